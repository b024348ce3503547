"""NeMo Automodel's per-expert down bias runs in fp32: DeepEP delivers the permuted probs in fp32, so
``t + b * p``, its cat and the closing cast move fp32 tensors (costmodel/llm/decompose.py
``_eager_expert_ops``; nemo_automodel/components/moe/layers.py ``_apply_bias`` @01926a5c)."""

from __future__ import annotations

from costmodel.specs.runspec import run_spec_from_mapping


def _down_bias(routing: str) -> dict[str, float]:
    from costmodel.llm.decompose import stage_ops

    run = run_spec_from_mapping({"model": "gpt-oss-20b", "seq_length": 4096, "framework": "automodel",
                                 "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 8},
                                 "strategy": {"tp": 1, "pp": 1, "ep": 8, "dp": 8, "micro_batch_size": 1,
                                              "global_batch_size": 64, "moe_routing": routing}})
    return {op.phase: op.bytes / op.shape[0] for op in stage_ops(run, 0) if op.name.startswith("moe.experts.down_bias")}


def test_down_bias_moves_fp32_bytes_per_element() -> None:
    # forward: b*p write 4; t + bp read 2 + 4, write 4; cat 4 + 4; cast 4 + 2
    assert _down_bias("round_robin")["fwd"] == 4 + (2 + 4 + 4) + (4 + 4) + (4 + 2)
    # backward with constant probs (FakeBalancedGate): cast grad 2 + 4, add grad to bf16 4 + 2, (g*p).sum 4 + 4 + 4
    assert _down_bias("round_robin")["bwd"] == (2 + 4) + (4 + 2) + (4 + 4 + 4)


def test_a_trained_router_adds_the_probs_gradient() -> None:
    assert _down_bias("uniform")["bwd"] == _down_bias("round_robin")["bwd"] + (4 + 4 + 4)
    assert _down_bias("uniform")["fwd"] == _down_bias("round_robin")["fwd"]


def test_stage_memo_tells_the_routings_apart() -> None:
    # the two routings give different expert ops, so the per-stage memo must not share them
    from costmodel.llm.compute import stage_ops_key

    def run(routing: str) -> object:
        return run_spec_from_mapping({"model": "gpt-oss-20b", "seq_length": 4096, "framework": "automodel",
                                      "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 8},
                                      "strategy": {"ep": 8, "dp": 8, "micro_batch_size": 1, "global_batch_size": 64,
                                                   "moe_routing": routing}})

    assert stage_ops_key(run("uniform"), 0) != stage_ops_key(run("round_robin"), 0)
