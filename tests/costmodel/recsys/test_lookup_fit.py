"""The stratified sample the lookup models are fitted on (costmodel.recsys.lookup_fit)."""

from __future__ import annotations

import itertools

import numpy as np

from costmodel.recsys.lookup_fit import TimedLookup, stratified_indices
from costmodel.specs.recsys import AccessDistribution

DISTRIBUTIONS = (AccessDistribution(), AccessDistribution(kind="zipf", zipf_exponent=1.05),
                 AccessDistribution(kind="zipf", zipf_exponent=1.2))
GRID = [TimedLookup(a, r, d, p, 1024, 1e-5) for a, r, d, p in
        itertools.product(DISTRIBUTIONS, (10**4, 10**5, 10**6, 10**7), (32, 64, 128, 256), (1, 4, 16, 64, 100))]


def test_sample_is_at_most_the_fraction():
    assert len(stratified_indices(GRID, 0.1, seed=0)) == int(0.1 * len(GRID))


def test_every_distribution_and_rows_stratum_is_sampled():
    chosen = [GRID[i] for i in stratified_indices(GRID, 0.1, seed=3)]
    assert {(t.access, t.rows) for t in chosen} == {(t.access, t.rows) for t in GRID}


def test_a_stratum_spreads_over_dims():
    chosen = [GRID[i] for i in stratified_indices(GRID, 0.1, seed=1)]
    by_stratum: dict = {}
    for t in chosen:
        by_stratum.setdefault((t.access, t.rows), set()).add(t.dim)
    # 20 cells per stratum ordered by (dim, pooling), 2 taken 10 apart: never twice the same dim
    assert all(len(dims) == 2 for dims in by_stratum.values())


def test_same_seed_same_sample_other_seed_other_sample():
    assert np.array_equal(stratified_indices(GRID, 0.1, 5), stratified_indices(GRID, 0.1, 5))
    assert not np.array_equal(stratified_indices(GRID, 0.1, 5), stratified_indices(GRID, 0.1, 6))
