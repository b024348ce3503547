"""benchmarks/recipes.py prices a recipe at the fastest fitting completion of the knobs its row leaves unstated."""

from __future__ import annotations

from tests.benchmark_module import load_benchmark


def _recipes():
    return load_benchmark("recipes")


def _row(recipes, row_id: str):
    entry = next(e for e in recipes.load_validation_set(recipes.PUBLIC) if e["id"] == row_id)
    run = recipes.run_spec_from_mapping(recipes.with_row_framework(entry), recipes.PUBLIC.parent)
    return entry, run, recipes.Evaluator(recipes.problem_for(run))


def test_unstated_knobs_take_the_fastest_fitting_values_and_stated_ones_stay():
    recipes = _recipes()
    entry, run, evaluator = _row(recipes, "megatron-core-r080-h100-32b")
    strategy, changes = recipes.tuned_completion(run, entry["unstated"], evaluator)
    assert set(changes) <= {"micro_batch_size", "recompute"}
    assert evaluator.evaluate(strategy).feasible
    for knob in ("tp", "pp", "dp", "cp", "global_batch_size", "zero_stage"):
        assert getattr(strategy, knob) == getattr(run.strategy, knob)


def test_a_row_without_unstated_knobs_is_priced_as_written():
    recipes = _recipes()
    entry = next(e for e in recipes.load_validation_set(recipes.PUBLIC)
                 if recipes.is_recipe(e) and not e.get("unstated"))
    run = recipes.run_spec_from_mapping(recipes.with_row_framework(entry), recipes.PUBLIC.parent)
    strategy, changes = recipes.tuned_completion(run, [], recipes.Evaluator(recipes.problem_for(run)))
    assert strategy == run.strategy and changes == {}


def test_a_row_reports_the_recipe_as_written_and_tuned_with_both_gains():
    recipes = _recipes()
    entry = next(e for e in recipes.load_validation_set(recipes.PUBLIC) if e["id"] == "megatron-core-r080-h100-32b")
    row = recipes.run_row(entry, tpe_trials=4)
    assert "recipe_s" not in row and {"recipe_tuned_s", "recipe_written_s", "gain_tuned", "gain_written"} <= set(row)
    run, evaluator = _row(recipes, entry["id"])[1:]
    assert row["recipe_written_s"] == evaluator.evaluate(run.strategy).step_time_s
    for key, recipe in (("gain_tuned", "recipe_tuned_s"), ("gain_written", "recipe_written_s")):
        assert row[key] == 1.0 - row["best_s"] / row[recipe]
