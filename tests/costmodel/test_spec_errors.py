"""The one-line SpecError shape and the numeric checks (costmodel/specs/errors.py)."""

from __future__ import annotations

import math
import time

import pytest

from costmodel.specs.errors import MAX_INT, QUOTE_CHARS, SpecError, quote, require_int, require_number


def test_a_10_mb_value_is_quoted_in_80_characters() -> None:
    value = "x" * 10_000_000
    start = time.perf_counter()
    message = str(SpecError("model", value, "a catalog name"))
    assert time.perf_counter() - start < 1.0
    got = message.split("Got ", 1)[1].removesuffix(" instead.")
    assert len(got) <= QUOTE_CHARS and got.startswith("'xxx") and "..." in got
    assert SpecError("model", value, "x").value is value  # the value itself is kept for callers


def test_a_huge_nested_value_and_field_are_cut_too() -> None:
    nested = [[["lol"] * 9] * 9] * 9
    message = str(SpecError("k" * 1000, nested, "a mapping"))
    assert len(message) < 2 * QUOTE_CHARS + 60
    assert "k" * 100 not in message


def test_short_values_are_quoted_as_repr() -> None:
    for value in ("abc", 8, 8.0, None, [1, 2], {"a": 1}):
        assert quote(value) == repr(value)
    assert quote(10**5000).startswith("<an integer of")  # past the 4300-digit str() limit


def test_the_message_is_one_line_whatever_allowed_holds() -> None:
    assert "\n" not in str(SpecError("f", "a\nb", "valid YAML (expected x\n  in line 3)"))


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 0, -1.5, "1.0e308", "8", True, None, 1e19])
def test_require_number_refuses(value: object) -> None:
    with pytest.raises(SpecError, match="a number > 0 and <= 1e\\+18") as info:
        require_number("cluster.hbm_bandwidth_GBps", value)
    assert info.value.field == "cluster.hbm_bandwidth_GBps"


def test_require_number_accepts_finite_numbers_and_huge_ints_fail_cleanly() -> None:
    assert require_number("x", 2039) == 2039.0
    assert require_number("x", 0, strict=False) == 0.0
    with pytest.raises(SpecError):
        require_number("x", 10**400)  # an int too large for a float: refused, no OverflowError


@pytest.mark.parametrize("value", [0, -8, 8.0, math.nan, math.inf, "8", True, MAX_INT + 1, 10**12])
def test_require_int_refuses_with_the_range(value: object) -> None:
    with pytest.raises(SpecError, match=rf"an integer in \[1, {MAX_INT}\]"):
        require_int("strategy.tp", value)


def test_require_int_maximum() -> None:
    assert require_int("cluster.num_gpus", 1024, maximum=2**20) == 1024
    with pytest.raises(SpecError, match=r"\[1, 1048576\]"):
        require_int("cluster.num_gpus", 2**20 + 1, maximum=2**20)
