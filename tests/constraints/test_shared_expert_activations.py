"""Shared experts' activations in an MoE layer's stored bytes (constraints.memory)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from constraints.memory import activation_bytes_per_layer, stage_memory
from costmodel.specs import Strategy, get_model
from costmodel.specs.runspec import run_spec_from_mapping

DSV3 = get_model("deepseek-v3")  # one shared expert of moe_ffn_hidden_size 2048 (DeepSeek-V3 report, Table)
SEQ = 4096


def _shared_bytes(model, strategy: Strategy) -> float:  # type: ignore[no-untyped-def]
    """What an MoE layer keeps beyond the same layer without shared experts."""
    alone = replace(model, num_shared_experts=0)
    return (activation_bytes_per_layer(model, strategy, SEQ, moe=True)
            - activation_bytes_per_layer(alone, strategy, SEQ, moe=True))


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_a_shared_expert_keeps_at_least_its_swiglu_input_and_down_projection_input(tp: int) -> None:
    """Autograd must keep the shared MLP's fc1 output (both SwiGLU halves, 16-bit) for the SwiGLU
    gradient and the down projection's input for its weight gradient: >= 6 bytes x tokens x width / tp.
    Before this term the difference was 0: a DeepSeek-V3 layer was sized as if it had no shared expert."""
    s = Strategy(tp=tp, ep=8, micro_batch_size=1, sequence_parallel=tp > 1)
    width = DSV3.num_shared_experts * DSV3.moe_ffn_hidden_size / tp
    assert _shared_bytes(DSV3, s) >= 6 * SEQ * width


def test_shared_expert_bytes_grow_with_the_number_of_shared_experts() -> None:
    s = Strategy(tp=1, ep=8)
    one, two = _shared_bytes(DSV3, s), _shared_bytes(replace(DSV3, num_shared_experts=2), s)
    assert two == pytest.approx(2 * one)


def test_dense_layers_and_models_without_shared_experts_are_unchanged() -> None:
    s = Strategy(tp=2, ep=8, sequence_parallel=True)
    mixtral = get_model("mixtral-8x7b")
    assert mixtral.num_shared_experts == 0
    assert _shared_bytes(mixtral, s) == 0
    dense = activation_bytes_per_layer(DSV3, s, SEQ, moe=False)
    assert dense == activation_bytes_per_layer(replace(DSV3, num_shared_experts=0), s, SEQ, moe=False)


def test_full_recompute_keeps_only_the_layer_input() -> None:
    assert _shared_bytes(DSV3, Strategy(tp=1, ep=8, recompute="full")) == 0


def test_a_deepseek_v3_stage_without_recompute_counts_its_shared_experts() -> None:
    """The search's Automodel pick for 1024 H100 (tp1 pp4 cp2 ep64, no recompute): the first stage's
    12 MoE layers x 4 in-flight micro-batches keep 6 B x 2048 tokens x 2048 each for the shared MLP."""
    run = run_spec_from_mapping({
        "model": "deepseek-v3", "seq_length": SEQ, "framework": "automodel",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 1024},
        "strategy": {"tp": 1, "pp": 4, "cp": 2, "ep": 64, "dp": 128, "micro_batch_size": 1,
                     "global_batch_size": 8192, "zero_stage": 3, "recompute": "none"}})
    without = replace(run, model=replace(run.model, num_shared_experts=0))
    extra = stage_memory(run, 0).layer_activation_bytes - stage_memory(without, 0).layer_activation_bytes
    assert extra >= 12 * 4 * 6 * (SEQ / 2) * 2048
