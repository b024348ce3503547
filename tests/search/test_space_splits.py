"""Uneven pipeline splits are offered as the pipeline_split knob where the layers do not divide over pp * vpp."""

from __future__ import annotations

from dataclasses import replace

import pytest

from constraints import rule_violations
from costmodel.specs import get_model
from costmodel.specs.layout import interleaved_ends, layout_of, pipeline_splits
from search import build_space
from search.space import SPLIT_KNOB, knob_value, legal_pp, legal_vpp
from tests.search.conftest import small_problem

# Llama 3 405B's 126 layers (NVIDIA's and Meta's uneven pp 16 example) on a shallow proxy of 30 layers
UNEVEN = replace(get_model("llama3.1-8b"), num_layers=30)


def test_divisible_models_keep_the_even_split_only() -> None:
    space = build_space(small_problem(16))
    assert space.choices[SPLIT_KNOB] == ("even",)


@pytest.mark.parametrize(("layers", "pp", "vpp"), [(126, 16, 2), (126, 8, 2), (30, 4, 2), (62, 2, 2), (61, 5, 3)])
def test_every_offered_split_is_a_layout_megatron_builds(layers: int, pp: int, vpp: int) -> None:
    from costmodel.specs.layout import _layout
    for name, fields_of in pipeline_splits(layers, 0, pp, vpp).items():
        lay = _layout(layers, 0, pp, vpp, None, fields_of.get("first_stage_layers"), fields_of.get("last_stage_layers"),
                      bool(fields_of.get("account_for_embedding")), bool(fields_of.get("account_for_loss")))
        assert not lay.problems, (name, lay.problems)
        assert sum(lay.stage_layers) == layers


def test_interleaved_ends_give_the_ends_no_more_than_a_middle_rank() -> None:
    first, last = interleaved_ends(126, 16, 2)  # type: ignore[misc]
    assert (first, last) == (8, 6)  # 8 + 14 x 8 + 6 = 126, each a multiple of vpp 2
    assert interleaved_ends(61, 4, 8) is None


def test_uneven_layers_get_interleaving_through_ends_or_accounting() -> None:
    problem = small_problem(16, model=UNEVEN)
    assert 4 in legal_pp(problem, 1, 1)
    assert legal_vpp(problem, 4, 16)[:2] == [1, 2]  # 30 layers: no even vpp 2 split over pp 4
    space = build_space(problem)
    assert set(space.choices[SPLIT_KNOB]) == {"even", "ends", "accounted"}
    picked = [s for s in space if s.pp == 4 and s.vpp == 2]
    assert picked and {knob_value(s, SPLIT_KNOB, problem.framework) for s in picked} == {"ends", "accounted"}
    for strategy in picked[:20]:
        run = problem.run(strategy)
        assert not rule_violations(run), strategy
        assert space.contains(strategy)
        assert sum(layout_of(UNEVEN, strategy).stage_layers) == 30


def test_neighbours_move_between_splits() -> None:
    problem = small_problem(16, model=UNEVEN)
    space = build_space(problem)
    ends = next(s for s in space if knob_value(s, SPLIT_KNOB, problem.framework) == "ends")
    moved = {knob_value(s, SPLIT_KNOB, problem.framework) for s in space.neighbours(ends)}
    assert "accounted" in moved


def test_split_can_be_fixed() -> None:
    space = build_space(small_problem(16, model=UNEVEN, fixed={SPLIT_KNOB: "accounted"}))
    assert space.choices[SPLIT_KNOB] == ("accounted",)
    assert all(s.account_for_embedding and s.account_for_loss for s in space)
