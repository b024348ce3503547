"""TP communication as Transformer Engine overlaps it (costmodel.llm.tp_comm)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from costmodel.comm import group_placement
from costmodel.predict import timer_for
from costmodel.specs.runspec import run_spec_from_mapping
from costmodel.llm.step import _on_group, predict_step
from costmodel.llm.tp_comm import (
    activation_wire_bytes,
    pipelined_scatter_seconds,
    ring_gather_seconds,
    tp_layer_exposed_s,
)


def _run(model: str = "llama3.1-70b", seq: int = 8192, gpus: int = 8, **strategy):
    strategy.setdefault("global_batch_size", 64)
    return run_spec_from_mapping({"model": model, "seq_length": seq,
                                  "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": gpus}, "strategy": strategy})


def _exposed(run, log=None) -> float:
    timer = timer_for(run.cluster.gpu)
    on = _on_group(timer, group_placement("tp", run.strategy, run.cluster), run.cluster.gpu)

    def collective(op, nbytes):
        if log is not None:
            log.append((op, nbytes))
        return on(op, nbytes)

    return tp_layer_exposed_s(run, timer, collective)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_overlap_exposes_something_and_never_more_than_no_overlap(tp):
    overlapped = _exposed(_run(tp=tp, tp_comm_overlap=True))
    plain = _exposed(_run(tp=tp))
    assert 0.0 < overlapped < plain


def test_pipelined_scatter_exposes_at_least_fill_and_drain():
    gemm, rs = 1e-3, 0.4e-3
    total = pipelined_scatter_seconds(gemm, rs, 4, 0.0)
    assert total >= 4 * gemm + rs  # the last chunk's reduce-scatter trails the last GEMM
    assert pipelined_scatter_seconds(gemm, 3e-3, 4, 0.0) == pytest.approx(gemm + 4 * 3e-3)  # comm-bound


def test_ring_gather_hides_transfers_shorter_than_a_chunk():
    assert ring_gather_seconds(1e-3, 0.5e-3, 4, 0.0) == pytest.approx(4e-3)
    assert ring_gather_seconds(1e-3, 2e-3, 4, 0.0) == pytest.approx(3 * 2e-3 + 1e-3)


def _fixed_gemms(tp: int, **strategy):
    """A model whose heads and MLP grow with ``tp``, so every GPU runs the same GEMMs at each tp."""
    run = _run(model="llama3.1-8b", tp=tp, **strategy)
    m = run.model
    model = replace(m, num_attention_heads=4 * tp, num_query_groups=tp, ffn_hidden_size=1792 * tp,
                    head_dim=m.head_dim, v_head_dim=m.v_head_dim)
    return replace(run, model=model)


@pytest.mark.parametrize("overlap", [False, True])
def test_exposed_tp_grows_with_tp_at_fixed_gemms(overlap):
    values = [_exposed(_fixed_gemms(tp, tp_comm_overlap=overlap)) for tp in (2, 4, 8)]
    assert values == sorted(values) and values[0] < values[-1], values


def test_fp8_all_gathers_half_the_bytes_and_reduce_scatters_stay_bf16():
    assert activation_wire_bytes("fp8") * 2 == activation_wire_bytes("bf16")
    log_bf16, log_fp8 = [], []
    _exposed(_run(tp=4), log_bf16)
    _exposed(_run(tp=4, precision="fp8"), log_fp8)
    gathers = lambda log: [b for op, b in log if op == "all_gather"]  # noqa: E731
    scatters = lambda log: [b for op, b in log if op == "reduce_scatter"]  # noqa: E731
    assert gathers(log_fp8) and [2 * b for b in gathers(log_fp8)] == gathers(log_bf16)
    assert scatters(log_fp8) == scatters(log_bf16)


def test_backward_regathers_column_inputs():
    log = []
    _exposed(_run(tp=4), log)
    ops = [op for op, _ in log]
    # forward: qkv, fc1 gather; proj, fc2 scatter. backward: proj, fc2 output-gradient gathers,
    # qkv, fc1 input re-gathers (for wgrad) and dgrad reduce-scatters
    assert ops.count("all_gather") == 6 and ops.count("reduce_scatter") == 4


def test_step_books_overlapped_tp_comm():
    step = predict_step(_run(tp=8, tp_comm_overlap=True), timer_for(_run().cluster.gpu))
    assert step.breakdown["tp_comm_s"] > 0.0


def test_deterministic():
    run = _run(tp=4, tp_comm_overlap=True, precision="fp8")
    first = _exposed(run)
    _exposed(_run(tp=2))
    assert _exposed(run) == first


def test_pipelined_scatter_without_margin_slows_only_overlapped_chunks():
    gemm, rs, slow = 1e-3, 0.4e-3, 0.2
    no_margin = pipelined_scatter_seconds(gemm, rs, 4, slow, margin=False)
    # the first chunk runs alone; each later chunk is slowed while the previous reduce-scatter runs
    assert pipelined_scatter_seconds(gemm, rs, 4, 0.0) < no_margin < pipelined_scatter_seconds(gemm, rs, 4, slow)
    assert no_margin == pytest.approx(4 * gemm + 3 * rs * slow / (1 + slow) + rs)


def _framework_run(framework: str, tp: int):
    """The Megatron-Core r0.8 GPT-70B row's shapes at ``tp`` (github.com/NVIDIA/Megatron-LM @f2e5db40 README table)."""
    model = {"name": "GPT-70B", "num_layers": 84, "hidden_size": 8192, "num_attention_heads": 64,
             "num_query_groups": 64, "ffn_hidden_size": 32768, "vocab_size": 131072, "seq_length": 4096,
             "activation": "gelu", "normalization": "layernorm", "position_embedding": "learned"}
    return run_spec_from_mapping({"model": model, "seq_length": 4096, "framework": framework,
                                  "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 768},
                                  "strategy": {"tp": tp, "pp": 1, "global_batch_size": 384,
                                               "sequence_parallel": True, "tp_comm_overlap": True}})


@pytest.mark.parametrize("tp", [2, 8])
def test_te1_userbuffers_without_sm_margin_expose_less_than_te2_defaults(tp):
    te1 = _exposed(_framework_run("megatron-core-r0.8", tp))
    te2 = _exposed(_framework_run("megatron-core", tp))
    assert 0.0 < te1 < te2


def test_te1_overlap_at_tp2_beats_no_overlap_by_a_clear_margin():
    # TE 1.x bulk overlaps share the SMs only while the collective runs, so at tp 2 (GEMMs long
    # against their collectives) overlap hides most of what the plain NCCL path exposes
    run = _framework_run("megatron-core-r0.8", 2)
    plain = _exposed(replace(run, strategy=replace(run.strategy, tp_comm_overlap=False)))
    assert _exposed(run) < 0.5 * plain
