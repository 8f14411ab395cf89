"""File-name templates: obsbus.naming.format_name."""

from __future__ import annotations

import pytest

from obsbus import State, Timestamp
from obsbus.naming import PLACEHOLDERS, format_name, placeholder_values


@pytest.fixture
def two_node_env(monkeypatch):
    """Rank 5 of 8, 4 per node: local rank 1 on node 1."""
    for name, value in {
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "4",
    }.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def state(two_node_env):
    state = State(run_name="exp1")
    ts = Timestamp()
    for _ in range(7):
        ts = ts.to_next_batch(samples=4, tokens=40)
    ts = ts.to_next_epoch().to_next_epoch().to_next_batch(samples=4, tokens=40)
    state.timestamp = ts  # 2 epochs done, batch 8, batch_in_epoch 1: the third epoch
    return state


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{run_name}", "exp1"),
        ("{rank}", "5"),
        ("{local_rank}", "1"),
        ("{world_size}", "8"),
        ("{local_world_size}", "4"),
        ("{node_rank}", "1"),
        ("{epoch}", "3"),  # counted from 1: the epoch batch 8 belongs to
        ("{batch}", "8"),
        ("{sample}", "32"),
        ("{token}", "320"),
        ("{iteration}", "0"),
        ("{batch_in_epoch}", "1"),
        ("{sample_in_epoch}", "4"),
        ("{token_in_epoch}", "40"),
        ("{run_name}/ep{epoch}-ba{batch}-rank{rank}.pt", "exp1/ep3-ba8-rank5.pt"),
    ],
    ids=[
        "run_name",
        "rank",
        "local_rank",
        "world_size",
        "local_world_size",
        "node_rank",
        "epoch",
        "batch",
        "sample",
        "token",
        "iteration",
        "batch_in_epoch",
        "sample_in_epoch",
        "token_in_epoch",
        "combined",
    ],
)
def test_fills_placeholders_from_state(state, template, expected):
    assert format_name(template, state) == expected


def test_every_documented_placeholder_is_filled_from_a_state(state):
    values = placeholder_values(state)
    assert set(values) == set(PLACEHOLDERS)
    template = "-".join("{" + key + "}" for key in PLACEHOLDERS)
    assert "{" not in format_name(template, state)


def test_time_placeholders_are_plain_numbers(state):
    # A Time would print as "2ep"; file names want the bare number.
    assert format_name("ep{epoch}", state) == "ep3"
    assert format_name("{epoch:03d}", state) == "003"


def test_epoch_is_counted_from_one_and_an_epoch_end_keeps_its_epoch():
    state = State(run_name="r")
    assert format_name("ep{epoch}", state) == "ep1"  # before the first batch ends
    ts = Timestamp().to_next_batch(samples=1).to_next_batch(samples=1)
    state.timestamp = ts
    assert format_name("ep{epoch}-ba{batch}", state) == "ep1-ba2"
    state.timestamp = ts = ts.to_next_epoch()  # at epoch_end: still the first epoch's
    assert format_name("ep{epoch}-ba{batch}", state) == "ep1-ba2"
    state.timestamp = ts.to_next_batch(samples=1)
    assert format_name("ep{epoch}-ba{batch}", state) == "ep2-ba3"


def test_rank_info_is_the_states_snapshot(monkeypatch, state):
    # The state read rank 5 when it was built; later env changes do not leak in.
    monkeypatch.setenv("RANK", "6")
    assert format_name("{rank}", state) == "5"
    assert format_name("{rank}") == "6"


def test_rank_placeholders_without_state_come_from_env(two_node_env):
    assert format_name("r{rank}-l{local_rank}-w{world_size}-n{node_rank}") == "r5-l1-w8-n1"


def test_defaults_without_env_or_state():
    assert format_name("rank{rank}of{world_size}") == "rank0of1"


def test_time_placeholders_unknown_without_state(two_node_env):
    assert format_name("{run_name}-ep{epoch}-{rank}") == "{run_name}-ep{epoch}-5"


def test_kwargs_fill_placeholders_and_win_over_state(state):
    assert format_name("{run_name}-{rank}-{epoch}", state, rank=0, epoch=9) == "exp1-0-9"
    assert format_name("{run_name}", state, run_name="other") == "other"


def test_kwargs_add_new_placeholders(state):
    assert format_name("{run_name}-{metric}", state, metric="loss") == "exp1-loss"
    assert format_name("{x}/{y}", x="a", y=3) == "a/3"


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{rank:02d}", "05"),
        ("{rank:>3}", "  5"),
        ("{world_size:x}", "8"),
        ("{batch:06d}", "000008"),
        ("{run_name:.3}", "exp"),
        ("{run_name!r}", "'exp1'"),
        ("{run_name!r:>8}", "  'exp1'"),
    ],
    ids=["zero-pad", "align", "hex", "batch-pad", "precision", "conversion", "conversion-spec"],
)
def test_format_specs(state, template, expected):
    assert format_name(template, state) == expected


@pytest.mark.parametrize(
    "template",
    [
        "{foo}",
        "{foo:>3}",
        "{foo!r}",
        "{foo!s:>3}",
        "{foo:02d}",
        "{0}",
        "{run_name.upper}",
        "{a[0]}",
    ],
    ids=[
        "plain",
        "spec",
        "conversion",
        "conversion-spec",
        "int-spec",
        "positional",
        "attribute",
        "index",
    ],
)
def test_unknown_placeholders_stay_verbatim(state, template):
    assert format_name(template, state) == template
    assert format_name(f"pre-{template}-{{rank}}", state) == f"pre-{template}-5"


def test_unknown_and_known_mixed(state):
    assert format_name("{run_name}-{foo:>3}-{rank:02d}-{bar}", state) == "exp1-{foo:>3}-05-{bar}"


def test_unknown_placeholder_can_be_filled_later(state):
    first = format_name("{run_name}/{step:05d}.json", state)
    assert first == "exp1/{step:05d}.json"
    assert format_name(first, step=42) == "exp1/00042.json"


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{x}}", "{x}"),
        ("{{rank}}", "{rank}"),
        ("{{{rank}}}", "{5}"),
        ("a{{b", "a{b"),
        ("a}}b", "a}b"),
    ],
    ids=["escaped", "escaped-known-name", "escaped-around-known", "open-only", "close-only"],
)
def test_escaped_braces(state, template, expected):
    assert format_name(template, state) == expected


def test_no_placeholders(state):
    assert format_name("plain.txt", state) == "plain.txt"
    assert format_name("", state) == ""


@pytest.mark.parametrize(
    "template", [None, 3, b"{rank}", ["{rank}"]], ids=["None", "int", "bytes", "list"]
)
def test_non_str_template_is_type_error(template):
    with pytest.raises(TypeError, match="A file name template must be a str, got "):
        format_name(template)


def test_a_bad_template_s_error_never_shows_its_credentials():
    from obsbus.naming import check_placeholders

    with pytest.raises(ValueError, match=r"'s3://\*\*\*@bucket/\{rnak\}' uses unknown") as info:
        check_placeholders("s3://ada:Pw0rdSecret9@bucket/{rnak}", "FileLogger filename")
    assert "Pw0rdSecret9" not in str(info.value)
