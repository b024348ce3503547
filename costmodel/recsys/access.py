"""What an access distribution implies for memory traffic: unique rows per batch and cache misses.

Every estimate is built from one quantity, the *occupancy* ``occ(x) = sum_i (1 - exp(-x p_i))``: the
expected number of distinct rows among ``x`` independent lookups with row probabilities ``p_i`` (Poisson
approximation of sampling with replacement). Then

- unique rows touched by a batch of ``L`` lookups: ``occ(L)``;
- LRU cache misses per batch (Che's approximation, Che et al. 2002, IEEE JSAC 20(7); Fricker et al. 2012
  show it exact enough for Zipf traffic): the cache's characteristic window ``tau`` (in batches) solves
  ``sum_t row_bytes_t occ_t(L_t tau) = cache_bytes`` over the tables that share the cache, and table ``t``
  misses ``L_t occ_t'(L_t tau)`` lookups per batch (``occ'`` is the derivative: ``sum_i p_i exp(-x p_i)``).

Row ids are taken as hashed: a row's popularity is unrelated to its index, so a row-wise shard of ``1/k``
of the rows sees ``1/k`` of the lookups with the same shape of distribution.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from costmodel.specs.recsys import AccessDistribution

_EXACT_HEAD = 256
"""Most popular Zipf ranks summed term by term; the tail is integrated (its terms vary slowly)."""
_BISECTIONS = 40
"""Halvings of the window's log bracket (about 30 wide): 2^-40 of it, far below any figure's precision."""
_TAIL_POINTS = 512
"""Log-spaced quadrature points over the Zipf tail: occupancy within 1e-5 of the exact sum at 10^6 rows
(exponents 0.8-1.2, 10^3-10^7 lookups); a 4096-rank head gains nothing measurable and costs 6x the time."""


@dataclass(frozen=True)
class RowClasses:
    """Rows grouped by probability: ``counts[j]`` rows each looked up with probability ``probs[j]`` per lookup."""

    counts: np.ndarray
    probs: np.ndarray

    def occupancy(self, lookups: float) -> float:
        """Expected distinct rows among ``lookups`` lookups."""
        return float(np.sum(self.counts * -np.expm1(-lookups * self.probs)))

    def miss_rate(self, lookups: float) -> float:
        """``d occ / d lookups``: probability that the next lookup finds a row not touched in the last ``lookups``."""
        return float(np.sum(self.counts * self.probs * np.exp(-lookups * self.probs)))


def _zipf_classes(rows: int, exponent: float) -> RowClasses:
    head = min(rows, _EXACT_HEAD)
    ranks = np.arange(1, head + 1, dtype=np.float64)
    counts = [np.ones(head)]
    weights = [ranks ** -exponent]
    if rows > head:  # midpoint rule on log-spaced cells of the rank axis
        edges = np.geomspace(head + 0.5, rows + 0.5, _TAIL_POINTS + 1)
        mids = np.sqrt(edges[:-1] * edges[1:])
        counts.append(np.diff(edges))
        weights.append(mids ** -exponent)
    c, w = np.concatenate(counts), np.concatenate(weights)
    return RowClasses(c, w / np.sum(c * w))


def _histogram_classes(access: AccessDistribution, rows: int, lookups: float) -> RowClasses:
    # Bin k: share s_k of the lookups goes to rows seen r_k times per batch of `lookups` lookups. Those rows
    # are Poisson with rate r_k per batch; the ones a batch shows are 1 - exp(-r_k) of the population, so the
    # population is L s_k / r_k / (1 - exp(-r_k)) rows and occ(lookups) equals the histogram's unique rows.
    reuse = np.array([r for r, _ in access.reuse_histogram])
    share = np.array([s for _, s in access.reuse_histogram])
    population = lookups * share / reuse / -np.expm1(-reuse)
    scale = min(1.0, rows / max(float(np.sum(population)), 1e-300))  # never more rows than the table has
    return RowClasses(population * scale, reuse / lookups / scale)


@lru_cache(maxsize=4096)
def row_classes(access: AccessDistribution, rows: int, lookups_per_batch: float) -> RowClasses:
    """The table's rows as probability classes (``lookups_per_batch``: the batch a histogram was measured on)."""
    if access.kind == "uniform":
        return RowClasses(np.array([float(rows)]), np.array([1.0 / rows]))
    if access.kind == "zipf":
        return _zipf_classes(rows, access.zipf_exponent)
    if access.kind == "hotness":
        hot = max(1.0, access.hot_rows_fraction * rows)
        cold = max(rows - hot, 0.0)
        if cold == 0.0:
            return RowClasses(np.array([float(rows)]), np.array([1.0 / rows]))
        return RowClasses(np.array([hot, cold]), np.array([access.hot_access_fraction / hot,
                                                           (1.0 - access.hot_access_fraction) / cold]))
    return _histogram_classes(access, rows, max(lookups_per_batch, 1.0))


def expected_unique_rows(access: AccessDistribution, rows: int, lookups: float,
                         lookups_per_batch: float | None = None) -> float:
    """Expected distinct rows among ``lookups`` lookups of a table of ``rows`` rows (at most both)."""
    if lookups <= 0:
        return 0.0
    classes = row_classes(access, rows, lookups if lookups_per_batch is None else lookups_per_batch)
    return min(classes.occupancy(lookups), float(rows), lookups)


@dataclass(frozen=True)
class CacheStream:
    """One table's lookups into a shared cache: per-batch ``lookups``, its row classes and stored ``row_bytes``.

    ``pages`` > 0 makes the cache page-granular (a TLB: one entry per page of ``row_bytes``, the page
    size): hashed ids spread the touched rows uniformly over the table's ``pages`` pages, so ``occ`` touched
    rows touch ``pages (1 - exp(-occ / pages))`` pages.
    """

    classes: RowClasses
    lookups: float
    row_bytes: float
    pages: float = 0.0

    def resident_bytes(self, tau: float) -> float:
        """Bytes of the cache this stream fills over a window of ``tau`` batches."""
        rows = self.classes.occupancy(self.lookups * tau)
        if self.pages:
            rows = self.pages * -math.expm1(-rows / self.pages)
        return self.row_bytes * rows

    def total_bytes(self) -> float:
        """Bytes the whole table takes in this cache."""
        return self.row_bytes * (self.pages or float(np.sum(self.classes.counts)))

    def misses(self, tau: float) -> float:
        """Lookups per batch that find their row (or page) outside a window of ``tau`` batches."""
        x = self.lookups * tau
        rate = self.classes.miss_rate(x)
        if self.pages:
            rate *= math.exp(-self.classes.occupancy(x) / self.pages)
        return min(self.lookups, self.lookups * rate)


class _SharedCache:
    """The streams of one cache as flat arrays, so that each step of the window search is one numpy pass."""

    def __init__(self, streams: Sequence[CacheStream]) -> None:
        self.counts = np.concatenate([s.classes.counts for s in streams])
        self.rates = np.concatenate([s.classes.probs * s.lookups for s in streams])  # lookups per batch
        self.starts = np.cumsum([0] + [len(s.classes.counts) for s in streams[:-1]])
        self.pages = np.array([s.pages for s in streams])
        self.row_bytes = np.array([s.row_bytes for s in streams])

    def occupancy(self, tau: float) -> np.ndarray:
        """Distinct rows (or pages) each stream keeps in a window of ``tau`` batches."""
        rows = np.add.reduceat(self.counts * -np.expm1(-self.rates * tau), self.starts)
        paged = self.pages > 0
        rows[paged] = self.pages[paged] * -np.expm1(-rows[paged] / self.pages[paged])
        return rows

    def filled(self, tau: float) -> float:
        return float(np.dot(self.row_bytes, self.occupancy(tau)))


def che_window(streams: Sequence[CacheStream], cache_bytes: float) -> float:
    """The characteristic window ``tau`` (batches) of an LRU cache of ``cache_bytes`` shared by ``streams``.

    ``inf`` when every touched row fits (the whole working set stays resident).
    """
    if cache_bytes <= 0 or not streams:
        return 0.0
    if sum(s.total_bytes() for s in streams) <= cache_bytes:
        return math.inf
    shared = _SharedCache(streams)
    lo, hi = 1e-12, 1.0
    while shared.filled(hi) < cache_bytes and hi < 1e15:
        lo, hi = hi, hi * 16.0
    for _ in range(_BISECTIONS):  # on log tau: filled() is increasing
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if shared.filled(mid) < cache_bytes else (lo, mid)
    return math.sqrt(lo * hi)


def cache_misses(streams: Sequence[CacheStream], cache_bytes: float) -> list[float]:
    """Expected lookups per batch of each stream that miss the shared LRU cache (Che's approximation)."""
    tau = che_window(streams, cache_bytes)
    if math.isinf(tau):
        return [0.0 for _ in streams]
    return [s.misses(tau) for s in streams]
