"""Recomputation follows the framework's selective policy (costmodel.llm.recompute) in the time model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from costmodel.llm.decompose import layer_ops
from costmodel.llm.messages import activation_bytes, grad_reduce_bytes, rank_tokens
from costmodel.llm.recompute import attention_recompute_fraction, layer_recompute_fraction, recompute_policy
from costmodel.llm.sharding import FSDP2, backward_gathers
from costmodel.llm.step import predict_step
from costmodel.predict import timer_for
from costmodel.specs import ClusterSpec, RunSpec, Strategy, get_gpu, get_model
from costmodel.specs.framework import get_framework


def _run(recompute: str = "selective", mode: str | None = "op", framework: str = "torchtitan",
         model: str = "llama2-7b", tp: int = 1, cp: int = 1, mbs: int = 1, seq: int = 4096) -> RunSpec:
    fw = get_framework(framework)
    if mode is not None:
        fw = replace(fw, selective_recompute=mode)
    strategy = Strategy(tp=tp, cp=cp, dp=8, micro_batch_size=mbs, global_batch_size=8 * mbs * 2,
                        sequence_parallel=tp > 1, recompute=recompute, zero_stage=3 if framework == "torchtitan" else 1)
    cluster = ClusterSpec(gpu=get_gpu("a100-sxm4-80gb"), num_gpus=8 * tp * cp, gpus_per_node=8)
    return RunSpec(model=get_model(model), cluster=cluster, strategy=strategy, seq_length=seq, framework=fw)


def _recompute_flops(run: RunSpec) -> float:
    ops = layer_ops(run.model, run.strategy, run.seq_length, policy=recompute_policy(run))
    return sum(op.total_flops for op in ops if op.phase == "recompute")


def _forward_flops(run: RunSpec) -> float:
    ops = layer_ops(run.model, run.strategy, run.seq_length, policy="none")
    return sum(op.total_flops for op in ops if op.phase == "fwd")


def test_policy_is_the_frameworks_only_for_selective() -> None:
    assert recompute_policy(_run(mode="op")) == "op"
    assert recompute_policy(_run(mode="layer")) == "layer"
    assert recompute_policy(_run(framework="megatron-core", mode=None)) == "megatron"
    assert recompute_policy(_run(recompute="full", mode="op")) == "full"
    assert recompute_policy(_run(recompute="none", mode="layer")) == "none"


def test_op_policy_reruns_wk_wo_w3_and_no_attention() -> None:
    """torchtitan's op policy saves every odd mm of wq, wk, wv, wo, w1, w3, w2 and the attention output."""
    run = _run(mode="op")
    m = run.model
    tokens = rank_tokens(run)
    h, kv, q = m.hidden_size, m.num_query_groups * m.head_dim, m.num_attention_heads * m.head_dim
    expected = 2.0 * tokens * (h * kv + q * h + h * m.ffn_hidden_size)  # wk, wo, w3
    ops = layer_ops(m, run.strategy, run.seq_length, policy="op", rope_fused=run.framework.rope_fusion)
    gemm = sum(op.total_flops for op in ops if op.phase == "recompute" and op.family == "gemm")
    assert gemm == pytest.approx(expected)
    assert not [op for op in ops if op.phase == "recompute" and op.family.startswith("attention")]
    assert {op.name for op in ops if op.phase == "recompute" and op.family == "memory"} >= {
        "input_norm.recompute", "mlp.swiglu.recompute", "rope.recompute"}


def test_layer_policy_reruns_half_the_forward() -> None:
    run = _run(mode="layer")
    assert _recompute_flops(run) == pytest.approx(0.5 * _forward_flops(run))
    assert _recompute_flops(_run(recompute="full")) == pytest.approx(_forward_flops(run))


def test_step_time_orders_none_selective_full() -> None:
    timer = timer_for(get_gpu("a100-sxm4-80gb"))
    t = {name: predict_step(run, timer).step_time_s for name, run in (
        ("none", _run(recompute="none")), ("op", _run(mode="op")), ("layer", _run(mode="layer")),
        ("full", _run(recompute="full")))}
    assert t["none"] < t["op"] < t["full"]
    assert t["none"] < t["layer"] < t["full"]


def test_stage_memo_keeps_policies_apart_whatever_the_order() -> None:
    """Same strategy, two frameworks' selective policies: the stage memo must not hand one the other's ops."""
    timer = timer_for(get_gpu("a100-sxm4-80gb"))
    op, megatron = _run(mode="op"), _run(mode="megatron")
    first = predict_step(op, timer).step_time_s
    other = predict_step(megatron, timer).step_time_s
    assert first != other
    assert predict_step(op, timer).step_time_s == first


def test_fractions() -> None:
    assert layer_recompute_fraction("full") == 1.0 and layer_recompute_fraction("layer") == 0.5
    assert layer_recompute_fraction("op") == 0.0 == layer_recompute_fraction("megatron")
    assert attention_recompute_fraction("megatron") == 1.0 and attention_recompute_fraction("op") == 0.0
    assert backward_gathers(replace(FSDP2, reshard_after_forward=False), pp=2, recompute="layer") == 0.5


def test_message_sizes() -> None:
    run = _run(cp=2, mbs=2, seq=8192)
    assert rank_tokens(run) == 2 * 8192 // 2
    assert activation_bytes(run, 1) == rank_tokens(run) * run.model.hidden_size
    assert grad_reduce_bytes(_run(framework="megatron-core", mode=None)) == 4  # fp32 main-grad reduce
    assert grad_reduce_bytes(_run(framework="deepspeed", mode=None)) == 2  # bf16 communication_data_type


def test_rope_follows_the_frameworks_fusion() -> None:
    """Megatron-Core fuses RoPE into one streaming kernel; torchtitan runs it as eager ops (slower)."""
    mcore = _run(framework="megatron-core", mode=None, recompute="none")
    titan = _run(framework="torchtitan", mode=None, recompute="none")
    assert mcore.framework.rope_fusion and not titan.framework.rope_fusion
    timer = timer_for(get_gpu("a100-sxm4-80gb"))

    def rope_seconds(fused: bool) -> float:
        ops = [op for op in layer_ops(mcore.model, mcore.strategy, mcore.seq_length, policy="none", rope_fused=fused)
               if op.name.startswith("rope")]
        assert {op.name.split(".")[0] for op in ops} == {"rope_fused" if fused else "rope"}
        return timer.time_ops(ops).total()

    assert rope_seconds(True) < rope_seconds(False)
    # the same strategy under each framework: the stage memo keeps the two RoPE pricings apart
    same = replace(titan, framework=replace(titan.framework, rope_fusion=True))
    assert predict_step(same, timer).step_time_s < predict_step(titan, timer).step_time_s


def test_unfused_attention_is_one_batched_gemm_per_product() -> None:
    """Megatron's baddbmm/bmm over every (micro-batch, head): one kernel, the batch folded into its rows."""
    run = _run(framework="megatron-core", mode=None, recompute="none", mbs=2)
    unfused = replace(run.strategy, flash_attention=False)
    ops = [op for op in layer_ops(run.model, unfused, run.seq_length, policy="none")
           if op.name.startswith("attention.") and op.family == "gemm"]
    batch = 2 * run.model.num_attention_heads
    assert {op.count for op in ops} == {1.0}
    scores = next(op for op in ops if op.name == "attention.scores.fwd")
    assert scores.shape == (batch * run.seq_length, run.seq_length, run.model.head_dim)
    # FLOPs as batch separate products: 2 x (scores + values) x 3 (fwd, dgrad, wgrad)
    per_pair = 2.0 * run.seq_length * run.seq_length * (run.model.head_dim + run.model.v_head_dim)
    assert sum(op.total_flops for op in ops) == pytest.approx(3 * batch * per_pair)


def test_fsdp2_copy_out_runs_on_the_compute_stream_only_for_fsdp2() -> None:
    """FSDP2 copies each gathered layer into its parameters on the compute stream; Megatron-FSDP,
    DeepSpeed and GSPMD gather into buffers the parameters view."""
    from costmodel.llm.sharding import DEEPSPEED_ZERO3, FSDP2, MEGATRON_FSDP, sharding_settings

    assert FSDP2.copy_out_bytes == 4 and MEGATRON_FSDP.copy_out_bytes == 0 == DEEPSPEED_ZERO3.copy_out_bytes
    titan = _run(recompute="none", mode=None)
    assert sharding_settings(titan).copy_out_bytes == 4
    gspmd = replace(titan, framework=replace(titan.framework, fsdp_implementation="gspmd"))
    assert sharding_settings(gspmd).copy_out_bytes == 0
    timer = timer_for(get_gpu("a100-sxm4-80gb"))
    with_copy = predict_step(titan, timer).breakdown["dp_comm_exposed_s"]
    without = predict_step(gspmd, timer).breakdown["dp_comm_exposed_s"]
    assert with_copy > without
