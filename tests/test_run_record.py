"""The run's own record in config/: contents for a Trainer and a Run, no secret anywhere,
and a broken git or an unwritable config folder never stops training."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from obsbus import Callback, Run, Trainer
from obsbus._init_args import init_args
from obsbus.callbacks import SpeedMonitor
from obsbus.errors import ObsbusWarning
from obsbus.loggers import FileLogger

FILES = {"run.json", "plugins.json", "units.json", "resolved.yaml", "hparams.json", "env.json",
         "git.json", "packages.txt", "system.json"}  # fmt: skip
ENV_SECRETS = {
    "MY_API_TOKEN": "tok-5566778899",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "INNOCENT_DB": "postgres://dbuser:pgpw4433@db.internal/runs",
}
HPARAMS = {"lr": 0.1, "wandb_api_key": "wbk-1234567890", "db": "mysql://u:myp4ss@h/db"}
LEAKS = ("tok-5566778899", "wJalrXUtnFEMI", "pgpw4433", "wbk-1234567890", "myp4ss",
         "cbsecret-2468", "sk-AbCdEf0123456789xyzXYZ", "argv-hf-9911")  # fmt: skip


class Notifier(Callback):
    """A user callback whose constructor takes a secret and an object."""

    def __init__(self, url: str, api_key: str, *, retries: int = 3, model=None) -> None:
        self.url, self.api_key, self.retries = url, api_key, retries


class LoudNotifier(Notifier):
    def __init__(self, level: int = 2, **kwargs) -> None:
        super().__init__(**kwargs)
        self.level = level


@pytest.fixture
def planted(monkeypatch):
    for name, value in ENV_SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "argv", ["train.py", "--hf-token", "argv-hf-9911", "--lr", "0.1"])


def _data():
    return [(torch.randn(4, 2), torch.randn(4, 1)) for _ in range(3)]


def _callback():
    return Notifier("https://hooks:cbsecret-2468@hooks.example/x", "sk-AbCdEf0123456789xyzXYZ",
                    model=torch.nn.Linear(2, 1))  # fmt: skip


def _assert_no_secret_in(folder: Path) -> None:
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert files
    for path in files:
        blob = path.read_bytes()
        for leak in LEAKS:
            assert leak.encode() not in blob, (path, leak)


def _read(folder: Path, name: str):
    return json.loads((folder / "config" / name).read_text())


def test_trainer_run_record(planted):
    trainer = Trainer(model=torch.nn.Linear(2, 1), train_dataloader=_data(),
                      loss_fn=torch.nn.functional.mse_loss, max_duration="1ep", run_folder="r",
                      loggers=[FileLogger("log.txt")], callbacks=[SpeedMonitor(7), _callback()],
                      hparams=HPARAMS, progress_bar=False)  # fmt: skip
    trainer.fit()
    folder = Path("r")
    assert {p.name for p in (folder / "config").iterdir()} == FILES
    run = _read(folder, "run.json")
    assert run["run_name"] == trainer.state.run_name and run["world_size"] == 1
    assert run["command"] == [sys.executable, "train.py", "--hf-token", "***", "--lr", "0.1"]
    assert run["cwd"] == str(Path.cwd()) and run["started"].endswith("+00:00")
    plugins = _read(folder, "plugins.json")["plugins"]
    by_class = {p["class"]: p for p in plugins}
    assert by_class["obsbus.loggers.file_logger.FileLogger"]["kind"] == "destination"
    assert by_class["obsbus.loggers.file_logger.FileLogger"]["args"]["filename"] == "log.txt"
    speed = by_class["obsbus.callbacks.speed_monitor.SpeedMonitor"]
    assert speed["kind"] == "callback"
    assert speed["args"]["window_size"] == 7 and speed["args"]["time_unit"] == "hours"
    notifier = by_class[f"{Notifier.__module__}.Notifier"]["args"]
    assert notifier["url"] == "https://***@hooks.example/x" and notifier["api_key"] == "***"
    assert notifier["retries"] == 3 and notifier["model"] == "<torch.nn.modules.linear.Linear>"
    hparams = _read(folder, "hparams.json")
    assert hparams["lr"] == 0.1 and hparams["max_duration"] == "1ep"
    assert hparams["wandb_api_key"] == "***" and hparams["db"] == "mysql://***@h/db"
    env = _read(folder, "env.json")
    assert "MY_API_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert env["INNOCENT_DB"] == "postgres://***@db.internal/runs"
    assert _read(folder, "git.json") == {
        "available": False, "reason": f"{Path.cwd()} is not in a git repository"}  # fmt: skip
    packages = (folder / "config" / "packages.txt").read_text().splitlines()
    assert packages == sorted(packages, key=lambda line: line.split("==")[0].lower())
    assert any(line.startswith("torch==") for line in packages)
    system = _read(folder, "system.json")
    assert system["torch"]["report"] is None and system["hardware"]["cpu_threads"] >= 1
    _assert_resolved(folder, trainer)
    _assert_no_secret_in(folder)


def _assert_resolved(folder: Path, trainer: Trainer) -> None:
    """resolved.yaml says what plugins.json says, by registry name, and builds again."""
    import yaml

    from obsbus import config

    path = folder / "config" / "resolved.yaml"
    resolved = yaml.safe_load(path.read_text())
    plugins = {p["class"]: p["args"] for p in _read(folder, "plugins.json")["plugins"]}
    assert resolved["run_name"] == trainer.state.run_name
    assert resolved["run_folder"] == str(folder.absolute())
    assert (
        resolved["callbacks"]["speed_monitor"]
        == plugins["obsbus.callbacks.speed_monitor.SpeedMonitor"]
    )
    assert resolved["loggers"]["file"] == plugins["obsbus.loggers.file_logger.FileLogger"]
    (notifier,) = resolved["unregistered"]
    assert notifier["class"] == f"{Notifier.__module__}.Notifier"
    assert notifier["args"]["api_key"] == "***"
    assert "python_args" not in resolved  # every argument of a registered plug-in is data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ObsbusWarning)  # the unregistered Notifier is skipped
        rebuilt = config.build(path)
    assert [type(p).__name__ for p in rebuilt.loggers + rebuilt.callbacks] == [
        "FileLogger", "SpeedMonitor"]  # fmt: skip
    assert rebuilt.callbacks[0].window_size == 7


def test_run_record_with_profiler_and_git(planted, tmp_path):
    from obsbus.profiler import JSONTraceHandler, Profiler, cyclic_schedule

    subprocess.run(["git", "init", "-q", "-b", "main"], check=True)
    subprocess.run(["git", "remote", "add", "origin",
                    "https://ada:ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789@github.com/a/b.git"],
                   check=True)  # fmt: skip
    Path("a.txt").write_text("x")
    subprocess.run(["git", "add", "a.txt"], check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "m"],
                   check=True)  # fmt: skip
    profiler = Profiler(cyclic_schedule(wait=0, warmup=0, active=1, repeat=1),
                        [JSONTraceHandler()], sys_prof_cpu=False)  # fmt: skip
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Run(model=model, optimizers=opt, max_duration="1ep", run_folder="runrec",
             callbacks=[LoudNotifier(level=5, url="u", api_key="cbsecret-2468")],
             hparams=HPARAMS, profiler=profiler) as run:  # fmt: skip
        for x, y in run.train(_data()):
            opt.zero_grad()
            loss = run.loss(torch.nn.functional.mse_loss, run.forward(model, x), y)
            run.backward(loss)
            opt.step()
    folder = Path("runrec")
    plugins = _read(folder, "plugins.json")["plugins"]
    kinds = {p["class"]: p["kind"] for p in plugins}
    assert kinds["obsbus.profiler.profiler.Profiler"] == "profiler"
    assert kinds["obsbus.profiler.json_trace_handler.JSONTraceHandler"] == "callback"
    prof = next(p for p in plugins if p["kind"] == "profiler")["args"]
    assert prof["sys_prof_cpu"] is False and prof["record_events"] is True
    loud = next(p for p in plugins if p["class"].endswith("LoudNotifier"))["args"]
    # the outermost __init__'s arguments, not the parent's
    assert loud == {"level": 5, "kwargs": {"url": "u", "api_key": "***"}}
    git = _read(folder, "git.json")
    assert git["available"] is True and len(git["commit"]) == 40 and git["branch"] == "main"
    assert git["dirty"] is False and git["remote"] == "https://***@github.com/a/b.git"
    assert "ghp_" not in (folder / "config" / "git.json").read_text()
    _assert_no_secret_in(folder)


def test_init_args_are_invisible_and_pickle_free():
    import pickle

    cb = LoudNotifier(level=1, url="u", api_key="k")
    assert init_args(cb) == {"level": 1, "kwargs": {"url": "u", "api_key": "k"}}
    assert set(vars(cb)) == {"url", "api_key", "retries", "level"}
    copy = pickle.loads(pickle.dumps(cb))
    assert init_args(copy) is None and copy.level == 1


def _train(folder: str) -> Trainer:
    trainer = Trainer(model=torch.nn.Linear(2, 1), train_dataloader=_data(),
                      loss_fn=torch.nn.functional.mse_loss, max_duration="1ep",
                      run_folder=folder, progress_bar=False)  # fmt: skip
    trainer.fit()
    return trainer


def test_a_failing_git_does_not_stop_training(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    git = bin_dir / "git"
    git.write_text(f"#!{sys.executable}\nimport sys\nprint('fatal: bad object HEAD', "
                   "file=sys.stderr)\nsys.exit(128)\n")  # fmt: skip
    git.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    trainer = _train("failing-git")
    assert trainer.state.timestamp.batch.value == 3
    record = _read(Path("failing-git"), "git.json")
    assert record == {"available": False,
                      "reason": "git rev-parse exited with status 128: fatal: bad object HEAD"}  # fmt: skip


def test_a_hanging_git_times_out(tmp_path, monkeypatch):
    from obsbus import _run_record

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    git = bin_dir / "git"
    git.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    git.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setattr(_run_record, "GIT_TIMEOUT_S", 0.5)
    _train("hanging-git")
    assert _read(Path("hanging-git"), "git.json") == {
        "available": False, "reason": "git rev-parse did not answer within 0.5 s"}  # fmt: skip


def test_no_gpu_tool_runs_at_run_start(tmp_path, monkeypatch):
    """A hung nvidia-smi must not hold the run, and rocm-smi is the monitors' to call."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.txt"
    for name in ("nvidia-smi", "rocm-smi", "amd-smi"):
        tool = bin_dir / name
        tool.write_text(f"#!{sys.executable}\nimport sys, time\n"
                        f"open({str(calls)!r}, 'a').write(' '.join(sys.argv) + '\\n')\n"
                        "time.sleep(60)\n")  # fmt: skip
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    _train("no-gpu-tools")
    assert not calls.exists(), calls.read_text()
    system = _read(Path("no-gpu-tools"), "system.json")
    assert system["gpu_tools"] == [] and system["hardware"]["cpu_threads"] >= 1


def test_an_unwritable_config_folder_does_not_stop_training():
    Path("blocked").mkdir()
    Path("blocked/config").write_text("a file where the folder would go")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = _train("blocked")
    assert trainer.state.timestamp.batch.value == 3
    ours = [str(w.message) for w in caught if issubclass(w.category, ObsbusWarning)]
    assert len([m for m in ours if "could not write the run record" in m]) == len(FILES)
    assert Path("blocked/config").read_text() == "a file where the folder would go"


def test_off_switch_and_other_ranks_write_nothing(monkeypatch):
    monkeypatch.setenv("OBSBUS_RUN_RECORD", "0")
    _train("off")
    assert not Path("off/config").exists()
    monkeypatch.delenv("OBSBUS_RUN_RECORD")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    Run(run_folder="rank1", run_name="r")
    assert not Path("rank1/config").exists()
