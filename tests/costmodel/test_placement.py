"""Rank placement of process groups (costmodel/comm/placement.py): Megatron order, domains, errors."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

import pytest

from costmodel.comm import GroupPlacement, collective_seconds, group_placement, link_figures, scale_up_domain_size
from costmodel.comm.placement import gpus_per_domain_used, group_ranks
from costmodel.specs import ClusterSpec, SpecError, Strategy, get_gpu
from costmodel.specs.gpu import override_gpu


def cluster(num_gpus: int, gpu: str = "h100-sxm5-80gb", gpus_per_node: int | None = None,
            used: int | None = None) -> ClusterSpec:
    """``used``: GPUs of each NVLink domain the job is given (the cluster's gpus_per_nvlink_domain_used)."""
    spec = get_gpu(gpu)
    if used is not None:
        spec = override_gpu(spec, {"gpus_per_nvlink_domain_used": used})
    return ClusterSpec(gpu=spec, num_gpus=num_gpus, gpus_per_node=gpus_per_node or spec.gpus_per_node)


def test_large_megatron_layout_tp8_dp16_pp8():
    s, c = Strategy(tp=8, dp=16, pp=8), cluster(1024)
    tp, dp, pp = (group_placement(k, s, c) for k in ("tp", "dp", "pp"))
    assert (tp.size, tp.gpus_per_node, tp.num_domains, tp.crosses_nodes) == (8, 8, 1, False)
    assert (dp.size, dp.gpus_per_node, dp.num_domains, dp.crosses_nodes) == (16, 1, 16, True)
    assert (pp.size, pp.gpus_per_node, pp.num_domains, pp.crosses_nodes) == (8, 1, 8, True)


def test_strided_dp_group_fits_in_one_node():
    dp = group_placement("dp", Strategy(tp=2, dp=4), cluster(8))
    assert (dp.size, dp.gpus_per_node, dp.num_domains, dp.crosses_nodes) == (4, 4, 1, False)


def test_dp_group_spans_two_nodes_when_stride_pushes_it_out():
    dp = group_placement("dp", Strategy(tp=4, dp=4), cluster(16))
    assert (dp.gpus_per_node, dp.num_domains, dp.crosses_nodes) == (2, 2, True)


STRATEGIES = [
    Strategy(tp=8, dp=16, pp=8),
    Strategy(tp=2, dp=4),
    Strategy(tp=4, cp=2, dp=4, pp=2),
    Strategy(tp=2, cp=2, dp=8, pp=2, ep=4),
    Strategy(tp=1, dp=64),
]


@pytest.mark.parametrize("strategy", STRATEGIES, ids=str)
def test_group_sizes_multiply_to_world_size(strategy):
    c = cluster(strategy.world_size)
    sizes = {k: group_placement(k, strategy, c).size for k in ("tp", "cp", "dp", "pp", "dp_cp", "ep", "edp")}
    assert math.prod(sizes[k] for k in ("tp", "cp", "dp", "pp")) == c.num_gpus
    assert sizes["dp_cp"] == sizes["dp"] * sizes["cp"]
    assert sizes["ep"] * sizes["edp"] == sizes["dp_cp"]


@pytest.mark.parametrize("strategy", STRATEGIES, ids=str)
def test_crosses_nodes_iff_more_than_one_domain(strategy):
    c = cluster(strategy.world_size)
    for kind in ("tp", "cp", "dp", "pp", "dp_cp", "ep", "edp"):
        g = group_placement(kind, strategy, c)
        assert g.crosses_nodes == (g.num_domains > 1)
        assert g.gpus_per_node * g.num_domains <= g.size


def test_tp_innermost_then_cp_then_dp():
    s, c = Strategy(tp=2, cp=2, dp=8, pp=2), cluster(64)
    assert group_placement("tp", s, c).num_domains == 1
    assert group_placement("cp", s, c).num_domains == 1  # ranks 0, 2
    dp = group_placement("dp", s, c)  # stride 4: 2 per 8-GPU node
    assert (dp.gpus_per_node, dp.num_domains) == (2, 4)
    dp_cp = group_placement("dp_cp", s, c)  # stride 2: 4 per node
    assert (dp_cp.gpus_per_node, dp_cp.num_domains) == (4, 4)


def test_ep_is_the_innermost_part_of_dp_cp():
    s, c = Strategy(tp=2, cp=2, dp=8, pp=2, ep=4), cluster(64)
    ep, edp = group_placement("ep", s, c), group_placement("edp", s, c)
    assert (ep.size, ep.num_domains) == (4, 1)  # ranks 0, 2, 4, 6
    assert (edp.size, edp.gpus_per_node, edp.num_domains) == (4, 1, 4)  # ranks 0, 8, 16, 24


def test_order_string_moves_dp_inside():
    s, c = Strategy(tp=8, dp=8), cluster(64)
    dp = group_placement("dp", s, c, order="dp-tp-cp-pp")
    tp = group_placement("tp", s, c, order="dp-tp-cp-pp")
    assert (dp.num_domains, tp.num_domains) == (1, 8)


def test_megatron_order_with_ep_token_is_accepted():
    s, c = Strategy(tp=2, dp=4), cluster(8)
    assert group_placement("dp", s, c, order="tp-cp-ep-dp-pp") == group_placement("dp", s, c)


def test_cluster_node_override_shrinks_the_domain():
    # Perlmutter: 4 A100 per node; only the run spec's node shape says so
    c = cluster(8, gpu="a100-sxm4-80gb", gpus_per_node=4)
    assert scale_up_domain_size(c) == 4
    dp = group_placement("dp", Strategy(dp=8), c)
    assert (dp.gpus_per_node, dp.num_domains, dp.crosses_nodes) == (4, 2, True)


def test_one_gpu_nodes_put_every_rank_in_its_own_domain():
    c = ClusterSpec(gpu=override_gpu(get_gpu("gh200-96gb"), {"nvlink_domain_size": 1}), num_gpus=8, gpus_per_node=1)
    dp = group_placement("dp", Strategy(dp=8), c)
    assert (dp.gpus_per_node, dp.num_domains) == (1, 8)


def test_nvl72_domain_spans_trays():
    c = cluster(144, gpu="gb200", used=72)
    assert scale_up_domain_size(c) == 72
    tp = group_placement("tp", Strategy(tp=8, dp=18), c)
    assert not tp.crosses_nodes
    dp = group_placement("dp", Strategy(dp=144), c)
    assert (dp.gpus_per_node, dp.num_domains) == (72, 2)


def test_nvl72_racks_are_filled_64_at_a_time_by_default():
    dp = group_placement("dp", Strategy(dp=144), cluster(144, gpu="gb200"))
    assert (dp.gpus_per_node, dp.num_domains) == (16, 3)  # 64 + 64 + 16


def test_uneven_domains_report_the_worst_group():
    # 72-GPU racks filled whole cut the 136-rank DP group into 72 + 64
    dp = group_placement("dp", Strategy(dp=136), cluster(136, gpu="gb200", used=72))
    assert (dp.gpus_per_node, dp.num_domains, dp.crosses_nodes) == (64, 2, True)


def test_single_rank_group():
    g = group_placement("pp", Strategy(tp=8), cluster(8))
    assert (g.size, g.num_domains, g.crosses_nodes) == (1, 1, False)


@pytest.mark.parametrize(("kind", "strategy", "order"), [
    ("zz", Strategy(dp=8), "tp-cp-dp-pp"),
    ("dp", Strategy(dp=4), "tp-cp-dp-pp"),        # 4 ranks on an 8-GPU cluster
    ("dp", Strategy(dp=8), "tp-dp-pp"),           # cp missing
    ("ep", Strategy(dp=8, ep=3), "tp-cp-dp-pp"),  # ep does not divide dp * cp
])
def test_invalid_input_raises_spec_error(kind, strategy, order):
    with pytest.raises(SpecError):
        group_placement(kind, strategy, cluster(8), order=order)


def test_group_placement_rejects_inconsistent_figures():
    with pytest.raises(ValueError):
        GroupPlacement(kind="dp", size=4, gpus_per_node=4, num_domains=2, crosses_nodes=True)
    with pytest.raises(ValueError):
        GroupPlacement(kind="dp", size=8, gpus_per_node=4, num_domains=2, crosses_nodes=False)


# --- rack-aware placement (issue 13 item 2) -------------------------------------------------------

EP_FITS_ONE_RACK = [Strategy(dp=256, ep=32), Strategy(dp=256, ep=64), Strategy(tp=2, dp=128, ep=32),
                    Strategy(tp=4, dp=64, ep=16), Strategy(tp=2, dp=64, pp=2, ep=32),
                    Strategy(tp=2, cp=2, dp=64, ep=16)]


@pytest.mark.parametrize("used", [64, 72])
@pytest.mark.parametrize("strategy", EP_FITS_ONE_RACK, ids=lambda s: f"tp{s.tp}-cp{s.cp}-pp{s.pp}-ep{s.ep}")
def test_ep_group_that_fits_one_nvlink_domain_never_crosses_the_nic(strategy, used):
    c = cluster(256, gpu="gb200", used=used)
    for stage in (None, *range(strategy.pp)):
        ep = group_placement("ep", strategy, c, stage=stage)
        assert (ep.num_domains, ep.crosses_nodes) == (1, False)
        assert group_placement("tp", strategy, c, stage=stage).num_domains == 1
    nbytes = 64e6
    ep = group_placement("ep", strategy, c)
    assert collective_seconds("all_to_all", nbytes, ep, c.gpu) == \
        collective_seconds("all_to_all", nbytes, GroupPlacement.single_domain(strategy.ep), c.gpu)


def test_whole_racks_are_used_when_no_group_needs_a_cut():
    c = cluster(288, gpu="gb200", used=72)
    assert gpus_per_domain_used(Strategy(tp=8, dp=36), c) == 72
    assert gpus_per_domain_used(Strategy(tp=1, dp=288, ep=32), c) == 64  # 72 would cut ranks 64..95
    assert gpus_per_domain_used(Strategy(tp=8, dp=36), cluster(288, gpu="gb200")) == 64
    assert gpus_per_domain_used(Strategy(tp=2, dp=8), cluster(16)) == 8  # an 8-GPU node is always filled


def test_per_stage_placement_differs_where_the_stage_straddles_a_rack():
    # 72-GPU racks: stage 0 (ranks 0..63) sits in rack 0; stages 1..3 straddle a rack boundary
    s = Strategy(tp=4, dp=16, pp=4)
    c = cluster(256, gpu="gb200", used=72)
    per_stage = [group_placement("dp_cp", s, c, stage=st) for st in range(4)]
    assert [g.crosses_nodes for g in per_stage] == [False, True, True, True]
    assert [(g.gpus_per_node, g.num_domains) for g in per_stage] == [(16, 1), (2, 2), (4, 2), (6, 2)]
    assert group_placement("dp_cp", s, c) == GroupPlacement(kind="dp_cp", size=16, gpus_per_node=2,
                                                            num_domains=2, crosses_nodes=True)
    # 64 per rack: every stage is one rack
    assert not any(group_placement("dp_cp", s, cluster(256, gpu="gb200"), stage=st).crosses_nodes
                   for st in range(4))


def test_per_stage_pipeline_pairs():
    s, c = Strategy(tp=4, dp=16, pp=4), cluster(256, gpu="gb200", used=72)
    pairs = [group_placement("pp", s, c, stage=st) for st in range(4)]
    assert all(p.size == 2 for p in pairs)
    # stage 0's ranks 0..63 send to 64..127: ranks 0..7 -> 64..71 stay in rack 0, the rest cross
    assert [p.crosses_nodes for p in pairs] == [True, True, True, True]
    assert not group_placement("pp", Strategy(tp=8, pp=2), cluster(16, gpu="gb200"), stage=1).crosses_nodes


def test_stage_out_of_range_is_a_spec_error():
    with pytest.raises(SpecError, match="stage"):
        group_placement("tp", Strategy(tp=8, pp=2), cluster(16), stage=2)


def _nic_slope(op, placement, gpu):
    """Seconds per byte at large messages (the latency cancels)."""
    big = np.array([1e9, 2e9])
    t = collective_seconds(op, big, placement, gpu)
    return (t[1] - t[0]) / 1e9


def test_group_straddling_two_racks_is_priced_between_all_nvlink_and_all_nic():
    # EP 128 on 64-GPU racks: 64 ranks in each of two racks
    c = cluster(256, gpu="gb200")
    ep = group_placement("ep", Strategy(dp=256, ep=128), c)
    assert (ep.gpus_per_node, ep.num_domains) == (64, 2)
    nbytes = 256e6
    nvlink = collective_seconds("all_to_all", nbytes, GroupPlacement.single_domain(128), c.gpu)
    nic = collective_seconds("all_to_all", nbytes, GroupPlacement.across_domains(1, 128), c.gpu)
    assert nvlink < collective_seconds("all_to_all", nbytes, ep, c.gpu) < nic
    # the bytes that cross: a rank sends 64 of its 128 shares to the other rack, over its NIC
    links = link_figures(c.gpu)
    assert _nic_slope("all_to_all", ep, c.gpu) == pytest.approx(
        max(63 / 128 / links.up_all_to_all_bytes_per_s, 64 / 128 / links.out_all_to_all_bytes_per_s))


def test_uneven_straddle_prices_the_fewest_populated_domain_over_the_real_domain_count():
    # 32 ranks cut 8 + 24: the 8 ranks send 24/32 of their bytes over their NICs; an all_reduce
    # across 2 domains runs the hierarchical tree, S / 8 through each NIC of the 8-rank side
    gpu = get_gpu("gb200")
    links = link_figures(gpu)
    g = GroupPlacement(kind="ep", size=32, gpus_per_node=8, num_domains=2, crosses_nodes=True)
    assert _nic_slope("all_to_all", g, gpu) == pytest.approx(24 / 32 / links.out_all_to_all_bytes_per_s)
    assert _nic_slope("all_reduce", g, gpu) == pytest.approx(1 / 8 / links.out_ring_bytes_per_s)
    nvlink = collective_seconds("all_to_all", 1e9, GroupPlacement.single_domain(32), gpu)
    nic = collective_seconds("all_to_all", 1e9, GroupPlacement.across_domains(1, 32), gpu)
    assert nvlink < collective_seconds("all_to_all", 1e9, g, gpu) < nic
    assert collective_seconds("all_reduce", 1e9, g, gpu) < collective_seconds(
        "all_reduce", 1e9, GroupPlacement.across_domains(1, 32), gpu)


# Ranks derived by hand from RankGenerator (megatron/core/parallel_state.py): order "tp-cp-ep-dp-pp",
# rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank)) on the dense grid and
# rank = etp_rank + etp * (ep_rank + ep * (edp_rank + edp * pp_rank)) on the expert grid; groups are
# listed with the innermost non-member dimension varying fastest.
HAND_RANKS = {
    # tp 2, dp 4, pp 2, ep 2 (etp = tp = 2, edp = 2*4 / (2*2) = 2), 16 ranks
    "tp": [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11], [12, 13], [14, 15]],
    "dp": [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]],
    "pp": [[0, 8], [1, 9], [2, 10], [3, 11], [4, 12], [5, 13], [6, 14], [7, 15]],
    "ep": [[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9, 11], [12, 14], [13, 15]],
    "edp": [[0, 4], [1, 5], [2, 6], [3, 7], [8, 12], [9, 13], [10, 14], [11, 15]],
    "tp_ep": [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]],
}


@pytest.mark.parametrize("kind", sorted(HAND_RANKS))
def test_megatron_rank_order_reproduced(kind):
    assert group_ranks(kind, Strategy(tp=2, dp=4, pp=2, ep=2)) == HAND_RANKS[kind]


def test_megatron_rank_order_with_cp_and_per_stage():
    s = Strategy(tp=2, cp=2, dp=2)
    assert group_ranks("cp", s) == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert group_ranks("dp", s) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert group_ranks("dp_cp", s) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert group_ranks("ep", Strategy(tp=2, dp=4, pp=2, ep=2), stage=1) == [[8, 10], [9, 11], [12, 14], [13, 15]]


def test_expert_tensor_parallel_folding_uses_the_expert_grid():
    if "etp" not in {f.name for f in dataclasses.fields(Strategy)}:
        pytest.skip("Strategy has no etp knob in this tree")
    s = Strategy(tp=2, dp=4, ep=4, etp=1)  # etp 1, ep 4, edp 8 / 4 = 2
    assert group_ranks("ep", s) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert group_ranks("edp", s) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert group_ranks("etp", s) == [[r] for r in range(8)]
