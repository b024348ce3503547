"""Context parallelism books its attention kernels at their own chunk shapes: the p2p ring's steps and
all_gather's per-chunk kernels (costmodel.llm.decompose)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from costmodel.analytic import key_length_time_factor
from costmodel.llm import decompose
from costmodel.llm.decompose import layer_ops
from costmodel.predict import timer_for
from costmodel.specs import Strategy, get_gpu, get_model

SEQ = 131072


def _attention(cp: int, cp_comm_type: str = "p2p", recompute: str = "none") -> list:
    strategy = Strategy(tp=4, cp=cp, cp_comm_type=cp_comm_type, recompute=recompute)
    return [op for op in layer_ops(get_model("llama2-7b"), strategy, SEQ)
            if op.family in ("attention_fwd", "attention_bwd")]


def _whole_causal_flops(heads: int = 8, head_dim: int = 128) -> float:
    return 2.0 * SEQ * SEQ * heads * 2 * head_dim * 0.5  # forward, causal, batch 1


@pytest.mark.parametrize("kind", ["p2p", "all_gather"])
@pytest.mark.parametrize("cp", [2, 4, 32])
def test_chunk_kernels_do_one_cp_th_of_the_causal_work(cp, kind, monkeypatch):
    # the key-length factor times the long-key kernels as fewer executions; without it the counts are the work
    monkeypatch.setattr(decompose, "key_length_time_factor", lambda queries, keys, gpu=None: 1.0)
    forward = [op for op in _attention(cp, kind) if op.family == "attention_fwd"]
    assert sum(op.flops * op.count for op in forward) == pytest.approx(_whole_causal_flops() / cp)


def test_ring_steps_run_at_chunk_shapes_a_causal_diagonal_and_non_causal_halves():
    cp = 16  # 4k chunks: below the 16k keys where the key-length factor is held at 1
    chunk = SEQ // (2 * cp)
    forward = {op.name: op for op in _attention(cp) if op.family == "attention_fwd"}
    diagonal, wide, long = forward["attention.fwd"], forward["attention_ring.fwd"], forward["attention_ring_keys.fwd"]
    assert diagonal.shape[1] == 2 * chunk and diagonal.shape[5] == 1 and diagonal.count == 1
    # steps i <= r: 2c queries over c keys, as one kernel of twice the batch; later steps c over 2c keys
    assert wide.shape[:2] == (2, chunk) and wide.shape[5] == 0 and wide.count == (cp - 1) / 2
    assert long.shape[:2] == (1, chunk) and long.shape[5] == 0
    assert long.count == pytest.approx((cp - 1) * key_length_time_factor(chunk, 2 * chunk))
    assert long.count < cp - 1


def test_all_gather_runs_per_chunk_kernels_of_the_local_queries():
    cp = 16
    chunk = SEQ // (2 * cp)
    forward = {op.name: op for op in _attention(cp, "all_gather") if op.family == "attention_fwd"}
    assert set(forward) == {"attention.fwd", "attention_gathered.fwd"}
    assert {op.shape[1] for op in forward.values()} == {chunk}  # the blocks of c queries, not of the sequence
    assert forward["attention.fwd"].shape[5] == 1 and forward["attention_gathered.fwd"].shape[5] == 0
    # 2 causal and 2cp - 1 full c-squares per rank, the long-key kernels at their amortised per-block cost
    assert 1.0 < forward["attention.fwd"].count < 2.0
    assert 0.8 * (2 * cp - 1) < forward["attention_gathered.fwd"].count < 2 * cp - 1


def test_all_gather_and_p2p_compute_alike_at_one_shape():
    """The two variants compute the same c-squares; the ring's diagonal is one 2c kernel, so they differ
    only by kernel shape, never by a whole-sequence kernel on one side."""
    timer = timer_for(get_gpu("gb200"))
    times = {kind: timer.time_ops(_attention(8, kind)).total() for kind in ("p2p", "all_gather")}
    assert times["all_gather"] == pytest.approx(times["p2p"], rel=0.15)


def test_ulysses_keeps_the_whole_sequence_kernel():
    ops = _attention(4, "a2a")
    assert {op.shape[1] for op in ops} == {SEQ}
    assert all(op.count == pytest.approx(0.25) for op in ops)


def test_without_cp_the_kernel_is_the_whole_sequence():
    assert {op.shape[1] for op in _attention(1)} == {SEQ}


def test_selective_recompute_re_runs_every_ring_step():
    recomputed = [op for op in _attention(4, recompute="selective") if op.phase == "recompute"]
    assert sorted(op.name for op in recomputed) == ["attention.recompute", "attention_ring.recompute",
                                                    "attention_ring_keys.recompute"]
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
