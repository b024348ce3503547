"""Time operators: fitted profile predictors where a profile covers the op, labelled fall-backs elsewhere.

``OperatorTimer`` memoises per-shape results and batches predictor calls: timing
the few dozen distinct operators of a strategy costs a dictionary lookup each
once warm.

Run-spec overrides of catalog figures (``cluster: {peak_tflops: ...}``) reach
every time. The analytic models read the overridden ``gpu`` directly. A profile's
tables were measured on the catalog GPU (``reference``), so a time read from them
is a what-if: it is scaled by ``costmodel.analytic.what_if_time_ratio`` (GEMMs and
attention by their roofline on either GPU: peak FLOP/s where compute-bound, HBM
bandwidth where memory-bound; memory-bound kernels by HBM bandwidth) and a measured
intra-node collective by the alpha-beta model's ratio (link bandwidth and
latency), and the output says so (``what_if_note``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from costmodel.analytic import (
    BACKWARD_GEMM_TIME_FACTOR,
    FA2_LEVEL_DEVICES,
    attention_backward_ratio,
    attention_head_dim_time_factor,
    attention_roofline_seconds,
    fa2_level_factor,
    fa2_level_factors,
    level_parallelism_factor,
    gemm_roofline_seconds,
    memory_kind,
    memory_op_seconds,
    noncausal_time_factor,
    shape_curve_device,
    what_if_time_ratio,
)
from costmodel.comm.collectives import link_figures
from costmodel.comm.formulas import single_domain_seconds
from costmodel.ops import Op
from costmodel.splitting import attention_long_sequence, attention_pieces, gemm_pieces
from costmodel.specs.gpu import GPU_FIELDS, GPUSpec

SOURCE_PROFILE = "profile"
SOURCE_ROOFLINE = "roofline"
SOURCE_ANALYTIC = "analytic"
NOTE_MEMORY = ("norms, activations, residuals, rotary, cross-entropy and the optimizer step: analytic "
               "bandwidth fits to Zhang et al. 2025 A100 measurements (no sampled table)")
NOTE_NONCAUSAL = ("non-causal attention: causal table x FlashAttention-2 non-causal/causal time ratio")
NOTE_ATTENTION_BWD = ("attention backward: sampled forward time x measured backward/forward ratio by sequence "
                      "length and head dim (no backward table)")
NOTE_GEMM_BWD = (f"backward GEMMs (dgrad, wgrad): forward-layout table time x {BACKWARD_GEMM_TIME_FACTOR}, "
                 "the backward/forward efficiency ratio measured on A100 by Zhang et al. 2025")
NOTE_HEAD_DIM = ("attention head dim outside the table's sampled head dims: timed at the nearest sampled head dim "
                 "x the FlashAttention-2 per-head-dim efficiency (costmodel.analytic)")
NOTE_FA2_LEVEL = ("attention: the built-in table's causal prefill kernel brought to the published throughput of "
                  "the training kernel by sequence length (FlashAttention-2 on A100, with its measured batch x heads "
                  "dependence; cuDNN fused attention on H100) (costmodel.analytic.FA2_LEVEL_DEVICES, "
                  "FA2_PARALLELISM_PAIRS)")
NOTE_GQA_AS_MHA = ("attention: grouped-query shapes timed at their multi-head shape (kv heads = query heads), the "
                   "shape the built-in table was brought to the training kernel's published level at; the "
                   "inference table's gain from grouping is not the training kernel's "
                   "(costmodel.timing.OperatorTimer._gqa_as_multi_head)")
# GPUSpec attributes a profile's measured times depend on (the ones a what-if scales them by).
_MEASURED_FIGURES = ("peak_flops", "hbm_bandwidth_bytes_per_s", "intra_node_bandwidth_bytes_per_s",
                     "intra_node_latency_s")
# GEMM roles whose table time is scaled by BACKWARD_GEMM_TIME_FACTOR, and the table dtypes it holds for.
_BACKWARD_ROLES = ("dgrad", "wgrad")
_BACKWARD_FACTOR_DTYPES = ("bf16", "fp16")


class Predictors(Protocol):
    """What the timer needs of a fitted profile (``costmodel.predictors.FittedProfile``)."""

    families: tuple[str, ...]
    profile: Any

    def predict_gemm(self, m: Any, n: Any, k: Any, dtype: str) -> tuple[np.ndarray, np.ndarray]: ...

    def predict_attention_fwd(self, batch: Any, seq: Any, heads: Any, kv_heads: Any,
                              head_dim: Any) -> tuple[np.ndarray, np.ndarray]: ...

    def sampled_range(self, family: str) -> dict[str, tuple[float, float]]: ...


@dataclass
class TimedOps:
    """Per-execution seconds and the source of each op's time."""

    ops: Sequence[Op]
    seconds: np.ndarray  # one execution
    sources: list[str]
    notes: list[str]  # fall-backs and approximations used, readable

    def total(self, phases: tuple[str, ...] | None = None) -> float:
        """Seconds of all executions (``count`` included) of the ops in ``phases``."""
        counts = np.array([op.count for op in self.ops])
        mask = np.ones(len(self.ops), bool) if phases is None else np.array([op.phase in phases for op in self.ops])
        return float(np.sum(self.seconds[mask] * counts[mask]))

    def total_family(self, family: str, phases: tuple[str, ...]) -> float:
        """Seconds of the ops of one family in ``phases``."""
        return sum(sec * op.count for op, sec in zip(self.ops, self.seconds)
                   if op.family == family and op.phase in phases)


def _gemm_role(op: Op) -> str:
    """``fwd``, ``dgrad`` or ``wgrad``: the last part of a GEMM op's name (``costmodel.llm.decompose``)."""
    role = op.name.rsplit(".", 1)[-1]
    return role if role in _BACKWARD_ROLES else "fwd"


def _gemm_family(dtype: str, available: tuple[str, ...] = ()) -> str:
    """The GEMM table for ``dtype``; fp16 reads the bf16 table when it has none (equal tensor-core peaks)."""
    if dtype == "fp8":
        return "gemm_fp8"
    if dtype == "fp16" and "gemm_fp16" in available:
        return "gemm_fp16"
    return "gemm_bf16"


@dataclass
class OperatorTimer:
    """Times ops for one GPU with an optional fitted profile.

    ``reference`` is the GPU whose figures the profile's tables were measured under
    (the catalog entry of ``gpu``, before run-spec overrides); None means ``gpu``.
    Where the two differ in a figure measured times depend on, those times are
    scaled to ``gpu`` (module docstring) and carry ``what_if_note``.
    """

    gpu: GPUSpec
    predictors: Predictors | None = None
    reference: GPUSpec | None = None
    _memo: dict[tuple[Any, ...], tuple[float, str, tuple[str, ...]]] = field(default_factory=dict, repr=False)
    _comm_memo: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)
    _fa2_level: list[np.ndarray | None] = field(default_factory=list, repr=False)  # computed once, on first use
    # Summed stage times keyed by the fields that shape a stage's operators (costmodel.llm.compute).
    stage_memo: dict[tuple[Any, ...], Any] = field(default_factory=dict, repr=False)

    @property
    def profile_name(self) -> str | None:
        return None if self.predictors is None else str(self.predictors.profile.name)

    @property
    def overridden_figures(self) -> tuple[str, ...]:
        """Catalog keys of the measured-on figures in which ``gpu`` differs from ``reference``."""
        if self.predictors is None or self.reference is None:
            return ()
        keys = {attr: key for key, (attr, _) in GPU_FIELDS.items()}
        out = []
        for attr in _MEASURED_FIGURES:
            if attr == "peak_flops":
                ours, theirs = dict(self.gpu.peak_flops), dict(self.reference.peak_flops)
                out += [f"peak_tflops.{d}" for d in ours if d in theirs and ours[d] != theirs[d]]
            elif getattr(self.gpu, attr) != getattr(self.reference, attr):
                out.append(keys[attr])
        return tuple(out)

    @property
    def what_if_note(self) -> str | None:
        """The label of times measured on ``reference`` and scaled to overridden figures, or None."""
        figures = self.overridden_figures
        if not figures:
            return None
        assert self.reference is not None
        return (f"what-if: times measured on {self.reference.name} (profile {self.profile_name}), scaled to the "
                f"overridden {', '.join(figures)}: GEMMs and attention by their roofline (peak FLOP/s where "
                "compute-bound, HBM bandwidth where memory-bound), memory-bound kernels by HBM bandwidth, "
                "intra-node collectives by link bandwidth and latency (costmodel.timing)")

    def _measured(self, op: Op, seconds: float, notes: tuple[str, ...] = ()) -> tuple[float, str, tuple[str, ...]]:
        """The memo entry of a time read from the profile: scaled to ``gpu`` where figures were overridden."""
        note = self.what_if_note
        if note is None:
            return float(seconds), SOURCE_PROFILE, notes
        assert self.reference is not None
        return float(seconds) * what_if_time_ratio(op, self.gpu, self.reference), SOURCE_PROFILE, notes + (note,)

    def _collective_ratio(self, op: str, num_gpus: np.ndarray, message_bytes: np.ndarray) -> np.ndarray | float:
        """Alpha-beta time on ``gpu``'s links over that on ``reference``'s (1 without overrides)."""
        if self.reference is None or not {"intra_node_bandwidth_GBps", "intra_node_latency_us"} \
                & set(self.overridden_figures):
            return 1.0
        n = np.maximum(num_gpus, 2.0)
        return (single_domain_seconds(op, message_bytes, n, link_figures(self.gpu))  # type: ignore[arg-type]
                / single_domain_seconds(op, message_bytes, n, link_figures(self.reference)))  # type: ignore[arg-type]

    def _has(self, family: str) -> bool:
        return self.predictors is not None and family in self.predictors.families

    @property
    def collective_factor(self) -> float:
        """Multiplier of every collective's time: 1 (``costmodel.factored_timing`` sets a trace-fitted one)."""
        return 1.0

    @property
    def has_collectives(self) -> bool:
        return self.predictors is not None and any(f.startswith("nccl") for f in self.predictors.families)

    def intra_collective(self, op: str, num_gpus: Any, message_bytes: Any) -> tuple[np.ndarray, np.ndarray]:
        """Measured intra-node collective time (memoised); out of range where the profile has no table."""
        n, b = np.asarray(num_gpus, dtype=float), np.asarray(message_bytes, dtype=float)
        key = (op, n.tobytes(), b.tobytes(), b.shape)
        hit = self._comm_memo.get(key)
        if hit is None:
            if self.predictors is None or f"nccl_{op}" not in self.predictors.families:
                shape = np.broadcast(n, b).shape
                hit = (np.full(shape, np.nan), np.zeros(shape, dtype=bool))
            else:
                seconds, in_range = self.predictors.predict_collective(op, n, b)  # type: ignore[attr-defined]
                hit = (seconds * self._collective_ratio(op, n, b), in_range)
            self._comm_memo[key] = hit
        return hit

    def _attention_splits(self, shapes: np.ndarray, in_range: np.ndarray) -> dict[int, tuple[float, str, int]]:
        """Out-of-range attention shapes timed as in-range pieces over batch and heads (and, past the
        table's longest sequence, at its edge: ``attention_long_sequence``), by index.

        Each entry: seconds, note, and the piece's (batch x heads) pairs.
        """
        sampled = getattr(self.predictors, "sampled_range", None)
        if sampled is None or bool(np.all(in_range)):
            return {}
        ranges = sampled("attention_fwd")
        plans = {int(index): plan for index in np.flatnonzero(~in_range)
                 if (plan := attention_pieces(shape := tuple(int(v) for v in shapes[index]), ranges)
                     or attention_long_sequence(shape, ranges)) is not None}
        assert self.predictors is not None
        return {index: (sec, f"attention (batch, seq, heads, kv_heads, head_dim)={tuple(int(v) for v in shapes[index])} "
                             f"lies beyond the attention table's range: timed as {scale:.3g} x the in-range piece {piece}",
                        int(piece[0] * piece[2]))
                for index, (sec, scale, piece) in _timed_pieces(plans, self.predictors.predict_attention_fwd).items()}

    def _attention_level(self) -> np.ndarray | None:
        """FA2-level factors of a built-in profile listed in ``FA2_LEVEL_DEVICES``, else None (memoised)."""
        if not self._fa2_level:
            factors = None
            profile = None if self.predictors is None else self.predictors.profile
            if self.predictors is not None and profile is not None and profile.path is None \
                    and profile.device in FA2_LEVEL_DEVICES and self._has("attention_fwd") \
                    and str(profile.metadata.get("source", "")).startswith("aiconfigurator-core"):
                fitted: Predictors = self.predictors
                factors = fa2_level_factors(profile.device, lambda *shape: fitted.predict_attention_fwd(*shape)[0])
                if factors is not None and not np.all(np.isfinite(factors)):
                    factors = None
            self._fa2_level.append(factors)
        return self._fa2_level[0]

    def _gqa_as_multi_head(self) -> bool:
        """Whether grouped-query attention is timed at its multi-head shape: on the built-in tables
        brought to a training kernel's published level (``FA2_LEVEL_DEVICES``: A100, H100).

        Those tables hold inference prefill kernels, and they time grouped-query attention (fewer KV
        than query heads) well ahead of multi-head attention of the same query heads, most at short
        sequences: on the H100 table, 64 query heads over 8 KV heads run 44% faster than over 64 at
        1k tokens, 15% at 8k, 6% at 16k (causal forward, 16k tokens, head dim 128). The level factors
        bring the table's multi-head shapes to the training kernel's published multi-head throughput;
        carried over to grouped shapes they put the training kernel past its published ceilings: on
        H100 a causal forward of 728 TFLOP/s at 1k (FlashAttention-3's best published causal figure is
        616 at 16k, arXiv 2407.08608 Fig. 5; cuDNN's 410 at 1k), on A100 204 at 2k (FlashAttention-2's
        README: 155 causal at 2k, 203 non-causal at 16k, its highest). Training kernels do the same
        FLOPs per query head whatever the grouping: FlashAttention-2 and cuDNN fused attention run one
        thread block per (batch, query head, query tile), reading its group's K/V
        (Dao-AILab/flash-attention csrc/flash_attn/src/flash_fwd_kernel.h: the K/V head is
        ``bidh / h_h_k_ratio``), so grouping lowers only K/V traffic, which does not bound a kernel of
        >= 1k keys at head dim 128. On these devices attention is therefore timed at the multi-head
        shape (KV heads = query heads), the shape the level was set at. The tables of newer GPUs
        (H200, B200, GB200, ...) have no published training-kernel level here and stay as they are
        (their grouped shapes stay within FlashAttention-4's published B200 throughput); a user's
        profile, measured with training kernels, is read at the shapes it measured.
        """
        return self._attention_level() is not None

    @staticmethod
    def _key(op: Op) -> tuple[Any, ...]:
        """Every input that determines ``op``'s memo entry (seconds, source and notes), nothing else.

        Equal keys must give equal entries whatever was timed before: a GEMM's notes name the
        first part of its name; a memory-bound op's time depends on its kernel kind (the fit or
        table it reads; ``moe.permute`` is a gather, ``moe.experts.swiglu`` an activation), its
        phase (recompute runs the forward kernel), its elements (a profile's table) and bytes.
        """
        if op.family == "gemm":
            return (op.family, op.name.split(".")[0], op.shape, op.dtype, _gemm_role(op) != "fwd")
        if op.family in ("attention_fwd", "attention_bwd"):
            return (op.family, op.shape, op.dtype)
        phase = "fwd" if op.phase == "recompute" else op.phase
        return (op.family, memory_kind(op), phase, op.shape, op.bytes, op.dtype)

    def time_ops(self, ops: Sequence[Op]) -> TimedOps:
        """Seconds for one execution of each op (batched for the uncached ones)."""
        memo, keys = self._memo, [self._key(op) for op in ops]
        missing = [op for op, key in zip(ops, keys) if key not in memo]
        if missing:
            self._fill(missing)
        results = [memo[key] for key in keys]
        notes = sorted({note for r in results for note in r[2]})
        return TimedOps(ops, np.array([r[0] for r in results]), [r[1] for r in results], notes)

    # -- filling the memo -------------------------------------------------------
    def _fill(self, ops: Sequence[Op]) -> None:
        unique: dict[tuple[Any, ...], Op] = {self._key(op): op for op in ops}
        gemms = [op for op in unique.values() if op.family == "gemm"]
        attention = [op for op in unique.values() if op.family in ("attention_fwd", "attention_bwd")]
        self._fill_memory([op for op in unique.values() if op.family in ("memory", "optimizer")])
        self._fill_gemms(gemms)
        self._fill_attention(attention)

    def _fill_memory(self, ops: list[Op]) -> None:
        """A profile's measured table of the op's kind and phase (from ``parplan profile``), else the fits."""
        for op in ops:
            phase = "fwd" if op.phase == "recompute" else op.phase
            kind = memory_kind(op)
            if self._has(f"memory_{kind}_{phase}"):
                assert self.predictors is not None
                sec, ok = self.predictors.predict_memory(kind, phase, [op.shape[0]])  # type: ignore[attr-defined]
                if bool(np.ravel(ok)[0]):
                    self._memo[self._key(op)] = self._measured(op, float(np.ravel(sec)[0]))
                    continue
            self._memo[self._key(op)] = (memory_op_seconds(op, self.gpu), SOURCE_ANALYTIC, (NOTE_MEMORY,))

    def _measured_attention_bwd(self, op: Op) -> float | None:
        """The profile's own attention-backward table, where it has one covering ``op``."""
        if not self._has("attention_bwd"):
            return None
        assert self.predictors is not None
        sec, ok = self.predictors.predict_attention_bwd(  # type: ignore[attr-defined]
            *(np.array([v], dtype=float) for v in op.shape[:5]))
        if not bool(np.ravel(ok)[0]):
            return None
        noncausal = len(op.shape) > 5 and op.shape[5] == 0
        return float(np.ravel(sec)[0]) * (noncausal_time_factor(op.shape[1]) if noncausal else 1.0)

    def _fill_gemms(self, gemms: list[Op]) -> None:
        by_dtype: dict[str, list[Op]] = {}
        for op in gemms:
            by_dtype.setdefault(op.dtype, []).append(op)
        for dtype, group in by_dtype.items():
            family = _gemm_family(dtype, self.predictors.families if self.predictors is not None else ())
            if not self._has(family):
                note = (f"{family}: no sampled table for {self.gpu.name}; roofline at the published "
                        f"achievable fraction of peak")
                for op in group:
                    self._memo[self._key(op)] = (gemm_roofline_seconds(op, self.gpu), SOURCE_ROOFLINE, (note,))
                continue
            assert self.predictors is not None
            shapes = np.array([op.shape for op in group], dtype=float)
            table_dtype = family.removeprefix("gemm_")
            m, n, k = shapes.T
            seconds, in_range = self.predictors.predict_gemm(m, n, k, table_dtype)
            # C[m, n] and its transpose C^T[n, m] are one GEMM with the operands swapped (same FLOPs and
            # bytes; on the A100 and H100 tables the two orientations differ by a median 3%, the tables'
            # own noise): a shape outside the table's range in one orientation is timed in the other.
            swapped = ~in_range
            if swapped.any():
                other, other_ok = self.predictors.predict_gemm(n[swapped], m[swapped], k[swapped], table_dtype)
                seconds[swapped], in_range[swapped] = other, other_ok
            split = self._gemm_splits(group, in_range, family, table_dtype)
            backward = table_dtype in _BACKWARD_FACTOR_DTYPES
            for index, (op, sec, ok, turned) in enumerate(zip(group, seconds, in_range, swapped)):
                notes: tuple[str, ...] = ()
                if not ok and index in split:
                    sec, piece_note = split[index]
                    ok, turned, notes = True, False, (piece_note,)
                if not ok:
                    note = (f"{op.name.split('.')[0]} GEMM (m, n, k)={op.shape} lies outside the {family} "
                            f"table's sampled range: roofline fall-back")
                    self._memo[self._key(op)] = (gemm_roofline_seconds(op, self.gpu), SOURCE_ROOFLINE, (note,))
                    continue
                if turned:
                    notes += (f"{op.name.split('.')[0]} GEMM (m, n, k)={op.shape} timed as its transpose "
                              f"(n, m, k): outside the {family} table's range in its own orientation",)
                if backward and _gemm_role(op) in _BACKWARD_ROLES:
                    sec = sec * BACKWARD_GEMM_TIME_FACTOR
                    notes += (NOTE_GEMM_BWD,)
                self._memo[self._key(op)] = self._measured(op, float(sec), notes)

    def _gemm_splits(self, group: list[Op], in_range: np.ndarray, family: str,
                     table_dtype: str) -> dict[int, tuple[float, str]]:
        """Out-of-range GEMMs of ``group`` timed as equal in-range pieces (costmodel.splitting), by index."""
        sampled = getattr(self.predictors, "sampled_range", None)
        if sampled is None or bool(np.all(in_range)):
            return {}
        ranges = sampled(family)
        plans: dict[int, tuple[float, tuple[int, int, int]]] = {}
        for index, op in enumerate(group):
            if not in_range[index]:
                m, n, k = (int(v) for v in op.shape)
                # the orientation with the larger piece (C and C^T are one GEMM)
                options = [plan for plan in (gemm_pieces((m, n, k), ranges), gemm_pieces((n, m, k), ranges)) if plan]
                if options:
                    plans[index] = min(options, key=lambda plan: plan[0])
        assert self.predictors is not None
        predictors = self.predictors
        return {index: (sec, f"{group[index].name.split('.')[0]} GEMM (m, n, k)={group[index].shape} lies beyond the "
                             f"{family} table's range: timed as {scale:.3g} x the in-range piece (m, n, k)={piece}")
                for index, (sec, scale, piece) in _timed_pieces(
                    plans, lambda *columns: predictors.predict_gemm(*columns, table_dtype)).items()}

    def _fill_attention(self, ops: list[Op]) -> None:
        if not ops:
            return
        if not self._has("attention_fwd"):
            note = (f"attention: no sampled table for {self.gpu.name}; roofline at the measured "
                    f"flash-attention fraction of peak")
            for op in ops:
                self._memo[self._key(op)] = (attention_roofline_seconds(op, self.gpu), SOURCE_ROOFLINE, (note,))
            return
        assert self.predictors is not None
        shapes = np.array([op.shape[:5] for op in ops], dtype=float)
        grouped = np.zeros(len(ops), dtype=bool)
        if self._gqa_as_multi_head():
            grouped = shapes[:, 3] < shapes[:, 2]
            shapes[:, 3] = np.maximum(shapes[:, 3], shapes[:, 2])  # GQA at its multi-head shape (see above)
        # Head dims between the sampled ones are the table predictor's; outside them (an A100 table
        # holds head dim 128 alone) the op is timed at the nearest sampled head dim and converted with
        # the FlashAttention-2 per-head-dim efficiency, never extrapolated by the regressor.
        head_dim = shapes[:, 4].copy()
        sampled = getattr(self.predictors, "sampled_range", None)
        if sampled is not None:
            low, high = sampled("attention_fwd")["head_dim"]
            shapes[:, 4] = np.clip(head_dim, low, high)
        seconds, in_range = self.predictors.predict_attention_fwd(*shapes.T)
        split = self._attention_splits(shapes, in_range)
        level = self._attention_level()
        for index, (op, sec, ok, d, d_ref) in enumerate(zip(ops, seconds, in_range, head_dim, shapes[:, 4])):
            notes: tuple[str, ...] = (NOTE_GQA_AS_MHA,) if grouped[index] else ()
            pairs = op.shape[0] * op.shape[2]  # (batch, head) pairs of what the table timed
            if not ok and index in split:
                sec, piece_note, pairs = split[index]
                ok, notes = True, (piece_note,)
            if not ok:
                note = (f"attention (batch, seq, heads, kv_heads, head_dim)={op.shape[:5]} lies outside the "
                        f"attention table's sampled range: roofline fall-back")
                self._memo[self._key(op)] = (attention_roofline_seconds(op, self.gpu), SOURCE_ROOFLINE, (note,))
                continue
            if op.family == "attention_bwd" and (measured := self._measured_attention_bwd(op)) is not None:
                self._memo[self._key(op)] = self._measured(op, measured)
                continue
            if level is not None:
                notes += (NOTE_FA2_LEVEL,)
                sec = (sec * fa2_level_factor(self.predictors.profile.device, level, op.shape[1])
                       * float(level_parallelism_factor(self.predictors.profile.device, pairs)))
            if d != d_ref:
                notes += (NOTE_HEAD_DIM,)
                sec = sec * attention_head_dim_time_factor(d, d_ref)
            if len(op.shape) > 5 and op.shape[5] == 0:
                notes += (NOTE_NONCAUSAL,)
                sec = sec * noncausal_time_factor(op.shape[1], shape_curve_device(self.gpu.name, op.family))
            if op.family == "attention_bwd":
                notes += (NOTE_ATTENTION_BWD,)
                sec = sec * attention_backward_ratio(op.shape[1], op.shape[4])
            self._memo[self._key(op)] = self._measured(op, float(sec), notes)


def _timed_pieces(plans: dict[int, tuple[float, tuple[int, ...]]],
                  predict: Any) -> dict[int, tuple[float, float, tuple[int, ...]]]:
    """``{index: (scale x piece seconds, scale, piece)}`` for the plans whose piece the table covers.

    ``plans`` maps an op index to ``(scale, piece shape)`` (``costmodel.splitting``);
    ``predict(*columns) -> (seconds, in_range)`` times every piece in one batch.
    """
    if not plans:
        return {}
    seconds, inside = predict(*np.array([piece for _, piece in plans.values()], dtype=float).T)
    return {index: (scale * float(sec), scale, piece)
            for (index, (scale, piece)), sec, ok in zip(plans.items(), seconds, inside) if ok}
