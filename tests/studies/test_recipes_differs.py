"""benchmarks/recipes.py: a best strategy that differs from the recipe only in a switch says so."""

from __future__ import annotations

from dataclasses import replace

from costmodel.specs.runspec import run_spec_from_mapping
from tests.benchmark_module import load_benchmark


def _recipes():
    return load_benchmark("recipes")


def test_a_tp_overlap_difference_is_listed_and_an_identical_strategy_is_not():
    run = run_spec_from_mapping({"model": "llama3.1-70b", "seq_length": 4096,
                                 "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 64},
                                 "strategy": {"tp": 8, "pp": 2, "global_batch_size": 64, "sequence_parallel": True,
                                              "tp_comm_overlap": True}})
    plain = replace(run.strategy, tp_comm_overlap=False)
    bench = _recipes()
    assert bench.differing_knobs(plain, run.strategy) == ["tp_comm_overlap True->False"]
    assert bench.differing_knobs(run.strategy, run.strategy) == []


def test_a_knob_outside_the_compared_list_is_listed_too():
    # The search leaves pipeline_flushes at its default: a recipe's 4 flushes dropped to 1 must show.
    run = run_spec_from_mapping({"model": "llama3.1-70b", "seq_length": 4096,
                                 "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 64},
                                 "strategy": {"tp": 8, "pp": 2, "global_batch_size": 64, "pipeline_flushes": 4}})
    fewer = replace(run.strategy, pipeline_flushes=1)
    assert _recipes().differing_knobs(fewer, run.strategy) == ["pipeline_flushes 4->1"]
