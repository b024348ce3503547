"""A profile measured on another device than the run's GPU: one warning on stderr, listed in the prediction."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from costmodel.predict import predict_run
from costmodel.profiles import builtin_profile, device_mismatch, make_profile, write_profile_files
from costmodel.specs import run_spec_from_mapping
from costmodel.specs.notices import ParplanWarning

H100 = "h100-sxm5-80gb"
PEAK, BANDWIDTH = 2e11, 2e10  # a CPU core
RUN = {"model": "llama3.1-8b", "seq_length": 4096, "cluster": {"gpu": H100, "num_gpus": 8},
       "strategy": {"tp": 2, "pp": 1, "micro_batch_size": 1, "global_batch_size": 64}}


def _cpu_profile(directory: Path, device: str = "cpu") -> Path:
    rng = np.random.default_rng(0)
    m, n, k = (np.round(np.exp(rng.uniform(np.log(64), np.log(2048), (120, 3))) / 16) * 16).astype(int).T
    latency = 2.0 * m * n * k / (0.7 * PEAK) + 2.0 * (m * k + n * k + m * n) / BANDWIDTH + 5e-6
    physics = {"peak_flops": {"bf16": PEAK}, "hbm_bandwidth_bytes_per_s": BANDWIDTH, "num_sms": 1}
    write_profile_files(make_profile("laptop", device, {"physics": physics},
                                     {"gemm_bf16": {"m": m, "n": n, "k": k, "latency_s": latency}}), directory)
    return directory


def test_a_builtin_profile_matches_its_gpu():
    profile = builtin_profile(H100)
    assert profile is not None and device_mismatch(profile, H100) is None


def test_a_cpu_profile_for_an_h100_run_warns_and_lists_the_warning(tmp_path):
    directory = _cpu_profile(tmp_path / "cpu-profile")
    with pytest.warns(ParplanWarning, match="measured on 'cpu', not on the run's GPU 'h100-sxm5-80gb'"):
        result = predict_run(run_spec_from_mapping(RUN), directory)
    assert sum("measured on 'cpu'" in w for w in result["warnings"]) == 1


def test_a_profile_recorded_under_the_runs_gpu_name_does_not_warn(tmp_path, recwarn):
    directory = _cpu_profile(tmp_path / "h100-profile", device=H100)
    result = predict_run(run_spec_from_mapping(RUN), directory)
    assert not any("not on the run's GPU" in w for w in result["warnings"])
    assert not [w for w in recwarn.list if issubclass(w.category, ParplanWarning)]


def _cli(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700, exist_ok=True)
    return subprocess.run([sys.executable, "-m", "parplan.cli", *argv], capture_output=True, text=True,
                          env={**os.environ, "PARPLAN_CACHE_DIR": str(cache)}, timeout=300, check=False)


def test_predict_json_warns_on_stderr_once_and_keeps_stdout_json(tmp_path):
    directory = _cpu_profile(tmp_path / "cpu-profile")
    spec = tmp_path / "run.yaml"
    spec.write_text(yaml.safe_dump(RUN), encoding="utf-8")
    proc = _cli(tmp_path, "predict", str(spec), "--profile", str(directory), "--json")
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("parplan: warning: profile 'laptop' was measured on 'cpu'")
    assert any("measured on 'cpu'" in w for w in json.loads(proc.stdout)["warnings"])


def test_search_warns_on_stderr_once(tmp_path):
    directory = _cpu_profile(tmp_path / "cpu-profile")
    proc = _cli(tmp_path, "search", "--model", "llama3.1-8b", "--gpu", H100, "--gpus", "8", "--global-batch-size",
                "64", "--seq-length", "4096", "--trials", "20", "--profile", str(directory), "--json")
    assert proc.returncode == 0, proc.stderr
    assert [line for line in proc.stderr.splitlines() if "measured on 'cpu'" in line] == [
        line for line in proc.stderr.splitlines() if line.startswith("parplan: warning:")]
    assert proc.stderr.count("measured on 'cpu'") == 1
    prediction = json.loads(proc.stdout)["best"]["prediction"]
    assert any("measured on 'cpu'" in w for w in prediction["warnings"])
