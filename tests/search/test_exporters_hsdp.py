"""HSDP in every exporter: the replicas as each framework spells them, or a one-line note where it cannot."""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from costmodel.specs import Strategy
from costmodel.specs.errors import SpecError
from search.exporters import EXPORTERS
from tests.search.conftest import small_problem

PROBLEM = small_problem(64)


def _hsdp(zero: int, cp: int = 1) -> Strategy:
    # 64 GPUs, tp=2: dp*cp = 32 ranks, shards of 8 ranks, 4 replicas
    return Strategy(tp=2, cp=cp, dp=32 // cp, micro_batch_size=1, global_batch_size=64, zero_stage=zero,
                    hsdp_shard_size=8)


def _text(name: str, strategy: Strategy, tmp_path: Path) -> str:
    return EXPORTERS[name].write(strategy, PROBLEM, tmp_path).read_text()


def _megatron_flags(text: str) -> list[str]:
    return shlex.split(" ".join(line for line in text.splitlines() if line.strip() and not line.startswith("#")))


@pytest.mark.parametrize("zero", [1, 3])
def test_megatron_writes_distributed_optimizer_instances(zero: int, tmp_path: Path) -> None:
    argv = _megatron_flags(_text("megatron", _hsdp(zero), tmp_path))
    assert argv[argv.index("--num-distributed-optimizer-instances") + 1] == "4"
    assert ("--outer-dp-sharding-strategy" in argv) == (zero == 3)
    assert "hsdp_shard_size" in EXPORTERS["megatron"].carried(_hsdp(zero))


def test_nemo_writes_the_ddp_config_keys(tmp_path: Path) -> None:
    ddp = yaml.safe_load(_text("nemo", _hsdp(3), tmp_path))["ddp"]
    assert ddp["num_distributed_optimizer_instances"] == 4 and ddp["outer_dp_sharding_strategy"] == "no_shard"


@pytest.mark.parametrize("cp", [1, 2])
def test_torchtitan_splits_dp_into_shard_and_replicate_degrees(cp: int, tmp_path: Path) -> None:
    strategy = replace(_hsdp(3, cp), cp_comm_type="all_gather")  # PyTorch ring attention's exchange
    flags = _megatron_flags(EXPORTERS["torchtitan"].write(strategy, PROBLEM, tmp_path).read_text())

    def value(flag: str) -> int:
        return int(flags[flags.index(flag) + 1])

    # FSDP2 shards over dp_shard * cp: 8 ranks per shard, 4 replicas
    assert value("--parallelism.data-parallel-replicate-degree") == 4
    assert value("--parallelism.data-parallel-shard-degree") * value("--parallelism.context-parallel-degree") == 8


@pytest.mark.parametrize(("name", "zero", "knob"), [("deepspeed", 3, "hsdp_shard_size"),
                                                    ("deepspeed", 1, "hsdp_shard_size"),
                                                    ("torchtitan", 1, "zero_stage")])
def test_hsdp_a_launcher_cannot_run_is_refused_on_one_line(name: str, zero: int, knob: str, tmp_path: Path) -> None:
    """DeepSpeed 0.19 removed MiCS (DeepSpeedConfig rejects mics_shard_size); torchtitan has no ZeRO-1."""
    with pytest.raises(SpecError) as info:
        _text(name, _hsdp(zero), tmp_path)
    assert info.value.field == f"{name} export: {knob}" and "\n" not in str(info.value)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("name", sorted(EXPORTERS))
def test_no_hsdp_writes_nothing_new(name: str, tmp_path: Path) -> None:
    plain = Strategy(tp=2, dp=32, micro_batch_size=1, global_batch_size=64, zero_stage=3, recompute="full")
    text = _text(name, plain, tmp_path)
    assert "num-distributed-optimizer-instances" not in text and "mics_shard_size" not in text
    assert "num_distributed_optimizer_instances" not in text
