"""Attention dropout and Megatron's fused causal softmax, in the operators a layer runs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from costmodel.analytic import memory_kind, memory_op_seconds
from costmodel.llm.decompose import FUSED_ATTENTION_DROPOUT_COST, layer_ops
from costmodel.specs import Strategy, get_gpu, get_model


def _strategy(flash: bool, precision: str = "fp16", mbs: int = 1) -> Strategy:
    return Strategy(tp=8, pp=1, dp=4, micro_batch_size=mbs, global_batch_size=32, precision=precision,
                    flash_attention=flash, recompute="none")


def _ops(model_name: str = "megatron-22b", flash: bool = False, dropout: bool = True, seq: int = 2048,
         precision: str = "fp16", mbs: int = 1) -> dict[str, object]:
    model = replace(get_model(model_name), dropout=dropout)
    return {op.name: op for op in layer_ops(model, _strategy(flash, precision, mbs), seq)}


def test_unfused_attention_dropout_streams_the_probabilities() -> None:
    with_dropout, without = _ops(dropout=True), _ops(dropout=False)
    fwd, bwd = with_dropout["attention_probs_dropout.fwd"], with_dropout["attention_probs_dropout.bwd"]
    model = get_model("megatron-22b")
    elements = 2048 * 2048 * model.num_attention_heads // 8  # one sequence, the GPU's heads at tp 8
    assert fwd.shape == (elements,)
    # reads the probabilities, writes the output and a one-byte mask; backward alike
    assert fwd.bytes == bwd.bytes == elements * (2 + 2 + 1)
    assert not any("probs_dropout" in name for name in without)


@pytest.mark.parametrize("seq, precision, fused", [(2048, "fp16", True), (4096, "bf16", True),
                                                   (8192, "fp16", False), (2046, "fp16", False)])
def test_fused_causal_softmax_runs_within_its_kernel_limits(seq: int, precision: str, fused: bool) -> None:
    ops = _ops(seq=seq, precision=precision)
    softmax = [op for name, op in ops.items() if "softmax" in name and name.endswith(".fwd")]
    assert len(softmax) == 1
    assert memory_kind(softmax[0]) == ("masked_softmax" if fused else "softmax")


def test_fused_causal_softmax_is_faster_than_torch_softmax_on_a100() -> None:
    op = _ops(mbs=8)["attention_masked_softmax.fwd"]
    gpu = get_gpu("a100-sxm4-80gb")
    torch_softmax = replace(op, name="attention.softmax.fwd")
    fused_s, torch_s = memory_op_seconds(op, gpu), memory_op_seconds(torch_softmax, gpu)
    # ScaledUpperTriangMaskedSoftmax streams at about twice torch.softmax's bandwidth (at 8 x 2048^2 x 12
    # scores its fixed 27 us is small beside the transfer)
    assert 1.5 < torch_s / fused_s < 2.5


def test_fused_attention_pays_the_measured_dropout_share() -> None:
    with_dropout, without = _ops(flash=True, dropout=True), _ops(flash=True, dropout=False)
    for name in ("attention.fwd", "attention.bwd"):
        assert with_dropout[name].count / without[name].count == pytest.approx(FUSED_ATTENTION_DROPOUT_COST)
        assert with_dropout[name].shape == without[name].shape
    assert not any("probs_dropout" in name for name in with_dropout)
