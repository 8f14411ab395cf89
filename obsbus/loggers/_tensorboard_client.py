"""The TensorBoard client of :class:`~obsbus.loggers.tensorboard_logger.TensorboardLogger`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from obsbus._check import check_folder_at_init
from obsbus.loggers._tensorboard_files import EventFiles
from obsbus.loggers._tensorboard_summaries import (
    as_number,
    hparams_end,
    hparams_start,
    image_summary,
    markdown_table,
    perplexity,
    scalar_summary,
    text_summary,
)
from obsbus.loggers._tracker_client import RunInfo, TrackerClient, skip_not_a_number

if TYPE_CHECKING:
    from obsbus.logger import Logger
    from obsbus.state import State

__all__ = ["TensorboardClient"]


class TensorboardClient(TrackerClient):
    """Event files of one run: scalars, one HParams session, text, PNG images."""

    channels_last = False  # a 3-D image is CHW unless the caller says channels_last=True
    uint8_images = True  # PNG-encoded here

    def __init__(
        self,
        *,
        log_dir: str | None,
        queue_size: int,
        dropped_prefixes: tuple[str, ...],
        log_validation_ppl: bool,
    ) -> None:
        self.log_dir, self.queue_size = log_dir, queue_size
        self.log_validation_ppl = log_validation_ppl
        self._dropped_prefixes = dropped_prefixes
        self._logger: Logger | None = None
        self._root: Path | None = None
        self._reset()

    def _reset(self) -> None:
        self._files: EventFiles | None = None
        self.run_dir: Path | None = None
        self._params: dict[str, Any] = {}
        self._session_started = False
        self._first_write_done = False
        self._last_step = 0
        self._start_time = 0.0
        self._wanted: dict[str, bool] = {}

    @override
    def prepare(self, state: State, logger: Logger) -> None:
        self._logger = logger
        if self.log_dir is None:
            self._root = state.run_folder.tensorboard_dir
        else:
            self._root = state.run_folder.resolve(logger.format_name(self.log_dir))
        # A relative log_dir (or one with placeholders) is known only now: a file there fails
        # here, naming it, not on the writer thread at the first event file.
        check_folder_at_init("TensorboardLogger", "log_dir", self._root)

    @override
    def start(self, info: RunInfo) -> None:
        if self._root is None:
            raise RuntimeError("TensorboardLogger started before init.")
        self._reset()
        per_rank = f"rank{info.rank}" if info.every_rank else ""
        self.run_dir = self._root / per_rank if per_rank else self._root
        remote = f"{info.run_name}/tensorboard/" + (per_rank + "/" if per_rank else "")
        self._files = EventFiles(self.run_dir, self.queue_size, self._logger, remote)
        self._start_time = time.time()

    def _write(self, summary: Any, step: int) -> None:
        assert self._files is not None
        self._files.write(summary, step)

    def _start_session(self) -> None:
        """The HParams session record, once, with the parameters known at the first write."""
        self._first_write_done = True
        if self._params and not self._session_started:
            self._session_started = True
            self._write(hparams_start(self._params, self._start_time), self._last_step)

    def _is_wanted(self, key: str) -> bool:
        wanted = self._wanted.get(key)
        if wanted is None:
            wanted = self._wanted[key] = not key.startswith(self._dropped_prefixes)
        return wanted

    @override
    def log_metrics(self, values: dict[str, Any], step: int) -> None:
        self._last_step = step
        scalars: dict[str, float] = {}
        for key, value in values.items():
            if not self._is_wanted(key):
                continue
            number = as_number(value)
            if number is None:
                skip_not_a_number(self.skip, "TensorboardLogger writes", key, value)
                continue
            scalars[key] = number
            if self.log_validation_ppl and key.startswith("metrics/") and key.endswith("/loss"):
                scalars[key[: -len("loss")] + "perplexity"] = perplexity(number)
        if not self._first_write_done:
            self._start_session()
        if scalars:
            self._write(scalar_summary(scalars), step)

    @override
    def log_params(self, params: dict[str, Any]) -> None:
        if not self._first_write_done:
            self._params.update(params)
            return
        rows = [[name, value] for name, value in params.items()]
        self._write(
            text_summary("hyperparameters", markdown_table(["name", "value"], rows)),
            self._last_step,
        )

    @override
    def set_tags(self, tags: dict[str, str]) -> None:
        self.log_params(dict(tags))

    @override
    def log_traces(self, traces: dict[str, Any], step: int) -> None:
        for key, text in traces.items():
            self._write(text_summary(f"traces/{key}", str(text)), step)

    @override
    def log_table(self, columns: list[str], rows: list[list[Any]], name: str, step: int) -> None:
        self._write(text_summary(name, markdown_table(columns, rows)), step)

    @override
    def log_images(self, images: list[Any], name: str, step: int) -> None:
        for i, array in enumerate(images):
            self._write(image_summary(name if len(images) == 1 else f"{name}/{i}", array), step)

    @override
    def flush(self) -> None:
        if self._files is not None:
            self._files.flush(True)  # and hand the event file to upload_file

    @override
    def finish(self, failed: bool, exception: BaseException | None) -> None:
        if not self._first_write_done:
            self._start_session()
        if self._session_started:
            self._write(hparams_end(failed, time.time()), self._last_step)
        if self._files is not None:
            self._files.close()
