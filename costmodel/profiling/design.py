"""Which operator shapes the sampler times, and in which order (no torch here).

Two sources of points, targeted first:

- **Targeted** (``--for-run``, ``--for-search``): the operators
  ``costmodel.llm.decompose.stage_ops`` lists for every pipeline stage of the
  given runs, exactly the shapes the cost model will ask the predictors about,
  most important first (FLOPs x count for GEMM and attention, bytes x count
  for memory-bound kernels).
- **Space-filling**: a scrambled Sobol sequence over the log of each shape
  column, within ``DesignBounds``, snapped to a ladder of values (four per
  octave for GEMM dimensions and element counts, two for sequence lengths
  and heads) aligned as real models align them (GEMM dimensions to 16,
  sequences to 64). Every prefix of a Sobol sequence is itself spread over
  the whole box, so a run cut short by its budget still covers the range;
  the ladder keeps the number of distinct values per column small, which the
  fit's outlier screen (a grid of neighbours) needs.

Each family is one *stream* of points; the sampler draws from the stream that
has used the least time so far, so that a slow family cannot starve the others.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
from scipy.stats import qmc

from costmodel.analytic import memory_kind
from costmodel.llm.decompose import stage_ops
from costmodel.ops import Op
from costmodel.profiling.kinds import MEMORY_KERNELS, OP_GROUPS, SAMPLED_DTYPES, MemoryKernel, memory_kernel
from costmodel.specs.errors import SpecError
from costmodel.specs.runspec import RunSpec

__all__ = ["CPU_BOUNDS", "CUDA_BOUNDS", "DesignBounds", "SamplePoint", "Targets", "design_streams", "ladder",
           "targeted_points"]

_SOBOL_POINTS_LOG2: Final = 11  # 2048 candidate points per stream, far more than any budget measures


@dataclass(frozen=True)
class SamplePoint:
    """One operator shape to time.

    Parameters
    ----------
    table : str
        Profile table: ``gemm_bf16``, ``gemm_fp16``, ``attention_fwd``, ``attention_bwd`` or ``memory``.
    shape : tuple of int
        gemm: ``(m, n, k)``; attention: ``(batch, seq_len, num_heads, num_kv_heads, head_dim, causal)``;
        memory: ``(elements, inner)`` where ``inner`` is the last dimension of the tensors.
    kernel : MemoryKernel or None
        The memory-bound kernel (memory points only).
    source : str
        ``targeted`` or ``design``.
    """

    table: str
    shape: tuple[int, ...]
    kernel: MemoryKernel | None = None
    source: str = field(default="design", compare=False)

    @property
    def key(self) -> str:
        """Identity in the journal: table, kernel and shape (not the source)."""
        variant = "" if self.kernel is None else f"{self.kernel.kind}.{self.kernel.phase}.{self.kernel.variant}"
        return f"{self.table}|{variant}|{','.join(str(v) for v in self.shape)}"

    @property
    def stream(self) -> str:
        """The design stream (family) the point belongs to."""
        return self.table if self.kernel is None else f"memory.{self.kernel.kind}.{self.kernel.phase}"

    def row(self) -> dict[str, Any]:
        """The profile table columns of this point, ``latency_s`` excluded."""
        if self.table.startswith("gemm"):
            m, n, k = self.shape
            return {"m": m, "n": n, "k": k}
        if self.table.startswith("attention"):
            b, s, h, kv, d, causal = self.shape
            return {"batch": b, "seq_len": s, "num_heads": h, "num_kv_heads": kv, "head_dim": d,
                    "causal": bool(causal)}
        assert self.kernel is not None
        elements = self.shape[0]
        return {"kind": self.kernel.kind, "phase": self.kernel.phase, "elements": elements,
                "bytes": self.kernel.bytes(elements)}

    def work(self) -> tuple[float, float]:
        """``(FLOPs, bytes)`` of one execution: the roofline the budget planner estimates time from."""
        if self.table.startswith("gemm"):
            m, n, k = (float(v) for v in self.shape)
            return 2.0 * m * n * k, 2.0 * (m * k + n * k + m * n)
        if self.table.startswith("attention"):
            b, s, h, kv, d, causal = (float(v) for v in self.shape)
            flops = 4.0 * b * h * s * s * d / (2.0 if causal else 1.0)
            moved = 2.0 * b * s * d * (2.0 * h + 2.0 * kv)
            # backward: five GEMMs to the forward's two, and the gradients written
            return (2.5 * flops, 2.0 * moved) if self.table == "attention_bwd" else (flops, moved)
        assert self.kernel is not None
        return 0.0, float(self.kernel.bytes(self.shape[0]))

    def footprint_bytes(self) -> float:
        """Device memory the kernel's tensors take (inputs, outputs, gradients), roughly."""
        _, moved = self.work()
        return 2.0 * moved


@dataclass(frozen=True, kw_only=True)
class DesignBounds:
    """The box the space-filling design covers (per shape column, inclusive)."""

    gemm_dim: tuple[int, int]
    batch: tuple[int, ...]
    seq_len: tuple[int, int]
    heads: tuple[int, int]
    gqa_ratios: tuple[int, ...]
    head_dims: tuple[int, ...]
    elements: tuple[int, int]
    params: tuple[int, int]
    message_bytes: tuple[int, int]
    inner: int  # last dimension of norm and element-wise tensors


# CPU: sizes one core times in well under a second each (a 4096^3 bf16 GEMM: about 1 s).
CPU_BOUNDS: Final = DesignBounds(gemm_dim=(64, 4096), batch=(1, 2, 4), seq_len=(128, 4096), heads=(1, 32),
                                 gqa_ratios=(1, 2, 4, 8), head_dims=(64, 128), elements=(2**14, 2**25),
                                 params=(2**16, 2**25), message_bytes=(2**10, 2**24), inner=1024)
# CUDA: the operator shapes of the catalog's models, 125M to 405B parameters, one to eight-way tensor parallel.
CUDA_BOUNDS: Final = DesignBounds(gemm_dim=(128, 65536), batch=(1, 2, 4, 8), seq_len=(256, 32768),
                                  heads=(1, 128), gqa_ratios=(1, 2, 4, 8), head_dims=(64, 128, 256),
                                  elements=(2**16, 2**30), params=(2**20, 2**30), message_bytes=(2**10, 2**30),
                                  inner=4096)


def ladder(low: int, high: int, per_octave: int, align: int) -> np.ndarray:
    """Values ``2^(i / per_octave)`` in ``[low, high]``, rounded to multiples of ``align``, distinct, sorted."""
    steps = np.arange(math.floor(per_octave * math.log2(low)), math.ceil(per_octave * math.log2(high)) + 1)
    values = np.maximum(align, np.round(np.exp2(steps / per_octave) / align) * align).astype(np.int64)
    return np.unique(values[(values >= low) & (values <= high)])


def _sobol(dimensions: int, seed: int) -> np.ndarray:
    return qmc.Sobol(d=dimensions, scramble=True, seed=seed).random_base2(_SOBOL_POINTS_LOG2)


def _pick(values: Sequence[int] | np.ndarray, unit: np.ndarray) -> np.ndarray:
    values = np.asarray(values)
    return values[np.minimum((unit * values.size).astype(np.int64), values.size - 1)]


def _unique(points: Iterable[SamplePoint]) -> Iterator[SamplePoint]:
    seen: set[str] = set()
    for point in points:
        if point.key not in seen:
            seen.add(point.key)
            yield point


def _gemm_stream(table: str, bounds: DesignBounds, seed: int) -> Iterator[SamplePoint]:
    dims = ladder(*bounds.gemm_dim, per_octave=4, align=16)
    for m, n, k in _pick(dims, _sobol(3, seed)).tolist():
        yield SamplePoint(table, (m, n, k))


def _attention_stream(table: str, bounds: DesignBounds, seed: int) -> Iterator[SamplePoint]:
    unit = _sobol(5, seed)
    seqs = ladder(*bounds.seq_len, per_octave=2, align=64)
    heads = ladder(*bounds.heads, per_octave=2, align=1)
    for b, s, h, ratio, d in zip(_pick(bounds.batch, unit[:, 0]).tolist(), _pick(seqs, unit[:, 1]).tolist(),
                                 _pick(heads, unit[:, 2]).tolist(), _pick(bounds.gqa_ratios, unit[:, 3]).tolist(),
                                 _pick(bounds.head_dims, unit[:, 4]).tolist(), strict=True):
        kv = h // ratio if h % ratio == 0 else h  # grouped-query attention needs heads divisible by groups
        yield SamplePoint(table, (b, s, h, kv, d, 1))


def _memory_stream(kernel: MemoryKernel, bounds: DesignBounds, seed: int) -> Iterator[SamplePoint]:
    if kernel.kind == "optimizer":
        counts = ladder(*bounds.params, per_octave=4, align=1024)
        inner = None
    else:
        inner = bounds.inner
        rows = ladder(max(1, bounds.elements[0] // inner), max(1, bounds.elements[1] // inner), 4, 1)
        counts = rows * inner
    for elements in _pick(counts, _sobol(1, seed)[:, 0]).tolist():
        yield SamplePoint("memory", (elements, inner or elements), kernel)


def design_streams(groups: Sequence[str], bounds: DesignBounds, *, dtype: str = "bf16", seed: int = 0,
                   variants: dict[str, str] | None = None) -> dict[str, Iterator[SamplePoint]]:
    """Space-filling point streams for the compute ``groups`` (``comm`` has its own sweep).

    Parameters
    ----------
    groups : sequence of str
        ``--ops`` groups (see ``OP_GROUPS``).
    bounds : DesignBounds
        The box to fill.
    dtype : str
        GEMM dtype (``bf16`` or ``fp16``).
    seed : int
        Scrambling seed of the Sobol sequences.
    variants : dict, optional
        ``{"norm": "rmsnorm" | "layernorm", "activation": "swiglu" | "gelu"}``.

    Returns
    -------
    dict
        Stream name -> iterator of distinct points, in design order.
    """
    variants = {"norm": "rmsnorm", "activation": "swiglu", **(variants or {})}
    streams: dict[str, Iterator[SamplePoint]] = {}
    for index, group in enumerate(groups):
        stream_seed = seed * 1000 + index * 10
        if group == "gemm":
            streams[f"gemm_{dtype}"] = _unique(_gemm_stream(f"gemm_{dtype}", bounds, stream_seed))
        elif group == "attention":
            for offset, table in enumerate(OP_GROUPS["attention"]):
                streams[table] = _unique(_attention_stream(table, bounds, stream_seed + offset))
        elif group != "comm":
            for offset, kernel in enumerate(MEMORY_KERNELS.values()):
                chosen = variants.get(kernel.kind, kernel.variant)
                if kernel.group == group and kernel.variant == chosen:
                    streams[f"memory.{kernel.kind}.{kernel.phase}"] = _unique(
                        _memory_stream(kernel, bounds, stream_seed + offset))
    return streams


@dataclass
class Targets:
    """Targeted points, most important first, and the ops no sampler kernel measures (what -> distinct shapes)."""

    points: list[SamplePoint]
    not_sampled: Counter[str]


def targeted_points(runs: Iterable[RunSpec], groups: Sequence[str]) -> Targets:
    """The operator shapes the cost model queries for ``runs``, restricted to the ``--ops`` groups.

    Every pipeline stage of every run is decomposed (``stage_ops``); equal
    shapes are merged and ranked by their summed FLOPs x count (bytes x count
    for memory-bound kernels), so that the shapes that dominate step time are
    measured first.
    """
    weight: dict[str, float] = {}
    points: dict[str, SamplePoint] = {}
    skipped: set[tuple[str, tuple[int, ...]]] = set()
    for run in runs:
        for stage in range(run.strategy.pp):
            for op in stage_ops(run, stage):
                point, reason = _point_of(op, run, groups)
                if point is None:
                    if reason:
                        skipped.add((reason, op.shape))
                    continue
                points.setdefault(point.key, point)
                flops, moved = point.work()
                weight[point.key] = weight.get(point.key, 0.0) + (flops or moved) * op.count
    ordered = sorted(points, key=lambda key: -weight[key])
    return Targets([points[key] for key in ordered], Counter(reason for reason, _ in skipped))


def _point_of(op: Op, run: RunSpec, groups: Sequence[str]) -> tuple[SamplePoint | None, str]:
    """The point that measures ``op``, or ``(None, reason)`` (empty reason: its group was not asked for)."""
    if op.family == "gemm":
        if "gemm" not in groups:
            return None, ""
        if op.dtype not in SAMPLED_DTYPES:
            return None, f"{op.dtype} GEMMs (dtype not sampled)"
        return SamplePoint(f"gemm_{op.dtype}", tuple(op.shape[:3]), source="targeted"), ""
    if op.family in ("attention_fwd", "attention_bwd"):
        if "attention" not in groups:
            return None, ""
        b, s, h, kv, d = op.shape[:5]
        causal = op.shape[5] if len(op.shape) > 5 else 1
        return SamplePoint(op.family, (b, s, h, kv, d, int(causal)), source="targeted"), ""
    kind = memory_kind(op)
    if {"norm": "norm", "optimizer": "optimizer"}.get(kind, "elementwise") not in groups:
        return None, ""
    phase = "fwd" if op.phase == "recompute" else op.phase
    name = op.name.split(".")[0]
    variant = {"norm": run.model.normalization, "activation": run.model.activation}.get(kind, "")
    candidates = [k for (k_kind, k_phase, _), k in MEMORY_KERNELS.items() if k_kind == kind and k_phase == phase]
    if not candidates or name.endswith("_dropout") or ".permute" in op.name or ".unpermute" in op.name:
        return None, f"{name} {phase}"
    try:
        kernel = memory_kernel(kind, phase, variant or candidates[0].variant)
    except SpecError:
        return None, f"{name} {phase} ({variant})"
    elements = int(op.shape[0])
    inner = elements if kind == "optimizer" else _inner(elements, run.seq_length if kind == "softmax"
                                                         else run.model.hidden_size)
    return SamplePoint("memory", (elements, inner), kernel, source="targeted"), ""


def _inner(elements: int, preferred: int) -> int:
    """The last dimension of a tensor of ``elements``: ``preferred`` if it divides, else a power of two."""
    if preferred and elements % preferred == 0:
        return preferred
    power = 1
    while power < 8192 and elements % (power * 2) == 0:
        power *= 2
    return power
