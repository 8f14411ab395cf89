"""The images a run logged with ``log_images`` (FileLogger's PNGs), shown in the report.

FileLogger writes ``images/rank{rank}/{name}/step-{step}[-{i}].png`` (see
:mod:`obsbus.loggers._image_files`). The page inlines them (``data:`` URIs,
so it still opens offline), the latest :data:`PER_NAME` steps of each name
and rank, at most :data:`MAX_BYTES` in all; what is left out is counted on
the page, never dropped silently.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from obsbus.loggers._image_files import IMAGES_FOLDER
from obsbus.masking import mask_secrets

__all__ = ["ImageFile", "Images", "image_files", "images_html", "read_images"]

#: Steps shown per image name and rank: the latest.
PER_NAME = 8
#: Bytes of PNG inlined at most, all images together; a bigger file is never inlined.
MAX_BYTES = 16 * 1024 * 1024
_MAX_FILE_BYTES = 4 * 1024 * 1024
_FILE = re.compile(r"step-(-?\d+)(?:-(\d+))?\.png")
_RANK = re.compile(r"rank(\d+)")
_PNG = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class ImageFile:
    rank: int
    name: str
    step: int
    index: int | None
    path: Path


@dataclass
class Images:
    #: (name, rank) -> the images shown, by step and index.
    shown: dict[tuple[str, int], list[tuple[ImageFile, bytes]]] = field(default_factory=dict)
    #: Images found and not shown (older steps, size limits, unreadable), with why.
    left_out: dict[str, int] = field(default_factory=dict)

    def leave_out(self, why: str, count: int = 1) -> None:
        self.left_out[why] = self.left_out.get(why, 0) + count


def _found(root: Path) -> list[ImageFile]:
    found = []
    for rank_dir in sorted((root / IMAGES_FOLDER).glob("rank*")):
        rank = _RANK.fullmatch(rank_dir.name)
        if rank is None or not rank_dir.is_dir():
            continue
        for path in rank_dir.glob("**/step-*.png"):
            parsed = _FILE.fullmatch(path.name)
            if parsed is None or not path.is_file():
                continue
            index = None if parsed.group(2) is None else int(parsed.group(2))
            name = path.parent.relative_to(rank_dir).as_posix()
            found.append(ImageFile(int(rank.group(1)), name, int(parsed.group(1)), index, path))
    return found


def image_files(root: Path) -> list[Path]:
    """Every image file of the run folder (for RunReport's up-to-date check)."""
    return [image.path for image in _found(root)]


def read_images(root: Path) -> Images:
    """The images to show, read (see the module for the limits)."""
    images, total = Images(), 0
    by_name: dict[tuple[str, int], list[ImageFile]] = {}
    for image in _found(root):
        by_name.setdefault((image.name, image.rank), []).append(image)
    for key in sorted(by_name):
        found = sorted(by_name[key], key=lambda i: (i.step, -1 if i.index is None else i.index))
        steps = sorted({i.step for i in found})
        kept = set(steps[-PER_NAME:])
        images.leave_out(f"older than the last {PER_NAME} steps", len(steps) - len(kept))
        for image in found:
            if image.step not in kept:
                continue
            try:
                size = image.path.stat().st_size
                if size > _MAX_FILE_BYTES or total + size > MAX_BYTES:
                    images.leave_out("over the page's size limit")
                    continue
                data = image.path.read_bytes()
            except OSError:
                images.leave_out("unreadable")
                continue
            if not data.startswith(_PNG):
                images.leave_out("not a PNG")
                continue
            total += len(data)
            images.shown.setdefault(key, []).append((image, data))
    images.left_out = {why: n for why, n in images.left_out.items() if n}
    return images


def images_html(images: Images) -> str:
    """The page's "Images" section ("" when the run logged none)."""
    if not images.shown and not images.left_out:
        return ""
    out = ['<section id="images"><h2>Images (log_images)</h2>']
    for (name, rank), shown in images.shown.items():
        title = escape(mask_secrets(name))
        out.append(f'<h3>{title} <span class="note">rank {rank}</span></h3><div class="images">')
        for image, data in shown:
            caption = f"step {image.step}" + ("" if image.index is None else f", #{image.index}")
            encoded = base64.b64encode(data).decode("ascii")
            out.append(
                f'<figure><img src="data:image/png;base64,{encoded}" alt="{title} {caption}">'
                f"<figcaption>{title}, {caption}, rank {rank}</figcaption></figure>"
            )
        out.append("</div>")
    for why, count in sorted(images.left_out.items()):
        note = f"{count} image step(s) or file(s) not shown: {escape(why)}."
        out.append(f'<p class="note">{note}</p>')
    out.append("</section>")
    return "\n".join(out)
