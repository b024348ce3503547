"""``suggest_strategy`` with the legal-value memo a search keeps proposes what it proposes without one."""

from __future__ import annotations

import random

import optuna

from search import build_space
from search.objective import LegalTree, legal_values, suggest_strategy
from search.space import LAYOUT_KNOBS, nearest
from tests.search.conftest import small_problem


def _scanned_layout(space, params):  # type: ignore[no-untyped-def]
    """The layout picked by scanning every layout per knob (what suggest_strategy did before its memo)."""
    candidates, picked = list(space.layouts), []
    for index, knob in enumerate(LAYOUT_KNOBS):
        legal = sorted({lay[index] for lay in candidates})
        value = legal[0] if len(legal) == 1 else nearest(params[knob], legal)
        picked.append(value)
        candidates = [lay for lay in candidates if lay[index] == value]
    return tuple(picked)


def test_shared_memo_gives_the_fresh_answer() -> None:
    space = build_space(small_problem(64))
    rng = random.Random(0)
    memo: LegalTree = {}
    for _ in range(200):  # proposals off the legal grid too, so the snapping is exercised
        params = {k: rng.choice(v) for k, v in space.choices.items() if len(v) > 1}
        shared = suggest_strategy(optuna.trial.FixedTrial(params), space, memo)
        fresh = suggest_strategy(optuna.trial.FixedTrial(params), space)
        assert shared == fresh
        assert tuple(space.knobs_of(shared)[k] for k in LAYOUT_KNOBS) == _scanned_layout(space, params)
    assert len(memo) > len(LAYOUT_KNOBS)  # the memo was filled and reused, not rebuilt per call


def test_legal_values_are_the_layouts_values() -> None:
    space = build_space(small_problem(64))
    memo: LegalTree = {}
    legal, groups = legal_values(space, (), memo)
    assert legal == sorted({lay[0] for lay in space.layouts})
    first = legal[-1]
    assert list(groups[first]) == [lay for lay in space.layouts if lay[0] == first]
    second, _ = legal_values(space, (first,), memo)
    assert second == sorted({lay[1] for lay in space.layouts if lay[0] == first})
