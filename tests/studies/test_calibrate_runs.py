"""benchmarks/calibrate.py fits the factor on the runs `parplan validate` predicts (row framework, completions)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import yaml

from studies.validate import validate

ROOT = Path(__file__).resolve().parents[2]


def _calibrate():
    spec = importlib.util.spec_from_file_location("calibrate_bench", ROOT / "benchmarks" / "calibrate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_calibrate_predicts_the_runs_validate_reports() -> None:
    entries = yaml.safe_load((ROOT / "studies" / "validation" / "public.yaml").read_text())
    labelled = [e for e in entries if "framework" not in e["run"] and e.get("framework")][:3]
    completed = [e for e in entries if e.get("unstated")][:3]
    chosen = {e["id"]: e for e in labelled + completed}
    rows = {r["id"]: r for r in validate(list(chosen.values()), ROOT / "studies" / "validation")["runs"]}
    calibrate = _calibrate()
    for run_id, entry in chosen.items():
        run = calibrate.validated_run(entry)
        row = rows[run_id]
        assert run.framework.name == row["framework"]
        for knob, value in row.get("completed", {}).items():
            assert getattr(run.strategy, knob) == value
