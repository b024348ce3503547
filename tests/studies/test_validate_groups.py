"""`parplan validate` per framework and per family, each beside its own constant-MFU floor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from parplan.cli import main
from costmodel.specs.runspec import run_spec_from_mapping
from studies.validate import (
    best_constant_mfu,
    constant_mfu_step,
    group_errors,
    load_validation_set,
    validate,
    with_row_framework,
)

PUBLIC = Path(__file__).resolve().parents[2] / "studies" / "validation" / "public.yaml"


def _subset() -> list[dict]:
    """Two rows of each of two families under two frameworks (cheap to predict)."""
    entries = load_validation_set(PUBLIC)
    picked: list[dict] = []
    for family in ("dense-tp-pp", "fsdp"):
        picked += [e for e in entries if e.get("family") == family][:2]
    return picked


def test_groups_split_the_mape_by_framework_and_family() -> None:
    result = validate(_subset())
    rows = [r for r in result["runs"] if r["error"] is not None]
    for key in ("framework", "family"):
        groups = result["groups"][key]
        assert sum(g["n"] for g in groups.values()) == result["n"]
        for name, g in groups.items():
            mine = [abs(r["error"]) for r in rows if r[key] == name]
            assert g["n"] == len(mine) and g["mape"] == pytest.approx(sum(mine) / len(mine))
            assert 0 < g["constant_mfu"] < 1 and g["constant_mfu_mape"] >= 0
    assert set(result["groups"]["family"]) == {"dense-tp-pp", "fsdp"}
    assert "torchtitan" in result["groups"]["framework"]


def test_a_group_floor_is_fitted_on_that_group_alone() -> None:
    # the group's own constant MFU never does worse on the group than the set's single MFU
    entries = _subset()
    result = validate(entries)
    runs = [run_spec_from_mapping(with_row_framework(e)) for e in entries]
    mfu = result["baseline"]["mfu"]
    for name, g in result["groups"]["family"].items():
        mine = [(r, e) for r, e in zip(runs, entries) if e["family"] == name]
        at_set_mfu = sum(abs(constant_mfu_step(r, mfu) / e["measured"]["step_time_s"] - 1) for r, e in mine)
        assert g["constant_mfu_mape"] <= at_set_mfu / len(mine) + 1e-12


def test_rows_without_a_family_are_grouped_as_unlabelled() -> None:
    entries = [{k: v for k, v in e.items() if k != "family"} for e in _subset()[:1]]
    assert set(validate(entries)["groups"]["family"]) == {"unlabelled"}


def test_group_errors_matches_best_constant_mfu() -> None:
    entries = _subset()
    runs = [run_spec_from_mapping(with_row_framework(e)) for e in entries]
    rows = [{"measured_step_time_s": e["measured"]["step_time_s"], "error": 0.1, "family": e["family"]}
            for e in entries]
    groups = group_errors(rows, runs, "family")
    dense = [i for i, e in enumerate(entries) if e["family"] == "dense-tp-pp"]
    mfu, floor = best_constant_mfu([runs[i] for i in dense], [rows[i]["measured_step_time_s"] for i in dense])
    assert groups["dense-tp-pp"] == {"n": 2, "mape": pytest.approx(0.1), "constant_mfu": mfu,
                                     "constant_mfu_mape": floor}


def test_cli_prints_group_tables_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    subset = tmp_path / "set.yaml"
    subset.write_text(yaml.safe_dump(_subset()))
    assert main(["validate", str(subset)]) == 0
    human = capsys.readouterr().out
    assert "constant-MFU MAPE" in human and "fsdp" in human and "torchtitan" in human
    assert main(["validate", str(subset), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["groups"]) == {"framework", "family"}
