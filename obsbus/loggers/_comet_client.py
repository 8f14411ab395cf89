"""The Comet client of :class:`~obsbus.loggers.comet_ml_logger.CometMLLogger` (writer thread)."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from obsbus._check import check_folder_at_init
from obsbus.loggers._tracker_client import RunInfo, TrackerClient, skip_not_a_number
from obsbus.masking import masked_sys_argv

if TYPE_CHECKING:
    from obsbus.logger import Logger
    from obsbus.state import State

__all__ = ["CometClient"]

log = logging.getLogger("obsbus")


class CometClient(TrackerClient):
    """One Comet ``Experiment`` (or ``OfflineExperiment``): numbers, parameters, others, assets."""

    channels_last = False  # a 3-D image is CHW unless the caller says channels_last=True
    uint8_images = True  # PIL images, so comet stores the pixels as they are

    def __init__(
        self,
        *,
        workspace: str | None,
        project_name: str | None,
        experiment_name: str | None,
        online: bool,
        offline_directory: str | None,
        exp_kwargs: dict[str, Any],
    ) -> None:
        self.workspace, self.project_name = workspace, project_name
        self.experiment_name, self.online = experiment_name, online
        self.offline_directory, self.exp_kwargs = offline_directory, exp_kwargs
        self.offline_dir: Path | None = None  # known at init
        self.experiment: Any = None

    @override
    def prepare(self, state: State, logger: Logger) -> None:
        if not self.online:
            folder = self.offline_directory
            self.offline_dir = check_folder_at_init(  # a relative one is known only now
                "CometMLLogger",
                "offline_directory",
                state.run_folder.root / "comet"
                if folder is None
                else state.run_folder.resolve(logger.format_name(folder)),
            )

    @override
    def can_upload_files(self) -> bool:
        return True

    @override
    def check_credentials(self) -> None:
        if self.online and not os.environ.get("COMET_API_KEY"):
            log.warning(
                "obsbus: CometMLLogger is online but COMET_API_KEY is not set, so the experiment "
                "will likely fail to start (comet_ml may still find a key in its config file). "
                "To fix, export COMET_API_KEY, or pass online=False to write an offline archive."
            )
        wants_patches = any(
            self.exp_kwargs.get(k)
            for k in ("log_graph", "auto_param_logging", "auto_metric_logging")
        )
        if "comet_ml" not in sys.modules:
            # comet_ml reads these once, when it is imported (on the writer thread, next).
            if not wants_patches:  # no patching of torch, TensorBoard & co. as they import
                os.environ.setdefault("COMET_DISABLE_AUTO_LOGGING", "1")
            if not self.online:  # offline means offline: no error reports to comet's Sentry
                os.environ.setdefault("COMET_ERROR_TRACKING_ENABLE", "false")

    @override
    def start(self, info: RunInfo) -> None:
        comet_ml = importlib.import_module("comet_ml")
        kwargs = {
            "project_name": self.project_name or info.project,
            "workspace": self.workspace,
        } | self.exp_kwargs
        if not self.online:
            assert self.offline_dir is not None
            self.offline_dir.mkdir(parents=True, exist_ok=True)
            kwargs.setdefault("offline_directory", str(self.offline_dir))
        # With log_env_host or parse_args on, comet records sys.argv as the experiment
        # starts: masked while it does.
        with masked_sys_argv():
            if self.online:
                experiment = comet_ml.Experiment(**kwargs)
            else:
                experiment = comet_ml.OfflineExperiment(**kwargs)
        self.experiment = experiment
        name = self.experiment_name or info.run_name
        if info.every_rank:
            experiment.set_name(f"{name}-rank{info.rank}")
            experiment.add_tag(info.run_name)
            experiment.log_others({"obsbus.group": info.run_name, "obsbus.rank": info.rank})
        else:
            experiment.set_name(name)

    @override
    def log_metrics(self, values: dict[str, Any], step: int) -> None:
        numbers: dict[str, Any] = {}
        for key, value in values.items():
            if isinstance(value, (int, float)):
                numbers[key] = int(value) if isinstance(value, bool) else value
            else:
                skip_not_a_number(self.skip, "CometMLLogger logs", key, value)
        if numbers:
            self.experiment.log_metrics(numbers, step=step)

    @override
    def log_params(self, params: dict[str, Any]) -> None:
        self.experiment.log_parameters(params)

    @override
    def set_tags(self, tags: dict[str, str]) -> None:
        self.experiment.log_others(tags)

    @override
    def upload_file(self, remote_file_name: str, file_path: Path) -> None:
        self.experiment.log_asset(str(file_path), file_name=remote_file_name, overwrite=True)

    @override
    def log_images(self, images: list[Any], name: str, step: int) -> None:
        pil = importlib.import_module("PIL.Image")
        for i, array in enumerate(images):
            # A PIL image, so comet stores the pixels as they are (it rescales arrays to min-max).
            self.experiment.log_image(
                pil.fromarray(array), name=name if len(images) == 1 else f"{name}_{i}", step=step
            )

    @override
    def log_table(self, columns: list[str], rows: list[list[Any]], name: str, step: int) -> None:
        self.experiment.log_table(f"{name}.csv", tabular_data=rows, headers=columns)

    @override
    def log_traces(self, traces: dict[str, Any], step: int) -> None:
        self.set_tags({f"traces/{k}": str(v) for k, v in traces.items()})

    @override
    def finish(self, failed: bool, exception: BaseException | None) -> None:
        experiment, self.experiment = self.experiment, None
        if experiment is None:
            return
        experiment.log_other("obsbus.status", "failed" if failed else "finished")
        experiment.end()
