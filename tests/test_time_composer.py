"""Composer's Time material, ported: its tests/test_time.py, the examples in the docstrings of
composer/core/time.py and its Time guide (docs/source/trainer/time.rst), with ``composer``
replaced by ``obsbus`` in the imports. Where obsbus differs on purpose, the test says so and
checks the message or the value a Composer user gets instead.
"""

from __future__ import annotations

import datetime
import pickle

import pytest

from obsbus import Time, Timestamp, TimeUnit
from obsbus.time import FractionalCountError, TimeInputError, TimeUnitMismatchError, ensure_time

# ----------------------------------------------------------------------------- the names


def test_the_enum_has_composers_names_and_values():
    """composer/core/time.py TimeUnit: the members and their string values."""
    assert {u.name: u.value for u in TimeUnit} == {
        "ITERATION": "iter",
        "EPOCH": "ep",
        "BATCH": "ba",
        "SAMPLE": "sp",
        "TOKEN": "tok",
        "DURATION": "dur",
        "SECOND": "sec",
    }


@pytest.mark.parametrize(
    ("text", "unit"),
    [("EP", TimeUnit.EPOCH), ("Ba", TimeUnit.BATCH), ("batch", TimeUnit.BATCH),
     ("DURATION", TimeUnit.DURATION), ("tok", TimeUnit.TOKEN), (TimeUnit.SECOND, TimeUnit.SECOND)],
)  # fmt: skip
def test_units_are_found_case_insensitively_by_value_or_name(text, unit):
    """composer/utils/string_enum.py: StringEnum(value) matches keys and values in any case."""
    assert TimeUnit(text) is unit
    assert Time(1, text).unit is unit
    if unit is not TimeUnit.DURATION:
        assert Timestamp(batch=3).get(text).unit is unit


def test_an_unknown_unit_lists_the_units():
    with pytest.raises(ValueError, match=r"Unknown time unit 'xx'; accepted: ep, ba, sp, tok"):
        Time(1, "xx")


# ----------------------------------------------------------------------------- tests/test_time.py

PARSE = [
    ("2iter", 2, TimeUnit.ITERATION),
    ("1ep", 1, TimeUnit.EPOCH),
    ("2ba", 2, TimeUnit.BATCH),
    ("3e10sp", 3 * 10**10, TimeUnit.SAMPLE),
    ("3_0e10sp", 30 * 10**10, TimeUnit.SAMPLE),
    ("4tok", 4, TimeUnit.TOKEN),
    ("4_000tok", 4000, TimeUnit.TOKEN),
    ("4_00_0tok", 4000, TimeUnit.TOKEN),
    ("0.5dur", 0.5, TimeUnit.DURATION),
    ("1h20m40s", 4840, TimeUnit.SECOND),
    # issue 14: units in any case, as Composer's regex is case-insensitive.
    ("1EP", 1, TimeUnit.EPOCH),
    ("0.25DUR", 0.25, TimeUnit.DURATION),
]


@pytest.mark.parametrize(("time_string", "expected_value", "expected_unit"), PARSE)
def test_time_parse(time_string, expected_value, expected_unit):
    """Composer tests/test_time.py::test_time_parse."""
    time = Time.from_timestring(time_string)
    assert time.value == expected_value
    assert time.unit == expected_unit


@pytest.mark.parametrize(
    ("expected_timestring", "time"),
    [
        ("2iter", Time(2, TimeUnit.ITERATION)),
        ("1ep", Time(1, TimeUnit.EPOCH)),
        ("2ba", Time(2, TimeUnit.BATCH)),
        ("3sp", Time(3, TimeUnit.SAMPLE)),
        ("4tok", Time(4, TimeUnit.TOKEN)),
        ("0.5dur", Time(0.5, TimeUnit.DURATION)),
        ("6sec", Time(6, TimeUnit.SECOND)),
    ],
)
def test_to_timestring(expected_timestring, time):
    """Composer tests/test_time.py::test_to_timestring."""
    assert time.to_timestring() == expected_timestring
    assert Time.from_timestring(time.to_timestring()) == time


def test_time_math():
    """Composer tests/test_time.py::test_time_math."""
    t1 = Time.from_timestring("1ep")
    t2 = Time.from_timestring("2ep")
    t3 = Time.from_timestring("3ep")
    t4 = Time.from_timestring("0.5dur")
    assert t1 + t2 == t3
    assert t2 - t1 == t1
    assert t1 - t2 == -t1
    assert t1 < t2
    assert t1 <= t2
    assert t2 > t1
    assert t2 >= t1
    assert t3 >= t3
    assert t3 <= t3
    assert t4 * t2 == t1
    assert 0.5 * t2 == t1
    assert t4 * 2 == Time.from_timestring("1dur")
    assert t1 / t2 == t4
    assert t2 / 2 == t1
    assert t3 % t3 == Time.from_timestring("0ep")
    assert t3 % t2 == t1


OPS = {
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "/": lambda a, b: a / b,
    "%": lambda a, b: a % b,
    "*": lambda a, b: a * b,
}


@pytest.mark.parametrize("op", OPS.values(), ids=list(OPS))
def test_invalid_math(op):
    """Composer tests/test_time.py::test_invalid_math: RuntimeError, which obsbus's error also
    is (and a TypeError, obsbus's rule for a wrong operand)."""
    with pytest.raises(RuntimeError, match=r"1ep (and|by) 1ba"):
        op(Time.from_timestring("1ep"), Time.from_timestring("1ba"))


def test_equality_across_units_is_false_where_composer_raises():
    """Deliberate difference from Composer tests/test_time.py::test_invalid_math (== and !=
    raise there): times in different units are simply not equal, so they can share a set."""
    t1, t2 = Time.from_timestring("1ep"), Time.from_timestring("1ba")
    assert (t1 == t2) is False
    assert (t1 != t2) is True
    assert len({t1, t2}) == 2


def test_time_from_input():
    """Composer tests/test_time.py::test_time_from_input: RuntimeError, which obsbus's error
    also is (and a TypeError, obsbus's rule for a wrong type); each says what to pass."""
    expected = Time(1, TimeUnit.EPOCH)
    assert Time.from_input(expected) == expected
    assert Time.from_input("1ep") == expected
    assert Time.from_input(1, TimeUnit.EPOCH) == expected
    assert Time.from_input(1, "ep") == expected
    assert Time.from_input(1, default_int_unit="ep") == expected  # Composer's keyword
    with pytest.raises(RuntimeError, match=r"Expected a Time, a time string or a number, got None"):
        Time.from_input(None)
    with pytest.raises(RuntimeError, match=r"got \[123\]"):
        Time.from_input([123])
    with pytest.raises(RuntimeError, match=r"bare number 1 is ambiguous.*'1ba' or '1ep'") as info:
        Time.from_input(1)
    assert isinstance(info.value, TypeError) and isinstance(info.value, TimeInputError)


def test_time_repr():
    """Composer tests/test_time.py::test_time_repr. Deliberate difference: the repr names the
    unit by its value, ``Time(1, 'tok')`` (Composer: ``Time(1, TimeUnit.TOKEN)``), so it
    evaluates with only ``Time`` imported."""
    time = Time(1, "tok")
    assert repr(time) == "Time(1, 'tok')"
    assert eval(repr(time)) == time
    assert eval(repr(time), {"Time": Time}).unit is TimeUnit.TOKEN


def test_timestamp():
    """Composer tests/test_time.py::test_timestamp."""
    timestamp = Timestamp()
    time = Time(10, "ep")
    assert timestamp < time
    assert timestamp.get(time.unit) == Time.from_epoch(0)


def test_timestamp_update():
    """Composer tests/test_time.py::test_timestamp_update."""
    timestamp = Timestamp(epoch=1)
    timestamp_2 = timestamp.copy(batch=2)
    assert timestamp_2.epoch == 1
    assert timestamp_2.batch == 2
    assert timestamp_2.sample == 0
    assert timestamp is not timestamp_2


def test_set_timestamp_says_to_copy():
    """Composer tests/test_time.py::test_set_timestamp sets ``epoch_in_iteration`` in place.
    Deliberate difference: an obsbus Timestamp is immutable (callbacks keep old ones to
    compare), and the error says what to write instead."""
    timestamp = Timestamp(epoch_in_iteration=1)
    assert timestamp.epoch_in_iteration == 1
    with pytest.raises(
        AttributeError,
        match=r"Timestamp is immutable.*write ts = ts.copy\(epoch_in_iteration=...\)",
    ):
        timestamp.epoch_in_iteration = 2
    assert timestamp.copy(epoch_in_iteration=2).epoch_in_iteration == 2


def _s(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)


def test_timestamp_to_next_batch_epoch_iteration():
    """Composer tests/test_time.py::test_timestamp_to_next_batch_epoch_iteration, unchanged:
    the wall-clock fields compare equal to timedeltas."""
    timestamp = Timestamp()
    # Step batch 0 in epoch 0
    timestamp = timestamp.to_next_batch(10, 20, _s(5))
    assert (timestamp.batch, timestamp.token_in_iteration, timestamp.batch_in_epoch) == (1, 20, 1)
    assert (timestamp.sample, timestamp.sample_in_epoch) == (10, 10)
    assert (timestamp.token, timestamp.token_in_epoch) == (20, 20)
    assert timestamp.total_wct == _s(5)
    assert timestamp.iteration_wct == _s(5)
    assert timestamp.epoch_wct == _s(5)
    assert timestamp.batch_wct == _s(5)

    # Finish epoch 0
    timestamp = timestamp.to_next_epoch(duration=_s(5))
    assert (timestamp.epoch, timestamp.batch, timestamp.token_in_iteration) == (1, 1, 20)
    assert (timestamp.batch_in_epoch, timestamp.sample, timestamp.sample_in_epoch) == (0, 10, 0)
    assert (timestamp.token, timestamp.token_in_epoch) == (20, 0)
    assert timestamp.total_wct == _s(10)
    assert timestamp.iteration_wct == _s(10)
    assert timestamp.epoch_wct == _s(0)
    assert timestamp.batch_wct == _s(0)

    # Step batch 0 in epoch 1
    timestamp = timestamp.to_next_batch(5, 0, _s(10))
    assert (timestamp.epoch, timestamp.batch, timestamp.epoch_in_iteration) == (1, 2, 1)
    assert (timestamp.token_in_iteration, timestamp.batch_in_epoch) == (20, 1)
    assert (timestamp.sample, timestamp.sample_in_epoch) == (15, 5)
    assert (timestamp.token, timestamp.token_in_epoch) == (20, 0)
    assert (timestamp.total_wct, timestamp.iteration_wct) == (_s(20), _s(20))
    assert (timestamp.epoch_wct, timestamp.batch_wct) == (_s(10), _s(10))

    # Step batch 1 in epoch 1
    timestamp = timestamp.to_next_batch(5, 1, _s(10))
    assert (timestamp.epoch, timestamp.batch, timestamp.token_in_iteration) == (1, 3, 21)
    assert (timestamp.batch_in_epoch, timestamp.sample, timestamp.sample_in_epoch) == (2, 20, 10)
    assert (timestamp.token, timestamp.token_in_epoch) == (21, 1)
    assert (timestamp.total_wct, timestamp.iteration_wct) == (_s(30), _s(30))
    assert (timestamp.epoch_wct, timestamp.batch_wct) == (_s(20), _s(10))

    # Finish epoch 1
    timestamp = timestamp.to_next_epoch()
    assert (timestamp.epoch, timestamp.batch, timestamp.epoch_in_iteration) == (2, 3, 2)
    assert (timestamp.token_in_iteration, timestamp.batch_in_epoch) == (21, 0)
    assert (timestamp.sample, timestamp.sample_in_epoch) == (20, 0)
    assert (timestamp.token, timestamp.token_in_epoch) == (21, 0)
    assert timestamp.total_wct == _s(30)
    assert (timestamp.epoch_wct, timestamp.batch_wct) == (_s(0), _s(0))

    # Step batch 0 in epoch 2
    timestamp = timestamp.to_next_batch(5, 1, _s(10))
    assert (timestamp.epoch, timestamp.batch, timestamp.epoch_in_iteration) == (2, 4, 2)
    assert (timestamp.token_in_iteration, timestamp.batch_in_epoch) == (22, 1)
    assert (timestamp.sample, timestamp.sample_in_epoch) == (25, 5)
    assert (timestamp.token, timestamp.token_in_epoch) == (22, 1)
    assert (timestamp.total_wct, timestamp.iteration_wct) == (_s(40), _s(40))
    assert (timestamp.epoch_wct, timestamp.batch_wct) == (_s(10), _s(10))

    # Finish iteration 0
    timestamp = timestamp.to_next_iteration()
    assert (timestamp.iteration, timestamp.epoch, timestamp.batch) == (1, 2, 4)
    assert (timestamp.epoch_in_iteration, timestamp.token_in_iteration) == (0, 0)
    assert (timestamp.batch_in_epoch, timestamp.sample, timestamp.sample_in_epoch) == (0, 25, 0)
    assert (timestamp.token, timestamp.token_in_epoch) == (22, 0)
    assert timestamp.total_wct == _s(40)
    assert timestamp.iteration_wct == _s(0)
    assert (timestamp.epoch_wct, timestamp.batch_wct) == (_s(0), _s(0))


def test_timestamp_repr():
    """Composer tests/test_time.py::test_timestamp_repr, and on a busy timestamp too."""
    timestamp = Timestamp()
    assert timestamp == eval(repr(timestamp))
    busy = Timestamp(iteration=1, epoch=2, token_in_iteration=7).to_next_batch(3, 4, 0.1)
    assert eval(repr(busy)) == busy
    assert eval(repr(busy)).state_dict() == busy.state_dict()


@pytest.mark.parametrize("time_string", ["1.1iter", "1.5ep", "2.1ba", "3.2sp", "3.4tok"])
def test_timestep_bad_strings(time_string):
    """Composer tests/test_time.py::test_timestep_bad_strings: TypeError, which obsbus's error
    also is (and a ValueError, obsbus's rule for a wrong value); it says why."""
    with pytest.raises(TypeError, match=r"must be a whole number.*To fix, round it") as info:
        Time.from_timestring(time_string)
    assert isinstance(info.value, ValueError) and isinstance(info.value, FractionalCountError)
    with pytest.raises(TypeError, match="must be a whole number"):
        Time(float(time_string[:3]), time_string[3:])


def test_fractional_seconds_are_accepted():
    """Composer refuses '0.1sec' (seconds must be whole there); obsbus takes fractions of a
    second, which its wall-clock fields are anyway."""
    assert Time.from_timestring("0.1sec") == Time(0.1, "sec")


@pytest.mark.parametrize(
    ("time_string", "expected"),
    [("0.5dur", "0.5dur"), ("1.0iter", "1iter"), ("2.0ep", "2ep"), ("3.000ba", "3ba"),
     ("030.0sp", "30sp"), ("30sec", "30sec")],
)  # fmt: skip
def test_timestep_valid_strings(time_string, expected):
    """Composer tests/test_time.py::test_timestep_valid_strings (whole counts become ints)."""
    assert Time.from_timestring(time_string).to_timestring() == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [("", "expected a non-negative number"), ("-1ba", "must not be negative"),
     ("   ", "expected a non-negative number")],
    ids=["empty", "negative", "blank"],
)  # fmt: skip
def test_stricter_than_composer_on_nonsense(text, why):
    """Composer parses '' as 0 seconds (its wall-clock check pads it to '0h0m0s') and '-1ba'
    as minus one batch; obsbus keeps refusing both (issue 14)."""
    with pytest.raises(ValueError, match=f"Invalid time string {text!r}: .*{why}"):
        Time.from_timestring(text)


# ----------------------------------------------------------------------------- docstrings


def test_time_class_docstring_examples():
    """The examples in Composer's ``Time`` docstring (composer/core/time.py), value by value
    (the reprs differ, see test_time_repr)."""
    assert Time(5, TimeUnit.EPOCH) == Time.from_epoch(5)
    assert Time(30_000, "tok") == Time.from_token(30000)
    assert Time(0.5, "dur") == Time.from_duration(0.5)
    assert Time(1, TimeUnit.EPOCH) + Time(2, TimeUnit.EPOCH) == Time(3, TimeUnit.EPOCH)
    assert Time(2, TimeUnit.EPOCH) * 0.5 == Time(1, TimeUnit.EPOCH)
    assert Time(2, TimeUnit.EPOCH) * Time(0.5, TimeUnit.DURATION) == Time(1, TimeUnit.EPOCH)
    ratio = Time(4, TimeUnit.EPOCH) / Time(2, TimeUnit.EPOCH)
    assert (ratio.value, ratio.unit) == (2.0, TimeUnit.DURATION)
    halved = Time(4, TimeUnit.EPOCH) / 2
    assert (halved.value, halved.unit, type(halved.value)) == (2, TimeUnit.EPOCH, int)
    assert Time(5, TimeUnit.EPOCH).to_timestring() == "5ep"
    assert Time.from_input("5ep") == Time.from_input(5, TimeUnit.EPOCH) == Time(5, "ep")
    assert Time.from_timestring("3e4tok") == Time(30000, TimeUnit.TOKEN)
    assert Time.from_timestring("0.5dur") == Time(0.5, TimeUnit.DURATION)


@pytest.mark.parametrize(
    ("make", "unit", "value"),
    [(Time.from_iteration, "iter", 2), (Time.from_epoch, "ep", 2), (Time.from_batch, "ba", 2),
     (Time.from_sample, "sp", 2), (Time.from_token, "tok", 2), (Time.from_duration, "dur", 0.5)],
    ids=["iteration", "epoch", "batch", "sample", "token", "duration"],
)  # fmt: skip
def test_from_unit_constructors(make, unit, value):
    """Composer's Time.from_iteration/from_epoch/from_batch/from_sample/from_token/
    from_duration: ``Time(value, unit)``."""
    made = make(value)
    assert made.unit is TimeUnit(unit)
    assert made.value == value and type(made.value) is type(value)


def test_from_duration_is_a_float_and_from_timedelta_parses_wall_clock():
    """Composer's Time.__init__ makes a ``dur`` value a float; from_timedelta reads '1h20m40s'
    (its Time guide: 'converted to Time(4840, TimeUnit.SECOND)')."""
    assert repr(Time.from_duration(1)) == "Time(1.0, 'dur')"
    assert Time.from_timedelta("1h20m40s") == Time(4840, TimeUnit.SECOND)
    with pytest.raises(ValueError, match=r"'5ep'.*'1h20m40s'"):
        Time.from_timedelta("5ep")


def test_time_guide_rounds_a_fraction_of_the_run_down():
    """Composer's Time guide: with max_duration '7ep', '0.2dur' is floor(7 * 0.2) = 1 epoch."""
    assert Time.from_timestring("7ep") * Time.from_timestring("0.2dur") == Time(1, "ep")


def test_to_next_batch_docstring_equivalence():
    """Composer's Timestamp.to_next_batch docstring: it equals this copy(...), timedeltas and
    Time arithmetic included."""
    timestamp, samples, tokens, duration = Timestamp(), 1, 2, datetime.timedelta(seconds=0)
    copied = timestamp.copy(
        batch=timestamp.batch + 1,
        batch_in_epoch=timestamp.batch_in_epoch + 1,
        sample=timestamp.sample + samples,
        sample_in_epoch=timestamp.sample_in_epoch + samples,
        token=timestamp.token + tokens,
        token_in_epoch=timestamp.token_in_epoch + tokens,
        token_in_iteration=timestamp.token_in_iteration + tokens,
        total_wct=timestamp.total_wct + duration,
        iteration_wct=timestamp.iteration_wct + duration,
        epoch_wct=timestamp.epoch_wct + duration,
        batch_wct=duration,
    )
    assert copied == timestamp.to_next_batch(samples, tokens, duration)
    assert repr(copied).startswith("Timestamp(")


def test_ensure_time():
    """composer.core.ensure_time(maybe_time, int_unit)."""
    assert ensure_time(3, TimeUnit.EPOCH) == Time(3, "ep")
    assert ensure_time("5ba", "ep") == Time(5, "ba")
    assert ensure_time(Time(2, "sp"), "ep") == Time(2, "sp")


# ----------------------------------------------------------------------------- user code


def test_a_composer_callback_reads_the_timestamp_unchanged():
    """What Composer's callbacks do with ``state.timestamp`` (speed_monitor.py,
    runtime_estimator.py): ``total_wct.total_seconds()``, counters against Times and ints,
    ``int(...)`` and ``.value``."""
    ts = Timestamp(epoch=1, batch=12, sample=384).to_next_batch(32, 0, _s(0.25))
    assert ts.total_wct.total_seconds() == 0.25
    assert ts.batch_wct.total_seconds() / 2 == 0.125
    assert ts.batch >= Time(10, "ba") and ts.batch >= 10 and 10 <= ts.batch  # noqa: SIM300
    assert ts.batch == 13 and int(ts.batch) == 13 and ts.sample.value == 416
    assert ts.epoch < Time.from_epoch(2) and ts >= "13ba" and ts > Time(1, TimeUnit.BATCH)
    assert ts.get(TimeUnit.SAMPLE) == Time(416, "sp")


def test_wall_clock_fields_are_float_seconds_that_read_as_timedeltas():
    """Deliberate difference: Composer's ``*_wct`` are ``datetime.timedelta``; obsbus keeps
    float seconds (metrics want numbers, and a step stays cheap) that also compare with and
    add timedeltas and have ``total_seconds()``. ``state_dict()`` holds plain floats."""
    ts = Timestamp(total_wct=_s(90), batch_wct=1.5)
    assert isinstance(ts.total_wct, float) and ts.total_wct == 90.0 and ts.total_wct == _s(90)
    assert ts.total_wct + _s(30) == _s(120) and _s(30) + ts.total_wct == 120.0
    assert ts.total_wct - _s(30) == 60.0 and _s(100) - ts.total_wct == 10.0
    assert ts.total_wct > _s(60) and ts.batch_wct < _s(2) and ts.batch_wct <= 1.5
    assert f"{ts.total_wct:.1f}" == "90.0" and round(ts.total_wct / 60, 1) == 1.5
    assert type(ts.state_dict()["total_wct"]) is float
    assert Timestamp.from_state_dict({"batch": 2, "total_wct": _s(3)}).total_wct == 3.0


def test_load_state_dict_in_place_says_what_to_write():
    """Deliberate difference: Composer's Timestamp.load_state_dict mutates it; obsbus's is
    immutable."""
    with pytest.raises(TypeError, match=r"state.timestamp = Timestamp.from_state_dict\(state_d"):
        Timestamp().load_state_dict({"batch": 3})


def test_time_is_generic_in_annotations():
    """Composer annotates ``Time[int]`` / ``Time[float]``; the same annotations evaluate."""
    assert Time[int] is not None and Time[float].__origin__ is Time


def test_to_next_batch_takes_times_and_timedeltas():
    """Composer's to_next_batch(samples: int | Time, tokens: int | Time, duration: timedelta)."""
    ts = Timestamp().to_next_batch(Time(4, "sp"), Time(9, "tok"), datetime.timedelta(seconds=2))
    assert (ts.sample, ts.token, ts.batch_wct) == (4, 9, 2.0)
    assert Timestamp().to_next_batch(duration=None).batch_wct == 0.0
    with pytest.raises(ValueError, match=r"to_next_batch samples must be in sp, got 4ba"):
        Timestamp().to_next_batch(Time(4, "ba"))


def test_pickles_name_the_public_module():
    """Pickled times name obsbus.time, so they load whatever module holds the code."""
    assert b"obsbus.time" in pickle.dumps(Time(1, "ep"))
    assert pickle.loads(pickle.dumps(TimeUnit.EPOCH)) is TimeUnit.EPOCH
    assert isinstance(TimeUnitMismatchError("x"), RuntimeError)
