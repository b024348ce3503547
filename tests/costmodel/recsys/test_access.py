"""Unique rows and cache misses implied by an access distribution (costmodel.recsys.access)."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.recsys.access import CacheStream, cache_misses, expected_unique_rows, row_classes
from costmodel.specs.recsys import AccessDistribution

ZIPF = AccessDistribution(kind="zipf", zipf_exponent=1.05)


def test_zipf_unique_rows_match_sampling():
    rows, lookups = 200_000, 50_000
    weights = np.arange(1, rows + 1, dtype=float) ** -1.05
    rng = np.random.default_rng(0)
    drawn = np.searchsorted(np.cumsum(weights), rng.random(lookups) * weights.sum())
    assert expected_unique_rows(ZIPF, rows, lookups) == pytest.approx(len(np.unique(drawn)), rel=0.02)


def test_uniform_unique_rows_are_the_closed_form():
    assert expected_unique_rows(AccessDistribution(), 1000, 1000) == pytest.approx(1000 * (1 - np.exp(-1)))


def test_reuse_histogram_gives_its_own_unique_rows():
    hist = AccessDistribution(kind="reuse_histogram", reuse_histogram=((1.0, 0.5), (10.0, 0.5)))
    assert expected_unique_rows(hist, 10**9, 1000) == pytest.approx(1000 * (0.5 / 1 + 0.5 / 10))


def test_hot_rows_cut_unique_rows():
    hot = AccessDistribution(kind="hotness", hot_rows_fraction=0.001, hot_access_fraction=0.9)
    assert expected_unique_rows(hot, 10**6, 10**5) < 0.5 * expected_unique_rows(AccessDistribution(), 10**6, 10**5)


def test_no_misses_when_the_table_fits_the_cache():
    stream = CacheStream(row_classes(AccessDistribution(), 1000, 1.0), 5000.0, 128.0)
    assert cache_misses([stream], 1000 * 128.0 + 1) == [0.0]


def test_skew_cuts_cache_misses():
    rows, lookups, row_bytes, cache = 10**6, 10**5, 512.0, 50e6
    uniform = CacheStream(row_classes(AccessDistribution(), rows, lookups), lookups, row_bytes)
    skewed = CacheStream(row_classes(ZIPF, rows, lookups), lookups, row_bytes)
    assert cache_misses([skewed], cache)[0] < 0.5 * cache_misses([uniform], cache)[0]


def test_uniform_misses_are_the_uncached_share():
    # Che's window for a uniform table: the cache holds cache/table of the rows, the rest miss
    rows, row_bytes = 10**6, 100.0
    stream = CacheStream(row_classes(AccessDistribution(), rows, 1.0), 1e5, row_bytes)
    missed = cache_misses([stream], 0.25 * rows * row_bytes)[0]
    assert missed == pytest.approx(0.75 * 1e5, rel=1e-3)


def test_tables_sharing_a_cache_miss_more_than_alone():
    rows, lookups = 10**6, 10**5
    stream = CacheStream(row_classes(ZIPF, rows, lookups), lookups, 256.0)
    alone = cache_misses([stream], 20e6)[0]
    shared = cache_misses([stream, stream], 20e6)[0]
    assert shared > alone
