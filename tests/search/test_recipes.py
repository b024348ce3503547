"""Recipe starting points and the climb over each basin."""

from __future__ import annotations

import optuna

from costmodel.specs import get_gpu, get_model
from search import Evaluator, SearchProblem, build_space
from search.objective import optuna_objective
from search.samplers._polish import polish, regime
from search.samplers._recipes import recipe_starts
from tests.search.conftest import analytic_evaluator, small_problem


def test_recipes_are_legal_fitting_and_cover_both_basins():
    problem = small_problem(64)
    space = build_space(problem)
    evaluator = analytic_evaluator(problem)
    starts = recipe_starts(space, evaluator)
    assert starts and len(starts) == len(set(starts))
    assert all(space.contains(s) and evaluator.fits(s) for s in starts)
    assert any(s.zero_stage == 3 and s.tp == 1 for s in starts)  # the FSDP recipe
    assert any(s.tp > 1 for s in starts)  # the tensor-parallel recipe


def test_recipe_prefers_context_over_pipeline_stages_to_fit():
    # 405B on 2048 GPUs with a batch of 1024: tp1 pp1 cp1 would need dp 2048 > batch; the FSDP recipe
    # takes cp 2 (a half-size dp) rather than 2 pipeline stages.
    problem = SearchProblem(model=get_model("llama3.1-405b"), gpu=get_gpu("h100-sxm5-80gb"), num_gpus=2048,
                            global_batch_size=1024, seq_length=8192)
    space = build_space(problem)
    starts = recipe_starts(space, Evaluator(problem))
    fsdp = [s for s in starts if s.zero_stage == 3 and s.tp == 1]
    assert fsdp and all(s.pp == 1 and s.cp == 2 and s.recompute == "full" for s in fsdp)


def test_polish_climbs_from_the_best_of_each_basin_in_turn(monkeypatch):
    import search.samplers._polish as polish_module

    problem = small_problem(64)
    space = build_space(problem)
    evaluator = analytic_evaluator(problem)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    objective = optuna_objective(evaluator, space, "time")

    def optimize(n: int) -> None:
        if n > 0:
            study.optimize(objective, n_trials=n)

    optimize(30)
    best_before = min(t.value for t in study.trials if t.value is not None)
    starts = []
    climb = polish_module._climb

    def spy(study_, optimize_, space_, evaluator_, total, current, tried):
        starts.append(current)
        climb(study_, optimize_, space_, evaluator_, total, current, tried)

    monkeypatch.setattr(polish_module, "_climb", spy)
    polish(study, optimize, space, evaluator, total=2000)
    assert len(starts) >= 2 and len(starts) == len({regime(e.strategy) for e in starts})  # one climb per basin
    assert starts[0].step_time_s == best_before  # the study's best first
    assert all(e.feasible for e in starts)
