"""The sample design: ladders, space-filling streams, targeted shapes of a run (no torch needed)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from costmodel.llm.decompose import stage_ops
from costmodel.profiling.design import CPU_BOUNDS, SamplePoint, design_streams, ladder, targeted_points
from costmodel.profiling.kinds import memory_kernel, parse_ops
from costmodel.specs import run_spec_from_mapping
from costmodel.specs.errors import SpecError


@pytest.fixture
def small_run(base_run):
    spec = {**base_run, "model": "gpt3-125m", "seq_length": 1024,
            "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 8},
            "strategy": {"tp": 2, "pp": 2, "micro_batch_size": 1, "global_batch_size": 16}}
    return run_spec_from_mapping(spec)


def test_ladder_is_aligned_geometric_and_bounded():
    values = ladder(64, 4096, per_octave=4, align=16)
    assert values[0] == 64 and values[-1] == 4096
    assert np.all(values % 16 == 0)
    assert np.all(np.diff(values) > 0)
    assert 20 <= values.size <= 26  # six octaves, four steps each


def test_streams_are_deterministic_distinct_and_inside_the_bounds():
    first = [p.key for p in itertools.islice(design_streams(["gemm"], CPU_BOUNDS)["gemm_bf16"], 200)]
    again = [p.key for p in itertools.islice(design_streams(["gemm"], CPU_BOUNDS)["gemm_bf16"], 200)]
    other = [p.key for p in itertools.islice(design_streams(["gemm"], CPU_BOUNDS, seed=1)["gemm_bf16"], 200)]
    assert first == again and first != other
    assert len(set(first)) == len(first)
    shapes = np.array([p.shape for p in itertools.islice(design_streams(["gemm"], CPU_BOUNDS)["gemm_bf16"], 200)])
    assert shapes.min() >= CPU_BOUNDS.gemm_dim[0] and shapes.max() <= CPU_BOUNDS.gemm_dim[1]


def test_a_short_prefix_already_spans_the_range():
    """Sobol order: a budget that stops after 32 points still covers every octave of each dimension."""
    shapes = np.array([p.shape for p in itertools.islice(design_streams(["gemm"], CPU_BOUNDS)["gemm_bf16"], 32)])
    for column in shapes.T:
        octaves = np.unique(np.floor(np.log2(column)))
        assert octaves.size >= 5


def test_every_group_has_streams():
    streams = design_streams(["gemm", "attention", "norm", "elementwise", "optimizer", "comm"], CPU_BOUNDS)
    assert set(streams) == {"gemm_bf16", "attention_fwd", "attention_bwd", "memory.norm.fwd", "memory.norm.bwd",
                            "memory.activation.fwd", "memory.activation.bwd", "memory.residual.fwd",
                            "memory.softmax.fwd", "memory.softmax.bwd", "memory.optimizer.step"}
    attention = next(streams["attention_fwd"])
    b, s, h, kv, d, causal = attention.shape
    assert h % kv == 0 and causal == 1 and d in CPU_BOUNDS.head_dims


def test_targeted_points_are_the_decomposed_shapes_heaviest_first(small_run):
    targets = targeted_points([small_run], ["gemm", "attention", "norm", "elementwise"])
    gemms = {p.shape for p in targets.points if p.table == "gemm_bf16"}
    expected = {op.shape for stage in range(2) for op in stage_ops(small_run, stage) if op.family == "gemm"}
    assert gemms == expected
    total: dict[tuple[int, ...], float] = {}
    for stage in range(2):
        for op in stage_ops(small_run, stage):
            if op.family == "gemm":
                total[op.shape] = total.get(op.shape, 0.0) + op.flops * op.count
    ranked = [total[p.shape] for p in targets.points if p.table == "gemm_bf16"]
    assert ranked == sorted(ranked, reverse=True)  # FLOPs x count over all stages and layers, heaviest first
    assert all(p.source == "targeted" for p in targets.points)
    assert targets.not_sampled  # rope is not in gpt3, but cross-entropy and the embedding have no kernel
    assert any("cross_entropy" in reason for reason in targets.not_sampled)


def test_targeted_points_only_for_the_groups_asked(small_run):
    targets = targeted_points([small_run], ["gemm"])
    assert {p.table for p in targets.points} == {"gemm_bf16"}
    assert not any("attention" in reason for reason in targets.not_sampled)


def test_memory_point_rows_follow_the_decompose_byte_convention():
    point = SamplePoint("memory", (4096 * 1024, 1024), memory_kernel("activation", "fwd", "swiglu"))
    assert point.row() == {"kind": "activation", "phase": "fwd", "elements": 4096 * 1024,
                           "bytes": 4096 * 1024 * 2 * 3}
    assert point.key == "memory|activation.fwd.swiglu|4194304,1024"


@pytest.mark.parametrize("text", ["gemm,conv", "", " , "])
def test_unknown_op_group_is_a_one_line_error(text):
    with pytest.raises(SpecError, match="'ops' parameter") as info:
        parse_ops(text)
    assert "\n" not in str(info.value)


def test_ops_are_returned_in_canonical_order():
    assert parse_ops("comm, gemm") == ("gemm", "comm")
