"""Autograd's sparse embedding-bag backward and SGD step on a CPU: a sort plus non-negative unit costs.

What runs (``EmbeddingBag(sparse=True)`` then ``weight.add_(grad.coalesce())``, the CPU miniatures'
kernel; PyTorch aten/src/ATen/native/EmbeddingBag.cpp and sparse/SparseTensor.cpp):

1. ``_embedding_bag_sparse_backward``: ``grad.index_select(0, offset2bag)``, one gradient row per lookup
   (a COO tensor of ``lookups`` rows);
2. ``coalesce``: ``at::sort`` of the lookups' ids (``costmodel.recsys.cpu_sort``: comparison sort, or
   radix sort from 32768 ids), then per lookup one ``cpublas::copy`` or ``axpy`` of its gradient row,
   gathered in sorted order, into its unique row's slot;
3. ``weight.add_(sparse)``: per unique row, the row read and written (its lines miss the caches as the
   forward's did).

The forward's columns (``costmodel.recsys.embedding.lookup_columns``) give every count but the sort, which
is neither linear in the lookups nor monotone at 32768 ids: it is priced from its own measured unit costs
and the rest is fitted on the measured backwards less the sort. The fused-TBE backward of a GPU is
``embedding.backward_bytes``; this predictor is for a CPU's autograd kernel only.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from costmodel.recsys.cpu_sort import SortCosts, sort_seconds
from costmodel.recsys.embedding import CPU_LINE_BYTES

UNIT_COSTS: Final = ("per_call", "per_lookup", "per_lookup_line", "per_gathered_miss_line", "per_unique_row",
                     "per_near_miss_line")
"""Per call (autograd node, COO tensor, allocations), per lookup (its COO row, its copy or axpy call), per
line of a lookup's gradient row (written by the gather, read and added by ``coalesce``), per such line
that ``coalesce``'s gather in sorted-id order misses in the near cache (the COO values, ``lookups x
row_bytes``, read in a random order once each: a fraction ``1 - near / buffer`` misses once the buffer
outgrows the cache), per unique row (``add_``'s row), per line of a unique row that misses the near cache."""


def backward_counts(columns: np.ndarray, near_bytes: float, sector: float = CPU_LINE_BYTES) -> np.ndarray:
    """The :data:`UNIT_COSTS` counts of each row of lookup ``columns`` (per call) with a near cache of
    ``near_bytes``."""
    lookups, row_bytes, unique, near = columns[:, [1, 3, 4, 5]].T
    lines = np.ceil(row_bytes / sector)
    buffer = np.maximum(lookups * row_bytes, 1.0)
    gathered_miss = lookups * lines * np.clip(1.0 - near_bytes / buffer, 0.0, 1.0)
    return np.column_stack([np.ones(len(columns)), lookups, lookups * lines, gathered_miss, unique,
                            np.minimum(near, unique) * lines])


def sort_column(columns: np.ndarray, sort: SortCosts) -> np.ndarray:
    """Seconds of sorting each row's lookups."""
    return np.array([sort_seconds(n, sort) for n in columns[:, 1]])


class SparseBackwardPredictor(RegressorMixin, BaseEstimator):
    """Seconds of one sparse backward + SGD step from lookup ``COLUMNS``: the sort (``sort``'s measured
    costs) plus ``backward_counts @ cost_per_unit_``, the costs fitted by non-negative least squares on
    the relative error of the measured times less the sort.

    Parameters
    ----------
    sort : SortCosts, optional
        This CPU's sort costs (``benchmarks/_sharding_hardware.cpu_sort_costs``); no sort term when None.
    near_bytes : float
        The near cache (a core's L2) the gather's buffer competes for; the same ``CacheLevels.near_bytes``
        the columns were computed with.
    sector : float
        Cache-line bytes (64 on x86).
    """

    def __init__(self, sort: SortCosts | None = None, near_bytes: float = 0.0, sector: float = CPU_LINE_BYTES) -> None:
        self.sort = sort
        self.near_bytes = near_bytes
        self.sector = sector

    def _sort_s(self, columns: np.ndarray) -> np.ndarray:
        return sort_column(columns, self.sort) if self.sort is not None else np.zeros(len(columns))

    def fit(self, X: ArrayLike, y: ArrayLike) -> SparseBackwardPredictor:
        """Fit the unit costs on measured backward seconds ``y``; returns ``self`` (sets ``cost_per_unit_``)."""
        from scipy.optimize import lsq_linear

        X = np.asarray(X, dtype=float)
        latency = np.maximum(np.asarray(y, dtype=float), 1e-12)
        counts = backward_counts(X, self.near_bytes, self.sector)
        scale = np.maximum(counts.max(axis=0), 1.0)
        rest = np.maximum(latency - self._sort_s(X), 0.0)
        solved = lsq_linear(counts / scale / latency[:, None], rest / latency, bounds=(0.0, np.inf))
        self.cost_per_unit_ = solved.x / scale
        return self

    def predict(self, X: ArrayLike) -> np.ndarray:
        """Predicted seconds (at least 1 ns)."""
        check_is_fitted(self)
        X = np.asarray(X, dtype=float)
        counts = backward_counts(X, self.near_bytes, self.sector)
        return np.maximum(self._sort_s(X) + counts @ self.cost_per_unit_, 1e-9)


__all__ = ["UNIT_COSTS", "SparseBackwardPredictor", "backward_counts", "sort_column"]
