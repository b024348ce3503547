"""benchmarks/recipes.py: the summary reports dense rows apart from MoE ones; --trials is checked."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _recipes():
    spec = importlib.util.spec_from_file_location("recipes_bench", ROOT / "benchmarks" / "recipes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_dense_summary_leaves_out_moe_rows_and_rows_without_a_gain():
    rows = [{"family": "dense-tp-pp", "gain": 0.02}, {"family": "cp", "gain": 0.04},
            {"family": "dense-tp-pp", "gain": 0.10}, {"family": "moe", "gain": 0.60}, {"family": "moe", "gain": None}]
    summary = _recipes().summarise(rows)
    assert summary["rows"] == 5 and summary["with_gain"] == 4
    assert summary["max_gain"] == pytest.approx(0.60) and not summary["target_met"]
    dense = summary["dense"]
    assert dense["with_gain"] == 3
    assert dense["median_gain"] == pytest.approx(0.04) and dense["max_gain"] == pytest.approx(0.10)
    assert dense["target_met"] and dense["above_15pct"] == 0


def test_a_non_positive_trial_count_is_a_one_line_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        _recipes().main(["--trials", "0", "--only", "none"])
    assert exit_info.value.code == 2
    assert "--trials must be a positive integer. Got 0 instead." in capsys.readouterr().err
