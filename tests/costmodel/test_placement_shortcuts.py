"""Placement shortcuts (costmodel/comm/placement.py): pipeline stages placed alike and groups placed by
their first ranks' residues give exactly what every group's listed ranks give."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import numpy as np
import pytest

from costmodel.comm import GROUP_KINDS, GroupPlacement, group_placement, pipeline_placements
from costmodel.comm.placement import (DEFAULT_ORDER, _alike_stages, _layout, _parse_order, _worst_spread,
                                      gpus_per_domain_used, group_ranks)
from costmodel.specs import ClusterSpec, SpecError, Strategy, get_gpu
from costmodel.specs.gpu import override_gpu


def _cluster(num_gpus: int, gpu: str = "h100-sxm5-80gb", gpus_per_node: int | None = None,
             **overrides: int) -> ClusterSpec:
    spec = override_gpu(get_gpu(gpu), overrides) if overrides else get_gpu(gpu)
    return ClusterSpec(gpu=spec, num_gpus=num_gpus, gpus_per_node=gpus_per_node or spec.gpus_per_node)


CLUSTERS = {
    "h100x96": _cluster(96),
    "h100x48-6-used": _cluster(48, gpus_per_nvlink_domain_used=6),  # domains filled 6 at a time
    "a100x32-4-per-node": _cluster(32, "a100-sxm4-80gb", gpus_per_node=4),
    "gb200x144": _cluster(144, "gb200"),  # NVL72 racks, 64 GPUs used of each
    "gb200x144-whole-racks": _cluster(144, "gb200", gpus_per_nvlink_domain_used=72),
    "gb200x120-60-used": _cluster(120, "gb200", gpus_per_nvlink_domain_used=60),
    "gh200x8-1-per-node": _cluster(8, "gh200-96gb", gpus_per_node=1, nvlink_domain_size=1),
}
# the default; dp inside; cp innermost, so dp_cp's ranks form no single strided run; pp inside cp and dp
ORDERS = (DEFAULT_ORDER, "dp-tp-cp-pp", "cp-tp-dp-pp", "tp-pp-cp-ep-dp")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _strategies(num_gpus: int, count: int, seed: str) -> list[Strategy]:
    """``count`` layouts of ``num_gpus`` drawn from tp <= 8, cp <= 4, pp <= 16, with MoE and HSDP knobs."""
    every = []
    for tp, cp, pp in itertools.product(range(1, 9), range(1, 5), range(1, 17)):
        if num_gpus % (tp * cp * pp):
            continue
        dp = num_gpus // (tp * cp * pp)
        for etp in {None, 1, 2}:
            expert_tp = tp if etp is None else etp
            for ep in _divisors(tp * cp * dp // expert_tp) if (tp * cp * dp) % expert_tp == 0 else []:
                for shard in (0, *_divisors(dp * cp)):
                    every.append(Strategy(tp=tp, cp=cp, dp=dp, pp=pp, ep=ep, etp=etp, hsdp_shard_size=shard))
    rng = random.Random(seed)
    picked = rng.sample(every, min(count, len(every)))
    # every pipeline depth the cluster allows, at least once
    by_pp = {s.pp: s for s in reversed(every)}
    return picked + [s for pp, s in sorted(by_pp.items()) if all(p.pp != pp for p in picked)]


def _plain(kind: str, strategy: Strategy, cluster: ClusterSpec, order: str, stage: int | None) -> GroupPlacement:
    """The placement read off every group's listed ranks, domain by domain."""
    segment = gpus_per_domain_used(strategy, cluster, order)
    groups = group_ranks(kind, strategy, order, stage=stage)
    fewest, most = len(groups[0]), 1
    for ranks in groups:
        assert ranks == sorted(ranks)  # so each domain's ranks are one run
        per_domain = Counter(rank // segment for rank in ranks)
        fewest, most = min(fewest, *per_domain.values()), max(most, len(per_domain))
    return GroupPlacement(kind=kind, size=len(groups[0]), gpus_per_node=fewest, num_domains=most,
                          crosses_nodes=most > 1)


@pytest.mark.parametrize("name", CLUSTERS)
@pytest.mark.parametrize("order", ORDERS)
def test_shortcuts_place_every_group_as_its_listed_ranks_do(name: str, order: str) -> None:
    cluster = CLUSTERS[name]
    count = 40 if order == DEFAULT_ORDER else 20
    strategies = _strategies(cluster.num_gpus, count, seed=f"{name} {order}")
    assert {s.pp for s in strategies} == {d for d in _divisors(cluster.num_gpus) if d <= 16}
    for strategy in strategies:
        # the table first, so that it is built from scratch rather than from group_placement's memo
        table = pipeline_placements(GROUP_KINDS, strategy, cluster, order)
        assert len(table) == strategy.pp
        for stage in range(strategy.pp):
            plain = tuple(_plain(kind, strategy, cluster, order, stage) for kind in GROUP_KINDS)
            assert table[stage] == plain, (strategy, stage)
            alone = tuple(group_placement(kind, strategy, cluster, order, stage=stage) for kind in GROUP_KINDS)
            assert alone == plain, (strategy, stage)
        for kind in GROUP_KINDS:
            assert group_placement(kind, strategy, cluster, order) == _plain(kind, strategy, cluster, order, None)
        assert len(set(table)) == len({id(row) for row in table})  # equal rows are one object
        _check_alike_stages(strategy, cluster, order)


def _check_alike_stages(strategy: Strategy, cluster: ClusterSpec, order: str) -> None:
    """Stages ``_alike_stages`` pairs have the same groups, rank by rank a whole number of segments apart."""
    segment = gpus_per_domain_used(strategy, cluster, order)
    for kind in GROUP_KINDS:
        alike = _alike_stages(kind, _layout(strategy), _parse_order(order), segment)
        assert all(like <= stage for stage, like in enumerate(alike))
        for stage, like in enumerate(alike):
            shift = np.array(group_ranks(kind, strategy, order, stage=stage)) - group_ranks(kind, strategy, order,
                                                                                            stage=like)
            assert (shift == shift.flat[0]).all() and shift.flat[0] % segment == 0, (kind, strategy, stage, like)


@pytest.mark.parametrize(("kinds", "strategy", "order"), [
    (("tp", "zz"), Strategy(dp=8), DEFAULT_ORDER),
    (("tp",), Strategy(dp=4), DEFAULT_ORDER),                          # 4 ranks on an 8-GPU cluster
    (("tp",), Strategy(dp=4, pp=2), "tp-dp-pp"),                       # cp missing
    (("tp", "ep"), Strategy(dp=4, pp=2, ep=3), DEFAULT_ORDER),         # ep does not divide dp * cp
    (("tp", "dp_shard"), Strategy(dp=4, pp=2, hsdp_shard_size=3), DEFAULT_ORDER),
])
def test_pipeline_placements_raise_on_every_call(kinds: tuple[str, ...], strategy: Strategy, order: str) -> None:
    cluster = _cluster(8)
    for _ in range(2):  # errors are not memoised
        with pytest.raises(SpecError) as table_error:
            pipeline_placements(kinds, strategy, cluster, order)
        with pytest.raises(SpecError) as first_error:
            for kind in kinds:
                group_placement(kind, strategy, cluster, order, stage=0)
        assert str(table_error.value) == str(first_error.value)


def test_a_pipeline_of_no_kinds_has_one_empty_row_per_stage() -> None:
    assert pipeline_placements((), Strategy(tp=2, dp=2, pp=2), _cluster(8)) == ((), ())


@pytest.mark.parametrize("segment", [1, 2, 3, 5, 6, 7, 8, 12, 60, 64, 72])
def test_worst_spread_of_a_run_or_listed_ranks_is_read_off_rank_by_rank(segment: int) -> None:
    rng = random.Random(segment)
    for step, count in itertools.product(range(1, 2 * segment + 3), (1, 2, 3, 5, 17, 64)):
        for start in {0, 1, step, segment - 1, rng.randrange(10 * segment)}:
            ranks = [start + step * k for k in range(count)]
            per_domain = Counter(rank // segment for rank in ranks)
            plain = (min(per_domain.values()), len(per_domain))
            assert _worst_spread((step, count), [(1, [start])], segment) == plain, (step, count, start)
            listed = np.array([[rank - start for rank in ranks]])
            assert _worst_spread(listed, [(1, [start])], segment) == plain, (step, count, start)
