"""replay fit: factors of parplan's operator times against a trace, and the factor profile predict / search take."""

import json

import numpy as np
import pytest
import yaml

from costmodel.predict import predict_run, timer_for
from costmodel.profiles.factors import FactorProfile, profile_content_hash, read_factor_profile, write_factor_profile
from costmodel.replay.operators import operator_seconds
from costmodel.specs.catalog import get_gpu
from costmodel.specs.errors import SpecError
from costmodel.specs.runspec import run_spec_from_mapping as parse_run_spec
from parplan.cli import main
from tests.replay.synth import write
from tests.replay.synth_ops import shaped_trace

GPU = "h100-sxm5-80gb"
RUN = {"model": "llama3.1-8b", "seq_length": 4096, "cluster": {"gpu": GPU, "num_gpus": 8},
       "strategy": {"tp": 2, "pp": 1, "dp": 4, "micro_batch_size": 1, "global_batch_size": 64}}


@pytest.fixture(scope="module")
def timer():
    return timer_for(get_gpu(GPU))


def _trace(tmp_path, timer, gemm=1.0, collective=1.0, noise=0.0, name="t.json"):
    """Kernels at parplan's own times x the family's factor x seeded log-normal noise."""
    rng = np.random.default_rng(0)
    factor = {"gemm": gemm, "nccl": collective}

    def kernel_us(instance):
        scale = factor.get("gemm" if instance.table.startswith("gemm") else instance.table, 1.0)
        return 1e6 * operator_seconds([instance], timer)[0] * scale * float(np.exp(rng.normal(0.0, noise)))

    return write(tmp_path / name, shaped_trace(kernel_us))


def test_gemms_20_percent_slower_give_a_gemm_factor_of_1_2(tmp_path, timer, capsys):
    path = _trace(tmp_path, timer, gemm=1.2, noise=0.05)
    assert main(["replay", "fit", str(path), "--gpu", GPU, "--out", str(tmp_path / "fit"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["factors"]["gemm"] == pytest.approx(1.2, abs=0.02)
    assert out["factors"]["elementwise"] == pytest.approx(1.0, abs=0.05)
    assert out["families"]["gemm"]["operators"] == 48 and out["families"]["gemm"]["p10"] < 1.2 < \
        out["families"]["gemm"]["p90"]  # the noise shows in the spread, not in the factor
    stored = read_factor_profile(tmp_path / "fit")
    assert stored is not None and stored.device == GPU and stored.factor("gemm") == out["factors"]["gemm"]


def test_human_output_prints_factors_and_spread(tmp_path, timer, capsys):
    path = _trace(tmp_path, timer, gemm=1.2)
    assert main(["replay", "fit", str(path), "--gpu", GPU, "--out", str(tmp_path / "fit")]) == 0
    text = capsys.readouterr().out
    assert "gemm" in text and "1.200" in text and "p90" in text and "--profile" in text


def test_factor_profile_scales_the_predicted_compute(tmp_path):
    write_factor_profile(FactorProfile("all", GPU, {"gemm": 1.2, "attention": 1.2, "elementwise": 1.2}),
                         tmp_path / "all")
    write_factor_profile(FactorProfile("gemm", GPU, {"gemm": 1.2}), tmp_path / "gemm")
    run = parse_run_spec(RUN)
    base = predict_run(run)
    scaled, gemm_only = predict_run(run, tmp_path / "all"), predict_run(run, tmp_path / "gemm")
    assert scaled["breakdown"]["compute_s"] == pytest.approx(1.2 * base["breakdown"]["compute_s"], rel=1e-9)
    assert base["breakdown"]["compute_s"] < gemm_only["breakdown"]["compute_s"] < scaled["breakdown"]["compute_s"]
    assert "trace factors" in scaled["profile"]


def test_collective_factor_slows_tensor_parallel_communication(tmp_path):
    write_factor_profile(FactorProfile("net", GPU, {"collective": 3.0}), tmp_path / "net")
    run = parse_run_spec(RUN)
    base, slow = predict_run(run), predict_run(run, tmp_path / "net")
    assert slow["breakdown"]["tp_comm_s"] > 2.0 * base["breakdown"]["tp_comm_s"] > 0
    assert slow["breakdown"]["compute_s"] == base["breakdown"]["compute_s"]


def test_search_with_the_fitted_profile_ranks_by_the_corrected_times(tmp_path, timer, capsys):
    import parplan

    slow_net = _trace(tmp_path, timer, collective=3.0, name="net.json")
    assert main(["replay", "fit", str(slow_net), "--gpu", GPU, "--out", str(tmp_path / "net"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["factors"]["collective"] == pytest.approx(3.0, rel=1e-6)
    problem = {"model": "llama3.1-8b", "gpu": GPU, "num_gpus": 8, "global_batch_size": 64, "seq_length": 4096,
               "allow": {"tp": [2, 4, 8]}, "fix": {"pp": 1, "cp": 1, "recompute": "none", "zero_stage": 1,
                                                   "micro_batch_size": 1, "sequence_parallel": True}}
    ranked = {}
    for label, profile in (("base", None), ("net", tmp_path / "net")):
        out = parplan.search(problem, trials=12, sampler="exhaustive", profile_dir=profile)
        ranked[label] = [(e.strategy, e.step_time_s) for e in out.result.feasible]
    assert [s for s, _ in ranked["net"]] != [] and len(ranked["net"]) == len(ranked["base"])
    base = dict(ranked["base"])
    # every strategy slower, the more so the more tensor-parallel communication it does
    slowdown = {s.tp: t / base[s] for s, t in ranked["net"]}
    assert 1.0 < slowdown[2] < slowdown[4] < slowdown[8]
    first = ranked["net"][0][0]
    assert ranked["net"][0][1] == pytest.approx(
        predict_run(out.result.problem.run(first), tmp_path / "net")["step_time_s"], rel=1e-9)


def test_factor_profile_is_validated(tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "metadata.yaml").write_text(yaml.safe_dump(
        {"kind": "trace-factors", "device": GPU, "factors": {"gemm": -1}}))
    with pytest.raises(SpecError, match="factors.gemm"):
        read_factor_profile(tmp_path / "bad")
    (tmp_path / "bad" / "metadata.yaml").write_text(yaml.safe_dump(
        {"kind": "trace-factors", "device": GPU, "factors": {"matmul": 1.1}}))
    with pytest.raises(SpecError, match="matmul"):
        read_factor_profile(tmp_path / "bad")
    assert read_factor_profile(tmp_path) is None  # not a profile at all


def test_fit_refuses_to_overwrite_what_it_did_not_write(tmp_path, timer, capsys):
    path = _trace(tmp_path, timer)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    assert main(["replay", "fit", str(path), "--gpu", GPU, "--out", str(tmp_path / "mine")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("parplan: error:") and err.count("\n") == 1
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]
    assert main(["replay", "fit", str(path), "--out", str(tmp_path / "x")]) == 2
    assert "--gpu" in capsys.readouterr().err


def test_content_hash_changes_with_the_factors(tmp_path):
    write_factor_profile(FactorProfile("a", GPU, {"gemm": 1.2}), tmp_path / "a")
    first = profile_content_hash(tmp_path / "a")
    write_factor_profile(FactorProfile("a", GPU, {"gemm": 1.3}), tmp_path / "a")
    assert profile_content_hash(tmp_path / "a") != first


def test_gpu_what_if_retimes_kernels_at_parplans_operator_times(tmp_path, timer, capsys):
    """A trace whose GEMMs ran 1.2x parplan's times, replayed with gpu=H100, matches one recorded at parplan's times."""
    slow, exact = _trace(tmp_path, timer, gemm=1.2, name="slow.json"), _trace(tmp_path, timer, name="exact.json")
    assert main(["replay", str(exact), "--json"]) == 0
    measured = [it["measured_s"] for it in json.loads(capsys.readouterr().out)["iterations"]]
    assert main(["replay", str(slow), "--what-if", f"gpu={GPU}", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["iterations"]
    assert [r["replayed_s"] for r in rows] == pytest.approx(measured, rel=0.01)
    assert all(r["baseline_replayed_s"] > r["replayed_s"] for r in rows)
    assert main(["replay", str(exact), "--what-if", "gpu=a100-sxm4-80gb", "--json"]) == 0
    a100 = [r["replayed_s"] for r in json.loads(capsys.readouterr().out)["iterations"]]
    assert all(a > h for a, h in zip(a100, measured))  # parplan's A100 GEMMs are slower than its H100 ones


def test_gpu_what_if_notes_what_was_retimed(tmp_path, timer, capsys):
    path = _trace(tmp_path, timer)
    assert main(["replay", str(path), "--what-if", f"gpu={GPU}"]) == 0
    assert "100.0% of recorded GPU time in recognised operators" in capsys.readouterr().out


def test_a_study_keys_its_problems_by_the_factor_profile(tmp_path):
    from studies.problems import expand
    from studies.spec import load_study
    from tests.studies.conftest import TINY, write_study

    write_factor_profile(FactorProfile("f", GPU, {"gemm": 1.2}), tmp_path / "f")
    study = write_study(tmp_path, {**TINY, "search": {**TINY["search"], "profile": "f"}}, "factored.yaml")
    first = [p.key for p in expand(load_study(study))]
    write_factor_profile(FactorProfile("f", GPU, {"gemm": 1.3}), tmp_path / "f")
    assert set(p.key for p in expand(load_study(study))).isdisjoint(first)  # new factors: searched again
