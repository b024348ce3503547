"""CUDA graphs in the search space: opt-in, and only the scopes the framework captures."""

from __future__ import annotations

from dataclasses import replace

import pytest

from costmodel.specs.errors import SpecError
from costmodel.specs.framework import get_framework
from search.space import build_space, parse_knob_value
from tests.search.conftest import small_problem

PROBLEM = small_problem(64)


def test_unasked_the_space_holds_no_graphs() -> None:
    space = build_space(PROBLEM)
    assert "cuda_graphs" not in dict(space.settings)
    assert all(s.cuda_graphs == "none" for s in list(space)[:50])


def test_allowed_scopes_multiply_the_space() -> None:
    allowed = replace(PROBLEM, allowed=(("cuda_graphs", ("none", "layers", "full_iteration")),))
    space = build_space(allowed)
    assert dict(space.settings)["cuda_graphs"] == ("none", "layers", "full_iteration")
    assert space.size == 3 * build_space(PROBLEM).size
    assert parse_knob_value("cuda_graphs", " layers ") == "layers"


def test_a_framework_without_graphs_offers_none_and_refuses_a_scope_on_one_line() -> None:
    titan = replace(PROBLEM, framework=get_framework("torchtitan"))
    space = build_space(replace(titan, allowed=(("cuda_graphs", ("none", "layers")),)))
    assert dict(space.settings)["cuda_graphs"] == ("none",)
    with pytest.raises(SpecError) as info:
        build_space(replace(titan, allowed=(("cuda_graphs", ("layers",)),)))
    assert info.value.field == "cuda_graphs" and "\n" not in str(info.value)
