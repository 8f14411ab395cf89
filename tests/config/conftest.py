"""Trackers offline, their files inside the test's directory, the network unreachable."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _offline(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("COMET_CONFIG", str(tmp_path / ".comet.config"))
    monkeypatch.setenv("COMET_DISABLE_AUTO_LOGGING", "1")
    monkeypatch.setenv("NEPTUNE_DATA_DIRECTORY", str(tmp_path / "neptune"))
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")  # anything that tries the network fails
    monkeypatch.setenv("NO_PROXY", "")
