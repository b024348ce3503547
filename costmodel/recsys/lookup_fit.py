"""Fit lookup predictors on a sample of timed embedding-bag points and score them on the rest.

Shared by ``benchmarks/embedding.py``, ``parplan profile fit`` and the tests: the distribution-aware model
and the distribution-blind one are the same ``EmbeddingBagPredictor`` fed different columns
(``costmodel.recsys.embedding.lookup_columns``), so the comparison isolates what the distribution adds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from costmodel.recsys.embedding import CPU_LINE_BYTES, CacheLevels, EmbeddingBagPredictor, LookupShard, lookup_columns
from costmodel.specs.recsys import AccessDistribution

CPU_NOMINAL_BANDWIDTH = 10e9

"""Bytes/s the CPU roofline divides by; a constant factor of every roofline, so the fitted efficiency absorbs
it and the predictions do not depend on it."""


@dataclass(frozen=True)
class TimedLookup:
    """One measured forward: ``batch`` bags of ``pooling`` ids into a ``rows x dim`` fp32 table."""

    access: AccessDistribution
    rows: int
    dim: int
    pooling: float
    batch: int
    seconds: float


def columns(points: Sequence[TimedLookup], caches: CacheLevels, aware: bool) -> np.ndarray:
    """Predictor columns of each point, each alone in the cache (the benchmark times one table at a time)."""
    rows = []
    for p in points:
        lookups = p.batch * p.pooling
        shard = LookupShard(access=p.access, rows=p.rows, dim=p.dim, row_bytes=4.0 * p.dim, lookups=lookups,
                            bags=p.batch, lookups_per_batch=lookups)
        rows.append(lookup_columns([shard], caches, aware=aware)[0])
    return np.array(rows)


def sample_indices(count: int, fraction: float, seed: int) -> np.ndarray:
    """A seeded random ``fraction`` of ``range(count)`` (at least 8 points)."""
    rng = np.random.default_rng(seed)
    take = max(8, int(fraction * count))
    return np.sort(rng.permutation(count)[:take])


def mape(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Mean absolute percentage error, in percent."""
    return float(100.0 * np.mean(np.abs(predicted - measured) / measured))


@dataclass(frozen=True)
class HeldOut:
    """Held-out error of the distribution-aware and the distribution-blind model on the same split."""

    train: int
    test: int
    aware_mape: float
    blind_mape: float
    aware: EmbeddingBagPredictor
    blind: EmbeddingBagPredictor


def held_out_errors(points: Sequence[TimedLookup], caches: CacheLevels, fraction: float = 0.1,
                    seed: int = 0, bandwidth: float = CPU_NOMINAL_BANDWIDTH,
                    sector: float = CPU_LINE_BYTES) -> HeldOut:
    """Fit both models on a ``fraction`` sample of ``points`` and score each on the others."""
    seconds = np.array([p.seconds for p in points])
    train = sample_indices(len(points), fraction, seed)
    test = np.setdiff1d(np.arange(len(points)), train)
    models = {}
    errors = {}
    for aware in (True, False):
        X = columns(points, caches, aware)
        model = EmbeddingBagPredictor(hbm_bandwidth_bytes_per_s=bandwidth, sector=sector).fit(X[train], seconds[train])
        models[aware] = model
        errors[aware] = mape(model.predict(X[test]), seconds[test])
    return HeldOut(len(train), len(test), errors[True], errors[False], models[True], models[False])
