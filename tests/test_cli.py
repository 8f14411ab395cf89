from __future__ import annotations

import subprocess
import sys

import pytest

from obsbus import Event
from obsbus.cli import main


def test_events_lists_every_event_in_order(capsys):
    assert main(["events"]) == 0
    assert capsys.readouterr().out.split() == [e.value for e in Event]


def test_events_order_shows_the_loop(capsys):
    assert main(["events", "--order"]) == 0
    out = capsys.readouterr().out
    assert out.index("fit_start") < out.index("before_forward") < out.index("fit_end")


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "events" in capsys.readouterr().err


def test_version_and_module_entry_point():
    out = subprocess.run([sys.executable, "-m", "obsbus.cli", "--version"], capture_output=True,
                         text=True, check=True)
    assert out.stdout.startswith("obsbus ")


def test_unknown_command_is_an_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["nope"])
    assert info.value.code == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err
