"""Problem facts (routing, pipeline schedule): fixed for every strategy, never searched (search.space)."""

from __future__ import annotations

import pytest

from costmodel.specs import get_model
from costmodel.specs.errors import SpecError
from search import build_space
from search.space import PROBLEM_FACTS, parse_knob_value
from tests.search.conftest import small_problem


def test_a_fixed_routing_holds_for_every_strategy() -> None:
    space = build_space(small_problem(16, model=get_model("mixtral-8x7b"), fixed={"moe_routing": "round_robin"}))
    strategies = list(space)
    assert strategies and all(s.moe_routing == "round_robin" for s in strategies)


def test_a_fixed_schedule_applies_only_where_the_job_pipelines() -> None:
    strategies = list(build_space(small_problem(16, fixed={"pipeline_schedule": "dualpipe"})))
    assert any(s.pp == 1 for s in strategies)
    assert all((s.pipeline_schedule == "dualpipe") == (s.pp > 1) for s in strategies)


def test_unfixed_facts_stay_at_the_strategy_default() -> None:
    strategies = list(build_space(small_problem(16)))
    assert all(getattr(s, fact) is None for s in strategies for fact in PROBLEM_FACTS)


def test_load_imbalance_parses_as_a_factor_or_balanced() -> None:
    assert parse_knob_value("moe_load_imbalance", "1.5") == 1.5
    assert parse_knob_value("moe_load_imbalance", "balanced") == "balanced"
    with pytest.raises(SpecError):
        parse_knob_value("moe_load_imbalance", "lots")
