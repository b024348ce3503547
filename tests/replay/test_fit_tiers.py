"""replay fit: one collective factor per tier (inside one scale-up domain, across domains) when the traces hold both."""

import json

import numpy as np
import pytest

from costmodel.comm import GroupPlacement
from costmodel.factored_timing import collective_factor_for, factored_timer
from costmodel.predict import timer_for
from costmodel.profiles.factors import FactorProfile, read_factor_profile
from costmodel.replay.operators import operator_seconds
from costmodel.specs.catalog import get_gpu
from parplan.cli import main
from tests.replay.synth import write
from tests.replay.synth_ops import shaped_trace

GPU = "h100-sxm5-80gb"  # scale-up domain of 8: an 8-rank all_reduce stays on NVLink, a 16-rank one crosses


@pytest.fixture(scope="module")
def timer():
    return timer_for(get_gpu(GPU))


def _trace(tmp_path, timer, world, collective, name):
    rng = np.random.default_rng(world)

    def kernel_us(instance):
        scale = collective if instance.table == "nccl" else 1.0
        return 1e6 * operator_seconds([instance], timer)[0] * scale * float(np.exp(rng.normal(0.0, 0.02)))

    return write(tmp_path / name, shaped_trace(kernel_us, world=world))


def test_both_tiers_give_one_factor_each(tmp_path, timer, capsys):
    intra, inter = _trace(tmp_path, timer, 8, 1.3, "w8.json"), _trace(tmp_path, timer, 16, 0.8, "w16.json")
    assert main(["replay", "fit", str(intra), str(inter), "--gpu", GPU, "--out", str(tmp_path / "fit"), "--json"]) == 0
    factors = json.loads(capsys.readouterr().out)["factors"]
    assert factors["collective_intra"] == pytest.approx(1.3, abs=0.03)
    assert factors["collective_inter"] == pytest.approx(0.8, abs=0.03)
    assert 0.8 < factors["collective"] < 1.3  # the pooled one lies between, weighted by time
    profile = read_factor_profile(tmp_path / "fit")
    assert profile is not None
    factored = factored_timer(timer, profile)
    assert collective_factor_for(factored, GroupPlacement.single_domain(8)) == factors["collective_intra"]
    assert collective_factor_for(factored, GroupPlacement.across_domains(8, 2)) == factors["collective_inter"]


def test_one_tier_writes_only_the_collective_factor(tmp_path, timer, capsys):
    path = _trace(tmp_path, timer, 8, 1.3, "w8.json")
    assert main(["replay", "fit", str(path), "--gpu", GPU, "--out", str(tmp_path / "fit"), "--json"]) == 0
    factors = json.loads(capsys.readouterr().out)["factors"]
    assert "collective_intra" not in factors and "collective_inter" not in factors
    profile = read_factor_profile(tmp_path / "fit")
    assert profile is not None and profile.collective(True) == profile.collective(False) == factors["collective"]


def test_a_tiered_profile_slows_only_the_tier_it_measured(timer):
    profile = FactorProfile("net", GPU, {"collective_inter": 3.0})
    factored = factored_timer(timer, profile)
    assert collective_factor_for(factored, GroupPlacement.single_domain(8)) == 1.0
    assert collective_factor_for(factored, GroupPlacement.across_domains(8, 4)) == 3.0
    assert collective_factor_for(timer, GroupPlacement.across_domains(8, 4)) == 1.0  # no factors: untouched


def test_predict_applies_the_tier_of_each_group(tmp_path):
    """16 H100s, tp 2 inside a node, dp 8 across two: an inter-node factor of 3 slows the data-parallel
    gradient sync and leaves tensor-parallel communication (on NVLink) as it was."""
    from costmodel.predict import predict_run
    from costmodel.profiles.factors import write_factor_profile
    from costmodel.specs.runspec import run_spec_from_mapping

    write_factor_profile(FactorProfile("net", GPU, {"collective_inter": 3.0}), tmp_path / "net")
    run = run_spec_from_mapping({"model": "llama3.1-8b", "seq_length": 4096,
                                 "cluster": {"gpu": GPU, "num_gpus": 16},
                                 "strategy": {"tp": 2, "pp": 1, "dp": 8, "micro_batch_size": 1,
                                              "global_batch_size": 64}})
    base, slow = predict_run(run)["breakdown"], predict_run(run, tmp_path / "net")["breakdown"]
    assert slow["tp_comm_s"] == base["tp_comm_s"] > 0
    assert slow["dp_comm_exposed_s"] > 2.0 * base["dp_comm_exposed_s"] > 0
