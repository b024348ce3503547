"""MoE knobs in the search space (search/space.py): expert TP folding, dispatchers, overlaps, under the rules."""

from __future__ import annotations

import pytest

from constraints.rules import rule_violations
from costmodel.specs.catalog import get_gpu, get_model
from costmodel.specs.framework import get_framework
from costmodel.specs.strategy import Strategy
from search.space import SearchProblem, build_space


def _problem(model: str = "mixtral-8x7b", framework: str = "megatron-core", **kwargs: object) -> SearchProblem:
    args: dict[str, object] = {"model": get_model(model), "gpu": get_gpu("h100-sxm5-80gb"), "num_gpus": 16,
                               "global_batch_size": 32, "seq_length": 4096, "max_cp": 1, "max_vpp": 2,
                               "max_micro_batch_size": 1, "framework": get_framework(framework)}
    args.update(kwargs)
    return SearchProblem(**args)  # type: ignore[arg-type]


def test_moe_space_offers_folding_dispatchers_and_overlaps() -> None:
    space = build_space(_problem())
    assert set(space.choices["moe_token_dispatcher"]) == {"allgather", "alltoall", "flex", "hybridep"}
    assert set(space.choices["moe_a2a_overlap"]) == {False, True}
    folded = [s for s in space if s.etp is not None]
    assert folded and all(s.etp == 1 < s.tp for s in folded)
    assert any(s.ep > s.dp * s.cp for s in folded)  # EP drawn from tp*dp*cp, legal only by folding


def test_every_moe_strategy_of_the_space_keeps_the_rules() -> None:
    problem = _problem()
    space = build_space(problem)
    strategies = list(space)
    assert len(strategies) == space.size
    for s in strategies[::7]:
        assert rule_violations(problem.run(s)) == [], s
    a2a = [s for s in strategies if s.moe_a2a_overlap]
    assert a2a and all(s.recompute != "full" and s.ep > 1 and (s.pp == 1 or s.vpp > 1) for s in a2a)
    assert not [s for s in strategies if s.moe_shared_expert_overlap]  # mixtral has no shared expert


def test_space_holds_a_recipe_that_leaves_moe_knobs_to_the_framework() -> None:
    space = build_space(_problem())
    recipe = Strategy(tp=2, dp=8, ep=8, micro_batch_size=1, global_batch_size=32, sequence_parallel=True)
    assert space.contains(recipe)
    assert space.knobs_of(recipe)["moe_token_dispatcher"] == "allgather"  # megatron-core.yaml default
    assert space.knobs_of(recipe)["etp"] == 2
    assert not space.contains(Strategy(tp=2, dp=8, ep=8, micro_batch_size=1, global_batch_size=32,
                                       sequence_parallel=True, moe_token_dispatcher="alltoall",
                                       moe_a2a_overlap=True, recompute="full"))  # a2a overlap refuses full


def test_frameworks_without_megatron_core_keep_their_dispatcher_and_no_folding() -> None:
    space = build_space(_problem(framework="torchtitan", max_tp=4))
    assert space.choices["moe_token_dispatcher"] == ("alltoall",)
    assert all(s.etp is None and s.moe_token_dispatcher is None for s in space)


def test_dense_models_get_no_moe_knobs() -> None:
    space = build_space(_problem(model="llama3.1-8b"))
    assert all(s.etp is None and s.moe_token_dispatcher is None and s.moe_a2a_overlap is None for s in space)


@pytest.mark.parametrize("knob,value", [("etp", 2), ("moe_token_dispatcher", "flex")])
def test_allowing_a_moe_knob_restricts_it(knob: str, value: object) -> None:
    space = build_space(_problem(allowed={knob: (value,)}))
    assert {space.knobs_of(s)[knob] for s in space} == {value}
