"""The lookup predictor and the columns the access distribution gives it (costmodel.recsys.embedding)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from costmodel.recsys.embedding import (
    COLUMNS,
    CacheLevels,
    EmbeddingBagPredictor,
    UNIT_COSTS,
    LookupShard,
    forward_bytes,
    lookup_columns,
    lookup_counts,
    merged_counts,
    parameters_for,
    sector_bytes,
)
from costmodel.specs.recsys import AccessDistribution

CACHES = CacheLevels(2e6, 32e6, 8e6)


def _shard(access: AccessDistribution, rows: int = 10**6, dim: int = 64, pooling: int = 20) -> LookupShard:
    lookups = 1024.0 * pooling
    return LookupShard(access=access, rows=rows, dim=dim, row_bytes=4.0 * dim, lookups=lookups, bags=1024.0,
                       lookups_per_batch=lookups)


def _random_columns(count: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shards = [_shard(AccessDistribution(kind="zipf", zipf_exponent=float(s)) if s else AccessDistribution(),
                     int(r), int(d), int(p))
              for s, r, d, p in zip(rng.choice([0, 1.05, 1.2], count), rng.choice([1e4, 1e5, 1e6], count),
                                    rng.choice([32, 128], count), rng.choice([1, 10, 100], count))]
    return np.vstack([lookup_columns([s], CACHES) for s in shards])


def test_blind_columns_ignore_the_distribution():
    zipf = lookup_columns([_shard(AccessDistribution(kind="zipf", zipf_exponent=1.2))], CACHES, aware=False)
    assert np.array_equal(zipf, lookup_columns([_shard(AccessDistribution())], CACHES))


def test_aware_columns_see_fewer_misses_under_skew():
    zipf = lookup_columns([_shard(AccessDistribution(kind="zipf", zipf_exponent=1.2))], CACHES)[0]
    uniform = lookup_columns([_shard(AccessDistribution())], CACHES)[0]
    assert zipf[4] < uniform[4] and zipf[6] < uniform[6]


def test_row_reads_round_up_to_whole_sectors():
    assert sector_bytes(np.array([100.0, 128.0, 129.0]), 32).tolist() == [128.0, 128.0, 160.0]


def test_predictor_recovers_known_unit_costs():
    X = _random_columns(60)
    costs = np.zeros(len(UNIT_COSTS))
    costs[[0, 1, 3, 5]] = (10e-9, 1e-9, 20e-9, 30e-9)  # per bag, per line, per far-miss line, per walk miss
    y = lookup_counts(X, 64) @ costs
    model = EmbeddingBagPredictor(sector=64).fit(X, y)
    assert model.rank_ == len(UNIT_COSTS)
    assert np.allclose(model.predict(_random_columns(20, seed=1)),
                       lookup_counts(_random_columns(20, seed=1), 64) @ costs, rtol=1e-3)


def test_fewer_parameters_sum_the_merged_counts():
    X = _random_columns(10)
    counts = lookup_counts(X, 64)
    merged = merged_counts(X, 64, 4)  # bag, line, near-miss line, far-miss line + TLB miss + walk miss
    assert np.allclose(merged, np.column_stack([counts[:, 0], counts[:, 1], counts[:, 2],
                                                counts[:, 3] + counts[:, 4] + counts[:, 5]]))
    assert np.allclose(merged_counts(X, 64, 1)[:, 0], forward_bytes(X, 64))


def test_parameters_follow_eight_training_points_each():
    assert [parameters_for(n) for n in (3, 8, 21, 47, 48, 55, 500)] == [1, 1, 2, 5, 6, 6, 6]


def test_the_main_memory_line_cost_is_held_at_its_streaming_bound():
    X = _random_columns(60)
    costs = np.array([10e-9, 0.5e-9, 1e-9, 1e-9, 5e-9, 0.0])  # a far-miss line at 1 ns: 64 GB/s, too fast
    y = lookup_counts(X, 64) @ costs
    model = EmbeddingBagPredictor(sector=64, stream_bandwidth_bytes_per_s=10e9).fit(X, y)
    assert model.lower_bounds().tolist() == pytest.approx([0, 0, 0, 6.4e-9, 0, 0])
    assert model.cost_per_unit_[3] == pytest.approx(6.4e-9)  # not the 1 ns an unbounded fit would find
    assert np.all(model.cost_per_unit_ >= 0)


def test_an_unknown_parameter_count_is_refused():
    with pytest.raises(ValueError, match="parameters"):
        EmbeddingBagPredictor(parameters=7).fit(_random_columns(8), np.ones(8))


def test_predict_before_fit_raises():
    with pytest.raises(NotFittedError):
        EmbeddingBagPredictor().predict(_random_columns(2))


def _column(name: str, shard: LookupShard, caches: CacheLevels = CACHES) -> float:
    return float(lookup_columns([shard], caches)[0, COLUMNS.index(name)])


def test_page_walks_miss_the_near_cache_only_on_tables_whose_page_tables_outgrow_it():
    # 10^4 x 64 fp32 = 2.6 MB: 80 page-table lines; 10^8 rows: 780,000 lines = 50 MB of page table > 2 MB
    small = _shard(AccessDistribution(), rows=10**4)
    huge = _shard(AccessDistribution(), rows=10**8)
    assert _column("walk_misses", small) <= 1.0
    assert _column("walk_misses", huge) > 0.5 * _column("tlb_misses", huge)


def test_page_walks_are_not_modelled_without_a_walk_span():
    shard = _shard(AccessDistribution(), rows=10**7)
    caches = CacheLevels(2e6, 32e6, 8e6, walk_span_bytes=0.0)
    assert _column("walk_misses", shard, caches) == _column("tlb_misses", shard, caches)


def test_pooled_output_larger_than_the_near_cache_is_written_back():
    # 1024 bags x 1024 fp32 = 4 MiB of output per call against a 2 MB near cache; 1024 x 16 = 64 KiB fits
    wide = LookupShard(access=AccessDistribution(), rows=1000, dim=1024, row_bytes=4096.0, lookups=1024.0,
                       bags=1024.0, lookups_per_batch=1024.0)
    narrow = LookupShard(access=AccessDistribution(), rows=1000, dim=16, row_bytes=64.0, lookups=1024.0,
                         bags=1024.0, lookups_per_batch=1024.0)
    assert _column("output_misses", wide) > 0.5 * 1024 * 4096 / 64
    assert _column("output_misses", narrow) < 0.01 * 1024 * 64 / 64
