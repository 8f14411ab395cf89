"""One headless Chromium for the report tests (Debian's, driven by Playwright), shared."""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"

#: Every canvas under an element, through Bokeh's shadow roots.
_CANVASES = """
(root) => {
  const out = [];
  const walk = (node) => {
    if (node.tagName === 'CANVAS') out.push(node);
    if (node.shadowRoot) walk(node.shadowRoot);
    for (const child of node.children || []) walk(child);
  };
  walk(root);
  return out.filter(c => c.width > 0 && c.height > 0).length;
}
"""
_Y_ENDS = """
() => Object.fromEntries(Bokeh.documents.flatMap(d => [...d.all_models])
  .filter(m => m.name && m.y_range).map(m => [m.name, m.y_range.end]))
"""
#: Per figure, in page pixels: where step 0 and step 1000 are drawn, its box, its legends' boxes
#: and the box of the card (section.plot) that holds it.
_LAYOUT = """
() => [...Bokeh.index].filter(v => v.model.type === 'Figure').map(v => {
  const box = v.el.getBoundingClientRect();
  const frame = v.frame_view;
  const card = v.el.closest('section.plot').getBoundingClientRect();
  const legends = [...v.renderer_views.values()].filter(r => r.model.type === 'Legend')
    .map(l => [box.left + l.bbox.left, box.top + l.bbox.top, box.left + l.bbox.right,
               box.top + l.bbox.bottom]);
  return {name: v.model.name, step0: box.left + frame.x_scale.compute(0),
          step1000: box.left + frame.x_scale.compute(1000),
          box: [box.left, box.top, box.right, box.bottom],
          card: [card.left, card.top, card.right, card.bottom], legends};
})
"""
_DRAWN = (
    "() => window.Bokeh && Bokeh.documents.length > 0 && [...Bokeh.index].length > 0"
    " && [...Bokeh.index].every(v => v.has_finished())"
)


@dataclass
class Opened:
    """What the browser saw of one page."""

    errors: list[str] = field(default_factory=list)
    #: Requests for anything but the page itself (each was aborted).
    requests: list[str] = field(default_factory=list)
    #: data-group -> canvases drawn in that plot's section
    plots: dict[str, int] = field(default_factory=dict)
    figures: int = 0
    text: str = ""
    screenshot: bytes = b""
    dialogs: list[str] = field(default_factory=list)
    #: The header's rank table: [rank, status, why, last step, rows] per rank.
    ranks: list[list[str]] = field(default_factory=list)
    pwned: bool = False
    #: figure name (the plot's group id) -> the end of its y-range, as BokehJS computed it
    y_ends: dict[str, float] = field(default_factory=dict)
    #: One dict a figure (``_LAYOUT``): where its steps are drawn, its and its legends' boxes.
    layout: list[dict[str, Any]] = field(default_factory=list)
    #: What ``open_report(path, act=...)``'s ``act(page)`` returned.
    acted: Any = None


#: The one Playwright and Chromium of the process, and how many session fixtures hold them:
#: Playwright's sync API can't be started twice in one thread, and tests outside this folder
#: (tests/reliability/test_report_truth.py) take these fixtures too.
_SHARED: dict[str, Any] = {"users": 0}


@pytest.fixture(scope="session")
def browser():
    """Chromium, launched once. A missing browser fails the tests (scripts/test.sh installs it)."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), (
        f"{CHROMIUM} is missing: scripts/test.sh installs Debian's chromium "
        "(apt-get install -y chromium)."
    )
    if not _SHARED["users"]:
        _SHARED["playwright"] = sync_playwright().start()
        try:
            _SHARED["browser"] = _SHARED["playwright"].chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox"]
            )
        except BaseException:
            _SHARED.pop("playwright").stop()
            raise
    _SHARED["users"] += 1
    try:
        yield _SHARED["browser"]
    finally:
        _SHARED["users"] -= 1
        if not _SHARED["users"]:
            try:
                _SHARED.pop("browser").close()
            finally:
                _SHARED.pop("playwright").stop()


@pytest.fixture(scope="session")
def open_report(browser):
    """``open_report(path, act=None) -> Opened``: load a page offline, wait for Bokeh, look at
    it; ``act(page)``, if given, then runs on the live page (hover, click) and its result is
    kept as ``Opened.acted``."""

    def open_(path: Path, act: Callable[[Any], Any] | None = None) -> Opened:
        seen = Opened()
        url = path.resolve().as_uri()
        context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
        try:
            page = context.new_page()
            page.on("pageerror", lambda exc: seen.errors.append(f"pageerror: {exc}"))
            page.on(
                "console",
                lambda msg: (
                    seen.errors.append(f"console: {msg.text}") if msg.type == "error" else None
                ),
            )
            page.on("dialog", lambda d: (seen.dialogs.append(d.message), d.dismiss()))

            def route(r):
                if r.request.url == url:
                    r.continue_()
                else:
                    seen.requests.append(r.request.url)
                    r.abort()

            page.route("**/*", route)
            page.goto(url)
            page.wait_for_function(_DRAWN, timeout=60_000)
            seen.figures = page.evaluate("() => document.querySelectorAll('.bk-Figure').length")
            for section in page.query_selector_all("section.plot"):
                seen.plots[section.get_attribute("data-group")] = section.evaluate(_CANVASES)
            seen.text = page.inner_text("body")
            seen.y_ends = page.evaluate(_Y_ENDS)
            seen.layout = page.evaluate(_LAYOUT)
            seen.pwned = bool(page.evaluate("() => window.__pwned === 1"))
            seen.ranks = page.eval_on_selector_all(
                "table.ranks tr",
                "rows => rows.slice(1).map(r => [...r.cells].map(c => c.innerText))",
            )
            # the first plot, as painted: an element's screenshot (a full page takes seconds)
            plot = page.locator("section.plot").first
            seen.screenshot = plot.screenshot() if plot.count() else page.screenshot()
            if act is not None:
                seen.acted = act(page)
        finally:
            context.close()
        return seen

    return open_


def pixel_spread(png: bytes) -> tuple[float, float]:
    """(standard deviation of the grey levels, share of pixels that are not background)."""
    from PIL import Image, ImageStat

    grey = Image.open(io.BytesIO(png)).convert("L")
    stddev = ImageStat.Stat(grey).stddev[0]
    histogram = grey.histogram()
    background = max(histogram)
    return stddev, 1.0 - background / sum(histogram)
