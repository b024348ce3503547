"""The command line: contract JSON, catalogs, and one-line errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from parplan.cli import main

EXAMPLES = sorted(p for p in (Path(__file__).resolve().parents[2] / "studies" / "examples").glob("*.yaml")
                  if not p.name.startswith("study-"))
CONTRACT_MEMORY_KEYS = {"weights_gib", "grads_gib", "optimizer_gib", "activations_gib", "other_gib"}


def _write(tmp_path: Path, data: Any, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def test_catalog_models_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["catalog", "models", "--json"]) == 0
    models = json.loads(capsys.readouterr().out)
    assert len(models) >= 25
    assert all(isinstance(m["name"], str) and m["num_params"] > 0 for m in models)
    assert {"gpt3-175b", "llama3.1-405b", "mixtral-8x7b"} <= {m["name"] for m in models}


def test_catalog_gpus_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["catalog", "gpus", "--json"]) == 0
    names = {g["name"] for g in json.loads(capsys.readouterr().out)}
    assert {"a100-sxm4-40gb", "h100-sxm5-80gb", "gb200", "mi300x", "l40s"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_predict_examples_print_contract_json(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert isinstance(out["fits"], bool)
    assert out["peak_memory_gib"] > 0
    assert set(out["memory"]) == CONTRACT_MEMORY_KEYS
    assert isinstance(out["violations"], list)
    assert out["fits"] == (not out["violations"])
    assert sum(out["memory"].values()) == pytest.approx(out["peak_memory_gib"], rel=1e-3)


def test_examples_fit(capsys: pytest.CaptureFixture[str]) -> None:
    for path in EXAMPLES:
        main(["predict", str(path), "--json"])
        assert json.loads(capsys.readouterr().out)["fits"], path


def test_predict_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", str(EXAMPLES[0])]) == 0
    out = capsys.readouterr().out
    assert "GiB usable" in out and "activations" in out


def test_json_and_yaml_specs_agree(tmp_path: Path, base_run: dict[str, Any],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    main(["predict", str(_write(tmp_path, base_run)), "--json"])
    from_yaml = json.loads(capsys.readouterr().out)
    main(["predict", str(_write(tmp_path, json.dumps(base_run), "run.json")), "--json"])
    assert json.loads(capsys.readouterr().out) == from_yaml


def test_infeasible_run_still_predicts(tmp_path: Path, base_run: dict[str, Any],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    base_run["strategy"]["dp"] = 3
    assert main(["predict", str(_write(tmp_path, base_run)), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] is False and any("num_gpus=16" in v for v in out["violations"])


def _set(run: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    *parents, leaf = dotted.split(".")
    node = run
    for key in parents:
        node = node[key]
    node[leaf] = value
    return run


BAD_INPUTS = [
    ("strategy.tp", "four", "strategy.tp"),
    ("strategy.tp", 0, "strategy.tp"),
    ("strategy.pp", -2, "strategy.pp"),
    ("strategy.micro_batch_size", 1.5, "strategy.micro_batch_size"),
    ("strategy.recompute", "sometimes", "strategy.recompute"),
    ("strategy.zero_stage", 4, "strategy.zero_stage"),
    ("strategy.precision", "int4", "strategy.precision"),
    ("strategy.sequence_parallel", "yes", "strategy.sequence_parallel"),
    ("strategy.tpp", 2, "strategy.tpp"),
    ("model", "llama9-1t", "model"),
    ("cluster.gpu", "h900", "cluster.gpu"),
    ("cluster.num_gpus", 0, "cluster.num_gpus"),
    ("cluster.num_gpus", 12, "cluster.num_gpus"),
    ("cluster.inter_node_bandwidth_GBps", -5, "cluster.inter_node_bandwidth_GBps"),
    ("cluster.color", "blue", "cluster.color"),
    ("seq_length", "long", "seq_length"),
    ("model", {"name": "x", "num_layers": 2, "hidden_size": 64, "num_attention_heads": 6, "vocab_size": 10},
     "model.head_dim"),
    ("model", {"name": "x", "num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10,
               "num_query_groups": 3}, "model.num_query_groups"),
    ("model", {"name": "x", "hidden_size": 64}, "model.num_layers"),
    ("model", {"hf_config": "/nonexistent/config.json"}, "model.hf_config"),
    ("nonsense", 1, "nonsense"),
]


@pytest.mark.parametrize(("field", "value", "named"), BAD_INPUTS, ids=[f"{b[0]}={b[1]!r}"[:40] for b in BAD_INPUTS])
def test_bad_field_is_one_line_error(tmp_path: Path, base_run: dict[str, Any], field: str, value: Any, named: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, _set(base_run, field, value))
    assert main(["predict", str(path), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("parplan: error:")
    assert repr(named) in lines[0] or named in lines[0]


@pytest.mark.parametrize("content", ["model: [unclosed\n", "- just\n- a list\n", "{}\n", ""])
def test_malformed_files(tmp_path: Path, content: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", str(_write(tmp_path, content))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "parplan: error:" in err[0]


def test_unreadable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", str(tmp_path / "missing.yaml")]) == 2
    assert "readable file" in capsys.readouterr().err


def test_tp_not_dividing_heads_is_a_violation_not_a_crash(tmp_path: Path, base_run: dict[str, Any],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    base_run["strategy"].update({"tp": 3, "pp": 1, "dp": 5})
    base_run["cluster"]["num_gpus"] = 16
    assert main(["predict", str(_write(tmp_path, base_run)), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any("tp=3 must divide num_attention_heads=32" in v for v in out["violations"])


def test_bad_subcommand_exits_2() -> None:
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2


def test_console_script_runs() -> None:
    proc = subprocess.run([sys.executable, "-m", "parplan.cli", "predict", str(EXAMPLES[0]), "--json"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["fits"] is True


def test_predict_reports_compute_per_stage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = {"model": "llama3.1-405b", "seq_length": 8192, "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 128},
           "strategy": {"tp": 8, "pp": 16, "micro_batch_size": 1, "global_batch_size": 32, "recompute": "full"}}
    path = _write(tmp_path, run)
    assert main(["predict", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    stages = out["stages"]
    assert [st["stage"] for st in stages] == list(range(16))
    assert [st["layers"] for st in stages] == out["pipeline_layers"] == [7] + [8] * 14 + [7]
    for st in stages:  # per step: every micro-batch's forward and backward, and the optimizer step
        assert st["compute_s"] == pytest.approx(32 * (st["forward_s"] + st["backward_s"]) + st["optimizer_s"])
    assert stages[0]["compute_s"] < stages[1]["compute_s"] == stages[14]["compute_s"]
    assert main(["predict", str(path)]) == 0
    table = capsys.readouterr().out
    assert "compute s/step" in table and "\n1-14 " in table


def test_output_piped_into_a_reader_that_stops_early_is_not_an_error(tmp_path: Path) -> None:
    run = {"model": "llama3.1-8b", "seq_length": 4096, "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 8},
           "strategy": {"tp": 1, "micro_batch_size": 1, "global_batch_size": 64, "zero_stage": 3}}
    path = _write(tmp_path, run)
    piped = subprocess.run(f"{sys.executable} -m parplan.cli predict {path} | head -1", shell=True,
                           capture_output=True, text=True, check=False)
    assert piped.returncode == 0 and piped.stdout.startswith("Run ")
    assert "BrokenPipeError" not in piped.stderr and "Traceback" not in piped.stderr


def test_help_documents_the_exit_codes(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for code in ("0 ", "1 ", "2 ", "3 ", "130 "):
        assert f"\n  {code}" in out


@pytest.mark.parametrize("shell, marker", [("bash", "complete"), ("zsh", "#compdef parplan")])
def test_completion_scripts_name_the_subcommands(shell: str, marker: str, capsys) -> None:
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    assert marker in script
    for command in ("predict", "search", "study", "validate", "replay"):
        assert command in script
