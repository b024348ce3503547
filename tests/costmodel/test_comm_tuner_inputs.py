"""Two of NCCL's tuner inputs in the collective model: a network's reported latency, NVLS Tree's per-head cap.

NCCL adds ``latencyInter`` (what the net plugin reports) to every inter-node hop, twice with Simple
(src/graph/tuning.cc ncclTopoTuneModel); InfiniBand reports 0, AWS's EFA plugin 35 us on p5en / p6-b200
(aws-ofi-nccl src/platform-aws.cpp). NVLS Tree's bus bandwidth is at most ``heads x perChMaxNVLSTreeBw``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from costmodel.comm import GroupPlacement, collective_seconds, link_figures
from costmodel.comm.formulas import candidate_seconds
from costmodel.comm.nccl_tuning import NET_PLUGIN_LATENCY_US
from costmodel.specs import SpecError, get_gpu

EFA = "aws-efa-p5en-p6-b200"
B200 = get_gpu("b200")
TINY = np.array([1024.0])  # below NCCL's ring plateau (bytes / (channels x ranks) < 64), latency-bound


def _extra(op: str, g: int, k: int) -> dict[str, float]:
    ib = candidate_seconds(op, TINY, g, k, link_figures(B200))
    efa = candidate_seconds(op, TINY, g, k, link_figures(B200, network=EFA))
    return {name: float(efa[name][0] - ib[name][0]) for name in ib}


def test_each_inter_node_hop_carries_the_reported_latency_twice_with_simple():
    plugin = NET_PLUGIN_LATENCY_US[EFA] * 1e-6
    k = 4
    extra = _extra("all_reduce", 8, k)
    # ring: nInterSteps = 2 (k - 1) network steps; tree and NVLS Tree: 2 log2(k) network hops
    assert extra["ring/Simple"] == pytest.approx(2 * (k - 1) * 2 * plugin)
    assert extra["tree/Simple"] == pytest.approx(2 * math.log2(k) * 2 * plugin)
    assert extra["nvls_tree/Simple"] == pytest.approx(2 * math.log2(k) * 2 * plugin)
    # all_gather's ring crosses the network k - 1 times
    assert _extra("all_gather", 8, k)["ring/Simple"] == pytest.approx((k - 1) * 2 * plugin)


def test_the_network_changes_nothing_inside_one_node():
    one_node = GroupPlacement.single_domain(8)
    sizes = np.logspace(10, 34, 13, base=2)
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        ib = collective_seconds(op, sizes, one_node, B200)
        efa = collective_seconds(op, sizes, one_node, B200, network=EFA)
        np.testing.assert_array_equal(ib, efa)


def test_infiniband_is_the_default_and_reports_nothing():
    across = GroupPlacement.across_domains(gpus_per_node=8, num_domains=4)
    sizes = np.logspace(10, 34, 13, base=2)
    assert NET_PLUGIN_LATENCY_US["ib"] == 0.0
    np.testing.assert_array_equal(collective_seconds("all_reduce", sizes, across, B200),
                                  collective_seconds("all_reduce", sizes, across, B200, network="ib"))


def test_efa_slows_mid_size_cross_node_calls_but_not_bandwidth_bound_ones():
    across = GroupPlacement.across_domains(gpus_per_node=8, num_domains=4)
    sizes = np.array([2.0**20, 2.0**34])  # 1 MiB, 16 GiB
    ratio = (collective_seconds("all_reduce", sizes, across, B200, network=EFA)
             / collective_seconds("all_reduce", sizes, across, B200))
    assert ratio[0] > 2.0  # latency-bound: hundreds of microseconds more per call
    assert ratio[1] == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("bad", ["efa", "", None, ["ib"], 3])
def test_an_unknown_network_is_a_one_line_error_naming_the_field(bad):
    across = GroupPlacement.across_domains(gpus_per_node=8, num_domains=4)
    with pytest.raises(SpecError) as err:
        collective_seconds("all_reduce", 2.0**20, across, B200, network=bad)
    assert err.value.field == "network" and "aws-efa-p5en-p6-b200" in str(err.value)
    assert "\n" not in str(err.value)


def test_every_benchmark_row_network_is_one_the_tuner_knows():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "nccl_published.yaml"
    rows = yaml.safe_load(path.read_text(encoding="utf-8"))["comparisons"]
    networks = {row["network"] for row in rows if "network" in row}
    assert networks and networks <= set(NET_PLUGIN_LATENCY_US)


# --- NVLS Tree's per-head bandwidth ceiling (perChMaxNVLSTreeBws, src/graph/tuning.cc) -----------------
H100 = get_gpu("h100-sxm5-80gb")


def _nvls_tree_busbw(gpu, k: int, size: float = 2.0**34) -> float:
    seconds = candidate_seconds("all_reduce", np.array([size]), 8, k, link_figures(gpu))["nvls_tree/Simple"][0]
    return 2 * (8 * k - 1) / (8 * k) * size / seconds / 1e9


@pytest.mark.parametrize(("k", "per_head"), [(2, 57.7), (4, 45.5), (128, 45.5)])
def test_hopper_nvls_tree_busbw_stops_at_nccls_per_head_ceiling(k, per_head):
    from costmodel.comm.nccl_tuning import nvls_tree_bus_cap, platform_for

    cap = nvls_tree_bus_cap(platform_for(H100.name), k, 8) / 1e9
    assert cap == pytest.approx(8 * per_head)
    busbw = _nvls_tree_busbw(H100, k)
    assert busbw <= cap * (1 + 1e-9)
    assert busbw == pytest.approx(cap, rel=0.01)  # 16 GiB: bandwidth-bound, the ceiling binds on Hopper


def test_blackwell_nvls_tree_ceiling_is_above_what_its_nics_carry():
    # 8 x 80 GB/s per head on Blackwell across > 2 nodes: the 50 GB/s NICs bind first, so the cap changes nothing
    busbw = _nvls_tree_busbw(B200, 4)
    assert busbw < 8 * 80.0 * 0.7
