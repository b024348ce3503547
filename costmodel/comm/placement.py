"""Where each process group's ranks sit: inside one scale-up (NVLink) domain or across several.

Ranks are numbered as Megatron-Core numbers them (``megatron/core/parallel_state.py``:
``RankGenerator`` and ``generate_masked_orthogonal_rank_groups``). The order string lists the
parallel dimensions innermost first; Megatron's default ``"tp-cp-ep-dp-pp"`` makes TP groups
blocks of ``tp`` consecutive ranks and puts pipeline stages ``tp * cp * dp`` ranks apart. Two
grids share that order: the dense one (``tp, cp, dp, pp``; ep = 1) cuts the ``tp cp dp pp dp_cp``
groups, the expert one (expert-TP ``etp``, ``ep``, expert-DP ``edp = tp*cp*dp / (etp*ep)``, ``pp``;
cp = 1) cuts the ``ep``, ``edp``, ``etp`` and ``tp_ep`` groups, so an EP group is ``ep`` ranks
``etp`` apart (Megatron-Core MoE parallel folding when ``etp != tp``).

A *domain* is one scale-up domain: the GPUs of one node, or of a whole NVL72 rack
(:func:`scale_up_domain_size`). A job is laid out on whole domains as a topology-aware
scheduler places it (Slurm's block topology with ``--segment``): consecutive ranks fill
:func:`gpus_per_domain_used` GPUs of one domain, then the next. That figure is at most the
cluster's ``gpus_per_nvlink_domain_used`` (NVL72: 64 of 72 by default) and, where the domain
is larger than a node, the largest whole number of nodes that keeps the EP, TP and CP groups
whole, so those groups stay inside one domain whenever the layout allows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, NamedTuple

import numpy as np

from costmodel.specs.errors import SpecError, require_int
from costmodel.specs.hashing import hash_once
from costmodel.specs.gpu import ClusterSpec
from costmodel.specs.strategy import Strategy

__all__ = ["DEFAULT_ORDER", "GROUP_KINDS", "GroupPlacement", "gpus_per_domain_used", "group_placement",
           "group_ranks", "pipeline_placements", "scale_up_domain_size"]

DEFAULT_ORDER: Final = "tp-cp-ep-dp-pp"  # Megatron-Core initialize_model_parallel(order=...) default
GROUP_KINDS: Final = ("tp", "cp", "dp", "pp", "dp_cp", "ep", "edp", "etp", "tp_ep", "dp_shard", "dp_replicate")
_TOKENS: Final = ("tp", "cp", "ep", "dp", "pp")
# Megatron's get_ranks() token of each kind; ep, edp, etp and tp_ep are cut from the expert grid.
_MEMBERS: Final = {"tp": ("tp",), "cp": ("cp",), "dp": ("dp",), "pp": ("pp",), "dp_cp": ("cp", "dp"),
                   "ep": ("ep",), "edp": ("dp",), "etp": ("tp",), "tp_ep": ("tp", "ep")}
_EXPERT_KINDS: Final = ("ep", "edp", "etp", "tp_ep")
# HSDP cuts each dp_cp group: consecutive ``hsdp_shard_size`` ranks shard (inner, as torchtitan's
# dp_shard mesh dimension sits inside dp_replicate), ranks that hold the same shard replicate.
_HSDP_KINDS: Final = ("dp_shard", "dp_replicate")


class _Layout(NamedTuple):
    """The degrees that place ranks (other strategy knobs share one placement)."""

    tp: int
    cp: int
    dp: int
    pp: int
    ep: int
    etp: int
    shard: int = 0  # hsdp_shard_size (0: the whole dp_cp group)


@hash_once
@dataclass(frozen=True, kw_only=True)
class GroupPlacement:
    """How the ranks of one kind of process group spread over scale-up domains.

    Every group of a kind has the same size; where groups differ in how they
    straddle domains, the figures describe the worst group (of one pipeline
    stage when :func:`group_placement` is asked for a stage).

    Attributes
    ----------
    kind : str
        Group kind: one of ``GROUP_KINDS``.
    size : int
        Ranks in the group (for ``pp``: the pipeline stages; per stage, the pair of stages).
    gpus_per_node : int
        Ranks of the group that share one domain; where the count differs between
        domains, the smallest (it has the fewest NICs, so it bounds cross-domain bandwidth).
    num_domains : int
        Domains the group spans.
    crosses_nodes : bool
        True when the group spans more than one domain, i.e. uses the scale-out network.
        For ``pp``, stages fill domains in order, so ``num_domains - 1`` of the
        ``size - 1`` stage boundaries cross the network and the rest use NVLink.
    """

    kind: str
    size: int
    gpus_per_node: int
    num_domains: int
    crosses_nodes: bool

    def __post_init__(self) -> None:
        if self.size < 1 or self.gpus_per_node < 1 or self.num_domains < 1:
            raise ValueError(f"GroupPlacement figures must be >= 1. Got {self!r} instead.")
        if self.gpus_per_node * self.num_domains > self.size:
            raise ValueError(f"gpus_per_node * num_domains must not exceed size. Got {self!r} instead.")
        if self.crosses_nodes != (self.num_domains > 1):
            raise ValueError(f"crosses_nodes must equal num_domains > 1. Got {self!r} instead.")

    @classmethod
    def single_domain(cls, size: int, kind: str = "custom") -> GroupPlacement:
        """``size`` ranks inside one domain."""
        return cls(kind=kind, size=size, gpus_per_node=size, num_domains=1, crosses_nodes=False)

    @classmethod
    def across_domains(cls, gpus_per_node: int, num_domains: int, kind: str = "custom") -> GroupPlacement:
        """``gpus_per_node`` ranks in each of ``num_domains`` domains."""
        return cls(kind=kind, size=gpus_per_node * num_domains, gpus_per_node=gpus_per_node,
                   num_domains=num_domains, crosses_nodes=num_domains > 1)


def scale_up_domain_size(cluster: ClusterSpec) -> int:
    """GPUs of ``cluster`` that share one scale-up domain.

    A domain larger than the catalog node (NVL72: 72 GPUs over 4-GPU trays) is kept.
    A domain that is the node follows the cluster's own ``gpus_per_node``, so that a run
    spec which only overrides the node shape (Perlmutter: 4 A100 per node) does not
    leave the catalog's 8-GPU domain in place.
    """
    gpu = cluster.gpu
    if gpu.nvlink_domain_size > gpu.gpus_per_node:
        size = gpu.nvlink_domain_size
    else:
        size = min(gpu.nvlink_domain_size, cluster.gpus_per_node)
    return max(1, min(size, cluster.num_gpus))


def _parse_order(order: str) -> tuple[str, ...]:
    tokens = order.lower().split("-")
    if "ep" not in tokens and "dp" in tokens:  # Megatron's default puts ep just inside dp
        tokens.insert(tokens.index("dp"), "ep")
    if sorted(tokens) != sorted(_TOKENS):
        raise SpecError("order", order, "a '-'-joined permutation of tp, cp, dp, pp (ep optional), innermost first")
    return tuple(tokens)


def _layout(strategy: Strategy) -> _Layout:
    # Megatron's expert_tensor_parallel_size defaults to tp; a Strategy with parallel folding sets it
    etp = getattr(strategy, "expert_tensor_parallel_size", strategy.tp)
    return _Layout(strategy.tp, strategy.cp, strategy.dp, strategy.pp, strategy.ep, etp,
                   getattr(strategy, "hsdp_shard_size", 0))


def _grid_sizes(layout: _Layout, expert: bool) -> dict[str, int]:
    """Size of each order token in the dense or the expert rank grid (Megatron's two RankGenerators)."""
    if not expert:
        return {"tp": layout.tp, "cp": layout.cp, "ep": 1, "dp": layout.dp, "pp": layout.pp}
    model = layout.tp * layout.cp * layout.dp
    if model % (layout.etp * layout.ep):
        raise SpecError("strategy.ep", layout.ep,
                        f"such that ep * etp (etp={layout.etp}) divides tp * cp * dp = {model}")
    edp = model // (layout.etp * layout.ep)
    return {"tp": layout.etp, "cp": 1, "ep": layout.ep, "dp": edp, "pp": layout.pp}


def _rank_rows(kind: str, layout: _Layout, tokens: tuple[str, ...], stage: int | None) -> np.ndarray:
    """Every group of ``kind`` (of pipeline stage ``stage``, if given) as a row of ascending ranks.

    Rows come in Megatron's order: ``generate_masked_orthogonal_rank_groups`` enumerates groups
    with the innermost non-member dimension fastest, and ranks within a group ascending.
    """
    if kind in _HSDP_KINDS:
        return _hsdp_rows(kind, _rank_rows("dp_cp", layout, tokens, stage), layout.shard)
    sizes = _grid_sizes(layout, expert=kind in _EXPERT_KINDS)
    outer_first = tokens[::-1]
    grid = np.arange(math.prod(sizes.values())).reshape([sizes[t] for t in outer_first])
    if stage is not None:
        pp_axis = outer_first.index("pp")
        grid = np.take(grid, _stages_of(kind, stage, layout.pp), axis=pp_axis)
    group_axes = [i for i, t in enumerate(outer_first) if t in _MEMBERS[kind]]
    other_axes = [i for i in range(len(outer_first)) if i not in group_axes]
    size = math.prod(grid.shape[i] for i in group_axes)
    # axes stay outer-to-inner, so each row lists its ranks in ascending order
    return grid.transpose(other_axes + group_axes).reshape(-1, size)


def _hsdp_rows(kind: str, dp_cp: np.ndarray, shard: int) -> np.ndarray:
    """The shard (consecutive ``shard`` ranks of each dp_cp group) or replicate groups of HSDP."""
    size = dp_cp.shape[1]
    shard = shard or size
    if size % shard:
        raise SpecError("strategy.hsdp_shard_size", shard, f"a divisor of dp * cp = {size}")
    blocks = dp_cp.reshape(dp_cp.shape[0], size // shard, shard)  # (group, replica, shard rank)
    if kind == "dp_shard":
        return blocks.reshape(-1, shard)
    return blocks.transpose(0, 2, 1).reshape(-1, size // shard)


def _stages_of(kind: str, stage: int, pp: int) -> list[int]:
    """Pipeline ranks a per-stage ``kind`` group touches: the stage; for ``pp`` its send/recv pair."""
    if kind != "pp" or pp == 1:
        return [stage]
    return [stage, stage + 1] if stage + 1 < pp else [stage - 1, stage]


def _span(sizes: dict[str, int], tokens: tuple[str, ...], members: tuple[str, ...]) -> int:
    """Consecutive ranks that hold one whole group: the dimensions up to its outermost member."""
    outermost = max(tokens.index(m) for m in members)
    return math.prod(sizes[t] for t in tokens[:outermost + 1])


def _keep_together_blocks(layout: _Layout, tokens: tuple[str, ...]) -> list[int]:
    """Rank blocks a scheduler should not cut, most wanted first: EP with TP and CP, EP, CP, TP."""
    dense = _grid_sizes(layout, expert=False)
    tp = _span(dense, tokens, ("tp",))
    cp = _span(dense, tokens, ("tp", "cp"))
    ep = _span(_grid_sizes(layout, expert=True), tokens, ("tp", "ep")) if layout.ep > 1 else 1
    return [math.lcm(ep, cp, tp), math.lcm(ep, tp), math.lcm(cp, tp), tp, 1]


@lru_cache(maxsize=1024)
def _segment(layout: _Layout, cluster: ClusterSpec, tokens: tuple[str, ...]) -> int:
    domain = scale_up_domain_size(cluster)
    fill = min(cluster.gpus_per_nvlink_domain_used, domain)
    # inside a multi-node domain (NVL72) a scheduler hands out whole nodes (compute trays)
    node = cluster.gpus_per_node if domain > cluster.gpus_per_node else domain
    for block in _keep_together_blocks(layout, tokens):
        step = math.lcm(node, block)
        if step <= fill:
            return fill // step * step
    return fill


def gpus_per_domain_used(strategy: Strategy, cluster: ClusterSpec, order: str = DEFAULT_ORDER) -> int:
    """GPUs of each scale-up domain that the job's consecutive ranks fill.

    The largest whole number of nodes, at most ``cluster.gpus_per_nvlink_domain_used``, that is a
    multiple of the EP (with TP and CP) rank block; failing that, of the EP, the CP or the TP
    block. A node-sized domain is always filled. Rank ``r`` sits in domain ``r // used``.
    """
    return _segment(_layout(strategy), cluster, _parse_order(order))


def group_ranks(kind: str, strategy: Strategy, order: str = DEFAULT_ORDER, *,
                stage: int | None = None) -> list[list[int]]:
    """Global ranks of every ``kind`` group, as Megatron-Core's ``RankGenerator.get_ranks`` lists them.

    ``tp cp dp pp dp_cp`` come from the dense generator (``get_ranks("tp")`` ... ``("dp-cp")``),
    ``ep edp etp tp_ep`` from the expert one (``get_ranks("ep")``, ``("dp")``, ``("tp")``,
    ``("tp-ep")``). With ``stage``, only
    that pipeline stage's groups (``pp``: the pairs of ``stage`` and the next stage).
    """
    _check_kind(kind)
    layout = _layout(strategy)
    return _rank_rows(kind, layout, _parse_order(order), _check_stage(stage, layout.pp)).tolist()


def _worst_spread(rows: np.ndarray, domain: int) -> tuple[int, int]:
    """(fewest ranks sharing a domain, most domains spanned) over the groups in ``rows``."""
    domains = rows // domain  # rows are ascending, so domain ids are non-decreasing along each row
    groups, size = domains.shape
    changes = domains[:, 1:] != domains[:, :-1]
    starts_mask = np.concatenate([np.ones((groups, 1), dtype=bool), changes], axis=1).ravel()
    starts = np.flatnonzero(starts_mask)
    runs = np.diff(np.append(starts, groups * size))
    row_first_run = np.flatnonzero(starts % size == 0)
    fewest = np.minimum.reduceat(runs, row_first_run)
    return int(fewest.min()), int(changes.sum(axis=1).max()) + 1


def _check_kind(kind: str) -> None:
    if kind not in GROUP_KINDS:
        raise SpecError("kind", kind, "one of " + ", ".join(GROUP_KINDS))


def _check_stage(stage: int | None, pp: int) -> int | None:
    return None if stage is None else require_int("stage", stage, minimum=0, maximum=pp - 1)


def group_placement(kind: str, strategy: Strategy, cluster: ClusterSpec,
                    order: str = DEFAULT_ORDER, *, stage: int | None = None) -> GroupPlacement:
    """Placement of the ``kind`` process groups of ``strategy`` on ``cluster``.

    Parameters
    ----------
    kind : str
        One of ``GROUP_KINDS``: ``tp``, ``cp``, ``dp``, ``pp`` (the pipeline; its
        send/recv pairs are adjacent stages), ``dp_cp`` (the gradient-sync group,
        ``dp * cp`` ranks), ``ep`` (expert parallel), ``edp`` (expert data parallel), ``etp``
        (expert tensor parallel), ``tp_ep`` (the expert-TP x EP group), ``dp_shard`` (the
        ``hsdp_shard_size`` ranks of a dp_cp group one ZeRO shard spans; the dp_cp group without
        HSDP) or ``dp_replicate`` (the ranks holding the same shard; size 1 without HSDP).
    strategy : Strategy
        Degrees; ``tp * cp * dp * pp`` must equal ``cluster.num_gpus``.
    cluster : ClusterSpec
        GPUs, node shape, scale-up domain and the GPUs of each domain the job is given.
    order : str
        Megatron-style order, innermost dimension first (default ``"tp-cp-ep-dp-pp"``).
    stage : int, optional
        Pipeline rank whose groups to describe (``pp``: its pairs with the next stage, the
        last stage's with the previous). Default: the worst group of the whole job.

    Returns
    -------
    GroupPlacement
    """
    # a search asks for the same few placements of thousands of strategies: checks run on a miss only
    return _checked_placement(kind, _layout(strategy), cluster, order, stage)


def pipeline_placements(kinds: tuple[str, ...], strategy: Strategy, cluster: ClusterSpec,
                        order: str = DEFAULT_ORDER) -> tuple[tuple[GroupPlacement, ...], ...]:
    """``group_placement`` of each of ``kinds`` on every pipeline rank: one tuple per rank, rank 0 first;
    ranks placed alike share one tuple object (a caller may key by its identity)."""
    return _pipeline_placements(kinds, _layout(strategy), cluster, order)


@lru_cache(maxsize=16384)  # a sweep's strategies share a few thousand layouts
def _pipeline_placements(kinds: tuple[str, ...], layout: _Layout, cluster: ClusterSpec,
                         order: str) -> tuple[tuple[GroupPlacement, ...], ...]:
    alike: dict[tuple[GroupPlacement, ...], tuple[GroupPlacement, ...]] = {}
    per_rank = []
    for stage in range(layout.pp):
        groups = tuple(_checked_placement(kind, layout, cluster, order, stage) for kind in kinds)
        per_rank.append(alike.setdefault(groups, groups))
    return tuple(per_rank)


@lru_cache(maxsize=65536)
def _checked_placement(kind: str, layout: _Layout, cluster: ClusterSpec, order: str,
                       stage: int | None) -> GroupPlacement:
    """``group_placement`` of a layout, after its checks (an error is raised again on every call: not cached)."""
    _check_kind(kind)
    world = layout.tp * layout.cp * layout.dp * layout.pp
    if world != cluster.num_gpus:
        raise SpecError("strategy", f"tp*cp*dp*pp={world}", f"a layout of all cluster.num_gpus={cluster.num_gpus} GPUs")
    tokens = _parse_order(order)
    rows = _rank_rows(kind, layout, tokens, _check_stage(stage, layout.pp))
    fewest, domains = _worst_spread(rows, _segment(layout, cluster, tokens))
    return GroupPlacement(kind=kind, size=rows.shape[1], gpus_per_node=fewest, num_domains=domains,
                          crosses_nodes=domains > 1)
