"""HSDP memory and rules: states sharded over the shard group only; framework and divisibility rules."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from constraints.memory import model_state_bytes
from constraints.rules import rule_violations
from costmodel.specs import ClusterSpec, RunSpec, Strategy, get_gpu, get_model
from costmodel.specs.framework import get_framework

MODELS = ["llama3.1-8b", "llama3.1-70b", "mixtral-8x7b"]


def _run(model: str = "llama3.1-8b", dp: int = 16, cp: int = 1, shard: int = 0, zero: int = 3,
         framework: str = "torchtitan", pp: int = 1) -> RunSpec:
    strategy = Strategy(pp=pp, dp=dp, cp=cp, micro_batch_size=1, global_batch_size=dp, zero_stage=zero,
                        hsdp_shard_size=shard)
    cluster = ClusterSpec(gpu=get_gpu("h100-sxm5-80gb"), num_gpus=pp * dp * cp, gpus_per_node=8)
    return RunSpec(model=get_model(model), cluster=cluster, strategy=strategy, seq_length=4096,
                   framework=get_framework(framework))


def _states(run: RunSpec) -> float:
    return sum(model_state_bytes(run, 0)[:3])


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(MODELS), st.sampled_from([2, 4, 8, 16, 32]), st.sampled_from([1, 2]),
       st.sampled_from([1, 2, 3]), st.data())
def test_bigger_shard_group_never_increases_model_state_memory(model: str, dp: int, cp: int, zero: int,
                                                                data: st.DataObject) -> None:
    replicas = [r for r in (1, 2, 4, 8, 16, 32) if dp % r == 0]
    small = data.draw(st.sampled_from(replicas[1:] or [1]))  # more replicas: a smaller shard group
    large = data.draw(st.sampled_from([r for r in replicas if r <= small]))
    ranks = dp * cp
    fw = "megatron-core"
    smaller = _states(_run(model, dp, cp, ranks // small, zero, fw))
    bigger = _states(_run(model, dp, cp, ranks // large, zero, fw))
    assert bigger <= smaller * (1 + 1e-12)


def test_whole_group_shard_equals_plain_sharding() -> None:
    assert _states(_run(shard=16)) == _states(_run(shard=0))


def test_node_shard_holds_the_states_of_an_eight_way_shard() -> None:
    # HSDP over 8 of 64 ranks: each rank holds what plain FSDP over 8 ranks holds
    assert _states(_run(dp=64, shard=8)) == _states(_run(dp=8))


def test_shard_that_splits_a_cp_block_is_a_violation() -> None:
    # dp=4, cp=2: a shard of 4 ranks is cp x 2 dp ranks (2 replicas); 1 rank shards nothing and
    # 3 ranks do not divide the 8
    assert not [v for v in rule_violations(_run(dp=4, cp=2, shard=4)) if "hsdp" in v]
    for shard in (1, 3):
        assert any("hsdp_shard_size" in v for v in rule_violations(_run(dp=4, cp=2, shard=shard)))


def test_hsdp_needs_zero_sharding() -> None:
    assert any("zero_stage >= 1" in v for v in rule_violations(_run(shard=8, zero=0)))


def test_framework_without_hybrid_zero1_refuses_it() -> None:
    # torchtitan has no ZeRO-1 at all; DeepSpeed's MiCS is ZeRO-3 only
    violations = rule_violations(_run(shard=8, zero=1, framework="deepspeed"))
    assert any("hsdp_shard_size with zero_stage=1" in v and "deepspeed" in v for v in violations)
    assert not [v for v in rule_violations(_run(shard=8, zero=3, framework="deepspeed")) if "hsdp" in v]
    assert not [v for v in rule_violations(_run(shard=8, zero=1, framework="megatron-core")) if "hsdp" in v]
