"""benchmarks/calibrate.py fits the factor on the runs `parplan validate` predicts (row framework, completions)."""

from __future__ import annotations

from pathlib import Path

import yaml

from studies.validate import validate
from tests.benchmark_module import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


def _calibrate():
    return load_benchmark("calibrate")


# Rows validate completes (a stated-unstated knob filled, ``completed`` non-empty), each under a framework
# other than the default: FSDP under torchtitan, HAI-LLM (DeepSeek-V2). The NeMo FP8 rows state their
# recompute now (NeMo-Framework-Launcher configs), so one runs here under its run's own framework (nemo1).
COMPLETED = ("fmsfsdp-a100-llama2-70b-fsdp-128gpu", "deepseekv2-report-h800-1024gpu")
OWN_FRAMEWORK = ("nemo2407-h100-fp8-gpt3-20b",)


def test_calibrate_predicts_the_runs_validate_reports() -> None:
    entries = yaml.safe_load((ROOT / "studies" / "validation" / "public.yaml").read_text())
    labelled = [e for e in entries if "framework" not in e["run"] and e.get("framework")][:3]
    completed = [e for e in entries if e["id"] in COMPLETED + OWN_FRAMEWORK]
    assert len(completed) == len(COMPLETED + OWN_FRAMEWORK)
    chosen = {e["id"]: e for e in labelled + completed}
    rows = {r["id"]: r for r in validate(list(chosen.values()), ROOT / "studies" / "validation")["runs"]}
    calibrate = _calibrate()
    for run_id, entry in chosen.items():
        run = calibrate.validated_run(entry)
        row = rows[run_id]
        assert run.framework.name == row["framework"]
        for knob, value in row.get("completed", {}).items():
            assert getattr(run.strategy, knob) == value
    assert all(rows[i].get("completed") for i in COMPLETED)  # the completions are really exercised
    assert {rows[i]["framework"] for i in COMPLETED + OWN_FRAMEWORK} == {"torchtitan", "hai-llm", "nemo1"}
