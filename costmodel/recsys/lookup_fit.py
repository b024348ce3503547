"""Fit lookup predictors on a sample of timed embedding-bag points and score them on the rest.

Shared by ``benchmarks/embedding.py``, ``parplan profile fit`` and the tests: the distribution-aware model
and the distribution-blind one are the same ``EmbeddingBagPredictor`` fed different columns
(``costmodel.recsys.embedding.lookup_columns``), so the comparison isolates what the distribution adds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from costmodel.recsys.embedding import (
    CPU_LINE_BYTES,
    CacheLevels,
    EmbeddingBagPredictor,
    LookupShard,
    lookup_columns,
    parameters_for,
)
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


def stratified_indices(points: Sequence[TimedLookup], fraction: float, seed: int) -> np.ndarray:
    """A seeded sample of ``floor(fraction * len(points))`` points (at least 8), stratified by distribution and
    table rows.

    Each (distribution, rows) stratum gets its share of the sample (largest remainders, ties broken at
    random), taken systematically from a random start over its cells ordered by (dim, pooling), so that
    every stratum and the dims and poolings within it are covered as evenly as the sample size allows.
    """
    rng = np.random.default_rng(seed)
    strata: dict[tuple, list[int]] = {}
    for index, p in enumerate(points):
        strata.setdefault((p.access, p.rows), []).append(index)
    keys = sorted(strata, key=lambda k: (str(k[0]), k[1]))
    total = min(len(points), max(8, int(fraction * len(points))))
    quota = np.array([fraction * len(strata[k]) for k in keys]) * total / max(fraction * len(points), 1e-12)
    take = np.floor(quota).astype(int)
    order = np.lexsort((rng.random(len(keys)), -(quota - take)))  # largest remainder first, random ties
    take[order[:total - take.sum()]] += 1
    chosen: list[int] = []
    for key, count in zip(keys, np.minimum(take, [len(strata[k]) for k in keys])):
        cells = sorted(strata[key], key=lambda i: (points[i].dim, points[i].pooling))
        if count:
            step = len(cells) / count
            start = rng.random() * step
            chosen += [cells[int(start + j * step)] for j in range(count)]
    return np.sort(np.array(chosen, dtype=int))


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
                    sector: float = CPU_LINE_BYTES, stream_bandwidth: float = 0.0) -> HeldOut:
    """Fit both models on a stratified ``fraction`` sample of ``points`` (:func:`stratified_indices`) and score
    each on the others.

    Each model fits as many unit costs as the sample holds :data:`~costmodel.recsys.embedding.
    MIN_POINTS_PER_PARAMETER` points for (``parameters_for``); ``stream_bandwidth`` (bytes/s, 0: none)
    bounds the main-memory line cost below (``EmbeddingBagPredictor``).
    """
    seconds = np.array([p.seconds for p in points])
    train = stratified_indices(points, fraction, seed)
    test = np.setdiff1d(np.arange(len(points)), train)
    models = {}
    errors = {}
    for aware in (True, False):
        X = columns(points, caches, aware)
        model = EmbeddingBagPredictor(hbm_bandwidth_bytes_per_s=bandwidth, sector=sector,
                                      parameters=parameters_for(len(train)),
                                      stream_bandwidth_bytes_per_s=stream_bandwidth).fit(X[train], seconds[train])
        models[aware] = model
        errors[aware] = mape(model.predict(X[test]), seconds[test])
    return HeldOut(len(train), len(test), errors[True], errors[False], models[True], models[False])
