"""The light sample: which rows of a profile table a predictor is fitted on.

Design (parameters in ``Profile.fit_sampling``; defaults in
``costmodel.profiles.DEFAULT_FIT_SAMPLING``). Rows are points in log-shape
space: the log of each shape column, scaled to [0, 1]. The target size is
``floor(fraction x rows)`` (10%), capped at ``max_rows`` (4000).

- **Large tables** (target >= ``min_rows``): a *maximin core* of
  ``core_fraction`` (25%) of the target, chosen greedily so that each new
  point is the row farthest from those already chosen (starting from a seeded
  random row), covers the edges and corners of the sampled space; the rest is
  a uniform random draw from the remaining rows, which follows the table's
  own density. Maximin alone over-weights the boundary and random alone
  leaves corners empty; the mix was the most accurate of random, maximin,
  stratified-by-cell and Latin-hypercube-like designs on the H100 GEMM table.
- **Small tables** (target < ``min_rows``, e.g. 63 rows per NCCL op): 10% of
  a 63-row table cannot describe a 21-point bandwidth curve, so a *staggered
  lattice* is used instead: along the shape column with the most distinct
  values (the sweep axis, e.g. message size), every ``stride``-th value is
  kept, the phase shifted by one for each combination of the other columns
  (each group size samples different sizes), plus both ends of the sweep
  axis. ``stride`` is the largest value (at least 2, so that at least half
  the table is held out) that keeps at least ``min_rows`` rows.

Everything is seeded by ``seed``; the same table and recipe give the same
sample on every machine. The rows not chosen are the held-out test set.

The tables hold one noisy measurement per shape, and a few are wildly off
(e.g. 24 us among 7 us neighbours in the H200 all_to_all table). Before
fitting, training rows more than ``outlier_factor`` (2x) off the estimate of
their grid neighbours *within the sample* are dropped (``grid_outliers``);
with no neighbour pair a row is kept.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

__all__ = ["grid_outliers", "light_sample"]

# The outlier grid holds one cell per combination of distinct shape values; past 16 M cells
# (128 MiB) the shapes are scattered, not a grid, and no row is flagged.
_MAX_GRID_CELLS = 2**24


def light_sample(shapes: np.ndarray, recipe: dict[str, Any]) -> np.ndarray:
    """Indices (sorted) of the training rows of one table.

    Parameters
    ----------
    shapes : ndarray of shape (n_rows, n_columns)
        Positive shape columns of the table.
    recipe : dict
        ``fraction``, ``max_rows``, ``min_rows``, ``core_fraction``, ``seed``.

    Returns
    -------
    ndarray of int
    """
    rows = shapes.shape[0]
    if rows < 2:
        return np.arange(rows)
    # floor, so that "10%" never means 10.002%
    target = max(1, min(int(recipe["max_rows"]), math.floor(float(recipe["fraction"]) * rows)))
    min_rows = int(recipe["min_rows"])
    rng = np.random.default_rng(int(recipe["seed"]))
    if target >= min_rows:
        return _maximin_and_random(_unit_log_space(shapes), target, float(recipe["core_fraction"]), rng)
    return _staggered_lattice(shapes, min(min_rows, rows // 2))


def _unit_log_space(shapes: np.ndarray) -> np.ndarray:
    logs = np.log(np.asarray(shapes, dtype=np.float64))
    span = np.ptp(logs, axis=0)
    return (logs - logs.min(axis=0)) / np.where(span > 0, span, 1.0)


def _maximin_and_random(points: np.ndarray, target: int, core_fraction: float,
                        rng: np.random.Generator) -> np.ndarray:
    core = max(1, round(core_fraction * target))
    chosen = [int(rng.integers(points.shape[0]))]
    distance = np.sum((points - points[chosen[0]]) ** 2, axis=1)
    for _ in range(core - 1):
        nxt = int(np.argmax(distance))
        chosen.append(nxt)
        distance = np.minimum(distance, np.sum((points - points[nxt]) ** 2, axis=1))
    rest = np.setdiff1d(np.arange(points.shape[0]), chosen)
    fill = rng.choice(rest, size=min(target - len(set(chosen)), rest.size), replace=False)
    return np.unique(np.concatenate([chosen, fill]).astype(np.int64))


def _staggered_lattice(shapes: np.ndarray, min_rows: int) -> np.ndarray:
    distinct = [np.unique(column) for column in shapes.T]
    sweep = int(np.argmax([values.size for values in distinct]))
    position = np.searchsorted(distinct[sweep], shapes[:, sweep])
    others = np.delete(shapes, sweep, axis=1)
    if others.shape[1]:
        _, group = np.unique(others, axis=0, return_inverse=True)
    else:
        group = np.zeros(shapes.shape[0], dtype=np.int64)
    ends = (position == 0) | (position == distinct[sweep].size - 1)
    best = None
    for stride in range(2, max(distinct[sweep].size, 2) + 1):
        keep = ends | ((position + group.ravel()) % stride == 0)
        if keep.sum() < min_rows:
            break
        best = keep
    if best is None:
        best = ends | ((position + group.ravel()) % 2 == 0)
    return np.flatnonzero(best)


def grid_outliers(X: np.ndarray, latency: np.ndarray, factor: float = 2.0) -> np.ndarray:
    """Rows whose latency is more than ``factor`` off their grid neighbours' estimate.

    The estimate of a row is the median, over every pair of opposite
    neighbours (one grid step either way along any combination of axes), of
    the pair's geometric-mean latency; rows without such a pair are never
    flagged. Grid steps are between the distinct values present in ``X``; when the
    grid would exceed 16 M cells (scattered shapes, not a grid) no row is flagged.

    Parameters
    ----------
    X : ndarray of shape (n_rows, n_axes)
        Shape columns; each column's distinct values are the grid axis.
    latency : ndarray of shape (n_rows,)
        Positive latencies.
    factor : float
        Allowed ratio either way.

    Returns
    -------
    ndarray of bool
    """
    axes = [np.unique(column) for column in X.T]
    if np.prod([values.size + 2.0 for values in axes]) > _MAX_GRID_CELLS:
        # Scattered shapes (a space-filling design, a trace) form no grid: no row has grid neighbours.
        return np.zeros(latency.size, dtype=bool)
    index = np.column_stack([np.searchsorted(values, column) for values, column in zip(axes, X.T, strict=True)])
    grid = np.full([values.size + 2 for values in axes], np.nan)  # padded by one cell each side
    grid[tuple((index + 1).T)] = np.log(latency)
    estimates = []
    for offset in itertools.product((-1, 0, 1), repeat=X.shape[1]):
        if offset <= (0,) * X.shape[1]:
            continue  # each opposite pair once: only the lexicographically positive half
        step = np.array(offset)
        ahead = grid[tuple((index + 1 + step).T)]
        behind = grid[tuple((index + 1 - step).T)]
        estimates.append((ahead + behind) / 2.0)
    stacked = np.column_stack(estimates)
    has_pair = np.any(np.isfinite(stacked), axis=1)
    local = np.full(latency.size, np.nan)
    local[has_pair] = np.nanmedian(stacked[has_pair], axis=1)
    return has_pair & (np.abs(np.log(latency) - local) > np.log(factor))
