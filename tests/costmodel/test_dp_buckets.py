"""Megatron-Core DDP buckets: the parameter all-gather one bucket ahead, unbucketed later pipeline ranks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from costmodel.llm import dp_buckets
from costmodel.llm.compute import pipeline_compute
from costmodel.llm.dp_buckets import bucket_count, bucket_params, param_gather_exposed_s
from costmodel.llm.messages import param_gather_bytes
from costmodel.llm.step import _dp_tail, _param_gather_head, _shard_groups, _sync, predict_step
from costmodel.predict import timer_for
from costmodel.specs import ClusterSpec, RunSpec, Strategy, get_gpu, get_model
from costmodel.specs.framework import get_framework


def _run(model: str = "llama3.1-70b", tp: int = 8, pp: int = 1, dp: int = 48, cp: int = 1, mbs: int = 1,
         gbs: int = 192, seq: int = 4096, precision: str = "bf16", framework: str = "megatron-core") -> RunSpec:
    s = Strategy(tp=tp, pp=pp, dp=dp, cp=cp, micro_batch_size=mbs, global_batch_size=gbs, zero_stage=1,
                 sequence_parallel=tp > 1, tp_comm_overlap=tp > 1, overlap_grad_reduce=True,
                 overlap_param_gather=True, recompute="selective", precision=precision)
    g = get_gpu("h100-sxm5-80gb")
    cluster = ClusterSpec(gpu=g, num_gpus=tp * pp * dp * cp, gpus_per_node=8)
    return RunSpec(model=get_model(model), cluster=cluster, strategy=s, seq_length=seq,
                   framework=get_framework(framework))


def test_bucket_size_follows_megatron_default():
    # max(40M, 1M x dp) (distributed_data_parallel.py)
    assert bucket_params(8) == 40_000_000
    assert bucket_params(48) == 48_000_000
    assert bucket_count(100e6, 48) == 3
    assert bucket_count(1.0, 48) == 1


def test_gather_hidden_when_each_bucket_computes_longer_than_the_next_gathers():
    hidden = param_gather_exposed_s(10, forward_s=0.1, bucket_gather_s=0.002, gather_s=0.02, is_bucketed=True)
    # only the first bucket and the NCCL slowdown of the nine overlapped bucket forwards show
    assert 0.002 <= hidden < 0.002 + 9 * 0.002
    stalled = param_gather_exposed_s(10, forward_s=0.01, bucket_gather_s=0.005, gather_s=0.05, is_bucketed=True)
    # gathers longer than the buckets' forward pace the forward: the gather time is nearly all exposed
    assert stalled >= 0.005 + 9 * (0.005 - 0.001)


def test_unbucketed_stage_hides_its_gather_behind_the_upstream_forwards_only():
    assert param_gather_exposed_s(1, 0.1, 0.3, 0.3, is_bucketed=False, upstream_forward_s=0.1) == pytest.approx(0.2)
    assert param_gather_exposed_s(1, 0.1, 0.3, 0.3, is_bucketed=False, upstream_forward_s=0.5) == 0.0
    assert dp_buckets.bucketed(0) and not dp_buckets.bucketed(1)


def test_later_pipeline_rank_reduces_its_gradients_in_one_piece_after_its_backward():
    run = _run(pp=2, gbs=384)
    timer = timer_for(run.cluster.gpu)
    stage = pipeline_compute(run, timer)[1]
    (params, g, rep), = _shard_groups(run, stage, 1)
    full = _sync(timer, "reduce_scatter", params * 4, g, rep, run.cluster.gpu)
    assert _dp_tail(run, timer, stage, 1) == pytest.approx(full)
    assert _dp_tail(run, timer, stage, 0) < full


def test_param_gather_head_grows_with_the_parameters_a_gpu_holds():
    """The leniency that let context parallelism beat tensor parallelism: the overlapped all-gather was
    priced as one bucket whatever the shard, so tp 2 x cp 4 (4x the parameters per GPU of tp 8, on the
    same NIC-bound data-parallel ring) paid nothing for its 4x gather traffic."""
    timer = timer_for(get_gpu("h100-sxm5-80gb"))
    tp8, tp2cp4 = _run(tp=8), _run(tp=2, cp=4, dp=48)
    heads = []
    for run in (tp8, tp2cp4):
        stage = pipeline_compute(run, timer)[0]
        heads.append(_param_gather_head(run, timer, stage, 0, 0.0))
    assert heads[1] > 3 * heads[0] > 0
    for run, head in zip((tp8, tp2cp4), heads):  # the step books it
        assert predict_step(run, timer).breakdown["dp_comm_exposed_s"] >= head


def test_more_forward_per_bucket_hides_the_gather():
    timer = timer_for(get_gpu("h100-sxm5-80gb"))
    one, four = _run(mbs=1), _run(mbs=4)
    heads = [_param_gather_head(r, timer, pipeline_compute(r, timer)[0], 0, 0.0) for r in (one, four)]
    assert heads[1] < heads[0]


def test_fp8_param_gather_halves_the_gathered_bytes():
    assert param_gather_bytes(_run(precision="fp8", framework="nemo")) == 1
    assert param_gather_bytes(_run(precision="fp8", framework="megatron-core")) == 2
    assert param_gather_bytes(_run(framework="nemo")) == 2


def test_without_overlap_the_whole_gather_follows_the_step():
    run = _run()
    timer = timer_for(run.cluster.gpu)
    stage = pipeline_compute(run, timer)[0]
    off = run.with_strategy(replace(run.strategy, overlap_param_gather=False))
    assert _param_gather_head(off, timer, stage, 0, 0.0) == 0.0
    assert _dp_tail(off, timer, stage, 0) > _dp_tail(run, timer, stage, 0)
