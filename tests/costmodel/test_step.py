"""End-to-end step time: contract fields, breakdown sums, and sanity properties."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.predict import predict_run, timer_for
from costmodel.specs import ClusterSpec, RunSpec, Strategy, get_gpu, get_model
from costmodel.llm.step import BREAKDOWN_KEYS, predict_step
from costmodel.timing import OperatorTimer

CONTRACT = {"fits", "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu",
            "peak_memory_gib", "memory", "breakdown", "violations", "step_time_s_interval", "warnings"}


def _run(model: str = "llama3.1-8b", gpu: str = "h100-sxm5-80gb", tp: int = 2, pp: int = 2, dp: int = 4,
         cp: int = 1, ep: int = 1, vpp: int = 1, gbs: int = 64, mbs: int = 1, seq: int = 4096,
         recompute: str = "selective", zero: int = 1) -> RunSpec:
    strategy = Strategy(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp, micro_batch_size=mbs, global_batch_size=gbs,
                        recompute=recompute, zero_stage=zero)
    g = get_gpu(gpu)
    cluster = ClusterSpec(gpu=g, num_gpus=tp * pp * dp * cp, gpus_per_node=g.gpus_per_node)
    return RunSpec(model=get_model(model), cluster=cluster, strategy=strategy, seq_length=seq)


CASES = [
    _run(),
    _run(tp=8, pp=4, dp=2, vpp=2, gbs=128, model="llama3.1-70b", seq=8192),
    _run(tp=1, pp=1, dp=8, zero=3, gbs=32),
    _run(model="mixtral-8x7b", tp=2, pp=2, dp=8, ep=4, gbs=64),
    _run(tp=2, pp=1, dp=4, cp=2, seq=16384, gbs=16),
    _run(gpu="a100-sxm4-80gb", model="gpt3-175b", tp=8, pp=8, dp=4, vpp=3, gbs=256, seq=2048, recompute="full"),
    _run(model="llama3.1-405b", tp=8, pp=16, dp=1, gbs=32, seq=8192, recompute="full"),  # uneven stages
    _run(gpu="mi300x", tp=8, pp=1, dp=2, gbs=32),  # no built-in profile: analytic models only (keep last)
]


@pytest.mark.parametrize("run", CASES, ids=range(len(CASES)))
def test_breakdown_adds_up_to_step_time(run: RunSpec) -> None:
    pred = predict_step(run, timer_for(run.cluster.gpu))
    assert set(pred.breakdown) == set(BREAKDOWN_KEYS)
    assert all(v >= 0 for v in pred.breakdown.values())
    assert sum(pred.breakdown.values()) == pytest.approx(pred.step_time_s, rel=1e-3)


@pytest.mark.parametrize("run", CASES, ids=range(len(CASES)))
def test_contract_fields(run: RunSpec) -> None:
    out = predict_run(run)
    assert CONTRACT <= set(out)
    lo, hi = out["step_time_s_interval"]
    assert lo < out["step_time_s"] < hi
    assert out["tokens_per_s"] == pytest.approx(run.tokens_per_step / out["step_time_s"])
    assert 0 < out["mfu"] < 1


def test_no_profile_says_so() -> None:
    out = predict_run(CASES[-1])
    assert out["profile"] is None
    assert any("no sampled table" in w for w in out["warnings"])


def test_parallelism_adds_its_communication() -> None:
    b = predict_step(CASES[1], timer_for(CASES[1].cluster.gpu)).breakdown
    assert b["tp_comm_s"] > 0 and b["pp_bubble_s"] > 0 and b["pp_comm_s"] > 0
    assert predict_step(CASES[3], timer_for(CASES[3].cluster.gpu)).breakdown["ep_comm_s"] > 0
    assert predict_step(CASES[4], timer_for(CASES[4].cluster.gpu)).breakdown["cp_comm_s"] >= 0


def test_overlap_flags_hide_communication() -> None:
    run = CASES[1]
    timer = timer_for(run.cluster.gpu)
    exposed = predict_step(run, timer)
    hidden = predict_step(replace(run, strategy=replace(run.strategy, tp_comm_overlap=True)), timer)
    # userbuffers overlap hides most TP comm, never all of it (costmodel.llm.tp_comm: drains, chunk GEMMs, SMs)
    assert 0 < hidden.breakdown["tp_comm_s"] < exposed.breakdown["tp_comm_s"]
    assert hidden.step_time_s < exposed.step_time_s


def _analytic(run: RunSpec) -> float:
    """Step time with the analytic models only (a profile's measured times do not move with datasheet figures)."""
    return predict_step(run, OperatorTimer(run.cluster.gpu, None)).step_time_s


@settings(max_examples=25, deadline=None)
@given(factor=st.floats(1.1, 4.0), field=st.sampled_from(["peak", "hbm", "intra", "inter"]),
       case=st.sampled_from(range(len(CASES))))
def test_faster_hardware_never_slower(factor: float, field: str, case: int) -> None:
    run = CASES[case]
    g = run.cluster.gpu
    faster = {
        "peak": {"peak_flops": tuple((d, v * factor) for d, v in g.peak_flops)},
        "hbm": {"hbm_bandwidth_bytes_per_s": g.hbm_bandwidth_bytes_per_s * factor},
        "intra": {"intra_node_bandwidth_bytes_per_s": g.intra_node_bandwidth_bytes_per_s * factor},
        "inter": {"inter_node_bandwidth_bytes_per_s": g.inter_node_bandwidth_bytes_per_s * factor},
    }[field]
    quicker = replace(run, cluster=replace(run.cluster, gpu=replace(g, **faster)))
    assert _analytic(quicker) <= _analytic(run) * (1 + 1e-9)


@settings(max_examples=20, deadline=None)
@given(mult=st.sampled_from([1, 2, 4, 8]))
def test_more_dp_replicas_never_raise_compute_per_step(mult: int) -> None:
    base = _run(tp=2, pp=2, dp=2, gbs=128)
    wider = _run(tp=2, pp=2, dp=2 * mult, gbs=128)
    timer = timer_for(base.cluster.gpu)
    assert predict_step(wider, timer).breakdown["compute_s"] <= predict_step(base, timer).breakdown["compute_s"]


def test_bubble_share_falls_with_more_microbatches() -> None:
    timer = timer_for(CASES[1].cluster.gpu)
    shares = []
    for gbs in (16, 32, 64, 256):
        b = predict_step(_run(tp=8, pp=4, dp=2, model="llama3.1-70b", seq=8192, gbs=gbs), timer)
        shares.append(b.breakdown["pp_bubble_s"] / b.step_time_s)
    assert shares == sorted(shares, reverse=True)


def test_deterministic() -> None:
    assert predict_run(CASES[1]) == predict_run(CASES[1])


def test_uneven_stages_time_their_own_layers() -> None:
    from costmodel.llm.compute import pipeline_compute

    run = _run(model="llama3.1-405b", tp=8, pp=16, dp=1, gbs=32, seq=8192, recompute="full")
    computes = pipeline_compute(run, OperatorTimer(run.cluster.gpu, None))
    # stage 0: 7 layers and the embedding; stage 1: 8 layers; the last: 7 layers and the LM head
    per_layer = computes[1].forward_s / 8
    assert computes[0].forward_s == pytest.approx(7 * per_layer, rel=0.02)
    assert computes[0].forward_s < computes[1].forward_s
    assert computes[1].forward_s == computes[8].forward_s
