"""Data-parallel buckets per framework (``Framework.dp_bucket_scheme``): Megatron-Core's parameter all-gather
one bucket ahead, unbucketed later pipeline ranks, the remainder bucket first; DeepSpeed's and apex's rules."""

from __future__ import annotations

from dataclasses import replace

import pytest

from costmodel.llm import dp_buckets
from costmodel.llm.compute import pipeline_compute
from costmodel.llm.dp_buckets import bucket_params, bucket_sizes, megatron_bucket_params, param_gather_exposed_s
from costmodel.llm.messages import param_gather_bytes
from costmodel.llm.step import _buckets, _collective, _dp_tail, _param_gather_head, _shard_groups, _sync, predict_step
from costmodel.predict import timer_for
from costmodel.specs import ClusterSpec, RunSpec, Strategy, get_gpu, get_model
from costmodel.specs.framework import get_framework


def _run(model: str = "llama3.1-70b", tp: int = 8, pp: int = 1, dp: int = 48, cp: int = 1, mbs: int = 1,
         gbs: int = 192, seq: int = 4096, precision: str = "bf16", framework: str = "megatron-core",
         zero_stage: int = 1) -> RunSpec:
    s = Strategy(tp=tp, pp=pp, dp=dp, cp=cp, micro_batch_size=mbs, global_batch_size=gbs, zero_stage=zero_stage,
                 sequence_parallel=tp > 1, tp_comm_overlap=tp > 1, overlap_grad_reduce=True,
                 overlap_param_gather=True, recompute="selective", precision=precision)
    g = get_gpu("h100-sxm5-80gb")
    cluster = ClusterSpec(gpu=g, num_gpus=tp * pp * dp * cp, gpus_per_node=8)
    return RunSpec(model=get_model(model), cluster=cluster, strategy=s, seq_length=seq,
                   framework=get_framework(framework))


def test_bucket_size_follows_megatron_default():
    # max(40M, 1M x dp) (distributed_data_parallel.py)
    assert megatron_bucket_params(8) == 40_000_000
    assert megatron_bucket_params(48) == 48_000_000
    assert bucket_params("megatron-core", 48, 4, 1e9) == 48e6
    assert bucket_params("deepspeed", 48, 2, 1e9) == 5e8
    assert bucket_params("apex", 48, 4, 1e9) == pytest.approx(100 * 2**20 / 4)  # 100 MiB of fp32
    assert bucket_params("per-layer", 48, 4, 3e8) == 3e8


def test_buckets_fill_in_reverse_so_the_first_one_is_the_remainder():
    # param_and_grad_buffer.py @core_r0.8.0: full buckets from the last layer back; the first layers remain
    assert bucket_sizes(100e6, 48e6) == [pytest.approx(4e6), 48e6, 48e6]
    assert bucket_sizes(96e6, 48e6) == [48e6, 48e6]
    assert bucket_sizes(1.0, 48e6) == [1.0]
    # a shared embedding alone in a bucket before the remainder
    assert bucket_sizes(100e6, 48e6, own_bucket=10e6) == [10e6, pytest.approx(42e6), 48e6]


def test_gather_hidden_when_each_bucket_computes_longer_than_the_next_gathers():
    hidden = param_gather_exposed_s([0.002] * 10, [0.01] * 10, gather_s=0.02, is_bucketed=True)
    # only the first bucket and the NCCL slowdown of the nine overlapped bucket forwards show
    assert 0.002 <= hidden < 0.002 + 9 * 0.002
    stalled = param_gather_exposed_s([0.005] * 10, [0.001] * 10, gather_s=0.05, is_bucketed=True)
    # gathers longer than the buckets' forward pace the forward: the gather time is nearly all exposed
    assert stalled >= 0.005 + 9 * (0.005 - 0.001)
    # a small first bucket exposes less than a full one in front
    assert param_gather_exposed_s([0.001, 0.005], [0.001, 0.005], 0.006, True) \
        < param_gather_exposed_s([0.005, 0.001], [0.005, 0.001], 0.006, True)


def test_unbucketed_stage_hides_its_gather_behind_the_upstream_forwards_only():
    assert param_gather_exposed_s([0.3], [0.1], 0.3, is_bucketed=False, upstream_forward_s=0.1) == pytest.approx(0.2)
    assert param_gather_exposed_s([0.3], [0.1], 0.3, is_bucketed=False, upstream_forward_s=0.5) == 0.0
    assert dp_buckets.bucketed("megatron-core", 0) and not dp_buckets.bucketed("megatron-core", 1)
    assert not dp_buckets.bucketed("apex", 1)  # Megatron-Core's schedule: grad_sync_func on rank 0 only
    assert dp_buckets.bucketed("deepspeed", 1) and dp_buckets.bucketed("per-layer", 3)


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


def test_first_gathered_bucket_is_the_remainder_not_a_full_bucket():
    run = _run()
    timer = timer_for(run.cluster.gpu)
    stage = pipeline_compute(run, timer)[0]
    (params, g, _), = _shard_groups(run, stage, 0)
    sizes = _buckets(run, stage, params, g)
    assert len(sizes) > 2 and sizes[0] < sizes[1] == 48e6
    assert sum(sizes) == pytest.approx(params)
    wire, gpu = param_gather_bytes(run), run.cluster.gpu
    gathers = [_collective(timer, "all_gather", b * wire, g, gpu) for b in sizes]
    forwards = [stage.forward_s * b / params for b in sizes]
    whole = _collective(timer, "all_gather", params * wire, g, gpu)
    head = _param_gather_head(run, timer, stage, 0, 0.0)
    assert head == pytest.approx(param_gather_exposed_s(gathers, forwards, whole, True))
    # a full bucket in front (the previous min(params, bucket)) exposes more
    full_first = param_gather_exposed_s([gathers[1]] + gathers[1:], forwards, whole, True)
    assert head < full_first


def test_tied_embedding_gets_its_own_first_bucket_under_the_distributed_optimizer_with_pp():
    run = _run(model="gpt3-1.3b", tp=1, pp=2, dp=8, gbs=64, seq=2048)
    assert run.model.tie_embeddings
    timer = timer_for(run.cluster.gpu)
    stage = pipeline_compute(run, timer)[0]
    (params, g, _), = _shard_groups(run, stage, 0)
    embedding = run.model.vocab_size * run.model.hidden_size
    assert _buckets(run, stage, params, g)[0] == embedding
    zero0 = _run(model="gpt3-1.3b", tp=1, pp=2, dp=8, gbs=64, seq=2048, zero_stage=0)
    assert _buckets(zero0, stage, params, g)[0] != embedding  # all-reduce DDP: no own bucket


def test_deepspeed_gathers_parameters_in_the_optimizer_step_not_the_next_forward():
    run = _run(framework="deepspeed")
    timer = timer_for(run.cluster.gpu)
    stage = pipeline_compute(run, timer)[0]
    assert run.strategy.overlap_param_gather
    assert _param_gather_head(run, timer, stage, 0, 0.0) == 0.0
    (params, g, _), = _shard_groups(run, stage, 0)
    gather = _collective(timer, "all_gather", params * param_gather_bytes(run), g, run.cluster.gpu)
    assert _dp_tail(run, timer, stage, 0) >= gather  # the whole gather sits in the step's tail
    off = run.with_strategy(replace(run.strategy, overlap_param_gather=False))
    assert _dp_tail(off, timer, stage, 0) == _dp_tail(run, timer, stage, 0)  # the switch does nothing there
    mc = _run()
    mc_off = mc.with_strategy(replace(mc.strategy, overlap_param_gather=False))
    assert _dp_tail(mc, timer, stage, 0) < _dp_tail(mc_off, timer, stage, 0)


def test_deepspeed_buckets_every_stage_in_5e8_elements_and_reduces_after_the_pipeline():
    run = _run(framework="deepspeed", pp=2, gbs=384)
    timer = timer_for(run.cluster.gpu)
    stage = pipeline_compute(run, timer)[0]
    (params, g, rep), = _shard_groups(run, stage, 0)
    sizes = _buckets(run, stage, params, g)
    assert sizes[1:] == [5e8] * (len(sizes) - 1) and 0 < sizes[0] <= 5e8
    assert not dp_buckets.overlaps_grad_reduce("deepspeed", 1, 2)
    assert dp_buckets.overlaps_grad_reduce("deepspeed", 1, 1) and not dp_buckets.overlaps_grad_reduce("deepspeed", 0, 1)
    full = _sync(timer, "reduce_scatter", params * 2, g, rep, run.cluster.gpu) \
        + _collective(timer, "all_gather", params * param_gather_bytes(run), g, run.cluster.gpu)
    assert _dp_tail(run, timer, stage, 0) == pytest.approx(full)


def test_param_gather_overlap_offered_only_where_the_framework_runs_it():
    assert get_framework("megatron-core").supports_param_gather_overlap
    assert get_framework("nemo1").supports_param_gather_overlap  # apex overlap_param_sync
    for name in ("deepspeed", "torchtitan", "maxtext", "megatron-lm-2021"):
        assert not get_framework(name).supports_param_gather_overlap, name
