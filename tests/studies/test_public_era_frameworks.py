"""The 2021-22 Megatron-LM and NeMo 24.07 public rows run under the frameworks their code was (issues 12, 14)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from constraints import rule_violations
from costmodel.specs.runspec import run_spec_from_mapping
from studies.validate import load_validation_set

PUBLIC = Path(__file__).resolve().parents[2] / "studies" / "validation" / "public.yaml"
ENTRIES = load_validation_set(PUBLIC)
ERA = {"narayanan21-": "megatron-lm-2021", "korthikanti22-": "megatron-lm-2022", "nemo2407-": "nemo1"}
ROWS = [(e, fw) for e in ENTRIES for prefix, fw in ERA.items() if e["id"].startswith(prefix)]


@pytest.mark.parametrize(("entry", "framework"), ROWS, ids=[e["id"] for e, _ in ROWS])
def test_era_row_runs_under_its_framework_and_breaks_none_of_its_rules(entry: dict[str, Any], framework: str) -> None:
    run = run_spec_from_mapping(entry["run"])
    assert run.framework.name == framework
    assert not [v for v in rule_violations(run) if "framework" in v]


def test_every_era_group_is_there() -> None:
    counts = {fw: sum(f == fw for _, f in ROWS) for fw in ERA.values()}
    assert counts == {"megatron-lm-2021": 10, "megatron-lm-2022": 8, "nemo1": 12}


def test_nemo2407_rows_state_recompute_and_leave_no_optimizer_knob_unstated() -> None:
    for entry, framework in ROWS:
        if framework == "nemo1":
            assert "recompute" in entry["run"]["strategy"], entry["id"]
            assert not {"recompute", "zero_stage"} & {str(u).split(" ")[0] for u in entry.get("unstated", [])}
