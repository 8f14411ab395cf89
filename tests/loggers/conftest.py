"""Fixtures shared by the destination tests."""

from __future__ import annotations

import pytest

from ._s3_server import S3Server, set_credentials


@pytest.fixture
def s3(monkeypatch):
    """A moto S3 server on 127.0.0.1 with test credentials, stopped after the test."""
    set_credentials(monkeypatch)
    server = S3Server().start()
    yield server
    server.stop()
