"""The collective sweep: two local gloo ranks time every collective, and the table fits."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("torch")

from costmodel.profiles import load_profile  # noqa: E402
from costmodel.profiling import SamplerConfig, fit_directory, run_profile  # noqa: E402
from costmodel.profiling.comm_worker import COMM_OPS, comm_plan, message_sizes  # noqa: E402

BUDGET_S = 16.0


def test_message_sizes_go_coarse_to_fine():
    sizes = message_sizes(2**10, 2**20)
    assert sizes[:2] == [2**10, 2**20]  # both ends first
    assert sorted(sizes) == [2**e for e in range(10, 21)]
    assert sizes[2] == 2**15  # then the middle


def test_plan_has_send_recv_on_pairs_only():
    plan = comm_plan(8, [1024])
    assert {(op, g) for op, g, _ in plan if op == "send_recv"} == {("send_recv", 2)}
    assert {g for _, g, _ in plan} == {2, 4, 8}


def test_two_process_gloo_profile_runs_and_fits(tmp_path):
    out = tmp_path / "gloo"
    start = time.monotonic()
    report = run_profile(SamplerConfig(out=out, device="cpu", ops=("comm",), budget_s=BUDGET_S, num_procs=2))
    elapsed = time.monotonic() - start
    assert report.comm is not None and report.comm.error is None
    assert report.comm.backend == "gloo" and report.comm.ranks == 2
    assert elapsed <= BUDGET_S + 5.0  # the last collective and the ranks' shutdown
    profile = load_profile(out)
    nccl = profile.tables["nccl"]
    assert set(nccl["op"].tolist()) == set(COMM_OPS)
    assert set(nccl["num_gpus"].tolist()) == {2}
    for op in COMM_OPS:
        sizes = nccl["message_bytes"][nccl["op"] == op]
        assert sizes.min() == 2**10 and sizes.max() == 2**24  # both ends of every curve
    assert profile.physics["intra_node_bandwidth_bytes_per_s"] > 0
    fit = fit_directory(out)
    assert {e.family for e in fit.errors} == {f"nccl_{op}" for op in COMM_OPS}
    # A fit that loses to the roofline on its held-out rows is not used (noisy gloo timings on a busy CPU
    # can make one op's fit lose); the rest must predict.
    used = [op for op in COMM_OPS if f"nccl_{op}" in fit.fitted.families]
    assert used, fit.fitted.notes
    seconds, inside = fit.fitted.predict_collective(used[0], 2, 2**18)
    assert bool(inside) and float(seconds) > 0
