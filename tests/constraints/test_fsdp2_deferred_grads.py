"""Unsharded gradients FSDP2 accumulates while its sync is deferred (constraints.memory)."""

from __future__ import annotations

from dataclasses import replace

from constraints.memory import (deferred_unsharded_grad_bytes, fsdp_grad_sync_deferred, params_on_gpu,
                                stage_memory)
from costmodel.llm.sharding import pipelined_fsdp2
from costmodel.specs.runspec import run_spec_from_mapping


def _dsv3(framework: str = "automodel", **strategy: object):  # type: ignore[no-untyped-def]
    knobs = {"tp": 1, "pp": 4, "cp": 2, "ep": 64, "dp": 128, "micro_batch_size": 1, "global_batch_size": 8192,
             "zero_stage": 3, "recompute": "none", "hsdp_shard_size": 32, **strategy}
    return run_spec_from_mapping({"model": "deepseek-v3", "seq_length": 4096, "framework": framework,
                                  "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 1024}, "strategy": knobs})


def test_pipelined_fsdp2_holds_every_managed_parameters_gradient_in_the_reduce_dtype() -> None:
    """torch.distributed.pipelining turns the sync off for all but the last backward, so FSDP2 keeps an
    unsharded fp32 gradient (reduce dtype) of each parameter it manages: dense, and experts sharded over 4."""
    run = _dsv3()
    dense, expert = params_on_gpu(run, 0)
    assert run.strategy.expert_data_parallel_size > 1
    assert deferred_unsharded_grad_bytes(run, 0) == (dense + expert) * 4
    # in the peak, beside the (sharded) model states
    without = stage_memory(run, 0).other_bytes - deferred_unsharded_grad_bytes(run, 0)
    assert without > 0 and stage_memory(run, 0).other_bytes >= (dense + expert) * 4


def test_the_search_pick_without_recompute_no_longer_fits_an_h100() -> None:
    """The pick recipes.py reported +25% with (tp1 pp4 cp2 ep64, no recompute, HSDP 32): its first stage's
    ~5.6e9 FSDP-managed parameters hold 4-byte unsharded gradients (~21 GiB) beside 54 GiB of activations."""
    run = _dsv3()
    assert stage_memory(run, 0).total_bytes > run.cluster.usable_memory_bytes
    assert stage_memory(_dsv3(recompute="full"), 0).total_bytes < run.cluster.usable_memory_bytes


def test_no_deferral_no_term() -> None:
    assert deferred_unsharded_grad_bytes(_dsv3(pp=1, dp=512, hsdp_shard_size=0), 0) == 0  # automodel pp1: per-mb RS
    assert deferred_unsharded_grad_bytes(_dsv3(zero_stage=1, hsdp_shard_size=0), 0) == 0
    mcore = _dsv3(framework="megatron-core", hsdp_shard_size=0)
    assert not fsdp_grad_sync_deferred(mcore) and deferred_unsharded_grad_bytes(mcore, 0) == 0


def test_time_and_memory_read_one_predicate() -> None:
    for run in (_dsv3(), _dsv3(pp=1, dp=512, hsdp_shard_size=0), _dsv3(framework="megatron-core", hsdp_shard_size=0)):
        assert pipelined_fsdp2(run) == fsdp_grad_sync_deferred(run)
    deferred = replace(_dsv3(pp=1, dp=512, hsdp_shard_size=0))
    deferred = replace(deferred, framework=replace(deferred.framework, fsdp_defer_grad_sync=True))
    assert pipelined_fsdp2(deferred) and deferred_unsharded_grad_bytes(deferred, 0) > 0
