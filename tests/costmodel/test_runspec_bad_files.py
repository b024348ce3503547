"""Hostile and out-of-range run-spec files through the CLI: exit 2, one stderr line, no traceback.

The cases that crash, hang or exhaust memory without the bounded reader run in
subprocesses (started together, each under a timeout); the numeric-field cases
run in-process through ``parplan.cli.main`` and are timed there (the CLI's own
start-up, about 2 s of imports, is not the file's cost).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from parplan.cli import main
from tests.conftest import BASE_RUN

LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{n}: &{n} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, n in zip("abcdefgh", "bcdefghi"))
GOOD = yaml.safe_dump(BASE_RUN)


def _subprocess_cases(root: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (parplan arguments, text the one stderr line must contain)."""
    (root / "laughs.yaml").write_text(LAUGHS + GOOD.replace("model: llama3.1-8b", "model: *i"))
    (root / "deep.yaml").write_text("[" * 100_000)
    (root / "deep.json").write_text("[" * 100_000)
    (root / "config.json").write_text('{"model_type": "llama", "x": ' + "[" * 100_000 + "}")
    (root / "hf.yaml").write_text(GOOD.replace("model: llama3.1-8b", "model: {hf_config: config.json}"))
    run = copy.deepcopy(BASE_RUN)
    run["cluster"]["num_gpus"] = 10**12
    (root / "gpus.yaml").write_text(yaml.safe_dump(run))
    run = copy.deepcopy(BASE_RUN)
    run["model"] = "x" * 10_000_000
    (root / "big.json").write_text(json.dumps(run))
    (root / "dup.yaml").write_text(GOOD + "seq_length: 2048\n")
    (root / "study.yaml").write_text(LAUGHS + "name: *a\n")
    cases = {
        "billion laughs": (["predict", "laughs.yaml"], "anchors or aliases"),
        "deep YAML": (["predict", "deep.yaml"], "nested at most 64"),
        "deep JSON": (["predict", "deep.json"], "nested at most 64"),
        "deep HF config": (["predict", "hf.yaml"], "model.hf_config"),
        "1e12 GPUs": (["predict", "gpus.yaml"], "cluster.num_gpus"),
        "10 MB value": (["predict", "big.json"], "'model'"),
        "duplicate key": (["predict", "dup.yaml"], "'seq_length' repeated"),
        "study laughs": (["study", "run", "study.yaml", "--out", str(root / "out")], "'study'"),
        "/dev/zero": (["predict", "/dev/zero"], "a regular file"),
    }
    if hasattr(os, "mkfifo"):
        os.mkfifo(root / "fifo.yaml")
        cases["FIFO"] = (["predict", "fifo.yaml"], "a regular file")
    return cases


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[subprocess.CompletedProcess[str], str]]:
    """Every subprocess case, started at once (each ~2 s of imports) and collected under one timeout."""
    root = tmp_path_factory.mktemp("bad-files")
    cases = _subprocess_cases(root)
    procs = {name: subprocess.Popen([sys.executable, "-m", "parplan.cli", *argv], cwd=root, text=True,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for name, (argv, _) in cases.items()}
    deadline = time.monotonic() + 120  # generous: ten interpreters start at once on a possibly busy machine
    out = {}
    for name, proc in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            stderr += "\n(timed out)"
        out[name] = (subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), cases[name][1])
    assert not (root / "out").exists()  # the refused study wrote nothing
    return out


SUBPROCESS_CASES = ["billion laughs", "deep YAML", "deep JSON", "deep HF config", "1e12 GPUs", "10 MB value",
                    "duplicate key", "study laughs", "/dev/zero", "FIFO"]


@pytest.mark.parametrize("name", SUBPROCESS_CASES)
def test_hostile_file_gets_one_line_and_exit_2(finished: dict[str, Any], name: str) -> None:
    if name not in finished:
        pytest.skip("no FIFOs on this platform")
    proc, named = finished[name]
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr[:2000]
    assert proc.returncode == 2
    assert lines[0].startswith("parplan: error: ") and named in lines[0]
    assert "x" * 100 not in lines[0] and len(lines[0]) < 2000  # no value is quoted past 80 characters


def _predict_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str], data: Any) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    start = time.perf_counter()
    assert main(["predict", str(path), "--json"]) == 2
    assert time.perf_counter() - start < 1.0
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err
    return lines[0]


def _with(section: str | None, key: str, value: Any) -> dict[str, Any]:
    run = copy.deepcopy(BASE_RUN)
    (run if section is None else run[section])[key] = value
    return run


INLINE_MODEL = {"name": "tiny", "num_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "vocab_size": 1000}
NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("section, key, value, field, allowed", [
    ("cluster", "num_gpus", 0, "cluster.num_gpus", "an integer in [1, 1048576]"),
    ("cluster", "num_gpus", -16, "cluster.num_gpus", "an integer in [1, 1048576]"),
    ("cluster", "num_gpus", 2**20 + 1, "cluster.num_gpus", "an integer in [1, 1048576]"),
    ("cluster", "num_gpus", 16.0, "cluster.num_gpus", "an integer"),
    ("cluster", "gpus_per_node", 0, "cluster.gpus_per_node", "an integer in [1, 1048576]"),
    ("cluster", "hbm_bandwidth_GBps", NAN, "cluster.hbm_bandwidth_GBps", "a number > 0"),
    ("cluster", "hbm_bandwidth_GBps", INF, "cluster.hbm_bandwidth_GBps", "a number > 0"),
    ("cluster", "inter_node_bandwidth_GBps", 0, "cluster.inter_node_bandwidth_GBps", "a number > 0"),
    ("cluster", "inter_node_latency_us", -1.0, "cluster.inter_node_latency_us", "a number >= 0"),
    ("cluster", "inter_node_latency_us", INF, "cluster.inter_node_latency_us", "a number >= 0"),
    ("cluster", "hbm_capacity_GiB", "1.0e308", "cluster.hbm_capacity_GiB", "a number > 0"),
    ("cluster", "memory_reserve_GiB", INF, "cluster.memory_reserve_GiB", "a number >= 0"),
    ("cluster", "memory_reserve_GiB", -2, "cluster.memory_reserve_GiB", "a number >= 0"),
    ("cluster", "fragmentation_fraction", NAN, "cluster.fragmentation_fraction", "a number >= 0"),
    ("cluster", "peak_tflops", {"bf16": INF}, "cluster.peak_tflops.bf16", "a number > 0"),
    ("cluster", "peak_tflops", {"bf16": 1e308}, "cluster.peak_tflops.bf16", "<= 1e+18"),
    ("strategy", "tp", 0, "strategy.tp", "an integer in [1, "),
    ("strategy", "micro_batch_size", -1, "strategy.micro_batch_size", "an integer in [1, "),
    ("strategy", "global_batch_size", NAN, "strategy.global_batch_size", "an integer in [1, "),
    ("strategy", "global_batch_size", "1.0e308", "strategy.global_batch_size", "an integer in [1, "),
    ("strategy", "global_batch_size", 10**12, "strategy.global_batch_size", "an integer in [1, 2147483647]"),
    (None, "seq_length", 0, "seq_length", "an integer in [1, "),
    (None, "seq_length", INF, "seq_length", "an integer in [1, "),
    (None, "model", {**INLINE_MODEL, "num_layers": 0}, "model.num_layers", "an integer in [1, "),
    (None, "model", {**INLINE_MODEL, "hidden_size": -512}, "model.hidden_size", "an integer in [1, "),
    (None, "model", {**INLINE_MODEL, "vocab_size": INF}, "model.vocab_size", "an integer in [1, "),
])
def test_numeric_field_out_of_range_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], section: str | None,
                                                key: str, value: Any, field: str, allowed: str) -> None:
    line = _predict_in_process(tmp_path, capsys, _with(section, key, value))
    assert f"'{field}'" in line and allowed in line, line


def test_json_float_gpu_count_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _predict_in_process(tmp_path, capsys, json.dumps(_with("cluster", "num_gpus", 1e12)))
    assert "'cluster.num_gpus'" in line


def test_a_nan_written_in_yaml_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = GOOD.replace("num_gpus: 16", "num_gpus: 16\n  hbm_bandwidth_GBps: .NaN")
    assert ".NaN" in text
    assert "'cluster.hbm_bandwidth_GBps'" in _predict_in_process(tmp_path, capsys, text)


def test_the_good_spec_still_predicts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(GOOD)
    assert main(["predict", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits"] is True
