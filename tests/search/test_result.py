"""Ranking, Pareto front, why-not lines and the explanation when nothing fits."""

from __future__ import annotations

from costmodel.specs import get_gpu, get_model
from search import SearchProblem, explain_infeasible, run_search
from tests.search.conftest import analytic_evaluator, small_problem


def test_top_is_ranked_and_feasible(problem) -> None:  # type: ignore[no-untyped-def]
    result = run_search(problem, n_trials=40, evaluator=analytic_evaluator(problem))
    top = result.top(5)
    assert top and all(e.feasible for e in top)
    assert [e.step_time_s for e in top] == sorted(e.step_time_s for e in top)
    assert result.best == top[0]


def test_pareto_front_is_non_dominated() -> None:
    problem = small_problem(16, fixed={"precision": "bf16", "zero_stage": 1})
    result = run_search(problem, sampler="exhaustive", objective="pareto", evaluator=analytic_evaluator(problem))
    front = result.pareto_front()
    assert len(front) >= 2
    for e in front:
        assert not any(o.step_time_s <= e.step_time_s and o.peak_memory_gib < e.peak_memory_gib
                       for o in result.feasible)


def test_why_not_quotes_the_memory_numbers() -> None:
    problem = small_problem(8, fixed={"precision": "bf16", "zero_stage": 0})  # 8B unsharded: tp=1 cannot fit
    result = run_search(problem, sampler="exhaustive", evaluator=analytic_evaluator(problem))
    lines = result.why_not()
    assert lines
    memory = [line for line in lines if "GiB usable" in line]
    assert memory and memory[0].split("=")[0] in {"tp", "pp", "cp", "recompute", "micro_batch_size", "vpp",
                                                   "sequence_parallel"}
    assert any("slower" in line for line in lines) or len(memory) == len(lines)


def test_infeasible_explains_the_fewest_gpus_and_the_gap() -> None:
    problem = SearchProblem(model=get_model("llama3.1-405b"), gpu=get_gpu("a100-sxm4-40gb"), num_gpus=8,
                            global_batch_size=64, seq_length=8192)
    result = run_search(problem, n_trials=10, evaluator=analytic_evaluator(problem))
    assert result.best is None
    why = explain_infeasible(result)
    assert why.fewest_gpus is not None and why.fewest_gpus > 8
    assert why.fitting_example is not None and why.fitting_example.feasible
    assert why.closest is not None and why.closest.memory_excess_gib > 0
    text = "\n".join(why.lines(problem))
    assert f"Fewest a100-sxm4-40gb GPUs that fit: {why.fewest_gpus}" in text
    assert "GiB short" in text
