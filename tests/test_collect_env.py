"""obsbus collect-env: sections, --json, secrets hidden, fake GPU tools on PATH, the CLI, the hook."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from obsbus import collect_env
from obsbus._collect_env_probes import LIBRARIES

ROOT = Path(__file__).resolve().parents[1]
ROCM_FIXTURES = ROOT / "tests" / "callbacks" / "fixtures" / "rocm_smi"
SECRETS = {
    "NCCL_SOCKET_PASSWORD": "hunter2-secret",
    "MASTER_ADDR": "https://user:pw7788@host.example",
    "SLURM_JOB_TOKEN": "slurmtok-998877",
    "HSA_NOTE": "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
}
LEAKS = ("hunter2-secret", "pw7788", "slurmtok-998877", "ghp_AbCdEfGh")
SECTIONS = ("== obsbus ==", "== PyTorch ==", "== Hardware ==", "== GPU tools ==",
            "== Libraries ==", "== Distributed ==")  # fmt: skip

# What `nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id
# --format=csv,noheader,nounits` prints: fields joined by ", ".
NVIDIA_CSV = (
    "0, NVIDIA H100 80GB HBM3, 550.90.12, 81559, 00000000:18:00.0\n"
    "1, NVIDIA H100 80GB HBM3, 550.90.12, 81559, 00000000:2A:00.0\n"
)
# `rocm-smi --showproductname --showdriverversion --json` (formatJson: printLog lines split
# on ': ', the tabs printLog puts before the value kept).
ROCM_JSON = {
    "card0": {"Card series": "\t\tAMD Instinct MI250X/MI250", "Card model": "\t\t0x0b0c",
              "Card vendor": "\t\tAdvanced Micro Devices, Inc. [AMD/ATI]", "Card SKU": "\t\tD65209"},
    "system": {"Driver version": "6.7.0"},
}  # fmt: skip


def _fake_tool(bin_dir: Path, name: str, script: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(script))
    path.chmod(0o755)


@pytest.fixture
def secrets_env(monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")


def test_every_section_and_the_json_layout(secrets_env):
    data = collect_env.collect(torch_report=False)
    text = collect_env.format_report(data)
    for section in SECTIONS:
        assert section in text
    assert data["torch"]["version"].startswith("2.")
    assert data["hardware"]["cpu_threads"] >= 1 and data["hardware"]["nodes"] == 1
    assert data["libraries"]["trackers"]["tensorboard"] is not None
    assert data["distributed"]["NCCL_DEBUG"] == "INFO"
    assert data["distributed"]["WORLD_SIZE"] == "1"
    # the name shows the variable is set, its value is hidden
    assert data["distributed"]["NCCL_SOCKET_PASSWORD"] == "***"
    assert data["distributed"]["MASTER_ADDR"] == "https://***@host.example"
    blob = json.dumps(data) + text
    for leak in LEAKS:
        assert leak not in blob


def test_libraries_cover_every_backend_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    listed = {n.lower().replace("_", "-") for names in LIBRARIES.values() for n in names}
    for extra in ("tensorboard", "wandb", "comet", "neptune", "mlflow", "s3", "sftp", "gpu"):
        for req in extras[extra]:
            name = req.split(";")[0].split(">")[0].split("<")[0].split("=")[0].strip()
            assert name.lower().replace("_", "-") in listed, (extra, name)


def test_nvidia_smi_on_path(tmp_path, monkeypatch):
    _fake_tool(
        tmp_path / "bin",
        "nvidia-smi",
        f"""
        import sys
        assert sys.argv[1].startswith("--query-gpu=") and sys.argv[2] == "--format=csv,noheader,nounits"
        sys.stdout.write({NVIDIA_CSV!r})
    """,
    )
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    tools = collect_env.collect(torch_report=False)["gpu_tools"]
    assert tools == [{"tool": "nvidia-smi", "gpus": [
        {"index": "0", "name": "NVIDIA H100 80GB HBM3", "driver_version": "550.90.12",
         "pci_bus_id": "00000000:18:00.0", "memory_total_mib": "81559"},
        {"index": "1", "name": "NVIDIA H100 80GB HBM3", "driver_version": "550.90.12",
         "pci_bus_id": "00000000:2A:00.0", "memory_total_mib": "81559"},
    ]}]  # fmt: skip
    assert "name=NVIDIA H100 80GB HBM3" in collect_env.format_report(
        collect_env.collect(torch_report=False)
    )


def test_rocm_smi_on_path(tmp_path, monkeypatch):
    _fake_tool(
        tmp_path / "bin",
        "rocm-smi",
        f"""
        import json, sys
        assert "--json" in sys.argv and "--showproductname" in sys.argv
        print(json.dumps({ROCM_JSON!r}))
    """,
    )
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    (tool,) = collect_env.collect(torch_report=False)["gpu_tools"]
    assert tool["tool"] == "rocm-smi"
    assert tool["gpus"][0]["index"] == "0"
    assert tool["gpus"][0]["Card series"] == "AMD Instinct MI250X/MI250"
    assert tool["system"] == {"Driver version": "6.7.0"}


def test_failing_and_hanging_tools_are_reported_not_raised(tmp_path, monkeypatch):
    from obsbus import _collect_env_probes as probes

    _fake_tool(
        tmp_path / "bin",
        "nvidia-smi",
        """
        import sys
        print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
        sys.exit(9)
    """,
    )
    _fake_tool(tmp_path / "bin", "amd-smi", "import time\ntime.sleep(60)\n")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(probes, "TOOL_TIMEOUT_S", 0.5)
    monkeypatch.setattr(probes.run_tool, "__defaults__", (0.5,))
    nvidia, amd = collect_env.collect(torch_report=False)["gpu_tools"]
    assert "exited with status 9" in nvidia["error"] and "NVIDIA driver" in nvidia["error"]
    assert "did not answer within 0.5 s" in amd["error"]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, check=False)  # fmt: skip


def test_cli_and_module_text_and_json(secrets_env):
    text = _run("-m", "obsbus.cli", "collect-env", "--no-torch")
    assert text.returncode == 0, text.stderr
    for section in SECTIONS:
        assert section in text.stdout
    as_json = _run("-m", "obsbus.collect_env", "--json", "--no-torch")
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert data["torch"]["report"] is None and data["distributed"]["NCCL_SOCKET_PASSWORD"] == "***"
    for leak in LEAKS:
        assert leak not in text.stdout and leak not in as_json.stdout


def test_torch_report_is_included_when_asked(secrets_env):
    done = _run("-m", "obsbus.collect_env")
    assert done.returncode == 0, done.stderr
    assert "== PyTorch collect_env ==" in done.stdout and "PyTorch version:" in done.stdout
    for leak in LEAKS:
        assert leak not in done.stdout


_CRASH = """
import sys
from obsbus.collect_env import configure_excepthook
seen = []
sys.excepthook = lambda *exc: (seen.append(exc[0]), print("PREVIOUS HOOK", exc[0].__name__,
                                                          file=sys.stderr))
configure_excepthook(torch_report=False)
configure_excepthook(torch_report=False)  # idempotent
raise ValueError("boom")
"""


@pytest.mark.parametrize(("rank", "report"), [("0", True), ("1", False)], ids=["rank0", "rank1"])
def test_excepthook_prints_the_report_then_chains(rank, report, secrets_env):
    done = _run("-c", _CRASH, env={"RANK": rank, "WORLD_SIZE": "2"})
    assert done.returncode == 1
    assert done.stderr.count("PREVIOUS HOOK ValueError") == 1
    assert (done.stderr.count("== Distributed ==") == 1) is report
    if report:
        assert done.stderr.index("== Distributed ==") < done.stderr.index("PREVIOUS HOOK")
    for leak in LEAKS:
        assert leak not in done.stderr
