"""HSDP in every exporter: the replicas as each framework spells them, or a one-line note where it cannot."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml

from costmodel.specs import Strategy
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
    par = tomllib.loads(_text("torchtitan", _hsdp(3, cp), tmp_path))["parallelism"]
    # FSDP2 shards over dp_shard * cp: 8 ranks per shard, 4 replicas
    assert par["data_parallel_replicate_degree"] == 4
    assert par["data_parallel_shard_degree"] * par["context_parallel_degree"] == 8


def test_deepspeed_writes_mics_shard_size_for_zero3(tmp_path: Path) -> None:
    config = json.loads(_text("deepspeed", _hsdp(3), tmp_path))
    assert config["zero_optimization"]["mics_shard_size"] == 8


@pytest.mark.parametrize(("name", "zero"), [("deepspeed", 1), ("torchtitan", 1)])
def test_hsdp_a_format_cannot_say_is_a_one_line_note(name: str, zero: int, tmp_path: Path) -> None:
    strategy = _hsdp(zero)
    exporter = EXPORTERS[name]
    assert "hsdp_shard_size" not in exporter.carried(strategy)
    notes = [n for n in exporter.notes(strategy) if "hsdp_shard_size=8" in n]
    assert len(notes) == 1 and "\n" not in notes[0]
    assert "mics_shard_size" not in _text(name, strategy, tmp_path)


@pytest.mark.parametrize("name", sorted(EXPORTERS))
def test_no_hsdp_writes_nothing_new(name: str, tmp_path: Path) -> None:
    plain = Strategy(tp=2, dp=32, micro_batch_size=1, global_batch_size=64, zero_stage=3)
    text = _text(name, plain, tmp_path)
    assert "num-distributed-optimizer-instances" not in text and "mics_shard_size" not in text
    assert "num_distributed_optimizer_instances" not in text
