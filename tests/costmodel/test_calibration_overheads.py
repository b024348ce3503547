"""Named overheads (kernel launch, data-parallel stragglers) and the one global calibration factor."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from costmodel import calibration
from costmodel.llm.overheads import (
    LAUNCH_S_PER_KERNEL,
    expected_max_standard_normal,
    kernels_per_layer,
    launch_exposed_s,
    layer_launch_exposed_s,
    straggler_fraction,
)
from costmodel.specs import ClusterSpec, RunSpec, Strategy, get_gpu, get_model
from costmodel.llm.step import predict_step
from costmodel.timing import OperatorTimer


def _run(model: str = "llama3.1-8b", tp: int = 1, pp: int = 1, dp: int = 1, mbs: int = 1, seq: int = 4096,
         recompute: str = "selective") -> RunSpec:
    strategy = Strategy(tp=tp, pp=pp, dp=dp, micro_batch_size=mbs, global_batch_size=mbs * dp * 2,
                        recompute=recompute, zero_stage=1 if dp > 1 else 0)
    g = get_gpu("h100-sxm5-80gb")
    cluster = ClusterSpec(gpu=g, num_gpus=tp * pp * dp, gpus_per_node=g.gpus_per_node)
    return RunSpec(model=get_model(model), cluster=cluster, strategy=strategy, seq_length=seq)


def _predict(run: RunSpec, scale: float = 1.0):  # noqa: ANN202 - StepPrediction
    return predict_step(run, OperatorTimer(run.cluster.gpu, None), scale)


def test_launch_is_hidden_behind_longer_gpu_work() -> None:
    assert launch_exposed_s(30, gpu_s=1e-3) == 0.0
    assert launch_exposed_s(30, gpu_s=50e-6) == pytest.approx(30 * LAUNCH_S_PER_KERNEL - 50e-6)


def test_full_recompute_launches_the_forward_again_in_backward() -> None:
    fwd, bwd = kernels_per_layer(_run())
    fwd_full, bwd_full = kernels_per_layer(_run(recompute="full"))
    assert fwd_full == fwd and fwd > 0
    assert bwd_full > bwd + fwd // 2  # the recomputed forward kernels launch inside the backward


def test_tiny_layers_are_launch_bound_and_large_ones_are_not() -> None:
    tiny = _run(model="gpt3-125m", seq=128)
    large = _run(mbs=4, seq=8192)
    for run, exposed in ((tiny, True), (large, False)):
        timer = OperatorTimer(run.cluster.gpu, None)
        assert (layer_launch_exposed_s(run, timer, run.model.num_layers, 0) > 0) is exposed
    timer = OperatorTimer(tiny.cluster.gpu, None)
    assert layer_launch_exposed_s(tiny, timer, 24, 0) == pytest.approx(2 * layer_launch_exposed_s(tiny, timer, 12, 0))


def test_expected_maximum_of_normals_matches_simulation() -> None:
    rng = np.random.default_rng(0)
    assert expected_max_standard_normal(1) == 0.0
    for n in (2, 8, 64, 1024):
        simulated = rng.standard_normal((4000, n)).max(axis=1).mean()
        assert expected_max_standard_normal(n) == pytest.approx(simulated, rel=0.05)


def test_each_doubling_of_replicas_costs_less_than_the_one_before() -> None:
    losses = [straggler_fraction(2 ** k) for k in range(0, 15)]
    steps = np.diff(losses)
    assert losses[0] == 0.0 and all(steps > 0)
    assert all(np.diff(steps[1:]) < 0)  # concave in log2(replicas) beyond the first doubling
    assert 0.01 < straggler_fraction(1024) < 0.05  # "a few %" at a thousand replicas, not tens of %


def test_no_straggler_term_without_data_parallelism() -> None:
    run = _run(mbs=4, seq=8192)  # large layers: no exposed launch either
    assert _predict(run).breakdown["other_s"] == pytest.approx(0.0, abs=1e-12)


def test_straggler_term_is_its_fraction_of_the_rest_of_the_step() -> None:
    run = _run(mbs=4, seq=8192, dp=64)
    b = _predict(run).breakdown
    rest = sum(v for k, v in b.items() if k != "other_s")
    assert b["other_s"] == pytest.approx(straggler_fraction(64) * rest, rel=1e-9)


def test_global_factor_stretches_forward_and_backward_not_the_optimizer() -> None:
    run = _run(mbs=4, seq=8192)  # dp = 1, pp = 1: no straggler, no exposed launch, one stage
    b = _predict(run, 1.2).breakdown
    assert b["optimizer_s"] > 0
    assert b["other_s"] == pytest.approx(0.2 * b["compute_s"], rel=1e-9)
    assert _predict(run, 1.2).breakdown["optimizer_s"] == pytest.approx(_predict(run, 1.0).breakdown["optimizer_s"])


def test_shipped_calibration_is_one_global_factor() -> None:
    cal = calibration.calibration()
    assert set(cal["framework"]) == {"compute_scale"}
    assert calibration.compute_scale() == pytest.approx(float(cal["framework"]["compute_scale"]))
    assert 0.9 <= calibration.compute_scale() <= 1.3  # inside the fitted grid
    assert all(set(g) == {"n", "scale", "held_out_mape"} for g in cal["fit"]["groups"].values())


def test_uncalibrated_factor_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calibration, "calibration", lambda: {})
    assert calibration.compute_scale() == 1.0


def test_faster_gpu_never_slower_with_launch_exposed() -> None:
    run = _run(seq=128)
    g = run.cluster.gpu
    quicker = replace(run, cluster=replace(run.cluster, gpu=replace(
        g, peak_flops=tuple((d, v * 4) for d, v in g.peak_flops), hbm_bandwidth_bytes_per_s=4 * g.hbm_bandwidth_bytes_per_s)))
    assert _predict(quicker).step_time_s <= _predict(run).step_time_s
