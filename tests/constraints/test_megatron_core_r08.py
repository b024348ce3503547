"""Megatron-Core r0.8 (Megatron-LM @f2e5db40): what its code cannot run is a violation (sources in
costmodel/catalog/frameworks/megatron-core-r0.8.yaml)."""

from __future__ import annotations

from typing import Any

import pytest

from constraints import rule_violations
from costmodel.specs.framework import framework_for_label, get_framework
from costmodel.specs.runspec import run_spec_from_mapping


def _violations(framework: str, **strategy: Any) -> list[str]:
    spec = {"model": "llama3.1-70b", "seq_length": 4096, "framework": framework,
            "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 768},
            "strategy": {"tp": 2, "pp": 1, "global_batch_size": 384, "micro_batch_size": 1, **strategy}}
    return rule_violations(run_spec_from_mapping(spec))


def test_the_readme_table_rows_resolve_to_r08() -> None:
    assert framework_for_label("Megatron-Core r0.8.0 / Megatron-LM") == "megatron-core-r0.8"
    assert framework_for_label("Megatron-Core") == "megatron-core"


@pytest.mark.parametrize(("strategy", "needle"), [
    ({"zero_stage": 3}, "zero_stage=3 is not offered"),
    ({"zero_stage": 1, "hsdp_shard_size": 8}, "hsdp_shard_size with zero_stage=1 is not offered"),
    ({"cp": 2, "cp_comm_type": "all_gather"}, "cp_comm_type=all_gather is not offered"),
])
def test_r08_refuses_what_it_lacks_and_today_s_megatron_core_runs_it(strategy: dict[str, Any], needle: str) -> None:
    assert any(needle in v for v in _violations("megatron-core-r0.8", **strategy))
    assert not any(needle in v for v in _violations("megatron-core", **strategy))


def test_r08_runs_the_distributed_optimizer_and_userbuffers_without_sm_margin() -> None:
    assert not _violations("megatron-core-r0.8", zero_stage=1, sequence_parallel=True, tp_comm_overlap=True)
    fw = get_framework("megatron-core-r0.8")
    assert not fw.tp_comm_sm_margin and get_framework("megatron-core").tp_comm_sm_margin
    assert fw.exporter == "megatron"


@pytest.mark.parametrize(("framework", "sharded"), [("megatron-core-r0.8", False), ("megatron-core", True)])
def test_a_search_offers_parameter_sharding_only_where_the_framework_runs_it(framework: str, sharded: bool) -> None:
    from parplan.api import search_problem
    from search.space import build_space

    problem, _ = search_problem({"model": "llama3.1-70b", "gpu": "h100-sxm5-80gb", "num_gpus": 768,
                                 "global_batch_size": 384, "seq_length": 4096, "framework": framework})
    choices = build_space(problem).choices
    assert (3 in choices["zero_stage"]) is sharded
    assert any(v for v in choices.get("hsdp_shard_size", (0,))) is sharded
