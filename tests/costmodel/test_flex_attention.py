"""Attention run through PyTorch FlexAttention (costmodel/llm/flex_attention.py), as NeMo Automodel's
GPT-OSS recipes run it (``framework.attention_kernel: flex``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from costmodel.llm import flex_attention as flex
from costmodel.llm.decompose import layer_ops, stage_ops
from costmodel.predict import timer_for
from costmodel.specs.errors import SpecError
from costmodel.specs.framework import get_framework
from costmodel.specs.runspec import RunSpec, run_spec_from_mapping


def _run(model: str = "gpt-oss-20b", attention_kernel: str = "flex") -> RunSpec:
    return run_spec_from_mapping({
        "model": model, "seq_length": 4096, "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 8},
        "strategy": {"dp": 8, "ep": 8, "micro_batch_size": 2, "global_batch_size": 256, "zero_stage": 3},
        "framework": {"name": "automodel", "attention_kernel": attention_kernel}})


def _attention_seconds(run: RunSpec) -> float:
    timed = timer_for(run.cluster.gpu).time_ops(stage_ops(run, 0))
    return sum(sec * op.count for op, sec in zip(timed.ops, timed.seconds) if op.name.startswith("attention"))


def test_a_window_of_one_block_computes_two_blocks() -> None:
    assert flex.window_keys_computed(128) == 256
    # query block j holds q in [128j, 128j + 127]; the keys it needs start at 128j - (w - 1)
    assert flex.window_keys_computed(129) == 256
    assert flex.window_keys_computed(130) == 384  # the band reaches a third block
    assert flex.window_keys_computed(1) == 128
    assert flex.window_keys_computed(4096) == 4096 + 128


def test_flex_runs_the_attention_cores_at_the_blog_s_share_of_flashattention() -> None:
    model = _run().model
    fa = layer_ops(model, _run().strategy, 4096, moe=True)
    fx = layer_ops(model, _run().strategy, 4096, moe=True, flex_attention=True)
    by_name = {op.name: op for op in fa}
    for op in fx:
        if op.name in ("attention.fwd", "attention.bwd"):
            share = flex.FLEX_FORWARD_EFFICIENCY if op.family == "attention_fwd" else flex.FLEX_BACKWARD_EFFICIENCY
            assert op.count == pytest.approx(by_name[op.name].count / share)
            assert op.flops == by_name[op.name].flops  # the same work, done slower
        if op.name.startswith("attention_window."):
            share = flex.FLEX_FORWARD_EFFICIENCY if op.family == "attention_fwd" else flex.FLEX_BACKWARD_EFFICIENCY
            assert op.count == pytest.approx(by_name[op.name].count * 2 / share)  # 256 keys a query for 128


def test_sinks_add_the_rescale_kernels_outside_the_attention() -> None:
    run = _run()
    assert run.model.attention_sinks
    names = {op.name for op in layer_ops(run.model, run.strategy, 4096, moe=True, flex_attention=True)}
    assert {"attention_sink_rescale.fwd", "attention_sink_rescale.bwd"} <= names
    plain = layer_ops(replace(run.model, attention_sinks=False), run.strategy, 4096, moe=True, flex_attention=True)
    assert not any(op.name.startswith("attention_sink") for op in plain)


def test_flex_attention_is_slower_than_flash_and_only_where_the_framework_runs_it() -> None:
    assert _attention_seconds(_run(attention_kernel="flex")) > 1.3 * _attention_seconds(_run(attention_kernel="flash"))
    assert get_framework("automodel").attention_kernel == "flash"  # TE attention unless a recipe picks flex
    assert get_framework("megatron-core").attention_kernel == "flash"


def test_an_unknown_attention_kernel_names_the_field() -> None:
    with pytest.raises(SpecError, match="attention_kernel"):
        _run(attention_kernel="sdpa")


def test_automodel_s_flex_path_copies_q_k_v_and_the_output_to_and_from_the_kernel_s_layout() -> None:
    # nemo_automodel/components/attention/utils.py @01926a5c: transpose(1, 2).contiguous() for q, k, v, output
    run = _run()
    ops = {op.name: op for op in layer_ops(run.model, run.strategy, 4096, moe=True, flex_attention=True,
                                           flex_device="h100-sxm5-80gb")}
    tokens = 2 * 4096
    m = run.model
    assert ops["attention_layout_copy.q.fwd"].bytes == tokens * m.num_attention_heads * m.head_dim * 4
    assert ops["attention_layout_copy.k.fwd"].bytes == tokens * m.num_query_groups * m.head_dim * 4
    assert "attention_layout_copy.out.fwd" in ops
    assert not any(name.startswith("attention_layout_copy") for name in
                   (op.name for op in layer_ops(m, run.strategy, 4096, moe=True)))  # flash: none


def test_flex_on_a_device_runs_forward_and_backward_at_their_own_fa2_shares() -> None:
    run = _run()
    plain = {op.name: op for op in layer_ops(run.model, run.strategy, 4096, moe=True, flex_attention=True)}
    on = {op.name: op for op in layer_ops(run.model, run.strategy, 4096, moe=True, flex_attention=True,
                                          flex_device="h100-sxm5-80gb")}
    assert on["attention.fwd"].count == pytest.approx(plain["attention.fwd"].count
                                                      / flex.fa2_share_of_table("h100-sxm5-80gb", 4096))
    assert on["attention.bwd"].count == pytest.approx(plain["attention.bwd"].count
                                                      / flex.fa2_backward_share_of_table("h100-sxm5-80gb", 4096))
