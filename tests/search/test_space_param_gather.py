"""overlap_param_gather is offered only where the framework gathers under the next forward (dp_buckets)."""

from __future__ import annotations

import pytest

from costmodel.specs.framework import get_framework
from search import build_space
from tests.search.conftest import small_problem


@pytest.mark.parametrize(("framework", "offered"), [("deepspeed", {False}), ("megatron-core", {False, True}),
                                                    ("nemo1", {False, True})])
def test_space_offers_overlap_param_gather_where_the_framework_runs_it(framework: str, offered: set[bool]) -> None:
    problem = small_problem(8, framework=get_framework(framework), fixed={"zero_stage": 1},
                            allowed={"overlap_param_gather": (False, True)})
    assert {s.overlap_param_gather for s in build_space(problem)} == offered
