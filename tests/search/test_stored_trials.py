"""Stored search trials as optuna-dashboard and the optuna API read them (issue 15 item 5)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from parplan.cli import main
from tests.dashboard import dashboard, get

# 8B on 8 GPUs with a tiny memory budget: many strategies do not fit, and TPE snaps some proposals.
ARGS = ["search", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--seq-length", "4096",
        "--global-batch-size", "32", "--trials", "25", "--json", "--fix", "precision=bf16"]


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('s') / 'search.db'}"
    assert main([*ARGS, "--storage", url, "--study-name", "s"]) == 0
    return url


def _trials(url: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name="s", storage=url).get_trials()


def test_stored_params_are_the_evaluated_strategy(stored: str) -> None:
    trials = _trials(stored)
    assert len(trials) == 25
    for t in trials:
        assert t.params == {k: t.user_attrs["strategy"][k] for k in t.params}


def test_infeasible_trials_carry_the_constraint_in_both_formats(stored: str) -> None:
    trials = _trials(stored)
    infeasible = [t for t in trials if not t.user_attrs["feasible"]]
    feasible = [t for t in trials if t.user_attrs["feasible"]]
    assert feasible
    for t in trials:
        assert t.system_attrs["constraints"] == [t.system_attrs["constraints:violation"]]
        assert all(v > 0 for v in t.constraints.values()) == (t in infeasible)
    assert all(t.user_attrs["reason"] for t in infeasible)


def test_optuna_dashboard_lists_the_study_with_infeasible_trials(stored: str, tmp_path: Path) -> None:
    with dashboard(stored) as (base, studies):
        assert [s["study_name"] for s in studies] == ["s"]
        detail = get(f"{base}/studies/{studies[0]['study_id']}")
        constraints = [t["constraints"] for t in detail["trials"]]
        assert len(constraints) == 25 and all(len(c) == 1 for c in constraints)
        truth = {t.number: t.user_attrs["feasible"] for t in _trials(stored)}
        assert {t["number"]: t["constraints"][0] <= 0 for t in detail["trials"]} == truth
