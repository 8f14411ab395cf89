"""Shared fixtures: every test runs in its own temporary directory."""

from __future__ import annotations

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
