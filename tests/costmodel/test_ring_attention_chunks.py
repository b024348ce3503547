"""Context parallelism's p2p ring books its per-step attention kernels at their own chunk shapes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from costmodel.llm.decompose import layer_ops
from costmodel.specs import Strategy, get_model

SEQ = 131072


def _attention(cp: int, cp_comm_type: str = "p2p", recompute: str = "none") -> list:
    strategy = Strategy(tp=4, cp=cp, cp_comm_type=cp_comm_type, recompute=recompute)
    return [op for op in layer_ops(get_model("llama2-7b"), strategy, SEQ)
            if op.family in ("attention_fwd", "attention_bwd")]


def _whole_causal_flops(heads: int = 8, head_dim: int = 128) -> float:
    return 2.0 * SEQ * SEQ * heads * 2 * head_dim * 0.5  # forward, causal, batch 1


@pytest.mark.parametrize("cp", [2, 4, 32])
def test_ring_steps_do_one_cp_th_of_the_causal_work(cp):
    forward = [op for op in _attention(cp) if op.family == "attention_fwd"]
    assert sum(op.flops * op.count for op in forward) == pytest.approx(_whole_causal_flops() / cp)


def test_ring_steps_run_at_chunk_shapes_a_causal_diagonal_and_non_causal_halves():
    cp = 4
    forward = {op.name: op for op in _attention(cp) if op.family == "attention_fwd"}
    diagonal, off = forward["attention.fwd"], forward["attention.fwd_ring"]
    assert diagonal.shape[1] == SEQ // cp and diagonal.shape[5] == 1 and diagonal.count == 1
    assert off.shape[1] == SEQ // (2 * cp) and off.shape[5] == 0 and off.count == 2 * (cp - 1)


@pytest.mark.parametrize("kind", ["all_gather", "a2a"])
def test_other_cp_variants_keep_the_whole_sequence_kernel(kind):
    ops = _attention(4, kind)
    assert {op.shape[1] for op in ops} == {SEQ}
    assert all(op.count == pytest.approx(0.25) for op in ops)


def test_without_cp_the_kernel_is_the_whole_sequence():
    assert {op.shape[1] for op in _attention(1)} == {SEQ}


def test_selective_recompute_re_runs_every_ring_step():
    recomputed = [op for op in _attention(4, recompute="selective") if op.phase == "recompute"]
    assert sorted(op.name for op in recomputed) == ["attention.recompute", "attention.recompute_ring"]
    forward = [op for op in _attention(4) if op.family == "attention_fwd"]
    assert sum(op.flops * op.count for op in recomputed) == pytest.approx(sum(op.flops * op.count for op in forward))


def test_cp_comm_type_is_part_of_the_stage_key():
    from costmodel.llm.compute import stage_ops_key
    from costmodel.specs import ClusterSpec, RunSpec, get_gpu

    strategy = Strategy(tp=4, cp=4, dp=1, micro_batch_size=1, global_batch_size=8)
    run = RunSpec(model=get_model("llama2-7b"), cluster=ClusterSpec(gpu=get_gpu("h100-sxm5-80gb"), num_gpus=16,
                                                                gpus_per_node=8),
                  strategy=strategy, seq_length=SEQ)
    gathered = replace(run, strategy=replace(strategy, cp_comm_type="all_gather"))
    assert stage_ops_key(gathered, 0) != stage_ops_key(run, 0)
