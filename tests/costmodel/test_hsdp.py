"""HSDP (``hsdp_shard_size``): shard within a group, replicate across groups, timed and placed."""

from __future__ import annotations

import pytest

from costmodel.comm.placement import group_placement, group_ranks
from costmodel.llm.sharding import gradient_sync_seconds
from costmodel.specs import ClusterSpec, RunSpec, Strategy, get_gpu, get_model
from costmodel.specs.errors import SpecError
from costmodel.specs.framework import get_framework
from costmodel.llm.step import predict_step
from costmodel.timing import OperatorTimer


def _run(dp: int = 64, shard: int = 0, zero: int = 3, framework: str = "torchtitan", tp: int = 1,
         cp: int = 1) -> RunSpec:
    gpu = get_gpu("h100-sxm5-80gb")
    strategy = Strategy(tp=tp, cp=cp, dp=dp, micro_batch_size=1, global_batch_size=dp, recompute="selective",
                        zero_stage=zero, hsdp_shard_size=shard)
    cluster = ClusterSpec(gpu=gpu, num_gpus=tp * cp * dp, gpus_per_node=gpu.gpus_per_node)
    return RunSpec(model=get_model("llama3.1-8b"), cluster=cluster, strategy=strategy, seq_length=4096,
                   framework=get_framework(framework))


def test_shard_groups_are_consecutive_dp_ranks_and_replicas_stride_over_them() -> None:
    s = Strategy(tp=2, dp=8, global_batch_size=8, hsdp_shard_size=4)
    assert group_ranks("dp_shard", s)[:2] == [[0, 2, 4, 6], [8, 10, 12, 14]]
    assert group_ranks("dp_replicate", s)[:2] == [[0, 8], [2, 10]]
    # every rank sits in exactly one shard group and one replicate group
    for kind in ("dp_shard", "dp_replicate"):
        assert sorted(r for g in group_ranks(kind, s) for r in g) == list(range(16))


def test_without_hsdp_the_shard_group_is_the_dp_cp_group() -> None:
    s = Strategy(tp=2, cp=2, dp=4, global_batch_size=4)
    assert group_ranks("dp_shard", s) == group_ranks("dp_cp", s)
    assert all(len(g) == 1 for g in group_ranks("dp_replicate", s))
    assert s.shard_group_size == 8 and s.shard_replicas == 1


def test_node_sized_shard_group_stays_on_nvlink() -> None:
    run = _run(dp=64, shard=8)
    shard = group_placement("dp_shard", run.strategy, run.cluster)
    replicate = group_placement("dp_replicate", run.strategy, run.cluster)
    assert (shard.size, shard.crosses_nodes) == (8, False)
    assert (replicate.size, replicate.num_domains) == (8, 8)


def test_a_shard_size_that_does_not_divide_dp_cp_is_refused() -> None:
    run = _run(dp=64, shard=48)
    with pytest.raises(SpecError, match="hsdp_shard_size"):
        group_placement("dp_shard", run.strategy, run.cluster)


def test_gradient_sync_adds_an_all_reduce_of_the_shard_over_the_replicas() -> None:
    calls: list[tuple[str, float, int]] = []
    s = Strategy(dp=8, global_batch_size=8, hsdp_shard_size=4)
    cluster = ClusterSpec(gpu=get_gpu("h100-sxm5-80gb"), num_gpus=8, gpus_per_node=8)
    shard, replicate = group_placement("dp_shard", s, cluster), group_placement("dp_replicate", s, cluster)

    def timed(op: str, nbytes: float, group: object) -> float:
        calls.append((op, nbytes, group.size))  # type: ignore[attr-defined]
        return 1.0

    assert gradient_sync_seconds("reduce_scatter", 800.0, shard, replicate, timed) == 2.0
    assert calls == [("reduce_scatter", 800.0, 4), ("all_reduce", 200.0, 2)]
    calls.clear()
    assert gradient_sync_seconds("reduce_scatter", 800.0, shard, None, timed) == 1.0


def test_hsdp_beats_fsdp_where_the_group_latency_dominates() -> None:
    # 8B on 1024 H100: each per-layer collective over 128 nodes pays a latency that grows with
    # the group; HSDP over 8 nodes keeps the gathers short and all-reduces only the shard.
    timer = OperatorTimer(get_gpu("h100-sxm5-80gb"), None)
    fsdp = predict_step(_run(dp=1024), timer).breakdown["dp_comm_exposed_s"]
    hsdp = predict_step(_run(dp=1024, shard=64), timer).breakdown["dp_comm_exposed_s"]
    assert hsdp < fsdp / 2


def test_hsdp_replica_all_reduce_is_priced_not_free() -> None:
    # one node per shard group: the gathers are on NVLink, but the shard's all-reduce crosses
    # all 8 nodes one NIC per GPU, so at 64 GPUs HSDP is not free (ring FSDP uses all NICs)
    timer = OperatorTimer(get_gpu("h100-sxm5-80gb"), None)
    inside = predict_step(_run(dp=8), timer).breakdown["dp_comm_exposed_s"]
    hsdp = predict_step(_run(dp=64, shard=8), timer).breakdown["dp_comm_exposed_s"]
    assert hsdp > inside


def test_hsdp_zero1_adds_the_replica_all_reduce_to_the_tail() -> None:
    timer = OperatorTimer(get_gpu("h100-sxm5-80gb"), None)
    run = _run(dp=64, zero=1, framework="megatron-core")
    plain = predict_step(run, timer).breakdown["dp_comm_exposed_s"]
    hsdp = predict_step(_run(dp=64, shard=64, zero=1, framework="megatron-core"), timer)
    # a shard group of all dp*cp ranks is plain ZeRO-1: the same time
    assert hsdp.breakdown["dp_comm_exposed_s"] == pytest.approx(plain)
    partial = predict_step(_run(dp=64, shard=8, zero=1, framework="megatron-core"), timer)
    assert partial.breakdown["dp_comm_exposed_s"] != pytest.approx(plain)
