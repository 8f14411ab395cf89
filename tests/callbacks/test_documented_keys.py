"""Metric keys are API: every exported monitor logs exactly the keys its docstring lists.

The monitors are found in ``obsbus.callbacks.__all__``; each docstring's ``Keys`` list
is parsed (``Keys: none`` and "Logs no metrics" are an empty list). A short CPU run of
each monitor, in the configurations of ``CASES``, must log no key the docstring lacks,
and every documented key must be logged by some case unless ``UNREACHED`` says why a
one-process CPU run can not log it. A new monitor without a ``CASES`` entry fails here.
"""

from __future__ import annotations

import inspect
import math
import os
import re
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import obsbus.callbacks as monitors
from obsbus import Callback, Run
from obsbus.loggers import InMemoryLogger

ROCM_FIXTURES = Path(__file__).parent / "fixtures" / "rocm_smi"
GPU = "CUDA or ROCm only"
RANKS = "world size > 1 only"

#: Each monitor's configurations for the short run; a new monitor must be added here.
CASES: dict[str, list[dict]] = {
    "EarlyStopper": [dict(monitor="loss", dataloader_label="train", patience="2ba")],
    "HangWatchdog": [dict(timeout=60)],
    "LRMonitor": [dict()],
    "LossSpikeDetector": [dict()],
    "MemoryMonitor": [dict(log_interval="2ba")],
    "MemorySnapshot": [dict(skip_batches=1, interval="2ba")],
    "NaNMonitor": [dict(on_nan="log", check_interval="2ba")],
    "OOMObserver": [dict()],
    "OptimizerMonitor": [
        dict(log_interval="2ba"),
        dict(log_interval="2ba", log_per_layer=True, log_param_norm=True, log_num_zeros=True),
    ],
    "RocmSmiMonitor": [dict(log_interval="2ba")],
    "RuntimeEstimator": [dict()],
    "SpeedMonitor": [
        dict(window_size=2, gpu_flops_available=1e15, flops_per_batch=lambda batch: 1e6)
    ],
    "SystemMetricsMonitor": [dict(log_interval="2ba", sample_interval_s=0.01, gpu=False)],
    "ThresholdStopper": [dict(monitor="loss", dataloader_label="train", threshold=-1.0)],
}

#: Documented keys a one-process CPU run can not log, and why.
UNREACHED: dict[str, dict[str, str]] = {
    "MemoryMonitor": {
        key: GPU
        for key in (
            "memory/current_allocated_mem",
            "memory/current_active_mem",
            "memory/current_inactive_mem",
            "memory/current_reserved_mem",
            "memory/peak_allocated_mem",
            "memory/peak_active_mem",
            "memory/peak_inactive_mem",
            "memory/peak_reserved_mem",
            "memory/alloc_retries",
            "memory/num_ooms",
        )
    },
    "LossSpikeDetector": {
        key: "logged only on a spike: test_loss_spike_detector.py checks these keys"
        for key in (
            "loss_spike/batch",
            "loss_spike/loss",
            "loss_spike/baseline",
            "loss_spike/score",
        )
    },
    "SpeedMonitor": {
        "throughput/step_time_max": RANKS,
        "throughput/step_time_min": RANKS,
        "throughput/step_time_max_over_min": RANKS,
        "throughput/step_time_slowest_rank": RANKS,
    },
    "SystemMetricsMonitor": {
        "system/gpu/utilization_percent": GPU,
        "system/gpu/memory_used_gb": GPU,
        "system/gpu/temperature_c": GPU,
        "system/gpu/power_w": GPU,
    },
}

#: Keys that depend on the machine (psutil may see no disk or network counters).
MAY_BE_ABSENT = {
    "system/disk_read_mb_per_s",
    "system/disk_write_mb_per_s",
    "system/net_sent_mb_per_s",
    "system/net_recv_mb_per_s",
}


def documented_keys(cls: type) -> list[str] | None:
    """The ``Keys`` list of ``cls``'s docstring: each bullet's leading ````key```` names."""
    doc = inspect.cleandoc(cls.__doc__ or "")
    lines = doc.splitlines()
    start = next((i for i, line in enumerate(lines) if re.match(r"Keys\b", line)), None)
    if start is None:
        return [] if "Logs no metrics" in doc else None
    if re.match(r"Keys: none\b", lines[start]):
        return []
    i = start
    while not lines[i].rstrip().endswith(":"):
        i += 1
    items: list[str] = []
    rest = lines[i + 1 :]
    for n, line in enumerate(rest):
        if line.startswith("- "):
            items.append(line[2:])
        elif line.startswith("  ") and items:
            items[-1] += " " + line.strip()
        elif line.strip():
            break  # the paragraph after the list
        elif items and not (n + 1 < len(rest) and rest[n + 1].startswith("- ")):
            break  # a blank line that does not lead to another bullet ends the list
    keys = []
    for item in items:
        if not item.startswith("``"):
            continue  # "whatever the optimizer's report_per_parameter_metrics adds"
        head = re.split(r"(?<=``):|(?<=``),? (?!``)", item.strip(), maxsplit=1)[0]
        keys += re.findall(r"``([^`]+)``", head)
    return keys


def pattern(key: str) -> re.Pattern[str]:
    """``lr-{OptimizerClass}/group{i}`` as a regex: each ``{field}`` is one or more
    characters other than ``/``."""
    parts = re.split(r"\{[^}]+\}", key)
    return re.compile("[^/]+".join(re.escape(part) for part in parts) + r"\Z")


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 4)
        self.head = torch.nn.Linear(4, 1)

    def forward(self, batch):
        return self.head(self.embed(batch["input_ids"]).mean(1))


def short_run(callback: Callback | None, *, nan_at: int = 3, pause: float = 0.0) -> InMemoryLogger:
    """Two epochs of 4 batches (dict batches with ``input_ids``: samples and tokens are
    counted), two optimizers, an evaluation per epoch, a NaN loss at batch ``nan_at``."""
    torch.manual_seed(0)
    model = Model()
    opts = [
        torch.optim.SGD(model.embed.parameters(), lr=0.1),
        torch.optim.SGD(model.head.parameters(), lr=0.05),
    ]
    data = [{"input_ids": torch.randint(0, 16, (4, 5)), "y": torch.randn(4, 1)} for _ in range(4)]
    memory = InMemoryLogger()
    callbacks = [] if callback is None else [callback]
    with Run(
        model=model, optimizers=opts, max_duration="2ep", callbacks=callbacks, loggers=[memory]
    ) as run:
        batch_no = 0
        for epoch in range(2):
            for batch in run.epoch(data):
                batch_no += 1
                for opt in opts:
                    opt.zero_grad()
                loss = run.loss(F.mse_loss, run.forward(model, batch), batch["y"])
                if batch_no == nan_at:
                    loss = loss * float("nan")
                    run.state.loss = loss.detach()
                run.backward(loss)
                time.sleep(pause)
                for opt in opts:
                    opt.step()
            for batch in run.eval(data[:2]):
                run.loss(F.mse_loss, run.forward(model, batch), batch["y"])
            del epoch
    return memory


def logged_names(memory: InMemoryLogger) -> set[str]:
    return set(memory.data) | set(memory.hyperparameters)


@pytest.fixture(scope="module")
def baseline() -> set[str]:
    """What the run logs without any monitor (the loss, the eval metrics, hparams)."""
    return logged_names(short_run(None))


@pytest.fixture
def fake_rocm_smi(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    target = bin_dir / "rocm-smi"
    target.write_text(f"#!{sys.executable}\n" + (ROCM_FIXTURES / "fake_rocm_smi.py").read_text())
    target.chmod(0o755)
    for name in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_ROCM_SMI_FIXTURES", str(ROCM_FIXTURES))
    monkeypatch.setenv("FAKE_ROCM_SMI_CALLS", str(tmp_path / "calls.txt"))


def exported_monitors() -> list[str]:
    return [
        name
        for name in monitors.__all__
        if isinstance(getattr(monitors, name), type)
        and issubclass(getattr(monitors, name), Callback)
    ]


def test_every_exported_monitor_has_cases_and_a_keys_list():
    names = exported_monitors()
    assert len(names) >= 12
    assert sorted(CASES) == sorted(names), "add the new monitor to CASES"
    undocumented = [n for n in names if documented_keys(getattr(monitors, n)) is None]
    assert undocumented == [], "write a Keys: list (or 'Keys: none') in these docstrings"


def test_the_parser_reads_a_keys_list():
    class Example:
        """Does things.

        Keys (GB):

        - ``a/b``: one, with ``not/a/key`` in the text.
        - ``c/{name}``, ``c/d``: two,
          continued ``not/either``.
        - whatever ``x/y`` adds.

        Args:
            z: ``not/a/key``.
        """

    assert documented_keys(Example) == ["a/b", "c/{name}", "c/d"]
    assert pattern("lr-{OptimizerClass}-{n}/group{i}").match("lr-SGD-1/group0")
    assert not pattern("lr-{OptimizerClass}/group{i}").match("lr-SGD/group0/extra")


@pytest.mark.parametrize("name", sorted(CASES))
def test_logged_keys_are_the_documented_keys(name, baseline, request):
    if name == "RocmSmiMonitor":
        request.getfixturevalue("fake_rocm_smi")
    cls = getattr(monitors, name)
    documented = documented_keys(cls)
    assert documented is not None
    patterns = {key: pattern(key) for key in documented}
    logged: set[str] = set()
    for kwargs in CASES[name]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # SystemMetricsMonitor's sampler needs a few samples between its log steps.
            memory = short_run(cls(**kwargs), pause=0.02 if name == "SystemMetricsMonitor" else 0)
        logged |= logged_names(memory) - baseline
        for key in logged_names(memory) & set(memory.data):
            values = [v for v in memory.get_timeseries(key)[key] if isinstance(v, float)]
            assert all(not math.isinf(v) for v in values), (key, values)
    undocumented = sorted(k for k in logged if not any(p.match(k) for p in patterns.values()))
    assert undocumented == [], f"{name} logs keys its docstring does not list"
    unreached = UNREACHED.get(name, {})
    assert set(unreached) <= set(documented), "stale UNREACHED entries"
    missing = sorted(
        key
        for key, p in patterns.items()
        if key not in unreached and key not in MAY_BE_ABSENT and not any(p.match(k) for k in logged)
    )
    assert missing == [], f"{name} documents keys that no case logged"
    reached = sorted(k for k in unreached if any(patterns[k].match(x) for x in logged))
    assert reached == [], "these UNREACHED keys were logged: take them out of UNREACHED"
