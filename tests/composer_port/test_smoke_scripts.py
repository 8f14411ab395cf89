"""The Composer observability guide's two smoke scripts, ported to obsbus.

Source: the Composer observability guide (the "observability" skill whose SKILL.md is
/work/shared/reference/002_*.txt), ``scripts/logger_smoke.py`` and
``scripts/profiler_smoke.py`` ("Tiny CPU/no-network smoke for Composer ..."; found with
the ``search`` tool). Each ``_run`` is the script's ``_run(output_dir, run_name)`` with
``composer`` changed to ``obsbus`` in the imports and the ``ComposerClassifier`` turned
into its module plus ``loss_fn=``; the script's temporary directory is pytest's
``tmp_path``. Nothing else changed.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from tests.composer_port._common import loss_fn, tiny_classification_data


def _run_logger_smoke(output_dir: Path, run_name: str) -> str:
    from obsbus import Callback, State, Trainer
    from obsbus.loggers import FileLogger, InMemoryLogger, Logger

    class MetricPulse(Callback):
        def batch_end(self, state: State, logger: Logger) -> None:
            logger.log_metrics({"smoke/batch": float(state.timestamp.batch.value)})

    module = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    model = module
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    in_memory = InMemoryLogger()
    file_logger = FileLogger(
        filename=str(output_dir / "{run_name}" / "logs-rank{rank}.txt"),
        remote_file_name="{run_name}/logs-rank{rank}.txt",
        capture_stdout=False,
        capture_stderr=False,
        flush_interval=1,
        overwrite=True,
    )

    trainer = Trainer(
        model=model,
        loss_fn=loss_fn,
        train_dataloader=tiny_classification_data(),
        max_duration="2ba",
        optimizers=optimizer,
        device="cpu",
        run_name=run_name,
        loggers=[in_memory, file_logger],
        callbacks=[MetricPulse()],
        progress_bar=False,
        log_to_console=False,
        train_subset_num_batches=2,
    )
    try:
        trainer.fit()
    finally:
        trainer.close()

    expected_log = output_dir / run_name / "logs-rank0.txt"
    if not expected_log.exists():
        raise AssertionError(f"Expected FileLogger output not found: {expected_log}")
    if "smoke/batch" not in in_memory.data:
        raise AssertionError("Expected custom smoke metric in InMemoryLogger.data")

    return f"OK logger smoke: {len(in_memory.data)} metric keys; log file: {expected_log}"


def _run_profiler_smoke(output_dir: Path, run_name: str) -> str:
    from obsbus import Callback, State, Trainer
    from obsbus.loggers import Logger
    from obsbus.profiler import JSONTraceHandler, Profiler, cyclic_schedule

    class ProfiledPulse(Callback):
        def batch_end(self, state: State, logger: Logger) -> None:
            del logger
            if state.profiler is not None:
                marker = state.profiler.marker("smoke/batch_end", categories=["smoke"])
                with marker:
                    _ = sum(range(8))

    module = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    model = module
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    profiler = Profiler(
        schedule=cyclic_schedule(skip_first=0, wait=0, warmup=1, active=1, repeat=1),
        trace_handlers=[
            JSONTraceHandler(
                folder=str(output_dir / "{run_name}" / "traces"),
                filename="ep{epoch}-ba{batch}-rank{rank}.json",
                remote_file_name=None,
                merged_trace_filename=None,
                merged_trace_remote_file_name=None,
                overwrite=True,
            ),
        ],
        sys_prof_cpu=False,
        sys_prof_memory=False,
        sys_prof_disk=False,
        sys_prof_net=False,
        torch_prof_profile_memory=False,
        torch_prof_with_flops=False,
        torch_prof_memory_filename=None,
    )

    trainer = Trainer(
        model=model,
        loss_fn=loss_fn,
        train_dataloader=tiny_classification_data(),
        max_duration="2ba",
        optimizers=optimizer,
        device="cpu",
        run_name=run_name,
        profiler=profiler,
        callbacks=[ProfiledPulse()],
        progress_bar=False,
        log_to_console=False,
        train_subset_num_batches=2,
    )
    try:
        trainer.fit()
    finally:
        trainer.close()

    trace_dir = output_dir / run_name / "traces"
    traces = sorted(trace_dir.glob("*.json"))
    if not traces:
        raise AssertionError(f"Expected JSON trace output under {trace_dir}")

    return f"OK profiler smoke: {len(traces)} trace file(s); first trace: {traces[0]}"


def test_logger_smoke(tmp_path):
    """Source: the Composer observability guide's scripts/logger_smoke.py, run as its main()."""
    out = _run_logger_smoke(tmp_path, "logger-smoke")
    assert out.startswith("OK logger smoke: ")


def test_profiler_smoke(tmp_path):
    """Source: the Composer observability guide's scripts/profiler_smoke.py, run as its main()."""
    out = _run_profiler_smoke(tmp_path, "profiler-smoke")
    assert out.startswith("OK profiler smoke: 1 trace file(s)")
