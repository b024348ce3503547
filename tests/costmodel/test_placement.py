"""Rank placement of process groups (costmodel/comm/placement.py): Megatron order, domains, errors."""

from __future__ import annotations

import math

import pytest

from costmodel.comm import GroupPlacement, group_placement, scale_up_domain_size
from costmodel.specs import ClusterSpec, SpecError, Strategy, get_gpu
from costmodel.specs.gpu import override_gpu


def cluster(num_gpus: int, gpu: str = "h100-sxm5-80gb", gpus_per_node: int | None = None) -> ClusterSpec:
    spec = get_gpu(gpu)
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
    c = cluster(144, gpu="gb200")
    assert scale_up_domain_size(c) == 72
    tp = group_placement("tp", Strategy(tp=8, dp=18), c)
    assert not tp.crosses_nodes
    dp = group_placement("dp", Strategy(dp=144), c)
    assert (dp.gpus_per_node, dp.num_domains) == (72, 2)


def test_uneven_domains_report_the_worst_group():
    # 72-GPU domains cut the TP group of ranks 64..79 into 8 + 8
    tp = group_placement("tp", Strategy(tp=16, dp=9), cluster(144, gpu="gb200"))
    assert (tp.gpus_per_node, tp.num_domains, tp.crosses_nodes) == (8, 2, True)


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
