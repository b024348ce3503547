"""``parplan profile fit`` and a profile's own physics, on synthetic measured profiles (no torch needed)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from costmodel.predictors import (
    GemmPredictor,
    OperatorPredictor,
    cache_dir,
    device_gpu,
    fitted_profile,
    forget_fitted,
)
from costmodel.predictors._fitted import cache_key
from costmodel.profiles import load_profile, make_profile, write_profile_files
from costmodel.profiling.fit import fit_directory
from costmodel.profiling.journal import USER_FIT_SAMPLING
from costmodel.specs import get_gpu
from costmodel.specs.errors import SpecError

PEAK, BANDWIDTH = 2e11, 2e10  # a CPU core: 200 GFLOP/s bf16, 20 GB/s
PHYSICS = {"peak_flops": {"bf16": PEAK}, "hbm_bandwidth_bytes_per_s": BANDWIDTH, "num_sms": 1,
           "intra_node_bandwidth_bytes_per_s": 5e9, "intra_node_latency_s": 2e-5, "source": "synthetic"}


def _synthetic_tables(rng: np.random.Generator) -> dict:
    dims = (np.round(np.exp(rng.uniform(np.log(64), np.log(2048), (300, 3))) / 16) * 16).astype(int)
    m, n, k = dims.T
    gemm = 2.0 * m * n * k / (0.7 * PEAK) + 2.0 * (m * k + n * k + m * n) / BANDWIDTH + 5e-6
    elements = (2 ** rng.uniform(14, 24, 40)).astype(int) // 1024 * 1024
    memory_time = 4.0 * elements / (0.6 * BANDWIDTH) + 3e-6
    sizes = 2 ** np.arange(10, 25)
    return {
        "gemm_bf16": {"m": m, "n": n, "k": k, "latency_s": gemm * rng.lognormal(0, 0.02, m.size)},
        "memory": {"kind": ["norm"] * elements.size, "phase": ["fwd"] * elements.size, "elements": elements,
                   "bytes": 4 * elements, "latency_s": memory_time * rng.lognormal(0, 0.02, elements.size)},
        "nccl": {"op": ["all_reduce"] * sizes.size, "num_gpus": [2] * sizes.size, "message_bytes": sizes,
                 "latency_s": 4e-5 + sizes / 5e9},
    }


@pytest.fixture
def measured_dir(tmp_path):
    tables = _synthetic_tables(np.random.default_rng(0))
    profile = make_profile("laptop: cpu (synthetic)", "cpu", {"physics": PHYSICS, "fit_sampling": USER_FIT_SAMPLING},
                           tables)
    write_profile_files(profile, tmp_path / "laptop")
    return tmp_path / "laptop"


def test_fit_reports_held_out_error_per_family_and_stores_beside(measured_dir):
    report = fit_directory(measured_dir)
    errors = {e.family: e for e in report.errors}
    assert set(errors) == {"gemm_bf16", "memory_norm_fwd", "nccl_all_reduce"}
    assert errors["gemm_bf16"].n_test == 75  # a quarter of 300 rows held out
    assert errors["gemm_bf16"].mape < 0.05 < errors["gemm_bf16"].roofline_mape
    assert errors["memory_norm_fwd"].mape < 0.05
    assert report.stored.parent == measured_dir / "fitted"
    assert (measured_dir / "fitted" / "report.yaml").is_file()


def test_profile_physics_make_the_fit_independent_of_the_runs_gpu(measured_dir):
    profile = load_profile(measured_dir)
    h100, a100 = get_gpu("h100-sxm5-80gb"), get_gpu("a100-sxm4-80gb")
    assert cache_key(profile, h100) == cache_key(profile, a100) == cache_key(profile, None)
    assert device_gpu(profile, h100).peak("bf16") == PEAK
    assert device_gpu(profile, h100).hbm_capacity_bytes == h100.hbm_capacity_bytes  # not measured: the run's


def test_fit_stores_only_data_in_the_profile_and_the_fit_in_the_private_cache(measured_dir, monkeypatch, tmp_path):
    report = fit_directory(measured_dir)
    assert sorted(p.name for p in (measured_dir / "fitted").iterdir()) == ["report.yaml"]
    assert report.cached is not None and report.cached.parent == cache_dir()
    forget_fitted()
    calls: list[str] = []
    original = OperatorPredictor.fit
    monkeypatch.setattr(OperatorPredictor, "fit", lambda self, X, y: calls.append("fit") or original(self, X, y))
    fitted = fitted_profile(load_profile(measured_dir), get_gpu("h100-sxm5-80gb"))
    assert calls == []  # the private cache's fit
    seconds, inside = fitted.predict_memory("norm", "fwd", [2**18, 2**40])
    assert inside.tolist() == [True, False]
    assert seconds[0] == pytest.approx(4.0 * 2**18 / (0.6 * BANDWIDTH) + 3e-6, rel=0.1)
    forget_fitted()
    monkeypatch.setenv("PARPLAN_CACHE_DIR", str(tmp_path / "another-users-cache"))
    fitted_profile(load_profile(measured_dir), get_gpu("h100-sxm5-80gb"))
    assert len(calls) == len(report.errors)  # another user refits from the tables


def test_profile_without_physics_needs_a_gpu(tmp_path):
    tables = {"gemm_bf16": {"m": [64, 128, 256], "n": [64] * 3, "k": [64] * 3, "latency_s": [1e-5, 2e-5, 4e-5]}}
    write_profile_files(make_profile("trace", "cpu", {}, tables), tmp_path / "trace")
    with pytest.raises(SpecError, match="'gpu' parameter must be a catalog GPU name") as info:
        fit_directory(tmp_path / "trace")
    assert "peak_flops" in str(info.value) and "\n" not in str(info.value)


def test_invalid_physics_is_a_one_line_error():
    with pytest.raises(SpecError, match="metadata.physics.hbm_bandwidth_bytes_per_s"):
        make_profile("x", "cpu", {"physics": {"hbm_bandwidth_bytes_per_s": -1}}, {})
    with pytest.raises(SpecError, match="metadata.physics.clock"):
        make_profile("x", "cpu", {"physics": {"clock": 1}}, {})


def test_cli_fit_prints_the_held_out_error(measured_dir, cli, capsys):
    assert cli(["profile", "fit", str(measured_dir)]) == 0
    out = capsys.readouterr().out
    assert "laptop: cpu (synthetic)" in out
    line = next(row for row in out.splitlines() if row.startswith("gemm_bf16"))
    assert line.split()[1:3] == ["225", "75"] and line.split()[3].endswith("%")
    assert "held-out report written to" in out and "fitted predictors cached in" in out
    assert cli(["profile", "fit", str(measured_dir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {row["family"] for row in data["families"]} == {"gemm_bf16", "memory_norm_fwd", "nccl_all_reduce"}


@pytest.mark.parametrize(("argv", "message"), [
    (["profile", "run", "--device", "cpu", "--ops", "gemm,conv", "--out", "x"], "'ops' parameter"),
    (["profile", "run", "--device", "cpu", "--out", "x", "--for-search", "model=gpt3-125m"], "for-search gpu"),
    (["profile", "run", "--device", "cpu", "--out", "x", "--for-search", "size=3"], "'for-search' parameter"),
    (["profile", "fit", "/no/such/dir"], "'profile' parameter must be a directory"),
    (["profile", "fit", "/no/such/dir", "--gpu", "h900"], "'cluster.gpu' parameter"),
])
def test_cli_errors_are_one_line_with_exit_2(argv, message, cli, capsys):
    assert cli(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_timer_uses_a_profiles_memory_table(measured_dir):
    """A user profile's measured norm kernels replace the analytic bandwidth fit (and drop its note)."""
    from costmodel.ops import memory_op
    from costmodel.timing import NOTE_MEMORY, OperatorTimer

    gpu = get_gpu("h100-sxm5-80gb")
    fitted = fitted_profile(load_profile(measured_dir), gpu)
    norm = memory_op("input_norm.fwd", "fwd", 2**18, 4 * 2**18)
    timed = OperatorTimer(gpu, fitted).time_ops([norm])
    assert timed.sources == ["profile"] and NOTE_MEMORY not in timed.notes
    assert timed.seconds[0] == pytest.approx(4.0 * 2**18 / (0.6 * BANDWIDTH) + 3e-6, rel=0.1)
    residual = memory_op("attn_residual.fwd", "fwd", 2**18, 6 * 2**18)  # no measured residual kernels
    assert OperatorTimer(gpu, fitted).time_ops([residual]).sources == ["analytic"]


@pytest.fixture
def noisy_dir(tmp_path):
    """A GEMM table of pure measurement noise around the roofline: the fit chases the noise."""
    rng = np.random.default_rng(2)
    m, n, k = (np.round(np.exp(rng.uniform(np.log(64), np.log(2048), (200, 3))) / 16) * 16).astype(int).T
    roofline = GemmPredictor(peak_flops=PEAK, hbm_bandwidth_bytes_per_s=BANDWIDTH, num_sms=1).roofline_s(
        np.column_stack([m, n, k]).astype(float))
    tables = {"gemm_bf16": {"m": m, "n": n, "k": k, "latency_s": roofline * rng.lognormal(0, 0.5, m.size)}}
    physics = {key: PHYSICS[key] for key in ("peak_flops", "hbm_bandwidth_bytes_per_s", "num_sms")}
    write_profile_files(make_profile("noisy", "cpu", {"physics": physics, "fit_sampling": USER_FIT_SAMPLING}, tables),
                        tmp_path / "noisy")
    return tmp_path / "noisy"


def test_a_fit_worse_than_the_roofline_is_stored_marked_and_not_used(noisy_dir):
    report = fit_directory(noisy_dir)
    (error,) = report.errors
    assert error.mape > error.roofline_mape  # the premise: 64% against 46%
    assert report.unused == ("gemm_bf16",) and report.fitted.families == ()
    stored = yaml.safe_load(report.stored.read_text(encoding="utf-8"))
    assert stored["families"]["gemm_bf16"]["used"] is False
    with pytest.raises(KeyError, match="worse than the roofline"):
        report.fitted.predict_gemm(256, 256, 256, "bf16")


def test_a_fit_worse_than_the_roofline_gives_the_labelled_fall_back(noisy_dir):
    from costmodel.llm.decompose import stage_ops
    from costmodel.predict import predict_run, timer_for
    from costmodel.specs import run_spec_from_mapping

    fit_directory(noisy_dir)
    run = run_spec_from_mapping({
        "model": {"name": "tiny", "num_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
                  "ffn_hidden_size": 1024, "vocab_size": 1024, "seq_length": 512},
        "seq_length": 512, "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 8},
        "strategy": {"tp": 1, "pp": 1, "micro_batch_size": 1, "global_batch_size": 8}})
    with pytest.warns(UserWarning, match="measured on 'cpu'"):
        result = predict_run(run, noisy_dir)
    (note,) = [w for w in result["warnings"] if "gemm_bf16 fit" in w]
    assert "not used" in note and "fall-back" in note
    timed = timer_for(run.cluster.gpu, noisy_dir).time_ops(stage_ops(run, 0))
    gemm_sources = {source for op, source in zip(timed.ops, timed.sources, strict=True) if op.family == "gemm"}
    assert gemm_sources == {"roofline"}


def test_use_worse_fits_in_the_metadata_keeps_the_fit(noisy_dir):
    metadata = yaml.safe_load((noisy_dir / "metadata.yaml").read_text(encoding="utf-8"))
    (noisy_dir / "metadata.yaml").write_text(yaml.safe_dump({**metadata, "use_worse_fits": True}), encoding="utf-8")
    report = fit_directory(noisy_dir)
    assert report.unused == () and report.fitted.families == ("gemm_bf16",)
    seconds, inside = report.fitted.predict_gemm(256, 256, 256, "bf16")
    assert bool(inside) and float(seconds) > 0


def test_use_worse_fits_must_be_a_bool():
    with pytest.raises(SpecError, match="metadata.use_worse_fits"):
        make_profile("x", "cpu", {"use_worse_fits": "yes"}, {})


def test_cli_fit_warns_about_a_fit_worse_than_the_roofline(noisy_dir, cli, capsys):
    assert cli(["profile", "fit", str(noisy_dir)]) == 0
    captured = capsys.readouterr()
    (warning,) = captured.err.splitlines()
    assert warning.startswith("parplan: warning: ") and "gemm_bf16 fit" in warning and "not used" in warning
    line = next(row for row in captured.out.splitlines() if row.startswith("gemm_bf16"))
    assert line.split()[-1] == "NO"
    assert cli(["profile", "fit", str(noisy_dir), "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["families"][0]["used"] is False and len(data["warnings"]) == 1
    assert captured.err.count("parplan: warning:") == 1
