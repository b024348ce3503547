"""Each legality rule fires on the run that breaks it, with the numbers in its sentence."""

from __future__ import annotations

from typing import Any

import pytest

from constraints import check, rule_violations
from costmodel.specs import run_spec_from_mapping


def _violations(run: dict[str, Any]) -> list[str]:
    return rule_violations(run_spec_from_mapping(run))


def test_base_run_is_legal_and_fits(base_run: dict[str, Any]) -> None:
    verdict = check(run_spec_from_mapping(base_run))
    assert verdict.violations == ()
    assert verdict.fits


@pytest.mark.parametrize(("changes", "needle"), [
    ({"dp": 3}, "must equal num_gpus=16"),
    ({"tp": 16, "pp": 1}, "exceeds the NVLink domain of 8"),
    ({"pp": 64, "tp": 1, "sequence_parallel": False, "global_batch_size": 64, "dp": 1}, "exceeds num_layers=32"),
    ({"pp": 2, "vpp": 3}, "split evenly over pp*vpp"),
    ({"global_batch_size": 63}, "divisible by micro_batch_size*dp"),
    ({"tp": 1, "pp": 1, "vpp": 2, "sequence_parallel": False}, "needs pp > 1"),
    ({"vpp": 2, "global_batch_size": 12}, "divisible by pp=2"),
    ({"tp": 1, "pp": 4}, "sequence_parallel needs tp > 1"),
    ({"ep": 2}, "needs a mixture-of-experts model"),
    ({"precision": "fp8", "_gpu": "a100-sxm4-80gb"}, "precision=fp8 is not supported by a100-sxm4-80gb"),
])
def test_rule_fires(base_run: dict[str, Any], changes: dict[str, Any], needle: str) -> None:
    changes = dict(changes)
    if "_gpu" in changes:
        base_run["cluster"]["gpu"] = changes.pop("_gpu")
    base_run["strategy"].update(changes)
    messages = _violations(base_run)
    assert any(needle in m for m in messages), messages


def test_tp_above_kv_heads_replicates(base_run: dict[str, Any]) -> None:
    base_run["model"] = "llama3.1-70b"
    base_run["cluster"]["num_gpus"] = 16
    base_run["strategy"].update({"tp": 16, "pp": 1, "allow_tp_across_nodes": True})
    assert not any("num_query_groups" in m for m in _violations(base_run))


def test_context_parallel_needs_2cp_divisor(base_run: dict[str, Any]) -> None:
    base_run["seq_length"] = 4098
    base_run["strategy"].update({"cp": 2, "tp": 2, "pp": 1, "sequence_parallel": False})
    base_run["cluster"]["num_gpus"] = 16
    assert any("divisible by 2*cp = 4" in m for m in _violations(base_run))


def test_expert_parallel_must_divide_experts_and_dp(base_run: dict[str, Any]) -> None:
    base_run["model"] = "mixtral-8x7b"
    base_run["strategy"].update({"tp": 1, "pp": 1, "sequence_parallel": False, "ep": 16})
    assert any("must divide num_experts=8" in m for m in _violations(base_run))
    base_run["strategy"].update({"ep": 8, "dp": 4})
    base_run["cluster"]["num_gpus"] = 4
    assert any("must divide dp*cp" in m for m in _violations(base_run))


def test_memory_violation_names_need_and_budget(base_run: dict[str, Any]) -> None:
    base_run["model"] = "llama3.1-405b"
    base_run["strategy"].update({"tp": 8, "pp": 1, "dp": 2, "zero_stage": 0})
    verdict = check(run_spec_from_mapping(base_run))
    assert not verdict.fits
    assert any("GiB per GPU" in m and "GiB usable on h100-sxm5-80gb" in m for m in verdict.violations)


def test_tp_neither_dividing_nor_multiple_of_kv_heads(base_run: dict[str, Any]) -> None:
    base_run["model"] = {"name": "odd", "num_layers": 4, "hidden_size": 1536, "num_attention_heads": 24,
                         "num_query_groups": 8, "vocab_size": 32000, "ffn_hidden_size": 6144}
    base_run["cluster"]["num_gpus"] = 12
    base_run["cluster"]["gpus_per_node"] = 12
    base_run["strategy"].update({"tp": 6, "pp": 1, "dp": 2, "allow_tp_across_nodes": True})
    assert any("tp=6 must divide num_query_groups=8" in m for m in _violations(base_run))
