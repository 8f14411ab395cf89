"""Shared fixtures: every test runs in its own temporary directory."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture(autouse=True)
def _isolate(tmp_path, monkeypatch):
    """Run each test in a fresh directory with no launcher environment leaking in."""
    monkeypatch.chdir(tmp_path)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
                 "OBSBUS_RUN_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    yield
    from obsbus.log import reset_logging

    reset_logging()  # a test that set up loguru and forgot to undo it
    wandb = sys.modules.get("wandb")
    if wandb is not None and hasattr(wandb, "teardown"):
        # wandb keeps the settings of its first run in a process-wide singleton: a test that ran
        # it with WANDB_MODE=disabled would make every later offline run write no files.
        wandb.teardown()


@pytest.fixture(params=[True, False], ids=["cpu-read", "transfer"])
def both_paths(request, monkeypatch):
    """Run a test twice: small CPU tensors read where they are (what a CPU run does), and
    every tensor sent through the transfer path device tensors take (CUDA, ROCm)."""
    from obsbus import values

    monkeypatch.setattr(values, "_READ_CPU_NOW", request.param)
    return request.param
