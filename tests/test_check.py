"""The shared argument checks: what each accepts, and the message for what it refuses."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from obsbus._check import (
    NotAFolderError,
    check_bool,
    check_callable,
    check_choice,
    check_folder,
    check_folder_at_init,
    check_instance,
    check_int,
    check_iterable_of,
    check_mapping,
    check_number,
    check_optional_bool,
    check_optional_choice,
    check_optional_int,
    check_optional_number,
    check_optional_str,
    check_seconds,
    check_str,
    check_stream,
    did_you_mean,
    is_int,
    is_number,
    type_as_value_error,
)


@pytest.mark.parametrize("value", [True, False])
def test_a_bool_is_a_bool(value):
    assert check_bool("X", "flag", value) is value


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("false", r"X flag must be True or False, got 'false'\. To fix, pass the bool False or "
                  r"True, not a string \(any non-empty one is true\)\."),
        (2, r"X flag must be True or False, got 2\. To fix, pass True rather than the int\."),
        (None, r"X flag must be True or False, got None\.$"),
    ],
)
def test_a_bool_flag_refuses_strings_ints_and_none(value, match):
    with pytest.raises(TypeError, match=match):
        check_bool("X", "flag", value)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 0, 0.0, -1])
def test_seconds_must_be_finite_and_positive(value):
    with pytest.raises(ValueError, match=rf"X timeout must be a finite number of seconds > 0, "
                                         rf"got {value!r}\."):
        check_seconds("X", "timeout", value)


@pytest.mark.parametrize("value", [True, "5", None])
def test_seconds_must_be_a_number(value):
    with pytest.raises(TypeError, match=rf"got {value!r}\."):
        check_seconds("X", "timeout", value)


def test_seconds_zero_where_allowed():
    assert check_seconds("X", "period", 0, allow_zero=True) == 0.0
    assert check_seconds("X", "timeout", 5) == 5.0 and isinstance(check_seconds("X", "t", 5), float)
    with pytest.raises(ValueError, match=r">= 0, got -0.5"):
        check_seconds("X", "period", -0.5, allow_zero=True)


def test_int_bounds_and_types():
    assert check_int("X", "n", 3, minimum=1) == 3
    with pytest.raises(ValueError, match=r"X n must be a whole number >= 1, got 0\."):
        check_int("X", "n", 0, minimum=1)
    with pytest.raises(TypeError, match=r"X n must be a whole number >= 0, got True\."):
        check_int("X", "n", True)
    with pytest.raises(TypeError, match=r"got 2\.5\."):
        check_int("X", "n", 2.5)


def test_str_must_be_a_non_empty_str():
    assert check_str("X", "name", "a") == "a"
    with pytest.raises(ValueError, match=r"X name must be a non-empty str, got ''\."):
        check_str("X", "name", "")
    with pytest.raises(TypeError, match=r"X name must be a non-empty str, got 5\."):
        check_str("X", "name", 5)


def test_callable():
    assert check_callable("X", "fn", len) is len
    with pytest.raises(TypeError, match=r"X fn must be a function or None, got 5\."):
        check_callable("X", "fn", 5)


def test_iterable_of_names_the_parameter_instead_of_a_raw_error():
    assert check_iterable_of("X", "items", (1, 2), int, accepted="ints") == [1, 2]
    assert check_iterable_of("X", "items", None, int, accepted="ints", allow_none=True) == []
    assert check_iterable_of("X", "items", 7, int, accepted="ints", allow_single=True) == [7]
    with pytest.raises(TypeError, match=r"^X items must be a list of int, got 5\.$"):
        check_iterable_of("X", "items", 5, int, accepted="a list of int")
    with pytest.raises(TypeError, match=r"X items must be ints, got 'ab'\."):
        check_iterable_of("X", "items", "ab", str, accepted="ints")  # not its characters
    with pytest.raises(TypeError, match=r"X items must be ints, got 'b' among \[1, 'b'\]\."):
        check_iterable_of("X", "items", [1, "b"], int, accepted="ints")


def test_mapping_needs_str_keys():
    assert check_mapping("X", "kw", None) == {}
    assert check_mapping("X", "kw", {"a": 1}) == {"a": 1}
    with pytest.raises(TypeError, match=r"X kw must be a dict with str keys, got 5\."):
        check_mapping("X", "kw", 5)
    with pytest.raises(TypeError, match=r"X kw must be a dict with str keys; the key 3 is not"):
        check_mapping("X", "kw", {3: "a"})


def test_a_file_where_a_folder_goes(tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("x")
    with pytest.raises(NotAFolderError, match=rf"X dir must be a folder, and {str(taken)!r} is an "
                                              r"existing file\. To fix, remove the file"):
        check_folder("X", "dir", str(taken))
    with pytest.raises(NotADirectoryError) as info:
        check_folder_at_init("X", "dir", taken)
    assert isinstance(info.value, ValueError)  # bad input, and what the file system would say


def test_a_folder_path_that_is_fine_or_not_known_yet(tmp_path):
    assert check_folder("X", "dir", tmp_path / "new") == tmp_path / "new"
    assert check_folder("X", "dir", "~/x") == Path("~/x").expanduser()
    (tmp_path / "taken").write_text("x")
    # Relative (to the run folder, known at init) or with placeholders: not checked yet.
    assert check_folder("X", "dir", "taken") == Path("taken")
    assert check_folder("X", "dir", str(tmp_path / "{run_name}")) == tmp_path / "{run_name}"
    assert check_folder("X", "dir", None, allow_none=True) is None
    with pytest.raises(TypeError, match=r"X dir must be a folder path \(str or os.PathLike\), "
                                        r"got 5\."):
        check_folder("X", "dir", 5)


def test_int_upper_bound_and_how_to_fix_a_near_int():
    assert check_int("X", "n", 5, minimum=1, maximum=5) == 5
    with pytest.raises(ValueError, match=r"^X n must be a whole number >= 1 and <= 5, got 6\.$"):
        check_int("X", "n", 6, minimum=1, maximum=5)
    with pytest.raises(TypeError, match=r"^X n must be a whole number >= 0, got 2\.0\. "
                                        r"To fix, pass 2 rather than the float\.$"):
        check_int("X", "n", 2.0)
    with pytest.raises(TypeError, match=r"got '3'\. To fix, pass the int 3, not a string\.$"):
        check_int("X", "n", "3")


def test_optional_int_says_or_none():
    assert check_optional_int("X", "n", None) is None
    assert check_optional_int("X", "n", 4, minimum=1) == 4
    with pytest.raises(ValueError, match=r"^X n must be a whole number >= 1 or None, got 0\.$"):
        check_optional_int("X", "n", 0, minimum=1)
    with pytest.raises(TypeError, match=r"^X n must be a whole number >= 0 or None, got 'a'\.$"):
        check_optional_int("X", "n", "a")


def test_number_keeps_the_value_and_checks_the_bounds():
    assert check_number("X", "f", 3) == 3 and isinstance(check_number("X", "f", 3), int)
    assert check_number("X", "f", 0.5, minimum=0, maximum=1) == 0.5
    assert check_number("X", "f", math.inf, finite=False) == math.inf
    with pytest.raises(ValueError, match=r"^X f must be a finite number > 0, got 0\.$"):
        check_number("X", "f", 0, minimum=0, above=True)
    with pytest.raises(ValueError, match=r"^X f must be a finite number >= 0 and <= 1, got 1\.5\.$"):
        check_number("X", "f", 1.5, minimum=0, maximum=1)
    with pytest.raises(ValueError, match=r"^X f must be a number >= 0, got nan\.$"):
        check_number("X", "f", math.nan, minimum=0, finite=False)  # nan never passes
    with pytest.raises(ValueError, match=r"got inf\.$"):
        check_number("X", "f", math.inf)
    with pytest.raises(TypeError, match=r"^X f must be a finite number of seconds, got True\.$"):
        check_number("X", "f", True, unit=" of seconds")
    with pytest.raises(TypeError, match=r"got '1'\. To fix, pass the number, not a string\.$"):
        check_number("X", "f", "1")


def test_number_real_takes_any_real_number():
    from fractions import Fraction

    with pytest.raises(TypeError, match=r"got Fraction\(1, 2\)"):
        check_number("X", "f", Fraction(1, 2))
    assert check_number("X", "f", Fraction(1, 2), real=True) == Fraction(1, 2)


def test_optional_number_says_or_none():
    assert check_optional_number("X", "f", None) is None
    with pytest.raises(ValueError, match=r"^X f must be a finite number > 0 or None, got -1\.$"):
        check_optional_number("X", "f", -1, minimum=0, above=True)


def test_choice_suggests_the_near_miss():
    assert check_choice("X", "mode", "fast", ["fast", "slow"]) == "fast"
    with pytest.raises(ValueError, match=r"^X mode must be one of 'fast', 'slow', got 'fsat'\. "
                                         r"Did you mean 'fast'\?$"):
        check_choice("X", "mode", "fsat", ["fast", "slow"])
    with pytest.raises(ValueError, match=r"got 'SLOW'\. Did you mean 'slow'\?$"):
        check_choice("X", "mode", "SLOW", ["fast", "slow"])
    with pytest.raises(ValueError, match=r"^X mode must be one of 'fast', 'slow', got 'zzz'\.$"):
        check_choice("X", "mode", "zzz", ["fast", "slow"])
    with pytest.raises(TypeError, match=r"^X mode must be one of 'fast', 'slow', got 1\.$"):
        check_choice("X", "mode", 1, ["fast", "slow"])


def test_optional_choice_says_or_none():
    assert check_optional_choice("X", "mode", None, ["a"]) is None
    with pytest.raises(ValueError, match=r"^X mode must be one of 'a' or None, got 'b'\.$"):
        check_optional_choice("X", "mode", "b", ["a"])


def test_optional_str():
    assert check_optional_str("X", "s", None) is None
    assert check_optional_str("X", "s", "", allow_empty=True) == ""
    with pytest.raises(ValueError, match=r"^X s must be a non-empty str or None, got ''\.$"):
        check_optional_str("X", "s", "")
    with pytest.raises(TypeError, match=r"^X s must be a str or None, got 5\.$"):
        check_optional_str("X", "s", 5, allow_empty=True)


def test_instance_names_the_type():
    assert check_instance("X", "p", Path("a"), Path) == Path("a")
    assert check_instance("X", "p", None, Path, allow_none=True) is None
    with pytest.raises(TypeError, match=r"^X p must be a Path or None, got 5\.$"):
        check_instance("X", "p", 5, Path, allow_none=True)
    with pytest.raises(TypeError, match=r"^X p must be a file path, got 5\.$"):
        check_instance("X", "p", 5, (str, Path), accepted="a file path")


def test_did_you_mean():
    assert did_you_mean("amp_bf61", ["fp32", "amp_fp16", "amp_bf16"]) == " Did you mean 'amp_bf16'?"
    assert did_you_mean("FP32", ["fp32", "fp16"]) == " Did you mean 'fp32'?"
    assert did_you_mean("zzz", ["fp32"]) == ""


def test_instance_refuses_a_bool_that_passes_only_as_an_int():
    assert check_instance("X", "d", 1, (str, int)) == 1
    assert check_instance("X", "flag", True, (bool, str)) is True
    assert check_instance("X", "any", True, object) is True
    with pytest.raises(TypeError, match=r"^X d must be a device, got True\.$"):
        check_instance("X", "d", True, (str, int), accepted="a device")


def test_optional_bool():
    assert check_optional_bool("X", "live", None) is None
    assert check_optional_bool("X", "live", False) is False
    with pytest.raises(TypeError, match=r"^X live must be True, False or None, got 'yes'\.$"):
        check_optional_bool("X", "live", "yes")


def test_stream_is_a_name_or_has_write():
    import io

    out = io.StringIO()
    assert check_stream("X", "stream", "stdout") == "stdout"
    assert check_stream("X", "stream", out) is out
    with pytest.raises(ValueError, match=r"^X stream must be 'stdout', 'stderr' or a text stream "
                                         r"\(an object with write\(\)\), got 'stdot'\. "
                                         r"Did you mean 'stdout'\?$"):
        check_stream("X", "stream", "stdot")
    with pytest.raises(TypeError, match=r"got None\.$"):
        check_stream("X", "stream", None)


@pytest.mark.parametrize(
    ("value", "int_", "number", "real"),
    [(3, True, True, True), (True, False, False, False), (2.5, False, True, True),
     ("3", False, False, False)],
    ids=["int", "bool", "float", "str"],
)
def test_predicates(value, int_, number, real):
    assert (is_int(value), is_number(value), is_number(value, real=True)) == (int_, number, real)


def test_is_number_real():
    from fractions import Fraction

    assert not is_number(Fraction(1, 2)) and is_number(Fraction(1, 2), real=True)


def test_type_as_value_error_keeps_the_message():
    with (
        pytest.raises(ValueError, match=r"^X n must be a whole number >= 1, got True\.$"),
        type_as_value_error(),
    ):
        check_int("X", "n", True, minimum=1)
    with pytest.raises(ValueError, match=r"got 0\.$"), type_as_value_error():
        check_int("X", "n", 0, minimum=1)


def test_seconds_tells_how_to_fix_a_string():
    with pytest.raises(TypeError, match=r"^X t must be a finite number of seconds > 0, got '5'\. "
                                        r"To fix, pass the number, not a string\.$"):
        check_seconds("X", "t", "5")
