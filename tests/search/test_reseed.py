"""A TPE sampler reseeded in place for each trial proposes what a new one per trial proposes."""

from __future__ import annotations

import pytest

from search.samplers import TPESearcher
from search.space import build_space
from tests.search.conftest import analytic_evaluator, small_problem


def _proposals(n_trials: int) -> list[object]:
    problem = small_problem(64)
    evaluations = TPESearcher(seed=7).search(build_space(problem), analytic_evaluator(problem), n_trials=n_trials)
    return [e.strategy for e in evaluations]


def test_reseeded_sampler_proposes_what_a_new_one_per_trial_does(monkeypatch: pytest.MonkeyPatch) -> None:
    made = []
    original = TPESearcher.make_inner_sampler
    monkeypatch.setattr(TPESearcher, "make_inner_sampler", lambda self, seed: made.append(seed) or original(self, seed))
    reseeded = _proposals(80)
    assert len(made) == 1  # one sampler for the whole search
    monkeypatch.setattr(TPESearcher, "reseed_inner", lambda self, sampler, seed: False)
    fresh = _proposals(80)
    assert len(made) > 80
    assert reseeded == fresh
    assert len(set(fresh)) > 25  # TPE ran past its start-up
