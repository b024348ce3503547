"""A stored search interrupted by Ctrl-C and re-run ends where an uninterrupted one does (issue 11, item 7)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from search import Evaluator, run_search
from search.space import SearchProblem
from tests.search.conftest import analytic_evaluator, small_problem

TRIALS = 60


class _CtrlC(Evaluator):
    """An evaluator whose ``stop_at``-th evaluation raises KeyboardInterrupt, as Ctrl-C inside a trial would."""

    def __init__(self, problem: SearchProblem, stop_at: int) -> None:
        super().__init__(problem, timer=analytic_evaluator(problem).timer)
        self.calls, self.stop_at = 0, stop_at

    def evaluate(self, strategy):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.calls == self.stop_at:
            raise KeyboardInterrupt
        return super().evaluate(strategy)


@pytest.fixture(scope="module")
def problem() -> SearchProblem:
    return small_problem(64, global_batch_size=256, seq_length=8192)


@pytest.fixture(scope="module")
def uninterrupted(problem: SearchProblem):  # type: ignore[no-untyped-def]
    return run_search(problem, n_trials=TRIALS, evaluator=analytic_evaluator(problem))


# 20: inside TPE; 47: inside the recipes and climb (TPE has the first 45 of 60 trials).
@pytest.mark.parametrize("stop_at", [20, 47, 55])
def test_resumed_search_reaches_the_uninterrupted_optimum(problem, uninterrupted, stop_at: int,  # type: ignore[no-untyped-def]
                                                          tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with pytest.raises(KeyboardInterrupt):
        run_search(problem, n_trials=TRIALS, evaluator=_CtrlC(problem, stop_at), storage=url, study_name="s")
    resumed = run_search(problem, n_trials=TRIALS, evaluator=analytic_evaluator(problem), storage=url,
                         study_name="s")
    assert resumed.best is not None and uninterrupted.best is not None
    assert resumed.best.step_time_s <= uninterrupted.best.step_time_s
    assert [e.strategy for e in resumed.evaluations] == [e.strategy for e in uninterrupted.evaluations]
    stored = optuna.load_study(study_name="s", storage=url)
    complete = stored.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(complete) == TRIALS
    assert not stored.get_trials(states=(optuna.trial.TrialState.WAITING,))


def test_stored_search_equals_in_memory_search(problem, uninterrupted, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    stored = run_search(problem, n_trials=TRIALS, evaluator=analytic_evaluator(problem),
                        storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s")
    assert [e.strategy for e in stored.evaluations] == [e.strategy for e in uninterrupted.evaluations]


def test_on_trial_counts_finished_trials(problem) -> None:  # type: ignore[no-untyped-def]
    seen: list[tuple[int, int | None]] = []
    run_search(problem, n_trials=12, evaluator=analytic_evaluator(problem), on_trial=lambda d, t: seen.append((d, t)))
    assert [d for d, _ in seen] == list(range(1, 13))
    assert {t for _, t in seen} == {12}


def test_missing_profile_fails_before_any_trial(problem, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from costmodel.specs.errors import SpecError

    url = f"sqlite:///{tmp_path / 's.db'}"
    with pytest.raises(SpecError, match="profile"):
        run_search(problem, n_trials=5, profile_dir=tmp_path / "no-such-profile", storage=url, study_name="s")
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize("url", ["notaurl", "nosuchdb://x/y", "sqlite://"])
def test_malformed_storage_is_one_spec_error(problem, url: str) -> None:  # type: ignore[no-untyped-def]
    from costmodel.specs.errors import SpecError

    with pytest.raises(SpecError, match="--storage") as info:
        run_search(problem, n_trials=5, evaluator=analytic_evaluator(problem), storage=url, study_name="s")
    assert "\n" not in str(info.value)


def _stored(study) -> list[tuple]:  # type: ignore[no-untyped-def, type-arg]
    return [(t.state, t.values, t.params, t.user_attrs, t.system_attrs) for t in study.get_trials()]


@pytest.mark.parametrize("resume_from", [0, 25])
def test_storing_at_the_end_stores_what_storing_each_trial_does(problem, resume_from: int) -> None:  # type: ignore[no-untyped-def]
    from search import build_space, make_searcher
    from search.storage import TrialList

    space = build_space(problem)
    stores = []
    for store_each, store in ((True, "study"), (False, "study"), (False, "list")):
        searcher = make_searcher("tpe", seed=3)
        target = optuna.create_study(sampler=searcher.make_sampler()) if store == "study" else TrialList()
        if resume_from:  # a stored search to resume: only the new trials may be added at the end
            make_searcher("tpe", seed=3).search(space, analytic_evaluator(problem), n_trials=resume_from,
                                                study=target)
        searcher.search(space, analytic_evaluator(problem), n_trials=TRIALS, study=target,
                        store_each=store_each)
        stores.append(_stored(target))
    assert len(stores[0]) == TRIALS
    assert stores[0] == stores[1] == stores[2]
