"""``parplan search --model config.json`` and ``parplan search RUN.yaml`` (issue 15 item 4)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from parplan.cli import main

FIXTURES = Path(__file__).parents[1] / "costmodel" / "hf_configs"
SMALL = ["--fix", "tp=8", "--fix", "pp=1", "--fix", "cp=1", "--fix", "recompute=full", "--fix", "zero_stage=1",
         "--fix", "precision=bf16", "--allow", "micro_batch_size=1,2", "--sampler", "exhaustive", "--jobs", "1",
         "--json"]


def test_search_accepts_an_hf_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "qwen3" / "config.json"
    config.parent.mkdir()
    shutil.copy(FIXTURES / "qwen3-8b.json", config)
    code = main(["search", "--model", str(config), "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--seq-length", "4096",
                 "--global-batch-size", "16", *SMALL])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["problem"]["model"] == "qwen3" and out["problem"]["seq_length"] == 4096
    assert out["best"]["strategy"]["tp"] == 8


def test_search_accepts_a_model_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({
        "num_layers": 8, "hidden_size": 2048, "num_attention_heads": 16, "vocab_size": 32000, "seq_length": 2048,
        "activation": "swiglu", "normalization": "rmsnorm", "position_embedding": "rope"}))
    code = main(["search", "--model", str(tmp_path / "tiny.yaml"), "--gpu", "h100-sxm5-80gb", "--gpus", "8",
                 "--global-batch-size", "16", *SMALL])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["problem"]["model"] == "tiny" and out["problem"]["seq_length"] == 2048


def test_search_from_a_run_spec_reports_the_speedup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump({
        "model": "llama3.1-8b", "seq_length": 4096, "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 8},
        "strategy": {"tp": 8, "micro_batch_size": 1, "global_batch_size": 16, "recompute": "full"}}))
    code = main(["search", str(run), *SMALL])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (out["problem"]["num_gpus"], out["problem"]["global_batch_size"], out["problem"]["seq_length"]) == (
        8, 16, 4096)
    base = out["baseline"]
    assert base["strategy"]["micro_batch_size"] == 1 and base["speedup"] is not None
    # The run's own strategy is in the searched space, so the best is at least as fast.
    assert base["speedup"] == pytest.approx(base["step_time_s"] / out["best"]["prediction"]["step_time_s"], rel=1e-6)
    assert base["speedup"] >= 1.0


def test_search_without_model_or_run_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "--gpu", "h100-sxm5-80gb", "--gpus", "8"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("parplan: error: The '--model' parameter") and err.count("\n") == 1


def test_search_unknown_model_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "--model", str(tmp_path / "nope.yaml"), "--gpu", "h100-sxm5-80gb", "--gpus", "8"]) == 2
    err = capsys.readouterr().err
    assert "model file" in err and err.count("\n") == 1
