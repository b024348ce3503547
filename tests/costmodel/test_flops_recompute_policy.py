"""Recomputation FLOPs (the HFU numerator) follow the framework's policy, as the decomposition runs it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from costmodel.llm.decompose import stage_ops
from costmodel.llm.flops import forward_flops_per_token, hardware_flops_per_step, recompute_flops_per_step
from costmodel.llm.recompute import recompute_policy
from costmodel.specs import ClusterSpec, RunSpec, Strategy, get_gpu, get_model
from costmodel.specs.framework import get_framework

CASES = [("llama3.1-8b", 2, 2), ("llama2-7b", 1, 1), ("qwen2.5-7b", 4, 1), ("gpt3-175b", 8, 4)]  # model, tp, pp


def _run(name: str, tp: int, pp: int, saved: str) -> RunSpec:
    dp, mbs, seq = 8, 2, 4096
    strategy = Strategy(tp=tp, pp=pp, dp=dp, micro_batch_size=mbs, global_batch_size=mbs * dp * 4,
                        sequence_parallel=tp > 1, recompute="selective")
    cluster = ClusterSpec(gpu=get_gpu("h100-sxm5-80gb"), num_gpus=tp * pp * dp, gpus_per_node=8)
    framework = replace(get_framework("torchtitan"), selective_recompute=saved)
    return RunSpec(model=get_model(name), cluster=cluster, strategy=strategy, seq_length=seq, framework=framework)


@pytest.mark.parametrize("saved", ["layer", "op", "megatron"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_closed_form_recompute_matches_the_decomposition(case: tuple, saved: str) -> None:
    run = _run(*case, saved)
    s, seq = run.strategy, run.seq_length
    decomposed = sum(op.total_flops for st in range(s.pp) for op in stage_ops(run, st)) * s.tp * s.cp
    closed = 3 * forward_flops_per_token(run.model, seq, causal=True) * s.micro_batch_size * seq
    closed += recompute_flops_per_step(run.model, s, seq, s.micro_batch_size, policy=recompute_policy(run))
    assert decomposed == pytest.approx(closed, rel=0.005)


def test_torchtitan_policies_execute_more_than_megatron_selective_and_less_than_full() -> None:
    run = _run("llama3.1-8b", 1, 1, "op")
    m, s, seq, b = run.model, run.strategy, run.seq_length, run.strategy.global_batch_size
    hfu = {p: hardware_flops_per_step(m, s, seq, b, policy=p) for p in ("none", "megatron", "op", "layer", "full")}
    assert hfu["none"] < hfu["megatron"] < hfu["op"] < hfu["full"]
    assert hfu["megatron"] < hfu["layer"] < hfu["full"]
    # without a policy, selective means Megatron's (the old behaviour)
    assert hardware_flops_per_step(m, s, seq, b) == hfu["megatron"]
