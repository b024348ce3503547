"""Every numeric flag refuses zero, negatives, NaN, inf and empty list items: one line, exit 2 (issue 11, item 5)."""

from __future__ import annotations

import argparse

import pytest

from parplan import _argtypes
from parplan.cli import main

SEARCH = ["search", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb"]
BAD = [
    (["--gpus", "8", "--global-batch-size", "0"], "--global-batch-size"),
    (["--gpus", "8", "--global-batch-size", "-8"], "--global-batch-size"),
    (["--gpus", "8", "--seq-length", "0"], "--seq-length"),
    (["--gpus", "8", "--seq-length", "1.0e308"], "--seq-length"),
    (["--gpus", "8", "--gpus-per-node", "0"], "--gpus-per-node"),
    (["--gpus", "8", "--trials", "0"], "--trials"),
    (["--gpus", "8", "--trials", "-5"], "--trials"),
    (["--gpus", "8", "--top", "0"], "--top"),
    (["--gpus", "8", "--max-tp", "0"], "--max-tp"),
    (["--gpus", "8", "--max-micro-batch-size", "-1"], "--max-micro-batch-size"),
    (["--gpus", "8", "--price-per-gpu-hour", "-1"], "--price-per-gpu-hour"),
    (["--gpus", "8", "--price-per-gpu-hour", "nan"], "--price-per-gpu-hour"),
    (["--gpus", "8", "--tokens", "inf"], "--tokens"),
    (["--gpus", "8", "--tokens", "0"], "--tokens"),
    (["--gpus", "8", "--tokens", "1e12", "--deadline-days", "nan"], "--deadline-days"),
    (["--gpus", "8", "--jobs", "0"], "--jobs"),
    (["--gpus", "8", "--seed", "-1"], "--seed"),
    (["--gpus", "8,,16"], "--gpus"),
    (["--gpus", "0"], "--gpus"),
    (["--gpus", "eight"], "--gpus"),
    (["--max-gpus", "0"], "--max-gpus"),
    (["--max-gpus", "-inf"], "--max-gpus"),
    (["--gpus", "8", "--allow", "tp=1,,2"], "--allow"),
    (["--gpus", "8", "--fix", "tp=abc"], "--fix"),
    (["--gpus", "8", "--fix", "wings=2"], "--fix"),
    (["--gpus", "8", "--fix", "tp"], "--fix"),
]


@pytest.mark.parametrize(("flags", "flag"), BAD, ids=[" ".join(f) for f, _ in BAD])
def test_bad_search_flag_is_one_line_naming_the_flag(flags: list[str], flag: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main([*SEARCH, *flags])
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and flag in err[0] and "Traceback" not in err[0]


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "-inf", "", " ", "1.5", "1e3", "x" * 500])
def test_positive_int_refuses(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as info:
        _argtypes.positive_int(text)
    assert "[1, " in str(info.value) and len(str(info.value)) < 200


@pytest.mark.parametrize("text", ["0", "-2.5", "nan", "NaN", "inf", "-inf", "1e400", "abc", ""])
def test_positive_number_refuses(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="> 0"):
        _argtypes.positive_number(text)


def test_typed_values_accept_what_is_in_range() -> None:
    assert _argtypes.positive_int(" 8 ") == 8
    assert _argtypes.positive_number("1.5e13") == 1.5e13
    assert _argtypes.int_list()("8,16") == (8, 16)
    assert _argtypes.jobs("-1") == -1 and _argtypes.jobs("4") == 4
    with pytest.raises(argparse.ArgumentTypeError):
        _argtypes.jobs("-2")
    with pytest.raises(argparse.ArgumentTypeError, match="empty"):
        _argtypes.int_list()("8,")
