"""`obsbus config check|show|keys`: output and exit status."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from obsbus import config
from obsbus.cli import main

GOOD = "callbacks:\n  speed_monitor: {window_size: 10}\nloggers:\n  in_memory: {}\n"
BAD = ("callbacks:\n  speed_monitor: {windw_size: 10}\n"
       "loggers:\n  wandb: {api_key: wbk-0011223344}\n  tensorbord: {}\n")  # fmt: skip


def test_check_ok(capsys):
    Path("good.yaml").write_text(GOOD)
    assert main(["config", "check", "good.yaml"]) == 0
    out, err = capsys.readouterr()
    assert out == "good.yaml: OK (1 callbacks, 1 loggers, no profiler)\n" and err == ""


def test_check_lists_every_problem_and_exits_1(capsys):
    Path("bad.yaml").write_text(BAD)
    assert main(["config", "check", "bad.yaml"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("obsbus config check: error: 3 problems in bad.yaml:\n")
    assert "  callbacks.speed_monitor.windw_size: SpeedMonitor has no argument 'windw_size'; " \
           "did you mean 'window_size'?\n" in err  # fmt: skip
    assert "  loggers.wandb.api_key: 'api_key' looks like a credential" in err
    assert "  loggers.tensorbord: unknown logger 'tensorbord'; did you mean 'tensorboard'?" in err
    assert "wbk-0011223344" not in err


def test_check_a_missing_file_exits_2(capsys):
    assert main(["config", "check", "nowhere.yaml"]) == 2
    assert "No such file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["config", "check", "x.yaml", "--dialect", "foundry"])
    assert info.value.code == 2


def test_check_primus_dialect(capsys, monkeypatch):
    seen = []
    monkeypatch.setattr(
        config, "from_primus", lambda cfg: seen.append(cfg) or {"loggers": {"file": {}}}
    )
    Path("p.yaml").write_text("disable_tensorboard: true\n")
    assert main(["config", "check", "p.yaml", "--dialect", "primus"]) == 0
    assert seen == [{"disable_tensorboard": True}]
    assert "OK (0 callbacks, 1 loggers, no profiler)" in capsys.readouterr().out


def test_show_prints_the_resolved_config(capsys):
    Path("good.yaml").write_text(GOOD)
    assert main(["config", "show", "good.yaml"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# The observability config this run was built with")
    shown = yaml.safe_load(out)
    assert shown == config.resolve("good.yaml")
    assert shown["callbacks"]["speed_monitor"]["window_size"] == 10
    assert shown["callbacks"]["speed_monitor"]["time_unit"] == "hours"
    Path("bad.yaml").write_text(BAD)
    assert main(["config", "show", "bad.yaml"]) == 1


def test_keys_lists_every_name(capsys):
    from obsbus import registry

    assert main(["config", "keys"]) == 0
    out = capsys.readouterr().out
    for kind in registry.KINDS:
        assert f"{kind}:\n" in out
        for name in registry.names(kind):
            assert f"\n  {name} " in out
    assert "  speed_monitor                Logs throughput" in out


def test_keys_of_one_plugin_has_defaults_and_the_docstring_text(capsys):
    from obsbus.callbacks import SpeedMonitor

    assert main(["config", "keys", "speed_monitor"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "speed_monitor (callbacks, obsbus.callbacks.speed_monitor:SpeedMonitor)\n"
    )
    assert "  window_size = 100  [int]\n      batches in the throughput window" in out
    # the text is the docstring's, so it can't drift
    assert "batches in the throughput window" in SpeedMonitor.__doc__
    assert main(["config", "keys", "threshold_stopper"]) == 0
    assert "  monitor (required)  [str]" in capsys.readouterr().out
    assert main(["config", "keys", "cyclic"]) == 0
    assert "  active = 4  [int]\n      batches to record" in capsys.readouterr().out
    assert main(["config", "keys", "profiler"]) == 0
    assert "torch_prof_with_stack = False" in capsys.readouterr().out


def test_keys_of_an_unknown_name_exits_2(capsys):
    assert main(["config", "keys", "speed_monitr"]) == 2
    assert (
        "no plug-in named 'speed_monitr'; did you mean 'speed_monitor'?" in capsys.readouterr().err
    )


def test_config_alone_prints_help_and_exits_2(capsys):
    assert main(["config"]) == 2
    assert "check" in capsys.readouterr().err
