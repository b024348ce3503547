"""Autograd's sparse embedding-bag backward + SGD on a CPU (costmodel.recsys.sparse_backward)."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.recsys.cpu_sort import SortCosts, sort_seconds
from costmodel.recsys.embedding import CacheLevels, LookupShard, lookup_columns
from costmodel.recsys.sparse_backward import UNIT_COSTS, SparseBackwardPredictor, backward_counts
from costmodel.specs.recsys import AccessDistribution

CACHES = CacheLevels(near_bytes=2 * 2**20, far_bytes=256 * 2**20, tlb_reach_bytes=8 * 2**20)
SORT = SortCosts(per_compare_step_s=5e-9, per_radix_id_s=40e-9)


def _columns(shapes) -> np.ndarray:
    return np.array([lookup_columns([LookupShard(access=AccessDistribution(kind="zipf", zipf_exponent=z) if z else
                                                 AccessDistribution(), rows=r, dim=d, row_bytes=4.0 * d,
                                                 lookups=2048 * p, bags=2048, lookups_per_batch=2048 * p)],
                                    CACHES)[0] for r, d, p, z in shapes])


SHAPES = [(r, d, p, z) for r in (3000, 30_000, 300_000) for d in (8, 32, 64) for p in (1, 4, 10, 16, 40)
          for z in (0.0, 1.2)]


def test_the_gather_misses_only_once_the_gradient_rows_outgrow_the_near_cache():
    counts = backward_counts(_columns([(30_000, 8, 1, 0.0), (30_000, 64, 40, 0.0)]), CACHES.near_bytes)
    gathered = UNIT_COSTS.index("per_gathered_miss_line")
    assert counts[0, gathered] == 0.0  # 2048 x 32 B = 64 KiB fits 2 MiB
    lookups, lines = 2048 * 40, 4  # 20 MiB of gradient rows: ~90% of their lines miss
    assert counts[1, gathered] == pytest.approx(lookups * lines * (1 - 2 * 2**20 / (lookups * 256)))


def test_known_unit_costs_and_the_sort_are_recovered_from_their_times():
    X = _columns(SHAPES)
    truth = np.array([40e-6, 30e-9, 9e-9, 20e-9, 60e-9, 20e-9])
    y = np.array([sort_seconds(n, SORT) for n in X[:, 1]]) + backward_counts(X, CACHES.near_bytes) @ truth
    model = SparseBackwardPredictor(SORT, CACHES.near_bytes).fit(X, y)
    np.testing.assert_allclose(model.predict(X), y, rtol=1e-6)


def test_the_prediction_drops_where_the_sort_turns_radix_as_measured_backwards_do():
    model = SparseBackwardPredictor(SORT, CACHES.near_bytes)
    model.cost_per_unit_ = np.array([40e-6, 5e-9, 9e-9, 20e-9, 60e-9, 20e-9])
    below, above = model.predict(_columns([(30_000, 32, 15.99, 0.0), (30_000, 32, 16, 0.0)]))
    assert above < below  # 32746 ids: comparison sort; 32768: radix


def test_without_sort_costs_the_sort_is_not_priced():
    X = _columns(SHAPES[:10])
    model = SparseBackwardPredictor(None, CACHES.near_bytes)
    model.cost_per_unit_ = np.zeros(len(UNIT_COSTS))
    assert np.all(model.predict(X) == 1e-9)


def test_an_unfitted_predictor_refuses_to_predict():
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        SparseBackwardPredictor(SORT).predict(_columns(SHAPES[:1]))
