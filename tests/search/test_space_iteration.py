"""Iterating a space gives exactly the strategies ``strategy_of`` builds from the filtered full product."""

from __future__ import annotations

import itertools

import pytest

from costmodel.specs.catalog import get_gpu, get_model
from costmodel.specs.framework import get_framework
from search.space import (LAYOUT_KNOBS, SearchProblem, StrategySpace, _degree_layouts, _iter_layouts, build_space,
                          legal_cp_comm_types, legal_hsdp_shard_sizes, legal_splits, setting_conflicts)


def _reference(space: StrategySpace) -> list[object]:
    """Every (layout, setting) of the full product whose values none conflict, as ``strategy_of`` builds it."""
    names, fw = [k for k, _ in space.settings], space.problem.framework
    out = []
    for layout in space.layouts:
        picked = dict(zip(LAYOUT_KNOBS, layout))
        for setting in itertools.product(*(v for _, v in space.settings)):
            if not any(setting_conflicts(picked, k, v, fw) for k, v in zip(names, setting)):
                out.append(space.strategy_of(layout, setting))
    return out


PROBLEMS = {
    "dense, uneven splits": dict(model="llama3.1-8b", num_gpus=24, global_batch_size=48),
    "moe, fixed facts": dict(model="mixtral-8x7b", num_gpus=16, global_batch_size=32, max_cp=1, max_vpp=2,
                             fixed=(("moe_load_imbalance", "balanced"), ("moe_routing", "round_robin"),
                                    ("pipeline_schedule", "1f1b"))),
    "deepspeed (zero stages vs pp)": dict(model="llama3.1-8b", num_gpus=16, global_batch_size=32,
                                          framework="deepspeed"),
    "torchtitan (hsdp)": dict(model="llama3.1-8b", num_gpus=32, global_batch_size=64, framework="torchtitan"),
}


def _problem(name: str) -> SearchProblem:
    args = dict(PROBLEMS[name])
    args["model"] = get_model(args["model"])  # type: ignore[arg-type]
    if "framework" in args:
        args["framework"] = get_framework(args["framework"])  # type: ignore[arg-type]
    return SearchProblem(gpu=get_gpu("h100-sxm5-80gb"), seq_length=4096, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_iteration_equals_strategy_of_over_the_filtered_product(name: str) -> None:
    space = build_space(_problem(name))
    fast, reference = list(space), _reference(space)
    assert len(fast) == space.size > 100
    assert fast == reference
    assert [vars(s) for s in fast] == [vars(s) for s in reference]  # derived fields too (sequence_parallel, vpp)
    assert [(layout, setting) for layout, setting in space.legal_settings()] == \
        [(layout, setting) for layout in space.layouts for setting in itertools.product(*(v for _, v in space.settings))
         if not any(setting_conflicts(dict(zip(LAYOUT_KNOBS, layout)), k, v, space.problem.framework)
                    for k, v in zip([k for k, _ in space.settings], setting))]


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_layouts_equal_the_plain_nested_loops(name: str) -> None:
    problem = _problem(name)
    for across in (False, True):
        plain = [(*lay, exchange, shard, split) for lay in _degree_layouts(problem, across)
                 for exchange in legal_cp_comm_types(problem, lay[0], lay[2])
                 for shard in legal_hsdp_shard_sizes(problem, lay[0], lay[2], lay[3])
                 for split in legal_splits(problem, lay[1], lay[5])]
        assert list(_iter_layouts(problem, across)) == plain
        assert len(plain) > 20
