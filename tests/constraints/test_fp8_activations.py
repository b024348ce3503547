"""FP8 activations as Transformer Engine keeps them: each GEMM saves the FP8 cast of its input.

TE v1.8 module/linear.py saves ``inputmat_t`` (FP8) instead of the 16-bit input, layernorm_linear.py
an FP8 ``ln_out``; the norm inputs, the attention core's q, k, v and output and the activation
function's input stay 16-bit (constraints/memory.py ``fp8_linear_input_bytes``).
"""

from __future__ import annotations

import pytest

from constraints.memory import activation_bytes_per_layer, fp8_linear_input_bytes, stage_memory
from costmodel.specs.framework import resolve_framework
from costmodel.specs.runspec import run_spec_from_mapping

# GPT-3 20B on 64 H100 as NeMo 24.07 ran it (studies/validation/public.yaml nemo2407-h100-fp8-gpt3-20b).
GPT3_20B = {"model": {"name": "gpt3-20b", "num_layers": 44, "hidden_size": 6144, "num_attention_heads": 48,
                      "num_query_groups": 48, "ffn_hidden_size": 24576, "vocab_size": 50257, "seq_length": 2048,
                      "activation": "gelu", "normalization": "layernorm", "position_embedding": "learned"},
            "seq_length": 2048, "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 64},
            "strategy": {"tp": 2, "pp": 1, "dp": 32, "micro_batch_size": 2, "global_batch_size": 256,
                         "sequence_parallel": True, "recompute": "none", "precision": "fp8"}}


def _run(framework: object = "megatron-core", **strategy: object):  # type: ignore[no-untyped-def]
    return run_spec_from_mapping({**GPT3_20B, "framework": framework,
                                  "strategy": {**GPT3_20B["strategy"], **strategy}})


@pytest.mark.parametrize(("recipe", "expected"), [
    ("delayed", 1.0), ("tensorwise", 1.0),
    ("mxfp8", 1 + 1 / 32),  # one E8M0 scale byte per 32 elements
    ("blockwise", 1 + 4 / 128),  # one fp32 scale per 1 x 128 block
])
def test_te_recipes_keep_one_fp8_byte_per_input_element_plus_scales(recipe: str, expected: float) -> None:
    framework = resolve_framework({"name": "megatron-core", "fp8_recipe": recipe})
    assert fp8_linear_input_bytes(framework, "fp8") == pytest.approx(expected)


def test_bf16_runs_and_frameworks_without_the_cache_keep_16_bit_inputs() -> None:
    assert fp8_linear_input_bytes(resolve_framework("megatron-core"), "bf16") == 2.0
    assert fp8_linear_input_bytes(resolve_framework("torchtitan"), "fp8") == 2.0  # torchao keeps the bf16 input


def test_gelu_layer_saves_the_fp8_bytes_of_its_four_gemm_inputs() -> None:
    """Per layer and micro-batch, with SP over tp = 2: QKV and fc1 inputs (h / t each) and the fc2 input
    (4h / t) drop from 2 bytes to 1. The projection's 16-bit input is flash attention's output O (one
    tensor, counted once); in FP8 the projection keeps its FP8 cast beside O, 1 byte more: 5 s b h / t fewer."""
    run = _run()
    s, b, h, t = 2048, 2, 6144, 2
    bf16 = activation_bytes_per_layer(run.model, run.strategy, 2048)
    fp8 = activation_bytes_per_layer(run.model, run.strategy, 2048, linear_input_bytes=1.0)
    assert bf16 - fp8 == pytest.approx(5 * s * b * h / t)


def test_fp8_run_under_megatron_core_holds_less_activation_memory_than_torchtitan() -> None:
    te = stage_memory(_run("megatron-core"), 0).activations_bytes
    torchao = stage_memory(_run({"name": "megatron-core", "fp8_activation_cache": False}), 0).activations_bytes
    assert te < 0.9 * torchao  # FP8 GEMM inputs: ~15% of this stage's activations


def test_full_recompute_keeps_the_16_bit_layer_input_whatever_the_precision() -> None:
    run = _run(recompute="full")
    bf16 = activation_bytes_per_layer(run.model, run.strategy, 2048)
    assert activation_bytes_per_layer(run.model, run.strategy, 2048, linear_input_bytes=1.0) == bf16


def test_moe_router_input_stays_16_bit_and_expert_inputs_fp8() -> None:
    moe = run_spec_from_mapping({"model": "mixtral-8x7b", "seq_length": 4096,
                                 "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 8},
                                 "strategy": {"tp": 1, "pp": 1, "dp": 8, "ep": 8, "micro_batch_size": 1,
                                              "global_batch_size": 64, "precision": "fp8"}})
    m, st = moe.model, moe.strategy
    dense_saving = (activation_bytes_per_layer(m, st, 4096, moe=False)
                    - activation_bytes_per_layer(m, st, 4096, moe=False, linear_input_bytes=1.0))
    moe_saving = (activation_bytes_per_layer(m, st, 4096, moe=True)
                  - activation_bytes_per_layer(m, st, 4096, moe=True, linear_input_bytes=1.0))
    s, h = 4096, m.hidden_size
    # attention is common: the QKV input saves a byte, the projection's FP8 cast costs one beside flash's
    # 16-bit output O (which is the projection's input in a 16-bit run); the dense MLP adds fc1 (h) and fc2 (ffn)
    attention = s * h - s * m.q_size
    assert dense_saving == pytest.approx(attention + s * h + s * m.ffn_hidden_size)
    assert moe_saving > attention + s * h  # expert inputs (top-k copies) are FP8, the router's input is not
