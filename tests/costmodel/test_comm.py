"""Collective times (costmodel/comm/collectives.py, formulas.py, calibration.yaml).

Citation keys are those of docs/hardware_and_formulas.md section 8.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import yaml

from costmodel.comm import (
    OPS,
    GroupPlacement,
    bus_bandwidth,
    collective_seconds,
    default_calibration,
    link_figures,
)
from costmodel.specs import SpecError, get_gpu
from costmodel.specs.gpu import override_gpu

GiB, MiB = 2**30, 2**20
H100 = get_gpu("h100-sxm5-80gb")
A100 = get_gpu("a100-sxm4-80gb")
SIZES = np.logspace(10, 34, 25, base=2)  # 1 KiB .. 16 GiB
IN_NODE = GroupPlacement.single_domain(8)
ACROSS = GroupPlacement.across_domains(gpus_per_node=8, num_domains=4)
ONE_PER_NODE = GroupPlacement.across_domains(gpus_per_node=1, num_domains=8)
PLACEMENTS = [IN_NODE, ACROSS, ONE_PER_NODE, GroupPlacement.across_domains(2, 2)]


def shape(p: GroupPlacement) -> str:
    return f"{p.gpus_per_node}x{p.num_domains}"


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("placement", PLACEMENTS, ids=shape)
def test_time_grows_with_message_size(op, placement):
    # below ~1 MiB NCCL launches one channel per 32 KiB (topoGetAlgoInfo), so time stays about flat there
    seconds = collective_seconds(op, SIZES, placement, H100)
    assert seconds.shape == SIZES.shape
    assert np.all(np.diff(seconds) >= 0)
    assert np.all(np.diff(seconds[SIZES >= MiB]) > 0)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("placement", PLACEMENTS, ids=shape)
def test_more_bandwidth_is_faster(op, placement):
    # halving both tiers keeps the NIC below the send/recv per-peer ceiling, which a raise would hit
    slower = override_gpu(H100, {"intra_node_bandwidth_GBps": 225, "inter_node_bandwidth_GBps": 25})
    assert collective_seconds(op, GiB, placement, H100) < collective_seconds(op, GiB, placement, slower)


@pytest.mark.parametrize("op", OPS)
def test_inter_node_is_slower_than_intra_node_for_the_same_group_size(op):
    for size in (MiB, 64 * MiB, GiB):
        assert collective_seconds(op, size, ONE_PER_NODE, H100) > collective_seconds(op, size, IN_NODE, H100)


def _ar_and_rs_ag(placement: GroupPlacement, algorithms: tuple[str, ...] | None = None) -> tuple[float, float]:
    ar = collective_seconds("all_reduce", GiB, placement, H100, algorithms=algorithms)
    rs_ag = (collective_seconds("reduce_scatter", GiB, placement, H100)
             + collective_seconds("all_gather", GiB, placement, H100))
    return ar, rs_ag


@pytest.mark.parametrize("placement", [IN_NODE, ACROSS, ONE_PER_NODE], ids=shape)
def test_all_reduce_is_about_reduce_scatter_plus_all_gather(placement):
    # a ring all_reduce is a reduce-scatter then an all-gather (NVLS and trees can beat it)
    ar, rs_ag = _ar_and_rs_ag(placement, ("ring", "tree"))
    assert ar == pytest.approx(rs_ag, rel=0.05)


@pytest.mark.parametrize("placement", PLACEMENTS, ids=shape)
def test_all_reduce_never_slower_than_reduce_scatter_plus_all_gather(placement):
    # NCCL runs the fastest of ring (= RS + AG), tree and NVLS; on 2 nodes the tree can be much faster
    ar, rs_ag = _ar_and_rs_ag(placement)
    assert ar <= rs_ag


@pytest.mark.parametrize("op", OPS)
def test_single_gpu_group_takes_no_time(op):
    one = GroupPlacement.single_domain(1)
    assert collective_seconds(op, GiB, one, H100) == 0.0
    assert np.all(collective_seconds(op, SIZES, one, H100) == 0.0)


def test_scalar_in_scalar_out_and_empty_message():
    assert isinstance(collective_seconds("all_reduce", 1e6, IN_NODE, H100), float)
    assert collective_seconds("all_reduce", 0, IN_NODE, H100) == 0.0


@pytest.mark.parametrize(("op", "size"), [("broadcast", 1.0), ("all_reduce", -1.0), ("all_reduce", float("nan"))])
def test_invalid_input_raises(op, size):
    with pytest.raises(SpecError):
        collective_seconds(op, size, IN_NODE, H100)


def _table(seconds: float, covered_below: float):
    calls = []

    def intra(op, num_gpus, message_bytes):
        calls.append((op, num_gpus))
        return np.full(message_bytes.shape, seconds), message_bytes < covered_below

    return intra, calls


def test_intra_predictor_used_where_in_range_and_ignored_outside():
    intra, calls = _table(seconds=1.0, covered_below=MiB)
    sizes = np.array([1024.0, 4 * MiB])
    got = collective_seconds("all_gather", sizes, IN_NODE, H100, intra)
    analytic = collective_seconds("all_gather", sizes, IN_NODE, H100)
    assert got[0] == 1.0
    assert got[1] == analytic[1]
    assert calls == [("all_gather", 8)]


def test_intra_predictor_not_consulted_across_nodes():
    intra, calls = _table(seconds=1.0, covered_below=np.inf)
    assert collective_seconds("all_reduce", MiB, ACROSS, H100, intra) < 1.0
    assert calls == []


def test_send_recv_asks_the_predictor_for_a_pair():
    intra, calls = _table(seconds=2.0, covered_below=np.inf)
    assert collective_seconds("send_recv", MiB, IN_NODE, H100, intra) == 2.0
    assert calls == [("send_recv", 2)]


def test_golden_8x_h100_all_reduce_busbw_at_1_gib():
    # 8x H100 ring all_reduce busbw 370 GB/s: NVIDIA GTC25 S72583; maintainer "effective NVLink
    # bandwidth of 370GB/s" (github.com/NVIDIA/nccl-tests/issues/212); h&f 3c
    seconds = collective_seconds("all_reduce", GiB, IN_NODE, H100, algorithms=("ring",))
    assert bus_bandwidth("all_reduce", GiB, seconds, 8) / 1e9 == pytest.approx(370, rel=0.15)


def test_golden_dgx_a100_four_nodes_all_reduce_busbw():
    # DGX A100 8 x 200 Gb/s HDR multi-node all_reduce busbw 192 GB/s (github.com/NVIDIA/nccl/issues/812);
    # the flat ring is NIC-bound at 8 NICs x 24 GB/s; h&f 3d
    seconds = collective_seconds("all_reduce", 16 * GiB, ACROSS, A100)
    assert bus_bandwidth("all_reduce", 16 * GiB, seconds, 32) / 1e9 == pytest.approx(192, rel=0.15)


def test_all_to_all_across_nodes_uses_one_nic_per_gpu():
    # alltoall cannot aggregate NICs: on k nodes busbw ~ k/(k-1) x one NIC [NCCLT-267], [NCCLT-130]
    two_nodes = GroupPlacement.across_domains(gpus_per_node=8, num_domains=2)
    seconds = collective_seconds("all_to_all", 16 * GiB, two_nodes, H100)
    nic = H100.inter_node_bandwidth_bytes_per_s * default_calibration().net_all_to_all_efficiency
    assert bus_bandwidth("all_to_all", 16 * GiB, seconds, 16) == pytest.approx(15 / 8 * nic, rel=0.01)


def test_send_recv_across_nodes_is_capped_per_peer():
    pair = GroupPlacement.across_domains(gpus_per_node=1, num_domains=2)
    cal = default_calibration()
    seconds = collective_seconds("send_recv", 16 * GiB, pair, H100)
    assert 16 * GiB / seconds == pytest.approx(cal.net_p2p_peer_bandwidth_bytes_per_s, rel=0.01)
    slow_nic = override_gpu(H100, {"inter_node_bandwidth_GBps": 25})
    seconds = collective_seconds("send_recv", 16 * GiB, pair, slow_nic)
    assert 16 * GiB / seconds == pytest.approx(25e9 * cal.net_bus_efficiency, rel=0.01)


@pytest.mark.parametrize("gpu", [A100], ids=lambda g: g.name)
def test_two_node_tree_beats_the_nic_bound_ring(gpu):
    # on 2 nodes NCCL's tree busbw exceeds the NICs' limit [NCCLT-196]; at 4+ nodes the ring's NIC bound holds.
    # Not on DGX H100: its 8 NICs (380 GB/s) match its NVLink ring (370), which bounds the tree's
    # domain phases; its measured 2-node 470 GB/s is NVLS Tree (test_two_node_nvls_tree_...).
    nics = 8 * gpu.inter_node_bandwidth_bytes_per_s * default_calibration().net_bus_efficiency
    two = GroupPlacement.across_domains(gpus_per_node=8, num_domains=2)
    busbw = bus_bandwidth("all_reduce", 16 * GiB, collective_seconds("all_reduce", 16 * GiB, two, gpu), 16)
    assert busbw > 1.03 * nics
    seconds = collective_seconds("all_reduce", 16 * GiB, ACROSS, gpu)
    assert bus_bandwidth("all_reduce", 16 * GiB, seconds, 32) <= nics


def test_every_calibration_entry_says_how_it_was_fitted():
    text = resources.files("costmodel.comm").joinpath("calibration.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    entries = []
    for value in data.values():
        entries.extend(value.values() if "value" not in value else [value])
    assert entries
    for entry in entries:
        assert entry.get("fitted"), entry
        assert 0 < entry["value"]


def test_calibration_covers_every_catalog_gpu_through_its_default():
    cal = default_calibration()
    for name in ("a100-sxm4-40gb", "mi300x", "l40s", "gb200"):
        assert 0 < cal.ring_efficiency_for(name) <= 1
        assert 0 < cal.all_to_all_efficiency_for(name) <= 1


def test_benchmark_skips_measured_part_without_the_shared_data(tmp_path):
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "collectives.py"
    done = subprocess.run([sys.executable, str(script), "--json", "--data", str(tmp_path / "absent")],
                          capture_output=True, text=True, check=True)
    report = json.loads(done.stdout)
    assert report["measured"] is None and report["measured_skipped"]
    assert len({row["name"] for row in report["published"]}) >= 4
    # the error breaks down by size band and node count, and no figure that fitted a constant is counted
    groups = {g["group"] for g in report["published_summary"]}
    assert {"size 1-16 MiB", "size >= 4 GiB", "nodes 1", "nodes > 16"} <= groups
    fitted = yaml.safe_load((script.parent / "nccl_published.yaml").read_text(encoding="utf-8"))["comparisons"]
    in_sample = {entry["name"] for entry in fitted if "calibrates" in entry}
    assert in_sample and not any(row["counted"] for row in report["published"] if row["name"] in in_sample)


# --- NCCL's tuning model (costmodel/comm/nccl_tuning.py): figures of src/graph/tuning.cc and
# src/enqueue.cc at github.com/NVIDIA/nccl 5067397c ---------------------------------------------
def _nccl_ring_time_us(proto: str, size: float, n: int, simple_busbw_gbps: float) -> float:
    """NCCL's own ring estimate inside one NVLink node (ncclTopoTuneModel / ncclTopoGetAlgoTime), by hand."""
    base = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}[proto]
    hop = {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}[proto]
    busbw = {"LL": min(141.0, 0.5 * simple_busbw_gbps), "LL128": 0.92 * simple_busbw_gbps,
             "Simple": simple_busbw_gbps}[proto]
    return base + 2 * (n - 1) * hop + 2 * (n - 1) / n * size / (1e3 * busbw)


def _crossover(low: str, high: str, n: int, simple_busbw_gbps: float) -> float:
    sizes = np.logspace(16, 32, 4000, base=2)
    faster = [_nccl_ring_time_us(high, s, n, simple_busbw_gbps) < _nccl_ring_time_us(low, s, n, simple_busbw_gbps)
              for s in sizes]
    return float(sizes[faster.index(True)])


def test_in_node_protocol_switches_where_nccls_tuner_switches():
    from costmodel.comm.collectives import nccl_algorithm

    simple = H100.intra_node_bandwidth_bytes_per_s * default_calibration().ring_efficiency_for(H100.name) / 1e9
    ll_to_ll128 = _crossover("LL", "LL128", 8, simple)
    ll128_to_simple = _crossover("LL128", "Simple", 8, simple)
    assert 1 * MiB < ll_to_ll128 < ll128_to_simple < 256 * MiB
    sizes = np.array([0.8 * ll_to_ll128, 1.25 * ll_to_ll128, 0.8 * ll128_to_simple, 1.25 * ll128_to_simple])
    assert nccl_algorithm("all_reduce", sizes, IN_NODE, H100, algorithms=("ring", "tree")) \
        == ["ring/LL", "ring/LL128", "ring/LL128", "ring/Simple"]


def test_small_messages_run_tree_or_ll_and_large_ones_ring_simple():
    # on A100 (no NVLink SHARP); H100 below
    from costmodel.comm.collectives import nccl_algorithm

    for placement in (IN_NODE, ACROSS, GroupPlacement.across_domains(8, 128)):
        small, large = nccl_algorithm("all_reduce", np.array([4096.0, 16 * GiB]), placement, A100)
        assert small.startswith("tree/") or small.endswith("/LL")
        assert large == "ring/Simple" or placement.num_domains > 64  # 1024 ranks: the ring's 2046 steps lose
    assert nccl_algorithm("all_reduce", 64e6, GroupPlacement.across_domains(8, 128), A100) == ["tree/Simple"]
    assert nccl_algorithm("all_gather", 64e6, GroupPlacement.across_domains(8, 128), A100) == ["ring/Simple"]


def test_nvls_runs_large_all_reduces_only_where_the_switch_reduces():
    from costmodel.comm.collectives import nccl_algorithm

    sizes = np.array([4096.0, 16 * GiB])
    assert nccl_algorithm("all_reduce", sizes, IN_NODE, H100)[1] == "nvls/Simple"
    assert nccl_algorithm("all_reduce", sizes, GroupPlacement.across_domains(8, 2), H100)[1] == "nvls_tree/Simple"
    for gpu in (A100, get_gpu("h100-pcie-80gb"), get_gpu("gh200-96gb")):  # no NVLink SHARP switch
        assert not any(a.startswith("nvls") for a in nccl_algorithm("all_reduce", sizes, IN_NODE, gpu))
    # one GPU per node has no NVLS group; all_gather / reduce_scatter never run NVLS here (no registration)
    assert not any(a.startswith("nvls") for a in nccl_algorithm("all_reduce", sizes, ONE_PER_NODE, H100))
    assert nccl_algorithm("all_gather", sizes, IN_NODE, H100)[1] == "ring/Simple"


@pytest.mark.parametrize("n", [2, 4, 8])
def test_tiny_in_node_all_reduce_costs_nccls_ll_latency(n):
    # Ring/LL: baseLat 6.6 us + 2(n-1) hops of 0.6 us over NVLink (hwLatencies) [NCCL-TUNING]
    seconds = collective_seconds("all_reduce", 64.0, GroupPlacement.single_domain(n), H100)
    assert seconds * 1e6 == pytest.approx(min(6.6 + 2 * (n - 1) * 0.6, 6.8 + 2 * (n - 1) * 0.6), rel=0.05)


def test_small_message_latency_grows_with_group_size():
    sizes = [collective_seconds("all_reduce", 64.0, GroupPlacement.single_domain(n), H100) for n in (2, 4, 8)]
    assert sizes[0] < sizes[1] < sizes[2]
    # 4 more ranks add 8 ring steps of NCCL's NVLink LL hop, 0.6 us (not the 3.4 us Simple hop) [NCCL-TUNING]
    assert (sizes[2] - sizes[1]) * 1e6 == pytest.approx(8 * 0.6, rel=0.1)
    nodes = [collective_seconds("all_reduce", 4096.0, GroupPlacement.across_domains(8, k), H100) for k in (2, 4, 16, 64)]
    assert nodes == sorted(nodes) and nodes[0] < nodes[-1]
    # the tree wins for small messages: latency grows by 2 network hops per doubling of the node count
    step = (nodes[3] - nodes[2]) / 2
    assert step == pytest.approx(2 * H100.inter_node_latency_s, rel=0.05)


def test_ll_bandwidth_is_capped_by_nccls_ll_max():
    from costmodel.comm.formulas import candidate_seconds

    links = link_figures(H100)
    big = np.array([GiB, 2 * GiB])
    t = candidate_seconds("all_reduce", big, 8, 1, links)["ring/LL"]
    busbw = 2 * 7 / 8 * GiB / (t[1] - t[0])
    # llMaxBws Hopper one node: 141 GB/s, below half of the 370 GB/s Simple ring [NCCL-TUNING]
    assert busbw / 1e9 == pytest.approx(min(141.0, 0.5 * links.up_ring_bytes_per_s / 1e9), rel=0.01)


def test_ll128_runs_at_120_of_128_bytes_of_the_simple_bandwidth():
    from costmodel.comm.formulas import candidate_seconds

    links = link_figures(H100)
    big = np.array([GiB, 2 * GiB])
    t = candidate_seconds("all_reduce", big, 8, 1, links)
    slope = {name: t[name][1] - t[name][0] for name in ("ring/LL128", "ring/Simple")}
    assert slope["ring/Simple"] / slope["ring/LL128"] == pytest.approx(0.92, rel=0.01)


def test_tree_runs_at_nccls_factor_with_its_medium_size_correction():
    from costmodel.comm.formulas import candidate_seconds

    links = link_figures(A100)
    tree = {s: candidate_seconds("all_reduce", np.array([s, 1.5 * s]), 8, 4, links)["tree/Simple"]
            for s in (2.0**26, 2.0**32)}
    slope = {s: (t[1] - t[0]) / (0.5 * s) for s, t in tree.items()}
    # 64 MiB: log2(S / 64) = 20, Simple treeCorrectionFactor 0.8 (1.0 beyond 256 MB) [NCCL-TUNING]
    assert slope[2.0**32] / slope[2.0**26] == pytest.approx(0.8, rel=0.01)
    phases = max(2 * 7 / 8 / links.up_ring_bytes_per_s, 2 / 8 / links.out_ring_bytes_per_s)
    assert slope[2.0**32] == pytest.approx(phases / 0.92, rel=0.01)


def test_cross_node_ring_latency_carries_the_plateau_and_net_overhead():
    from costmodel.comm.formulas import candidate_seconds

    for gpu, overhead_us in ((H100, 3.0), (A100, 6.0)):  # 1 us (Intel host) / 2 us (DGX A100's AMD EPYC) x 3
        links = link_figures(gpu)
        t = candidate_seconds("all_gather", np.array([GiB, 2 * GiB]), 8, 2, links)["ring/Simple"]
        intercept_us = (2 * t[0] - t[1]) * 1e6
        hop_us = max(gpu.intra_node_latency_s * 1e6, overhead_us)
        assert intercept_us == pytest.approx(1.4 * (8.4 + 14 * hop_us + 1 * gpu.inter_node_latency_s * 1e6), rel=0.01)


def test_small_messages_run_on_fewer_channels():
    # NCCL drops a channel while bytes < channels x 512 threads x 64 B (Simple) [NCCL-TUNING]: below
    # 24 x 32 KiB the Simple ring's time stays flat (twice the bytes on twice the channels); above
    # it, every doubling costs its bandwidth time
    from costmodel.comm.formulas import candidate_seconds

    links = link_figures(H100)
    small = candidate_seconds("all_gather", np.array([64.0, 128.0, 256.0]) * 1024, 8, 1, links)["ring/Simple"]
    assert small == pytest.approx(np.full(3, small[0]), rel=1e-9)
    large = candidate_seconds("all_gather", np.array([64.0, 128.0]) * MiB, 8, 1, links)["ring/Simple"]
    assert large[1] - large[0] == pytest.approx(7 / 8 * 64 * MiB / links.up_ring_bytes_per_s, rel=1e-6)


# --- NVLink SHARP (NVLS, NVLS Tree) -----------------------------------------------------------------
@pytest.mark.parametrize(("n", "published"), [(5, 414.2), (6, 435.6), (7, 460.0), (8, 473.1)])
def test_golden_h200_nvls_all_reduce_by_gpu_count(n, published):
    # 8x H200, default NCCL (NVLS), 8 GiB: busbw by GPU count [MLE-NET] (h&f 3c); the model's
    # 2 (n-1)/(n+1) x nvlsEfficiency 0.85 x the Ring bandwidth follows it (not fitted on it)
    h200 = get_gpu("h200-sxm-141gb")
    seconds = collective_seconds("all_reduce", 8 * GiB, GroupPlacement.single_domain(n), h200)
    assert bus_bandwidth("all_reduce", 8 * GiB, seconds, n) / 1e9 == pytest.approx(published, rel=0.05)


def test_nvls_moves_the_buffer_once_each_way_through_the_switch():
    from costmodel.comm.formulas import candidate_seconds
    from costmodel.comm.nccl_tuning import NVLS_EFFICIENCY

    from costmodel.comm.nccl_tuning import nvls_pipeline_factor

    links = link_figures(H100)
    sizes = np.array([GiB, 16 * GiB])
    t = candidate_seconds("all_reduce", sizes, 8, 1, links)["nvls/Simple"]
    per_byte = 9 / 8 / (NVLS_EFFICIENCY["hopper"] * links.up_ring_bytes_per_s)  # S (g+1)/g each way
    fill = nvls_pipeline_factor(sizes, links.platform, 8)
    assert t == pytest.approx(25e-6 + per_byte * sizes * fill, rel=1e-9)  # NCCL's NVLink NVLS latency, 25 us


def test_nvls_pipeline_fill_stretches_mid_size_calls_only():
    from costmodel.comm.nccl_tuning import NVLS_PIPELINE_STAGES, nvls_pipeline_factor, platform_for

    platform = platform_for("h100-sxm5-80gb")
    sizes = np.array([64.0 * 1024, 8 * MiB, 64 * MiB, GiB, 16 * GiB])
    fill = nvls_pipeline_factor(sizes, platform, 8)
    assert fill[0] == NVLS_PIPELINE_STAGES  # shorter than one loop: it still crosses the three stages
    assert np.all(np.diff(fill) < 0) and fill[-1] == pytest.approx(1.0, abs=0.01)
    # 8 MiB on 16 channels x 8 heads: chunk cut to 32 KiB (below 8 x 128 x 64 KiB), 2 loops -> (2 + 2) / 2
    assert fill[1] == pytest.approx(2.0)


def test_two_node_nvls_tree_exceeds_the_ring_as_measured():
    # 2 x HGX H100, 8 x 400 Gb/s, NCCL's default NVLSTree: 470 GB/s at 16 GiB [NCCLT-309]
    two = GroupPlacement.across_domains(gpus_per_node=8, num_domains=2)
    busbw = bus_bandwidth("all_reduce", 16 * GiB, collective_seconds("all_reduce", 16 * GiB, two, H100), 16) / 1e9
    ring = bus_bandwidth("all_reduce", 16 * GiB,
                         collective_seconds("all_reduce", 16 * GiB, two, H100, algorithms=("ring",)), 16) / 1e9
    assert ring < 400 < busbw == pytest.approx(470, rel=0.15)


def test_nvls_tree_reads_the_24th_tree_correction_entry():
    from costmodel.comm.nccl_tuning import tree_correction

    at_512_mb = np.array([2.0**29])  # log2i(S / 64) = 23: NVLS Tree reads 0.9, Tree is past its table (1.0)
    assert tree_correction("Simple", at_512_mb, "nvls_tree")[0] == pytest.approx(0.9)
    assert tree_correction("Simple", at_512_mb)[0] == 1.0


@pytest.mark.parametrize("algorithms", [("ring",), ("tree",), ("ring", "tree")])
def test_algorithms_restrict_the_candidates_like_nccl_algo(algorithms):
    from costmodel.comm.collectives import nccl_algorithm

    names = nccl_algorithm("all_reduce", SIZES, IN_NODE, H100, algorithms=algorithms)
    assert {name.split("/")[0] for name in names} <= set(algorithms)
    free = collective_seconds("all_reduce", SIZES, IN_NODE, H100)
    assert np.all(collective_seconds("all_reduce", SIZES, IN_NODE, H100, algorithms=algorithms) >= free)


@pytest.mark.parametrize("algorithms", [("rings",), (), ("nvls",)])
def test_algorithms_outside_what_nccl_runs_are_refused(algorithms):
    # "nvls" is a known name, but A100 has no NVLink SHARP: nothing is left to run
    with pytest.raises(SpecError, match="algorithms"):
        collective_seconds("all_reduce", GiB, IN_NODE, A100, algorithms=algorithms)
