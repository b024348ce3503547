"""Unset strategy knobs take the framework's default, and ``predict`` says which it assumed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from constraints import check
from costmodel.specs.runspec import run_spec_from_mapping
from parplan.cli import main


def _spec(framework: str = "megatron-core", model: str = "llama3.1-8b", **strategy: Any) -> dict[str, Any]:
    return {"model": model, "seq_length": 4096, "framework": framework,
            "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 8},
            "strategy": {"tp": 2, "global_batch_size": 32, **strategy}}


def _assumed(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d.knob: d.to_dict() for d in run_spec_from_mapping(data).defaults_assumed}


def test_nemo_fills_zero_stage_from_its_distributed_optimizer() -> None:
    assumed = _assumed(_spec("nemo"))
    assert assumed["zero_stage"] == {"knob": "zero_stage", "value": 1, "source": "nemo",
                                     "field": "distributed_optimizer"}
    assert assumed["tp_comm_overlap"]["source"] == "nemo"


def test_torchtitan_without_zero_stage_runs_fsdp2_not_an_illegal_zero1() -> None:
    run = run_spec_from_mapping(_spec("torchtitan"))
    assert run.strategy.zero_stage == 3
    assert {"knob": "zero_stage", "value": 3, "source": "torchtitan", "field": "fsdp_implementation"} in \
        [d.to_dict() for d in run.defaults_assumed]
    assert not any("zero" in v.lower() for v in check(run).violations)


def test_megatron_core_keeps_zero1_and_names_parplan_as_its_source() -> None:
    assert _assumed(_spec())["zero_stage"] == {"knob": "zero_stage", "value": 1, "source": "parplan"}


def test_stated_knobs_are_not_listed_and_win_over_the_default() -> None:
    run = run_spec_from_mapping(_spec("torchtitan", zero_stage=0, tp_comm_overlap=False))
    assert run.strategy.zero_stage == 0
    assert run.defaults_assumed == ()


def test_moe_knobs_listed_for_moe_models_only() -> None:
    moe = _assumed(_spec(model="mixtral-8x7b", ep=4))
    assert moe["moe_token_dispatcher"]["value"] == "allgather"  # megatron-core.yaml moe_token_dispatcher
    assert {"moe_shared_expert_overlap", "moe_a2a_overlap"} <= set(moe)
    assert "moe_token_dispatcher" not in _assumed(_spec())


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_predict_json_and_human_output_list_the_defaults(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, _spec("nemo"))
    assert main(["predict", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"knob": "zero_stage", "value": 1, "source": "nemo", "field": "distributed_optimizer"} in \
        out["defaults_assumed"]
    assert main(["predict", str(path)]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("defaults assumed:")]
    assert line == ["defaults assumed: zero_stage=1 (nemo), tp_comm_overlap=False (nemo)"]


def test_predict_json_empty_list_when_everything_is_stated(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", str(_write(tmp_path, _spec(zero_stage=1, tp_comm_overlap=False))), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["defaults_assumed"] == []
