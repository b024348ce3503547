"""Every searcher keeps the contract of ``search.samplers.BaseSearcher`` (shared conformance suite)."""

from __future__ import annotations

import optuna
import pytest

from costmodel.llm.step import predict_step
from search import build_space, run_search
from search.samplers import BaseSearcher, ExhaustiveSearcher, NSGAIISearcher, TPESearcher
from search.storage import open_study
from tests.search.conftest import analytic_evaluator, analytic_timer, small_problem

SEARCHERS = {
    "tpe": lambda: TPESearcher(seed=3),
    "nsga2": lambda: NSGAIISearcher(seed=3, population_size=10),
    "exhaustive": lambda: ExhaustiveSearcher(),
}
TINY = {"fixed": {"precision": "bf16", "zero_stage": 1, "cp_comm_type": "p2p"},  # p2p: keep the space small
        "allowed": {"recompute": ("selective", "full")}}


@pytest.fixture(params=sorted(SEARCHERS))
def searcher(request: pytest.FixtureRequest) -> BaseSearcher:
    return SEARCHERS[request.param]()


def test_proposals_are_legal_and_one_per_trial(searcher: BaseSearcher) -> None:
    problem = small_problem(16, **TINY)
    space = build_space(problem)
    out = searcher.search(space, analytic_evaluator(problem), n_trials=25)
    assert len(out) == 25
    assert all(space.contains(e.strategy) for e in out)


def test_same_seed_same_trials(searcher: BaseSearcher) -> None:
    problem = small_problem(16, **TINY)
    space = build_space(problem)
    runs = [[e.strategy for e in searcher.search(space, analytic_evaluator(problem), n_trials=25)]
            for _ in range(2)]
    assert runs[0] == runs[1]


def test_stored_study_resumes(searcher: BaseSearcher, tmp_path) -> None:  # type: ignore[no-untyped-def]
    problem = small_problem(16, **TINY)
    space = build_space(problem)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    evaluator = analytic_evaluator(problem)
    first = searcher.search(space, evaluator, n_trials=6,
                            study=open_study(url, "s", searcher.directions, searcher.make_sampler()))
    study = open_study(url, "s", searcher.directions, searcher.make_sampler())
    second = searcher.search(space, evaluator, n_trials=10, study=study)
    assert [e.strategy for e in second[:6]] == [e.strategy for e in first]
    assert len(study.trials) == 10
    assert all("violation" in t.user_attrs and "constraints:violation" in t.system_attrs for t in study.trials)


def test_exhaustive_finds_the_brute_force_optimum() -> None:
    problem = small_problem(16, **TINY)
    space = build_space(problem)
    timer = analytic_timer(problem)
    brute = {}
    for strategy in space:
        from constraints import check

        run = problem.run(strategy)
        if check(run).fits:
            brute[strategy] = predict_step(run, timer).step_time_s
    best = min(brute, key=brute.__getitem__)
    result = run_search(problem, sampler="exhaustive", evaluator=analytic_evaluator(problem))
    assert result.trials == space.size
    assert len(result.feasible) == len(brute)
    assert result.best is not None and result.best.strategy == best
    assert result.best.step_time_s == pytest.approx(brute[best])


def test_parallel_sweep_equals_serial() -> None:
    problem = small_problem(16, **TINY)
    space = build_space(problem)
    serial = ExhaustiveSearcher(n_jobs=1).search(space, analytic_evaluator(problem))
    parallel = ExhaustiveSearcher(n_jobs=2, min_parallel=1).search(space, analytic_evaluator(problem))
    assert serial == parallel


def test_tpe_reaches_the_optimum_of_a_small_space() -> None:
    problem = small_problem(16, **TINY)
    evaluator = analytic_evaluator(problem)
    truth = run_search(problem, sampler="exhaustive", evaluator=evaluator).best
    # 150 of the space's ~1,100 strategies (the pipeline_split knob grew it; 60 trials missed by 12% at seed 0)
    found = run_search(problem, sampler="tpe", n_trials=150, seed=0, evaluator=evaluator).best
    assert truth is not None and found is not None
    assert found.step_time_s <= truth.step_time_s * 1.02


def test_optuna_logging_is_left_as_it_was(problem) -> None:  # type: ignore[no-untyped-def]
    level = optuna.logging.get_verbosity()
    run_search(problem, n_trials=3, evaluator=analytic_evaluator(problem))
    assert optuna.logging.get_verbosity() == level
