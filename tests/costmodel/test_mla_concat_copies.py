"""MLA's q/k concatenations and v copy where the framework has no fused MLA RoPE kernel
(costmodel/llm/decompose.py ``_mla_concat_copies``; Automodel deepseek_v3/layers.py MLA.forward @01926a5c)."""

from __future__ import annotations

from costmodel.llm.decompose import layer_ops
from costmodel.specs.runspec import run_spec_from_mapping


def _ops(rope_fused: bool) -> dict[str, object]:
    run = run_spec_from_mapping({"model": "deepseek-v3", "seq_length": 4096,
                                 "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 64},
                                 "strategy": {"ep": 64, "dp": 64, "micro_batch_size": 1, "global_batch_size": 64,
                                              "zero_stage": 3}})
    return {op.name: op for op in layer_ops(run.model, run.strategy, 4096, moe=True, rope_fused=rope_fused)}


def test_eager_mla_rope_copies_q_k_and_v_once_each_per_head() -> None:
    ops = _ops(rope_fused=False)
    fwd = ops["mla_concat.fwd"]
    heads, tokens = 128, 4096
    # q and k: 192 wide (128 nope + 64 rope), v: 128; each read and written once, bf16
    assert fwd.bytes == tokens * heads * (192 + 192 + 128) * 2 * 2
    # backward: dq (192) and dk_nope|dv (128 + 128) concatenated, the expanded dk_pe (64) summed over heads
    assert ops["mla_concat.bwd"].bytes == tokens * heads * ((192 + 256 + 64) + (192 + 256)) * 2


def test_a_fused_mla_rope_kernel_writes_q_and_k_itself() -> None:
    assert "mla_concat.fwd" not in _ops(rope_fused=True)
