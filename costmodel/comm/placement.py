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


@lru_cache(maxsize=64)  # every placement miss parses the order (a bad one raises again: errors are not cached)
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
    shard = _hsdp_shard(size, shard)
    blocks = dp_cp.reshape(dp_cp.shape[0], size // shard, shard)  # (group, replica, shard rank)
    if kind == "dp_shard":
        return blocks.reshape(-1, shard)
    return blocks.transpose(0, 2, 1).reshape(-1, size // shard)


def _hsdp_shard(size: int, shard: int) -> int:
    """Ranks of one HSDP shard group of a ``size``-rank dp_cp group (``shard`` 0: all of them)."""
    shard = shard or size
    if size % shard:
        raise SpecError("strategy.hsdp_shard_size", shard, f"a divisor of dp * cp = {size}")
    return shard


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


# (stride, indices) of grid dimensions: a group's copies sit ``stride * i`` apart for each index ``i``
_Copies = list[tuple[int, range | list[int]]]
# The ranks of the groups that start at copy offset 0: an arithmetic run ``(step, count)`` from 0 or,
# where they form none, rows of ascending ranks (one, or one per HSDP shard or replica of a dp_cp group)
_Pattern = tuple[int, int] | np.ndarray


def _group_shape(kind: str, layout: _Layout, tokens: tuple[str, ...],
                 stage: int | None) -> tuple[_Pattern, _Copies]:
    """The ``kind`` groups (of ``stage``, if given) that ``_rank_rows`` lists, as a pattern and its copies.

    Every group is a pattern's ranks (a row of them, if listed) plus ``stride * i`` for one ``i`` of
    each of the copies' ``(stride, indices)``. In Megatron's default order every pattern is an
    arithmetic run; rows need member dimensions that do not chain (``cp-tp-dp-pp`` makes dp_cp
    two strided runs).
    """
    if kind in _HSDP_KINDS:
        pattern, copies = _group_shape("dp_cp", layout, tokens, stage)
        if not isinstance(pattern, tuple):
            return _hsdp_rows(kind, pattern, layout.shard), copies
        # a shard is ``shard`` consecutive ranks of the run, a replica every shard-th one
        step, size = pattern
        shard = _hsdp_shard(size, layout.shard)
        if kind == "dp_shard":
            return (step, shard), [*copies, (step * shard, range(size // shard))]
        return (step * shard, size // shard), [*copies, (step, range(shard))]
    sizes = _grid_sizes(layout, expert=kind in _EXPERT_KINDS)
    members: list[tuple[int, int]] = []  # (stride, count) of the member dimensions, innermost first
    copies: _Copies = []
    stride = 1
    for token in tokens:  # innermost first: a dimension's stride is the ranks of those inside it
        indices: range | list[int] = range(sizes[token])
        if token == "pp" and stage is not None:
            indices = _stages_of(kind, stage, layout.pp)
        if token not in _MEMBERS[kind]:
            if len(indices) > 1 or indices[0]:
                copies.append((stride, indices))
        else:
            if indices[0]:  # a pp pair starts at its first stage
                copies.append((stride, [indices[0]]))
            if members and members[-1][0] * members[-1][1] == stride:  # it chains onto the run inside it
                members[-1] = (members[-1][0], members[-1][1] * len(indices))
            elif len(indices) > 1:
                members.append((stride, len(indices)))
        stride *= sizes[token]
    if len(members) <= 1:
        return members[0] if members else (1, 1), copies
    ranks = np.zeros(1, dtype=np.int64)
    for member_stride, count in members:  # the ranks inside stay below member_stride: ascending
        ranks = np.add.outer(np.arange(count) * member_stride, ranks).ravel()
    return ranks.reshape(1, -1), copies


def _worst_spread(pattern: _Pattern, copies: _Copies, segment: int) -> tuple[int, int]:
    """(fewest ranks sharing a domain, most domains spanned) over the groups of a ``_group_shape``.

    A group's domains are ``rank // segment`` and only how they change along the group counts, so
    copies whose first ranks agree modulo ``segment`` are placed alike: each residue is placed once.
    """
    starts = _start_residues(copies, segment)
    if not isinstance(pattern, tuple):
        return _listed_spread(starts, pattern, segment)
    step, count = pattern
    if count == 1:
        return 1, 1
    if step >= segment:
        return 1, count  # consecutive ranks a domain or more apart
    fewest, most = count, 1
    length = (count - 1) * step
    # a domain's count depends on its edge modulo step, which repeats every step / gcd domains
    period = step // math.gcd(segment, step)
    for start in starts:  # the first rank sits in domain 0; step < segment leaves no domain empty
        last = (start + length) // segment
        if not last:
            continue  # one domain holds the run
        # ranks of the run below an edge e > start: ceil((e - start) / step) = -((start - e) // step)
        low = min(-((start - segment) // step), count + (start - last * segment) // step)
        for domain in range(1, min(last, 1 + period)):
            low = min(low, (start - domain * segment) // step - (start - (domain + 1) * segment) // step)
        fewest, most = min(fewest, low), max(most, last + 1)
    return fewest, most


def _start_residues(copies: _Copies, segment: int) -> set[int]:
    """The first ranks of a pattern's copies, modulo ``segment``."""
    starts = {0}
    for stride, indices in copies:
        period = segment // math.gcd(segment, stride)  # stride * i modulo segment repeats after period
        if isinstance(indices, range) and len(indices) > period:
            indices = range(period)
        steps = {stride * i % segment for i in indices}
        starts = {(start + step) % segment for start in starts for step in steps}
    return starts


def _listed_spread(starts: set[int], rows: np.ndarray, segment: int) -> tuple[int, int]:
    """(fewest ranks sharing a domain, most domains spanned) of the ascending ``rows`` shifted by each of ``starts``."""
    # only non-default orders list ranks, but thousands of them: numpy walks them
    shifted = np.fromiter(starts, dtype=np.int64, count=len(starts))[:, None, None] + rows
    domains = shifted.reshape(-1, rows.shape[1]) // segment  # non-decreasing along each row
    groups, size = domains.shape
    changes = domains[:, 1:] != domains[:, :-1]
    starts_mask = np.concatenate([np.ones((groups, 1), dtype=bool), changes], axis=1).ravel()
    run_starts = np.flatnonzero(starts_mask)
    runs = np.diff(np.append(run_starts, groups * size))
    row_first_run = np.flatnonzero(run_starts % size == 0)
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
    # stage 0 first, kind by kind as before, so that a bad input raises the error it always raised
    columns = [[_checked_placement(kind, layout, cluster, order, 0)] for kind in kinds]
    if layout.pp > 1 and kinds:
        tokens = _parse_order(order)
        segment = _segment(layout, cluster, tokens)
        for kind, column in zip(kinds, columns):
            for stage, like in enumerate(_alike_stages(kind, layout, tokens, segment)[1:], start=1):
                column.append(column[like] if like < stage else _checked_placement(kind, layout, cluster, order, stage))
    alike: dict[tuple[GroupPlacement, ...], tuple[GroupPlacement, ...]] = {}
    per_rank = []
    for groups in zip(*columns) if kinds else [()] * layout.pp:
        per_rank.append(alike.setdefault(groups, groups))
    return tuple(per_rank)


def _alike_stages(kind: str, layout: _Layout, tokens: tuple[str, ...], segment: int) -> list[int]:
    """For each pipeline stage, the first stage whose ``kind`` groups are placed as its own.

    Any order: stage ``s``'s rank rows are stage 0's plus ``s`` times the pp stride of the kind's grid
    (the ranks the dimensions inside pp hold), and a placement reads ranks only through
    ``rank // segment`` and only their differences, so stages whose shifts agree modulo ``segment``
    are placed alike. ``pp`` pairs stage ``s`` with ``s + 1``; the last stage takes the pair before.
    """
    sizes = _grid_sizes(layout, expert=kind in _EXPERT_KINDS)  # HSDP rows are dense dp_cp rows, cut
    stride = math.prod(sizes[t] for t in tokens[:tokens.index("pp")])
    first: dict[int, int] = {}
    alike = []
    for stage in range(layout.pp):
        shifted = min(stage, layout.pp - 2) if kind == "pp" else stage
        alike.append(first.setdefault(shifted * stride % segment, stage))
    return alike


@lru_cache(maxsize=65536)
def _checked_placement(kind: str, layout: _Layout, cluster: ClusterSpec, order: str,
                       stage: int | None) -> GroupPlacement:
    """``group_placement`` of a layout, after its checks (an error is raised again on every call: not cached)."""
    _check_kind(kind)
    world = layout.tp * layout.cp * layout.dp * layout.pp
    if world != cluster.num_gpus:
        raise SpecError("strategy", f"tp*cp*dp*pp={world}", f"a layout of all cluster.num_gpus={cluster.num_gpus} GPUs")
    tokens = _parse_order(order)
    # the shape first, as the rows were cut before the segment: a bad layout raises the same error
    pattern, copies = _group_shape(kind, layout, tokens, _check_stage(stage, layout.pp))
    fewest, domains = _worst_spread(pattern, copies, _segment(layout, cluster, tokens))
    size = pattern[1] if isinstance(pattern, tuple) else pattern.shape[1]
    return GroupPlacement(kind=kind, size=size, gpus_per_node=fewest, num_domains=domains,
                          crosses_nodes=domains > 1)
