"""Operator timing: backward-GEMM factor, transposed look-ups, attention head-dim and FA2-level conversions."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from costmodel.analytic import (
    BACKWARD_GEMM_TIME_FACTOR,
    FA2_HEAD_DIM_EFFICIENCY,
    attention_head_dim_efficiency,
    attention_head_dim_time_factor,
    FA2_BWD_HEAD_DIM_RATIO,
    FA2_PADDED_BWD_RATIO,
    attention_backward_ratio,
    fa2_level_factor,
    fa2_level_factors,
    fa2_parallelism_factor,
)
from costmodel.ops import Op, gemm
from costmodel.profiles import aiconfigurator_adapter as adapter
from costmodel.specs.catalog import get_gpu
from costmodel.timing import (
    NOTE_FA2_LEVEL,
    NOTE_GEMM_BWD,
    NOTE_HEAD_DIM,
    SOURCE_PROFILE,
    SOURCE_ROOFLINE,
    OperatorTimer,
)

A100 = "a100-sxm4-80gb"


@dataclass
class _Profile:
    device: str
    metadata: dict[str, Any] = field(default_factory=lambda: {"source": "aiconfigurator-core 0.12.0"})
    path: Path | None = None
    name: str = "stub"


class _Stub:
    """Fitted-profile stand-in: GEMM table m <= 1000 and k >= 32; attention at head dim 128, <= 16 heads."""

    families = ("attention_fwd", "gemm_bf16")

    def __init__(self, profile: _Profile) -> None:
        self.profile = profile

    def predict_gemm(self, m: Any, n: Any, k: Any, dtype: str) -> tuple[np.ndarray, np.ndarray]:
        m, n, k = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (m, n, k)))
        inside = (m <= 1000) & (k >= 32)
        return np.where(inside, 2.0 * m * n * k / 1e14, np.nan), inside

    def predict_attention_fwd(self, batch: Any, seq: Any, heads: Any, kv_heads: Any,
                              head_dim: Any) -> tuple[np.ndarray, np.ndarray]:
        b, s, h, _, d = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (batch, seq, heads, kv_heads,
                                                                                   head_dim)))
        inside = (d == 128) & (h <= 16)
        return np.where(inside, 2.0 * b * s * s * h * d / 1.5e14, np.nan), inside

    def sampled_range(self, family: str) -> dict[str, tuple[float, float]]:
        if family == "gemm_bf16":
            return {"m": (1.0, 1000.0), "n": (1.0, 1e9), "k": (32.0, 1e9)}
        assert family == "attention_fwd"
        return {"batch": (1.0, 64.0), "seq_len": (128.0, 16384.0), "num_heads": (1.0, 16.0),
                "num_kv_heads": (1.0, 16.0), "head_dim": (128.0, 128.0), "tokens": (128.0, 1e6)}


# The stub profile's default device has no published training-kernel level (FA2_LEVEL_DEVICES).
def _timer(device: str = "b200", **profile: Any) -> OperatorTimer:
    return OperatorTimer(get_gpu("h100-sxm5-80gb"), _Stub(_Profile(device, **profile)))  # type: ignore[arg-type]


def _attention(head_dim: int, causal: int = 1, seq: int = 2048) -> Op:
    shape = (2, seq, 8, 8, head_dim, causal)
    return Op("attention.fwd", "attention_fwd", "fwd", shape, 4.0 * 2 * seq * seq * 8 * head_dim, 1.0, "bf16")


def test_backward_gemms_take_the_backward_factor_and_forward_ones_do_not():
    fwd = gemm("mlp_up.fwd", "fwd", 512, 1024, 2048, "bf16")
    dgrad = gemm("mlp_up.dgrad", "bwd", 512, 1024, 2048, "bf16")  # same shape on purpose: separate memo entries
    wgrad = gemm("mlp_up.wgrad", "bwd", 512, 1024, 2048, "fp16")
    timed = _timer().time_ops([fwd, dgrad, wgrad])
    base = 2.0 * 512 * 1024 * 2048 / 1e14
    assert timed.seconds == pytest.approx([base, base * BACKWARD_GEMM_TIME_FACTOR, base * BACKWARD_GEMM_TIME_FACTOR])
    assert timed.sources == [SOURCE_PROFILE] * 3
    assert NOTE_GEMM_BWD in timed.notes
    assert _timer().time_ops([fwd]).notes == []


def test_gemm_outside_the_table_is_timed_as_its_transpose():
    op = gemm("lm_head.wgrad", "bwd", 50304, 600, 8192, "bf16")  # m beyond the stub's range, n inside
    timed = _timer().time_ops([op])
    assert timed.sources == [SOURCE_PROFILE]
    assert timed.seconds[0] == pytest.approx(2.0 * 50304 * 600 * 8192 / 1e14 * BACKWARD_GEMM_TIME_FACTOR)
    assert any("transpose" in note for note in timed.notes)


def test_gemm_beyond_the_table_in_both_orientations_is_timed_as_in_range_pieces():
    timed = _timer().time_ops([gemm("huge.fwd", "fwd", 50000, 40000, 64, "bf16")])
    assert timed.sources == [SOURCE_PROFILE]
    # 40 pieces of (1000, 50000, 64) in the transposed orientation (50 in its own): the same FLOPs
    assert timed.seconds[0] == pytest.approx(2.0 * 50000 * 40000 * 64 / 1e14)
    assert any("timed as 40 x the in-range piece (m, n, k)=(1000, 50000, 64)" in note for note in timed.notes)
    assert not any("roofline" in note for note in timed.notes)


def test_gemm_below_the_table_with_no_in_range_piece_falls_back_to_the_roofline():
    timed = _timer().time_ops([gemm("huge.fwd", "fwd", 50000, 40000, 16, "bf16")])  # k under the table's 32
    assert timed.sources == [SOURCE_ROOFLINE]
    assert any("roofline fall-back" in note for note in timed.notes)


def test_attention_beyond_the_table_heads_is_timed_as_head_groups():
    op = Op("attention.fwd", "attention_fwd", "fwd", (2, 2048, 40, 8, 128, 1), 1.0, 1.0, "bf16")
    timed = _timer().time_ops([op])
    assert timed.sources == [SOURCE_PROFILE]
    # a piece of 14 heads (3 kv heads), scaled by the work: 40 / 14 of its time
    assert timed.seconds[0] == pytest.approx(2.0 * 2 * 2048 * 2048 * 40 * 128 / 1.5e14)
    assert any("timed as 2.86 x the in-range piece (2, 2048, 14, 3, 128)" in note for note in timed.notes)


def test_attention_beyond_the_table_sequence_is_not_split_but_timed_at_the_edge_sequence():
    op = Op("attention.fwd", "attention_fwd", "fwd", (1, 32768, 40, 8, 128, 1), 1.0, 1.0, "bf16")
    timed = _timer().time_ops([op])
    assert timed.sources == [SOURCE_PROFILE]  # no longer the fixed-fraction roofline
    assert any("in-range piece (1, 20480, 14, 3, 128" in note for note in timed.notes)  # the sequence is never cut


@pytest.mark.parametrize("head_dim", [64, 80, 104, 256])
def test_head_dim_outside_the_sampled_ones_uses_the_fa2_head_dim_efficiency(head_dim):
    timer = _timer()
    at_128 = timer.time_ops([_attention(128)]).seconds[0]
    timed = timer.time_ops([_attention(head_dim)])
    assert timed.sources == [SOURCE_PROFILE]
    assert timed.seconds[0] == pytest.approx(at_128 * attention_head_dim_time_factor(head_dim, 128))
    assert NOTE_HEAD_DIM in timed.notes


def test_fa2_level_applies_to_the_builtin_a100_table_only():
    op = _attention(128, seq=1024)
    plain = _timer().time_ops([op])
    builtin = _timer(A100).time_ops([op])
    user = _timer(A100, path=Path("/tmp/profile")).time_ops([op])
    assert NOTE_FA2_LEVEL not in plain.notes and NOTE_FA2_LEVEL not in user.notes
    assert NOTE_FA2_LEVEL in builtin.notes
    assert user.seconds[0] == plain.seconds[0]
    stub = _Stub(_Profile(A100))
    factors = fa2_level_factors(A100, lambda *shape: stub.predict_attention_fwd(*shape)[0])
    assert factors is not None
    pairs = op.shape[0] * op.shape[2]
    assert builtin.seconds[0] == pytest.approx(
        plain.seconds[0] * fa2_level_factor(A100, factors, 1024) * fa2_parallelism_factor(pairs))


def test_fewer_batch_head_pairs_run_faster_per_flop_on_the_fa2_level_table():
    # Same FLOPs (batch x heads x seq^2 fixed) spread over fewer (batch, head) pairs: the FA2-level
    # A100 table is scaled down more, the plain table not at all.
    few = Op("attention.fwd", "attention_fwd", "fwd", (1, 2048, 4, 4, 128, 1), 1.0, 1.0, "bf16")
    many = Op("attention.fwd", "attention_fwd", "fwd", (8, 2048, 8, 8, 128, 1), 1.0, 1.0, "bf16")
    plain = _timer().time_ops([few, many]).seconds
    builtin = _timer(A100).time_ops([few, many]).seconds
    assert builtin[0] / plain[0] < builtin[1] / plain[1]
    assert (builtin[0] / plain[0]) / (builtin[1] / plain[1]) == pytest.approx(
        fa2_parallelism_factor(4) / fa2_parallelism_factor(64))
    assert fa2_parallelism_factor(1e6) == pytest.approx(1.0, abs=1e-5)


def test_fa2_level_factors_compare_published_and_table_throughput():
    # A table running at exactly the README's causal TFLOP/s needs no correction.
    seqs = np.array([512, 1024, 2048, 4096, 8192, 16384], dtype=float)
    tflops = dict(zip(seqs, [99, 133, 155, 173, 182, 189], strict=True))

    def readme_speed(batch: Any, seq: Any, heads: Any, kv_heads: Any, head_dim: Any) -> np.ndarray:
        rate = np.array([tflops[s] for s in np.asarray(seq, dtype=float)]) * 1e12
        return 2.0 * batch * seq * seq * heads * head_dim / rate

    factors = fa2_level_factors(A100, readme_speed)
    # ... beyond undoing the parallelism factor at the README's own batch x heads (16 heads, 16384 tokens)
    assert factors is not None and np.allclose(factors * fa2_parallelism_factor(16 * 16384 / seqs), 1.0)
    assert fa2_level_factors("b200", readme_speed) is None
    assert fa2_level_factor(A100, np.linspace(0.5, 1.0, 6), 100) == pytest.approx(0.5)  # clamped below 512


def test_head_dim_efficiency_follows_the_fa2_kernels():
    for kernel, efficiency in FA2_HEAD_DIM_EFFICIENCY.items():
        assert attention_head_dim_efficiency(kernel) == pytest.approx(efficiency)
    # A padded head dim does its kernel's work: never faster than the kernel's own head dim.
    for d in (40, 72, 104, 144, 200, 240):
        kernel = 32 * int(np.ceil(d / 32))
        assert attention_head_dim_time_factor(d, kernel) >= 1.0
    # FlashAttention-2 README (A100, fwd+bwd): head dim 64 takes 0.556-0.575 of head dim 128's time.
    assert 0.54 < attention_head_dim_time_factor(64, 128) < 0.58
    assert attention_head_dim_efficiency(512) == FA2_HEAD_DIM_EFFICIENCY[256]


def test_backward_ratio_follows_the_fa2_backward_kernels():
    assert attention_backward_ratio(4096, 128) == pytest.approx(2.90 + 615 / 4096)
    assert attention_backward_ratio(4096) == attention_backward_ratio(4096, 128)
    for kernel, ratio in FA2_BWD_HEAD_DIM_RATIO.items():
        assert attention_backward_ratio(2048, kernel) == pytest.approx(attention_backward_ratio(2048) * ratio)
    assert attention_backward_ratio(2048, 112) == pytest.approx(attention_backward_ratio(2048) * FA2_PADDED_BWD_RATIO)
    assert attention_backward_ratio(2048, 512) == pytest.approx(attention_backward_ratio(2048, 256))
    assert attention_backward_ratio(1024) > attention_backward_ratio(8192)  # short sequences: less efficient bwd


def test_merge_takes_the_median_at_the_primary_level():
    m = np.arange(1, 201, dtype=np.int64)
    primary = {"m": m, "n": np.full(200, 64), "k": np.full(200, 32), "latency_s": np.full(200, 1e-3)}
    rng = np.random.default_rng(0)
    noisy = 1e-3 * np.exp(rng.normal(0, 0.05, 200))

    def table(level: float, latency_s: np.ndarray) -> tuple[Any, dict[str, np.ndarray], np.ndarray]:
        columns = {"m": m, "n": np.full(200, 64), "k": np.full(200, 32), "latency": latency_s * level / 1e-3}
        return None, columns, np.arange(200)

    merged, note = adapter._merge_gemm(primary, {"a": table(1.10, noisy), "b": table(0.95, noisy[::-1].copy())})
    assert note["offsets"]["a"] == pytest.approx(1.10 * np.exp(np.median(np.log(noisy / 1e-3))), rel=1e-3)
    assert note["shapes_by_measurements"] == {3: 200}
    assert np.median(merged["latency_s"]) == pytest.approx(1e-3, rel=0.01)  # the primary's level
    assert not merged["latency_s"].flags.writeable


def test_builtin_bf16_table_is_the_merge_of_the_f_linear_backends():
    pytest.importorskip("pyarrow")
    tables = adapter.backend_gemm_tables("h100-sxm5-80gb")
    assert list(tables)[0] == "vllm 0.24.0" and len(tables) == 3
    merged = adapter.load_tables("h100-sxm5-80gb")
    note = merged["metadata"]["gemm_bf16_merge"]
    assert set(note["offsets"]) == {"sglang 0.5.14", "trtllm 1.3.0rc20"}
    assert merged["metadata"]["kernel_sources"]["gemm_bf16"] == [
        "sglang_torch_linear", "torch.nn.functional.linear", "torch_flow"]
    # one shape by hand: median of the three, the others scaled by their offsets
    gemm_bf16 = merged["gemm_bf16"]
    row = 1234
    shape = (gemm_bf16["m"][row], gemm_bf16["n"][row], gemm_bf16["k"][row])
    values = []
    for name, table in tables.items():
        hit = (table["m"] == shape[0]) & (table["n"] == shape[1]) & (table["k"] == shape[2])
        values.append(table["latency_s"][hit][0] / note["offsets"].get(name, 1.0))
    assert gemm_bf16["latency_s"][row] == pytest.approx(np.median(values), rel=1e-3)


# -- times measured on the catalog GPU, scaled to run-spec overrides (issue 11, item 6) ----------------------
def _what_if_timer(overrides: dict[str, Any]) -> OperatorTimer:
    from costmodel.specs.gpu import override_gpu

    catalog = get_gpu("h100-sxm5-80gb")
    stub = _Stub(_Profile("h100-sxm5-80gb"))
    return OperatorTimer(override_gpu(catalog, overrides), stub, reference=catalog)  # type: ignore[arg-type]


def test_a_compute_bound_gemm_follows_the_overridden_peak_and_a_memory_bound_one_the_bandwidth():
    big = gemm("mlp_up.fwd", "fwd", 1000, 8192, 8192, "bf16")  # ~130 GFLOP: compute-bound
    thin = gemm("mlp_up.fwd", "fwd", 8, 8192, 8192, "bf16")  # a few rows: reads the weight, memory-bound
    plain = _timer().time_ops([big, thin]).seconds
    peak = _what_if_timer({"peak_tflops": {"bf16": 2 * 989.4}}).time_ops([big, thin]).seconds
    bandwidth = _what_if_timer({"hbm_bandwidth_GBps": 2 * 3350}).time_ops([big, thin]).seconds
    assert peak[0] == pytest.approx(plain[0] / 2)
    assert peak[1] == pytest.approx(plain[1])
    assert bandwidth[0] == pytest.approx(plain[0])
    assert bandwidth[1] == pytest.approx(plain[1] / 2)


def test_scaled_times_are_labelled_and_unscaled_ones_are_not():
    op = gemm("mlp_up.fwd", "fwd", 512, 1024, 2048, "bf16")
    timer = _what_if_timer({"peak_tflops": {"bf16": 500}})
    assert timer.overridden_figures == ("peak_tflops.bf16",)
    assert timer.what_if_note in timer.time_ops([op]).notes
    assert _what_if_timer({"inter_node_bandwidth_GBps": 100}).what_if_note is None  # read by the formulas alone
    assert _timer().what_if_note is None


def test_a_measured_collective_follows_the_overridden_link():
    class _Collectives(_Stub):
        families = ("nccl_all_gather",)

        def predict_collective(self, op: str, n: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
            size = np.asarray(b, dtype=float)
            return 20e-6 + size / 300e9, np.ones(size.shape, dtype=bool)

    catalog = get_gpu("h100-sxm5-80gb")
    from costmodel.specs.gpu import override_gpu

    def seconds(overrides: dict[str, Any]) -> np.ndarray:
        timer = OperatorTimer(override_gpu(catalog, overrides), _Collectives(_Profile("h100-sxm5-80gb")),  # type: ignore[arg-type]
                              reference=catalog)
        return timer.intra_collective("all_gather", 8, np.array([1e3, 1e9]))[0]

    plain, wide, quick = seconds({}), seconds({"intra_node_bandwidth_GBps": 900}), seconds({"intra_node_latency_us": 1})
    assert wide[1] < 0.6 * plain[1] and wide[0] == pytest.approx(plain[0], rel=0.05)  # bandwidth: large messages
    assert quick[0] < 0.8 * plain[0] and quick[1] == pytest.approx(plain[1], rel=0.01)  # latency: small ones


def test_h100_level_is_cudnn_published_throughput_without_the_a100_parallelism_factor():
    # A table running exactly at cuDNN's published causal TFLOP/s (FA3 paper Fig. 5) needs no correction
    # on H100, and no A100-derived (batch x heads) factor is folded into its level.
    seqs = np.array([512, 1024, 2048, 4096, 8192, 16384], dtype=float)
    tflops = dict(zip(seqs, [315, 410, 484, 518, 529, 539], strict=True))

    def cudnn_speed(batch: Any, seq: Any, heads: Any, kv_heads: Any, head_dim: Any) -> np.ndarray:
        rate = np.array([tflops[s] for s in np.asarray(seq, dtype=float)]) * 1e12
        return 2.0 * batch * seq * seq * heads * head_dim / rate

    factors = fa2_level_factors("h100-sxm5-80gb", cudnn_speed)
    assert factors is not None and np.allclose(factors, 1.0)
    few = Op("attention.fwd", "attention_fwd", "fwd", (1, 2048, 4, 4, 128, 1), 1.0, 1.0, "bf16")
    many = Op("attention.fwd", "attention_fwd", "fwd", (8, 2048, 8, 8, 128, 1), 1.0, 1.0, "bf16")
    plain = _timer().time_ops([few, many]).seconds
    builtin = _timer("h100-sxm5-80gb").time_ops([few, many])
    assert NOTE_FA2_LEVEL in builtin.notes
    assert builtin.seconds[0] / plain[0] == pytest.approx(builtin.seconds[1] / plain[1])


def _causal(seq: int, batch: int = 2, heads: int = 8) -> Op:
    return Op("attention.fwd", "attention_fwd", "fwd", (batch, seq, heads, heads, 128, 1),
              2.0 * batch * seq * seq * heads * 128, 1.0, "bf16")


def test_attention_past_the_longest_sequence_keeps_the_edge_efficiency_and_is_continuous():
    timer = _timer()
    edge = int(16384 * 1.25)  # the stub's longest seq_len x RANGE_MARGIN: the last in-range sequence
    inside, past, far = timer.time_ops([_causal(edge), _causal(edge + 64), _causal(8 * edge)]).seconds
    assert past / inside == pytest.approx(((edge + 64) / edge) ** 2)  # no jump at the edge
    assert far / inside == pytest.approx(64.0)  # time grows with the work, s^2
    timed = timer.time_ops([_causal(8 * edge)])
    assert timed.sources == [SOURCE_PROFILE] and not any("roofline" in note for note in timed.notes)


def test_attention_past_the_longest_sequence_and_the_heads_splits_both():
    seconds = _timer().time_ops([_causal(40960, heads=40)]).seconds[0]
    edge = int(16384 * 1.25)
    # 40 heads -> pieces of 14 heads at the edge sequence, scaled by heads and by (s / edge)^2
    piece = 2.0 * 2 * edge * edge * 14 * 128 / 1.5e14
    assert seconds == pytest.approx(piece * 40 / 14 * (40960 / edge) ** 2)
