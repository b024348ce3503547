"""Embedding-bag lookup time: the memory traffic an access distribution implies, at a fitted efficiency.

A lookup kernel (``torch.nn.EmbeddingBag``, FBGEMM's TBE) gathers ``lookups`` rows and writes ``bags``
pooled vectors. Its HBM traffic is the rows that miss the cache, each rounded up to whole memory sectors,
plus the index and offset arrays and the pooled output (:func:`forward_bytes`). The distribution enters only
through two columns, the unique rows and the cache-missing lookups (``costmodel.recsys.access``);
``aware=False`` computes them as if every table were uniform, the distribution-blind baseline.

``EmbeddingBagPredictor`` regresses the log efficiency against that traffic's bandwidth roofline, as the
GEMM and memory-bound predictors do (``costmodel.predictors``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final

import numpy as np
from numpy.typing import ArrayLike
from sklearn.linear_model import LinearRegression
from sklearn.utils.validation import check_is_fitted, validate_data

from costmodel.predictors._base import OperatorPredictor
from costmodel.predictors._features import clip_shapes
from costmodel.recsys.access import CacheStream, RowClasses, cache_misses, expected_unique_rows, row_classes
from costmodel.specs.recsys import UNIFORM, AccessDistribution

INDEX_BYTES: Final = 8  # int64 ids (TorchRec KeyedJaggedTensor default)
OFFSET_BYTES: Final = 8  # int64 offsets, one per bag
OUTPUT_BYTES: Final = 4  # fp32 pooled output (TorchRec's default output dtype)
GPU_SECTOR_BYTES: Final = 32  # NVIDIA global-memory sector (CUDA C++ Programming Guide, "Device Memory Accesses")
CPU_LINE_BYTES: Final = 64  # x86 cache line

L2_CACHE_BYTES: Final[dict[str, float]] = {
    # NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020): 40 MB L2.
    "a100-sxm4-40gb": 40 * 2**20, "a100-sxm4-80gb": 40 * 2**20, "a100-pcie-80gb": 40 * 2**20,
    # NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022): 50 MB L2 (SXM5 and PCIe; H200 is the same GH100).
    "h100-sxm5-80gb": 50 * 2**20, "h100-pcie-80gb": 50 * 2**20, "h200-sxm-141gb": 50 * 2**20,
}
"""Last-level cache in front of HBM per catalog GPU; a GPU not listed is modelled without one (every
lookup of a row not yet touched in the batch reads HBM), which over-estimates lookups of hot tables."""

COLUMNS: Final = ("bags", "lookups", "dim", "row_bytes", "unique_rows", "near_misses", "far_misses", "tlb_misses",
                   "walk_misses", "output_misses")
"""Predictor columns: ``near_misses`` miss the near cache (CPU: a core's L2; GPU: L2), ``far_misses`` the last
level before main memory (CPU: L3; GPU: L2 again), ``tlb_misses`` the address-translation cache,
``walk_misses`` the TLB misses whose page-table line also misses the near cache, ``output_misses`` the
pooled-output lines the near cache evicted since the last batch wrote them; all per call."""

PTE_LINE_SPAN_BYTES: Final = 8 * 4096
"""Table bytes one 64-B line of page-table entries maps: 8 eight-byte PTEs of 4-KiB pages (Intel 64 and IA-32
Architectures Software Developer's Manual, Vol. 3A, Sec. 4.5, 4-level paging)."""


@dataclass(frozen=True)
class CacheLevels:
    """Capacities (bytes) of the near cache, of the last-level cache in front of main memory, and the reach
    of the TLB (entries x ``page_bytes``; 0: not modelled, every lookup counted as a miss).

    ``walk_span_bytes``: table bytes one cache line of page-table entries maps (0: page walks not
    modelled; the default is x86-64's with 4-KiB pages); ``line_bytes``: the cache line the pooled output
    is written in.
    """

    near_bytes: float
    far_bytes: float
    tlb_reach_bytes: float = 0.0
    page_bytes: float = 4096.0
    walk_span_bytes: float = PTE_LINE_SPAN_BYTES
    line_bytes: float = CPU_LINE_BYTES


@dataclass(frozen=True)
class LookupShard:
    """One table shard's lookups on one rank in one step.

    ``rows`` and ``dim`` are the shard's; ``lookups`` the ids it receives; ``bags`` the pooled vectors it
    writes; ``lookups_per_batch`` the lookups the whole table receives per global batch (a reuse histogram's
    reference) and ``row_share`` the fraction of the table's rows (and of its lookups) this shard holds.
    """

    access: AccessDistribution
    rows: int
    dim: int
    row_bytes: float
    lookups: float
    bags: float
    lookups_per_batch: float
    row_share: float = 1.0


def _granular(stream: CacheStream, share: float, span: float, table_bytes: float, entry: float) -> CacheStream:
    """The stream seen at ``span``-byte granularity (TLB pages, page-table lines), each granule one
    ``entry`` weighing ``share`` of it (a row-wise shard's rows weigh ``row_share`` of their bytes)."""
    return CacheStream(stream.classes, stream.lookups, entry * share, max(1.0, table_bytes / span))


def lookup_columns(shards: Sequence[LookupShard], caches: CacheLevels, aware: bool = True) -> np.ndarray:
    """The predictor's ``COLUMNS`` for shards that share one cache (one rank), one row per shard.

    The near and the far cache hold the rows, the page-table lines of their TLB misses and the pooled
    outputs (each output line written once per call) of every shard, all competing under Che's
    approximation (``costmodel.recsys.access``). ``aware=False`` takes every distribution as uniform (the
    distribution-blind baseline).
    """
    n = len(shards)
    out = np.zeros((n, len(COLUMNS)))
    rows_streams, table_bytes = [], []
    for i, s in enumerate(shards):
        access = s.access if aware else UNIFORM
        # a row-wise shard of row_share of the rows sees row_share of the lookups, same shape (hashed ids)
        full_rows = max(1, round(s.rows / s.row_share))
        classes = row_classes(access, full_rows, s.lookups_per_batch)
        unique = s.row_share * expected_unique_rows(access, full_rows, s.lookups / s.row_share, s.lookups_per_batch)
        rows_streams.append(CacheStream(classes, s.lookups / s.row_share, s.row_bytes * s.row_share))
        table_bytes.append(s.row_bytes * full_rows)
        out[i, :5] = (s.bags, s.lookups, s.dim, s.row_bytes, max(unique, 1.0))
    share = np.array([s.row_share for s in shards])
    pages = [_granular(st, s.row_share, caches.page_bytes, b, caches.page_bytes)
             for st, s, b in zip(rows_streams, shards, table_bytes)]
    tlb = np.array(cache_misses(pages, caches.tlb_reach_bytes))  # of the whole table's stream
    out[:, 7] = np.maximum(share * tlb, 1.0)
    line = caches.line_bytes
    outputs = [CacheStream(RowClasses(np.array([lines]), np.array([1.0 / lines])), lines, line)
               for lines in (max(1.0, s.bags * s.dim * OUTPUT_BYTES / line) for s in shards)]
    # each TLB miss reads one page-table line: a stream over the table's PTE lines, at the TLB-miss rate
    walks = [dataclasses.replace(_granular(st, s.row_share, caches.walk_span_bytes, b, line), lookups=m)
             for st, s, b, m in zip(rows_streams, shards, table_bytes, tlb)] if caches.walk_span_bytes else []
    for column, size in ((5, caches.near_bytes), (6, caches.far_bytes)):
        missed = np.array(cache_misses(rows_streams + outputs + walks, size))
        out[:, column] = np.maximum(share * missed[:n], 1.0)
        if column == 5:
            out[:, 9] = np.maximum(missed[n:2 * n], 1.0)
            out[:, 8] = np.maximum(share * missed[2 * n:], 1.0) if walks else out[:, 7]
    return out


def sector_bytes(row_bytes: np.ndarray, sector: float) -> np.ndarray:
    """Bytes a row read moves: whole sectors (a 100-B row costs four 32-B sectors)."""
    return np.ceil(row_bytes / sector) * sector


def forward_bytes(columns: np.ndarray, sector: float) -> np.ndarray:
    """HBM bytes of a lookup's forward: missed rows (whole sectors), ids, offsets, pooled output."""
    bags, lookups, dim, row_bytes, missed = columns[:, [0, 1, 2, 3, 6]].T
    return missed * sector_bytes(row_bytes, sector) + lookups * INDEX_BYTES + bags * (OFFSET_BYTES
                                                                                      + dim * OUTPUT_BYTES)


def backward_bytes(columns: np.ndarray, sector: float, state_bytes_per_row: np.ndarray | float) -> np.ndarray:
    """HBM bytes of a fused backward + sparse optimizer step (FBGEMM TBE ``EXACT_*`` kernels).

    Read the pooled-output gradient and the ids; sort (id, position) pairs (radix sort: read and write
    12 B per lookup, twice); read and write each unique row and its optimizer state once (the
    gradient of a row is accumulated in registers before the row-wise update).
    """
    bags, lookups, dim, row_bytes, unique = columns[:, :5].T
    return (bags * dim * OUTPUT_BYTES + lookups * INDEX_BYTES + 4 * lookups * 12
            + 2 * unique * (sector_bytes(row_bytes, sector) + state_bytes_per_row))


def optimizer_state_bytes_per_row(optimizer: str, dim: int) -> float:
    """fp32 optimizer state per embedding row (FBGEMM TBE: row-wise Adagrad keeps one momentum per row;
    Adam keeps two per element; SGD none)."""
    return {"sgd": 0.0, "rowwise_adagrad": 4.0, "adam": 8.0 * dim}[optimizer]


UNIT_COSTS: Final = ("per_bag", "per_line", "per_near_miss_line", "per_far_miss_line", "per_tlb_miss", "per_walk_miss")
"""The work counts of :func:`lookup_counts`, one unit cost each (seconds per unit). A per-lookup cost is
not one of them: a lookup is the lines of its row (on the CPU grid of ``benchmarks/embedding.py`` it
fitted to 0 beside the per-line cost in every split)."""

FAR_LINE: Final = UNIT_COSTS.index("per_far_miss_line")

MERGES: Final[dict[int, tuple[tuple[int, ...], ...]]] = {
    # fewer parameters merge counts whose unit costs are nearest (indices into UNIT_COSTS); 1: the roofline
    6: ((0,), (1,), (2,), (3,), (4,), (5,)),
    5: ((0,), (1,), (2,), (3,), (4, 5)),  # a page walk missing the near cache priced as any TLB miss
    4: ((0,), (1,), (2,), (3, 4, 5)),  # a TLB miss priced as a main-memory line
    3: ((0,), (1,), (2, 3, 4, 5)),  # every missed line (and TLB miss) priced alike
    2: ((0,), (1, 2, 3, 4, 5)),  # every line priced alike, missed or not
    1: (),
}
"""The column groups of an ``EmbeddingBagPredictor`` with ``parameters`` unit costs; one parameter is the
traffic roofline (:func:`forward_bytes`) at one fitted efficiency. The per-bag cost stays its own in every
group of two or more: at a fixed batch it also carries the call's fixed cost, which no line count can (on
a Zen 5 VM, 8 us per call of 256 bags against 1-2 ns per row line; priced as line reads, the two-cost fit
missed its own training cells by 53% on the CI grid, 27% with the bag kept apart)."""

MIN_POINTS_PER_PARAMETER: Final = 8
"""Training points per fitted unit cost (``parameters_for``): fewer parameters rather than an under-determined fit."""


def parameters_for(points: int) -> int:
    """Most unit costs ``points`` training points fit at :data:`MIN_POINTS_PER_PARAMETER` each (1 to 6)."""
    return int(min(len(UNIT_COSTS), max(1, points // MIN_POINTS_PER_PARAMETER)))


def lookup_counts(columns: np.ndarray, sector: float) -> np.ndarray:
    """The work counts a lookup's time is a non-negative sum of, one column each (per call).

    Per bag (its offsets, loop and call), per row line read, per line that misses the near cache (rows'
    lines; the pooled output's lines, each written by a write-allocate of a line not in the core's
    caches, twice where the near cache evicted it since the last call), per line that also misses the
    far cache (main memory), per TLB miss, per page walk whose page-table line misses the near cache (a
    dependent read before the row's). Each row-line count includes the farther ones (a missed line is
    also a line read), so each line cost is the extra over the nearer level and >= 0 keeps a farther
    line at least as dear as a nearer one.
    """
    bags, lookups, dim, row_bytes, _, near, far, tlb, walk, output = columns.T
    lines = np.ceil(row_bytes / sector)
    out_lines = np.ceil(dim * OUTPUT_BYTES / sector)
    return np.column_stack([bags, lookups * lines, near * lines + bags * out_lines + output, far * lines, tlb, walk])


def merged_counts(columns: np.ndarray, sector: float, parameters: int) -> np.ndarray:
    """:func:`lookup_counts` summed into :data:`MERGES` ``[parameters]`` groups (1: the forward bytes)."""
    if parameters == 1:
        return forward_bytes(columns, sector)[:, None]
    counts = lookup_counts(columns, sector)
    return np.column_stack([counts[:, list(group)].sum(axis=1) for group in MERGES[parameters]])


class EmbeddingBagPredictor(OperatorPredictor):
    """Latency of one embedding-bag forward from ``COLUMNS``: a non-negative sum of work counts.

    ``time = sum_j c_j n_j`` over :func:`merged_counts` ``n_j``, each ``c_j`` a cost per unit (seconds per
    bag, per missed line ...) between its bounds, fitted by bounded least squares on the *relative*
    error (each row divided by its latency). Its efficiency against the traffic roofline
    (:meth:`roofline_s` / :meth:`predict`) is what the backward reuses (``costmodel.recsys.step``).

    Parameters
    ----------
    hbm_bandwidth_bytes_per_s : float
        Main-memory bandwidth of the device (default: H100-SXM, 3350 GB/s): the roofline's.
    sector : float
        Bytes of one memory transaction (32 on NVIDIA GPUs, 64 on x86 CPUs).
    parameters : int
        Unit costs fitted, 1 to 6 (:data:`MERGES`); fit with at least :data:`MIN_POINTS_PER_PARAMETER`
        points each (``parameters_for``).
    stream_bandwidth_bytes_per_s : float
        The fastest streaming read bandwidth of one core from main memory (0: no bound). A main-memory
        line costs at least ``sector`` / this (what a line takes at the streaming rate; the cache work
        of the same line may overlap it), the lower bound of the per-far-miss-line cost.
    random_state : int, RandomState or None
        Unused (the fit is deterministic); kept for the common contract.
    """

    shape_columns: ClassVar[tuple[str, ...]] = COLUMNS

    def __init__(self, hbm_bandwidth_bytes_per_s: float = 3350e9, sector: float = GPU_SECTOR_BYTES,
                 parameters: int = 6, stream_bandwidth_bytes_per_s: float = 0.0, random_state: Any = None) -> None:
        self.hbm_bandwidth_bytes_per_s = hbm_bandwidth_bytes_per_s
        self.sector = sector
        self.parameters = parameters
        self.stream_bandwidth_bytes_per_s = stream_bandwidth_bytes_per_s
        self.random_state = random_state

    def _physics(self, shapes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        roofline = forward_bytes(shapes, self.sector) / self.hbm_bandwidth_bytes_per_s
        return lookup_counts(shapes, self.sector), np.log(roofline)

    def _make_regressor(self) -> LinearRegression:
        return LinearRegression(positive=True, fit_intercept=False)

    def _shapes(self, X: np.ndarray) -> np.ndarray:
        """The ``COLUMNS`` of ``X`` (missing ones 1), clipped into [1, 1e12] as every predictor's shapes are."""
        return clip_shapes(X, len(COLUMNS))

    def lower_bounds(self) -> np.ndarray:
        """Seconds per unit each fitted cost is bounded below by (0, or the main-memory line's bound)."""
        groups = MERGES[self.parameters]
        bounds = np.zeros(max(1, len(groups)))
        for index, group in enumerate(groups):
            # only a group of main-memory lines (and the TLB misses priced as one): never nearer lines
            if group[0] == FAR_LINE and self.stream_bandwidth_bytes_per_s > 0:
                bounds[index] = self.sector / self.stream_bandwidth_bytes_per_s
        return bounds

    def fit(self, X: ArrayLike, y: ArrayLike) -> EmbeddingBagPredictor:
        """Fit the per-unit costs on measured latencies (seconds); returns ``self``.

        Sets ``cost_per_unit_``, ``rank_`` and ``condition_number_`` (of the scaled relative design).
        """
        from scipy.optimize import lsq_linear

        if self.parameters not in MERGES:
            raise ValueError(f"The 'parameters' parameter must be one of {sorted(MERGES)}. Got "
                             f"{self.parameters!r} instead.")
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True)
        latency = np.maximum(np.abs(np.asarray(y)), 1e-12)
        counts = merged_counts(self._shapes(np.asarray(X)), self.sector, self.parameters)
        self.scale_ = np.maximum(counts.max(axis=0), 1.0)  # unit-free columns for the solver
        design = counts / self.scale_ / latency[:, None]
        self.rank_ = int(np.linalg.matrix_rank(design))
        self.condition_number_ = float(np.linalg.cond(design))
        lower = self.lower_bounds() * self.scale_
        solved = lsq_linear(design, np.ones(len(latency)), bounds=(lower, np.full(len(lower), np.inf)))
        self.cost_per_unit_ = np.maximum(solved.x, lower) / self.scale_
        return self

    def predict(self, X: ArrayLike) -> np.ndarray:
        """Predicted latency in seconds (at least 1 ns)."""
        check_is_fitted(self)
        X = np.asarray(validate_data(self, X, dtype=np.float64, reset=False))
        return np.maximum(merged_counts(self._shapes(X), self.sector, self.parameters) @ self.cost_per_unit_, 1e-9)


class RooflineLookups:
    """Profile-free lookup time: the traffic at the device's HBM bandwidth (labelled a roofline, no fit)."""

    source = "roofline"

    def __init__(self, hbm_bandwidth_bytes_per_s: float, sector: float = GPU_SECTOR_BYTES) -> None:
        self.hbm_bandwidth_bytes_per_s = hbm_bandwidth_bytes_per_s
        self.sector = sector

    def predict(self, columns: np.ndarray) -> np.ndarray:
        return forward_bytes(columns, self.sector) / self.hbm_bandwidth_bytes_per_s


def efficiency(model: Any, columns: np.ndarray, bandwidth: float, sector: float) -> np.ndarray:
    """Achieved fraction of ``bandwidth`` in the forwards of ``columns`` (at most 1), reused for the backward."""
    seconds = np.maximum(model.predict(columns), 1e-12)
    return np.minimum(forward_bytes(columns, sector) / bandwidth / seconds, 1.0)


def gpu_caches(gpu_name: str) -> CacheLevels:
    """The catalog GPU's L2 as both levels (0 when unknown: no cache modelled)."""
    size = L2_CACHE_BYTES.get(gpu_name, 0.0)
    return CacheLevels(size, size, walk_span_bytes=0.0)


__all__ = ["COLUMNS", "MERGES", "UNIT_COSTS", "CacheLevels", "EmbeddingBagPredictor", "LookupShard",
           "RooflineLookups", "backward_bytes", "efficiency", "forward_bytes", "gpu_caches", "lookup_columns",
           "lookup_counts", "merged_counts", "optimizer_state_bytes_per_row", "parameters_for"]
