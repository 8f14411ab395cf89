"""config/resolved.yaml: written at init from the plug-ins' records; it builds them again."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import yaml

from obsbus import Callback, Run, config
from obsbus._config_export import HEADER
from obsbus.errors import ObsbusWarning

CFG = {
    "run_name": "rt",
    "log_interval": "4ba",
    "callbacks": {"speed_monitor": {"window_size": 5}, "lr_monitor": {}, "nan_monitor": {},
                  "threshold_stopper": {"monitor": "loss", "dataloader_label": "eval",
                                        "threshold": 0.25}},
    "loggers": {"file": [{"filename": "a.txt", "jsonl_filename": None},
                         {"filename": "b.txt", "jsonl_filename": "b.jsonl"}], "in_memory": {},
                "console": {"stream": "stdout"}},
    "profiler": {"schedule": {"cyclic": {"wait": 0, "warmup": 0, "active": 1}},
                 "trace_handlers": {"json_trace_handler": {"folder": "tr"}},
                 "sys_prof_cpu": False},
}  # fmt: skip


class Mine(Callback):
    def __init__(self, level: int = 1, hook=None, api_key=None) -> None:
        self.level, self.hook, self.api_key = level, hook, api_key


def _plugins(cfg):
    return [*cfg.loggers, *cfg.callbacks]


def _run(cfg, folder, extra=()):
    with Run(max_duration="2ba", run_folder=folder, run_name=cfg.run_name, loggers=cfg.loggers,
             callbacks=[*cfg.callbacks, *extra], profiler=cfg.profiler) as run:  # fmt: skip
        for _ in run.train([[1], [2]]):
            pass
    return Path(folder) / "config" / "resolved.yaml"


def test_resolved_yaml_round_trips():
    first = config.build(CFG)
    expected = config.resolved_config(_plugins(first), first.profiler, run_name="rt")
    path = _run(first, "one")
    text = path.read_text()
    assert text.startswith(HEADER)
    written = yaml.safe_load(text)
    assert written["run_folder"] == str(Path("one").absolute())
    assert {k: v for k, v in written.items() if k != "run_folder"} == expected
    # every default is filled in
    assert written["callbacks"]["speed_monitor"] == {
        "window_size": 5, "gpu_flops_available": None, "time_unit": "hours",
        "log_interval": "4ba", "flops_per_batch": None, "precision": None}  # fmt: skip
    assert [f["filename"] for f in written["loggers"]["file"]] == ["a.txt", "b.txt"]
    assert written["profiler"]["schedule"] == {
        "cyclic": {"skip_first": 0, "wait": 0, "warmup": 0, "active": 1, "repeat": 1}}  # fmt: skip
    assert list(written["profiler"]["trace_handlers"]) == ["json_trace_handler"]
    assert "unregistered" not in written and "python_args" not in written
    # build -> export -> build: equal plug-in configurations
    second = config.build(path)
    again = config.resolved_config(_plugins(second), second.profiler, run_name="rt")
    assert again == expected
    assert {k: v for k, v in yaml.safe_load(_run(second, "two").read_text()).items()
            if k != "run_folder"} == expected  # fmt: skip


def test_what_a_config_cannot_say_is_listed_and_skipped():
    cfg = config.build({"callbacks": {"speed_monitor": {}}})
    cfg.callbacks.append(type(cfg.callbacks[0])(flops_per_batch=len))
    path = _run(cfg, "three", extra=[Mine(level=3, hook=print), Mine(api_key="mine-5544332211")])
    written = yaml.safe_load(path.read_text())
    mine = {"kind": "callback", "class": f"{__name__}.Mine"}
    assert written["unregistered"] == [
        {**mine, "args": {"level": 3, "hook": "<built-in function print>", "api_key": None}},
        {**mine, "args": {"level": 1, "hook": None, "api_key": "***"}},
    ]
    assert "mine-5544332211" not in path.read_text()
    assert written["python_args"] == {
        "callbacks.speed_monitor[1]": {"flops_per_batch": "<built-in function len>"}}  # fmt: skip
    assert len(written["callbacks"]["speed_monitor"]) == 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rebuilt = config.build(path)
    messages = [str(w.message) for w in caught if issubclass(w.category, ObsbusWarning)]
    assert any("'unregistered' section is not built" in m for m in messages)
    assert any("'python_args' section is not built" in m for m in messages)
    assert [c.flops_per_batch for c in rebuilt.callbacks] == [None, None]


def test_a_lambda_schedule_makes_the_profiler_unregistered():
    from obsbus.profiler import Profiler, ProfilerAction

    prof = Profiler(lambda state: ProfilerAction.SKIP, sys_prof_cpu=False)
    out = config.resolved_config([], prof)
    assert "profiler" not in out
    assert out["unregistered"][0]["kind"] == "profiler"


def test_show_is_what_the_run_writes():
    Path("obs.yaml").write_text(yaml.safe_dump(CFG))
    shown = config.resolve("obs.yaml")
    built = config.build("obs.yaml")
    assert shown == config.resolved_config(_plugins(built), built.profiler, run_name="rt")


@pytest.mark.parametrize("secret", ["https://u:pw-4455667788@host/x"])
def test_a_masked_value_never_reaches_the_file(secret):
    out = config.dump(config.resolved_config([Mine(hook=secret)]))
    assert "pw-4455667788" not in out and "https://***@host/x" in out
