"""Every pinned prediction (public set, benchmark problems) is reproduced to 1e-9 relative (issue 18, item 1).

The pins are regenerated with ``python benchmarks/pin_predictions.py --write`` after a deliberate
physics change (the commit message then says so); a failure lists the first differing runs and fields.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from studies.validate import load_validation_set
from tests.regression.pins import load_pin_module

pins = load_pin_module()


@pytest.fixture(scope="module")
def pinned() -> dict[str, Any]:
    return pins.load()


@pytest.fixture(scope="module")
def recomputed(pinned: dict[str, Any]) -> dict[str, Any]:
    return pins.recompute(pinned)


def test_every_pinned_prediction_is_reproduced(pinned: dict[str, Any], recomputed: dict[str, Any]) -> None:
    diffs = pins.differences(pinned, recomputed)
    if diffs:
        pytest.fail(pins.report(diffs), pytrace=False)


def test_the_search_evaluates_the_pinned_problems_as_pinned(pinned: dict[str, Any],
                                                            recomputed: dict[str, Any]) -> None:
    diffs = pins.search_differences(pinned)
    if diffs:
        pytest.fail(pins.report(diffs), pytrace=False)


def test_pins_cover_every_public_run_and_every_benchmark_problem(pinned: dict[str, Any]) -> None:
    rows = load_validation_set(pins.PUBLIC_SET)
    assert sorted(r["id"] for r in pinned["public"]) == sorted(r["id"] for r in rows)
    names = [p.name for p, _, _ in pins.benchmark_problems()]
    assert [e["problem"]["name"] for e in pinned["problems"]] == names
    assert len([n for n in names if not n.startswith("search-")]) == 17  # the scale table
    for entry in pinned["problems"]:
        roles = {r["role"] for r in entry["runs"]}
        assert {"sample-fits", "sample-infeasible"} <= roles, entry["problem"]["name"]


def test_pins_hold_every_breakdown_and_memory_term(pinned: dict[str, Any]) -> None:
    fitting = next(r["pred"] for e in pinned["problems"] for r in e["runs"] if r["role"] == "sample-fits")
    keys = set(fitting)
    assert {"step_time_s", "fits", "violations", "peak_memory_gib", "mfu"} <= keys
    assert {k for k in keys if k.startswith("breakdown.")} >= {"breakdown.compute_s", "breakdown.pp_bubble_s"}
    assert {k for k in keys if k.startswith("memory.")} >= {"memory.weights_gib", "memory.activations_gib"}
    assert any(k.startswith("stages.0.") for k in keys)


# -- the comparison itself can fail -----------------------------------------------------------
def _first_fitting(doc: dict[str, Any]) -> dict[str, Any]:
    return next(r for e in doc["problems"] for r in e["runs"] if r["role"] == "sample-fits")


def test_a_number_off_by_more_than_the_tolerance_is_reported_with_the_regeneration_command(
        pinned: dict[str, Any]) -> None:
    changed = copy.deepcopy(pinned)
    pred = _first_fitting(changed)["pred"]
    pred["breakdown.compute_s"] *= 1 + 1e-8
    diffs = pins.differences(pinned, changed)
    assert len(diffs) == 1 and "breakdown.compute_s" in diffs[0]
    assert pins.REGENERATE in pins.report(diffs)


def test_a_number_within_the_tolerance_agrees(pinned: dict[str, Any]) -> None:
    changed = copy.deepcopy(pinned)
    _first_fitting(changed)["pred"]["step_time_s"] *= 1 + 1e-10
    assert pins.differences(pinned, changed) == []


@pytest.mark.parametrize(("pinned_value", "now"), [
    (True, False), ("interleaved", "1f1b"), (["needs 90 GiB"], []), ([8, 8], [8, 7]), (1.0, True), (0.0, 1e-300),
    ("inf", 1e308), (None, 0.0),
])
def test_strings_booleans_lists_and_zero_compare_exactly(pinned_value: Any, now: Any) -> None:
    assert not pins.values_agree(pinned_value, now)


def test_a_field_missing_on_one_side_is_reported(pinned: dict[str, Any]) -> None:
    changed = copy.deepcopy(pinned)
    pred = _first_fitting(changed)["pred"]
    pred["breakdown.new_mechanism_s"] = 0.1
    del pred["mfu"]
    diffs = pins.differences(pinned, changed)
    assert any("new_mechanism_s not pinned" in d for d in diffs) and any("mfu" in d and "absent" in d for d in diffs)
