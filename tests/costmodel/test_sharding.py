"""ZeRO-3 / FSDP and ZeRO-2 sharding timed as issued: prefetch window, exposed ends, re-gathers, floor."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import costmodel.llm.step as step
from costmodel.llm.sharding import (
    DEEPSPEED_ZERO3,
    FSDP2,
    MEGATRON_FSDP,
    backward_gathers,
    prefetch_layers,
    sharded_pass_seconds,
    zero3_microbatch_seconds,
)
from costmodel.specs import ClusterSpec, RunSpec, Strategy, get_gpu, get_model
from costmodel.llm.step import predict_step
from costmodel.timing import OperatorTimer


def _run(dp: int = 16, pp: int = 1, gbs: int | None = None, model: str = "llama3.1-8b", ep: int = 1,
         recompute: str = "selective", zero: int = 3, net_scale: float = 1.0, flops_scale: float = 1.0,
         overlap_grad_reduce: bool = True) -> RunSpec:
    g = get_gpu("h100-sxm5-80gb")
    g = replace(g, inter_node_bandwidth_bytes_per_s=g.inter_node_bandwidth_bytes_per_s * net_scale,
                intra_node_bandwidth_bytes_per_s=g.intra_node_bandwidth_bytes_per_s * net_scale,
                peak_flops=tuple((d, v * flops_scale) for d, v in g.peak_flops),
                hbm_bandwidth_bytes_per_s=g.hbm_bandwidth_bytes_per_s * flops_scale)
    strategy = Strategy(tp=1, pp=pp, dp=dp, ep=ep, micro_batch_size=1, global_batch_size=gbs or dp,
                        recompute=recompute, zero_stage=zero, overlap_grad_reduce=overlap_grad_reduce)
    cluster = ClusterSpec(gpu=g, num_gpus=pp * dp, gpus_per_node=g.gpus_per_node)
    return RunSpec(model=get_model(model), cluster=cluster, strategy=strategy, seq_length=4096)


def _predict(run: RunSpec) -> step.StepPrediction:
    return predict_step(run, OperatorTimer(run.cluster.gpu, None))


def test_zero3_time_grows_with_group_size_at_fixed_bytes() -> None:
    # same model, one micro-batch per GPU: equal compute and gathered bytes, only the group grows
    small, large = _predict(_run(dp=16)), _predict(_run(dp=64))
    assert small.breakdown["compute_s"] == pytest.approx(large.breakdown["compute_s"])
    assert large.breakdown["dp_comm_exposed_s"] > small.breakdown["dp_comm_exposed_s"] > 0


def test_expert_parameters_are_gathered(monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run(dp=16, model="mixtral-8x7b", ep=2)
    with_experts = _predict(run).breakdown["dp_comm_exposed_s"]
    real = step.params_on_gpu
    monkeypatch.setattr(step, "params_on_gpu", lambda r, st: (real(r, st)[0], 0.0))
    assert with_experts > _predict(run).breakdown["dp_comm_exposed_s"]


def test_first_gather_and_last_reduce_scatter_exposed_with_huge_compute() -> None:
    gather, scatter = 1e-3, 2e-3
    total = zero3_microbatch_seconds(32, 1e3, 2e3, gather, scatter, prefetch=1, bwd_gathers=1, slowdown=0.0)
    assert total - 3e3 == pytest.approx(2 * gather + scatter)  # forward's and backward's first gather, last RS
    slow_gpu = _predict(_run(dp=16, flops_scale=0.01))
    assert slow_gpu.breakdown["dp_comm_exposed_s"] > 0


@settings(max_examples=200, deadline=None)
@given(layers=st.integers(1, 40), compute=st.floats(1e-4, 1.0), gather=st.floats(0.0, 1.0),
       scatter=st.floats(0.0, 1.0), small=st.floats(0.0, 4.0), extra=st.floats(0.0, 4.0),
       slowdown=st.sampled_from([0.0, 0.189, 0.4]))
def test_larger_prefetch_window_never_slower(layers: int, compute: float, gather: float, scatter: float,
                                             small: float, extra: float, slowdown: float) -> None:
    for gathers, rs in ((gather, 0.0), (gather, scatter)):
        narrow = sharded_pass_seconds(layers, compute, gathers, rs, small, slowdown)
        wide = sharded_pass_seconds(layers, compute, gathers, rs, small + extra, slowdown)
        assert wide <= narrow * (1 + 1e-9) + 1e-12


def test_prefetch_windows_of_each_implementation() -> None:
    layer = 218e6  # Llama 3 8B layer parameters
    assert prefetch_layers(FSDP2, layer) == 1
    assert prefetch_layers(MEGATRON_FSDP, layer) == 3  # buckets added until 5e8 elements are in flight
    assert prefetch_layers(DEEPSPEED_ZERO3, layer) == pytest.approx(5e7 / layer)  # part of the next layer


def test_recompute_adds_regather() -> None:
    # parameters kept gathered after the forward (Automodel's reshard_after_forward: never) without
    # pipelining: FSDP2's post-backward reshard is unconditional, so full recompute gathers again
    from costmodel.specs.framework import get_framework

    kept = replace(FSDP2, reshard_after_forward=False)
    assert backward_gathers(kept, pp=1, recompute="selective") == 0
    assert backward_gathers(kept, pp=1, recompute="full") == 1
    automodel = get_framework("automodel")
    selective = _predict(replace(_run(dp=16, gbs=64, net_scale=0.02, recompute="selective"), framework=automodel))
    full = _predict(replace(_run(dp=16, gbs=64, net_scale=0.02, recompute="full"), framework=automodel))
    gained = full.breakdown["dp_comm_exposed_s"] - selective.breakdown["dp_comm_exposed_s"]
    assert gained > 0


def test_pipelined_fsdp2_keeps_parameters_gathered_through_recompute() -> None:
    # torch.distributed.pipelining turns the post-backward reshard off per micro-batch
    assert backward_gathers(FSDP2, pp=2, recompute="full", pipelined=True) == 0
    assert backward_gathers(replace(FSDP2, reshard_after_forward=True), pp=2, recompute="none", pipelined=True) == 1


def test_pipelined_fsdp2_syncs_once_per_step_not_per_microbatch() -> None:
    # FSDP2 under PP gathers on the step's first forward and reduce-scatters after the last
    # backward: its sharding time does not grow with the micro-batches, Megatron-FSDP's does
    from costmodel.specs.framework import get_framework

    def sharding_s(framework: str, gbs: int) -> float:
        run = replace(_run(dp=16, pp=2, gbs=gbs, net_scale=0.05), framework=get_framework(framework))
        return _predict(run).breakdown["dp_comm_exposed_s"]

    assert sharding_s("torchtitan", 128) == pytest.approx(sharding_s("torchtitan", 32), rel=1e-6)
    assert sharding_s("torchtitan", 32) > 0
    assert sharding_s("megatron-core", 128) > 2 * sharding_s("megatron-core", 32)


def test_comm_bound_floor() -> None:
    # traffic above compute: the step is paced by the channel, so halving compute does not halve it
    layers, gather = 32, 2e-3
    base = sharded_pass_seconds(layers, 1e-3, gather, 0.0, prefetch=1)
    halved = sharded_pass_seconds(layers, 0.5e-3, gather, 0.0, prefetch=1)
    assert halved > 0.9 * base
    assert halved >= layers * gather
    comm_bound = _run(dp=16, net_scale=0.02)
    fast = _predict(comm_bound)
    faster = _predict(_run(dp=16, net_scale=0.02, flops_scale=2.0))
    assert faster.breakdown["compute_s"] < 0.6 * fast.breakdown["compute_s"]
    assert faster.step_time_s > 0.75 * fast.step_time_s


def test_zero2_reduces_every_microbatch() -> None:
    one = _predict(_run(dp=16, gbs=16, zero=2, overlap_grad_reduce=False))
    eight = _predict(_run(dp=16, gbs=128, zero=2, overlap_grad_reduce=False))
    tail = one.breakdown["dp_comm_exposed_s"]
    assert eight.breakdown["dp_comm_exposed_s"] > 4 * tail > 0


def test_settings_follow_the_run_framework() -> None:
    from costmodel.llm.sharding import sharding_settings
    from costmodel.specs.framework import get_framework

    run = _run()
    torchtitan = sharding_settings(replace(run, framework=get_framework("torchtitan")))
    assert (torchtitan.prefetch_layers, torchtitan.prefetch_params, torchtitan.reduce_bytes) == (1, None, 4)
    deepspeed = sharding_settings(replace(run, framework=get_framework("deepspeed")))
    assert (deepspeed.prefetch_params, deepspeed.reduce_bytes) == (5e7, 2)
    assert sharding_settings(replace(run, framework=get_framework("megatron-core"))).prefetch_params == 5e8
