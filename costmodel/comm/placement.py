"""Where each process group's ranks sit: inside one scale-up (NVLink) domain or across several.

Ranks are numbered as Megatron-LM numbers them (``megatron/core/parallel_state.py``,
``RankGenerator``): the order string lists the parallel dimensions innermost first, so with
the default ``"tp-cp-dp-pp"`` consecutive ranks differ in their TP index, TP groups are
blocks of ``tp`` consecutive ranks, and pipeline stages are ``tp * cp * dp`` ranks apart.
Expert parallelism is carved out of the ``dp * cp`` ranks as Megatron does (expert
ranks use the order ``tp-ep-dp-pp``): an EP group is the innermost ``ep`` ranks of a
``dp_cp`` group, an expert-data-parallel (``edp``) group the ranks at stride ``ep`` in it.

A *domain* is one scale-up domain: the GPUs of one node, or of a whole NVL72 rack
(see :func:`scale_up_domain_size`). Consecutive global ranks fill one domain after another.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Final

import numpy as np

from costmodel.specs.errors import SpecError
from costmodel.specs.gpu import ClusterSpec
from costmodel.specs.strategy import Strategy

__all__ = ["DEFAULT_ORDER", "GROUP_KINDS", "GroupPlacement", "group_placement", "scale_up_domain_size"]

DEFAULT_ORDER: Final = "tp-cp-dp-pp"
GROUP_KINDS: Final = ("tp", "cp", "dp", "pp", "dp_cp", "ep", "edp")
_DIMS: Final = ("tp", "cp", "dp", "pp")
# Megatron spells its decoder order "tp-cp-ep-dp-pp"; ep is not a separate axis of the
# dense layout here (it is carved from dp*cp), so the token is accepted and skipped.
_IGNORED_TOKENS: Final = ("ep",)


@dataclass(frozen=True, kw_only=True)
class GroupPlacement:
    """How the ranks of one kind of process group spread over scale-up domains.

    Every group of a kind has the same size; where groups differ in how they
    straddle domains (possible when the domain size is not a power of two,
    e.g. NVL72), the figures describe the worst group.

    Attributes
    ----------
    kind : str
        Group kind: ``tp``, ``cp``, ``dp``, ``pp``, ``dp_cp``, ``ep`` or ``edp``.
    size : int
        Ranks in the group (for ``pp``: the pipeline stages).
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
    tokens = tuple(t for t in order.lower().split("-") if t not in _IGNORED_TOKENS)
    if sorted(tokens) != sorted(_DIMS):
        raise SpecError("order", order, "a '-'-joined permutation of tp, cp, dp, pp (innermost first)")
    return tokens


def _group_ranks(kind: str, sizes: dict[str, int], ep: int, order: tuple[str, ...]) -> np.ndarray:
    """Every group of ``kind`` as a row of ascending global ranks, shape (groups, size).

    ``sizes`` holds the tp, cp, dp and pp degrees; ``ep`` matters for the expert groups only.
    """
    outer_first = order[::-1]
    grid = np.arange(int(np.prod(list(sizes.values())))).reshape([sizes[d] for d in outer_first])
    members = {"tp": ("tp",), "cp": ("cp",), "dp": ("dp",), "pp": ("pp",)}.get(kind, ("cp", "dp"))
    group_axes = [i for i, d in enumerate(outer_first) if d in members]
    other_axes = [i for i in range(len(outer_first)) if i not in group_axes]
    size = int(np.prod([sizes[outer_first[i]] for i in group_axes]))
    # axes stay outer-to-inner, so each row lists its ranks in ascending order
    rows = grid.transpose(other_axes + group_axes).reshape(-1, size)
    if kind in ("dp_cp", "tp", "cp", "dp", "pp"):
        return rows
    if size % ep:
        raise SpecError("strategy.ep", ep, f"a divisor of dp * cp = {size}")
    blocks = rows.reshape(rows.shape[0], size // ep, ep)
    if kind == "ep":
        return blocks.reshape(-1, ep)
    return blocks.transpose(0, 2, 1).reshape(-1, size // ep)  # edp: same expert shard, stride ep


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


def group_placement(kind: str, strategy: Strategy, cluster: ClusterSpec,
                    order: str = DEFAULT_ORDER) -> GroupPlacement:
    """Placement of the ``kind`` process groups of ``strategy`` on ``cluster``.

    Parameters
    ----------
    kind : str
        One of ``GROUP_KINDS``: ``tp``, ``cp``, ``dp``, ``pp`` (the pipeline; its
        send/recv pairs are adjacent stages), ``dp_cp`` (the gradient-sync group,
        ``dp * cp`` ranks), ``ep`` (expert parallel) or ``edp`` (expert data parallel).
    strategy : Strategy
        Degrees; ``tp * cp * dp * pp`` must equal ``cluster.num_gpus``.
    cluster : ClusterSpec
        GPUs, node shape and scale-up domain.
    order : str
        Megatron-style order, innermost dimension first (default ``"tp-cp-dp-pp"``).

    Returns
    -------
    GroupPlacement
    """
    if kind not in GROUP_KINDS:
        raise SpecError("kind", kind, "one of " + ", ".join(GROUP_KINDS))
    if strategy.world_size != cluster.num_gpus:
        raise SpecError("strategy", f"tp*cp*dp*pp={strategy.world_size}",
                        f"a layout of all cluster.num_gpus={cluster.num_gpus} GPUs")
    # Only the layout places ranks: strategies that differ in other knobs share one placement.
    layout = (strategy.tp, strategy.cp, strategy.dp, strategy.pp, strategy.ep if kind in ("ep", "edp") else 1)
    return _layout_placement(kind, layout, cluster, order)


@lru_cache(maxsize=4096)
def _layout_placement(kind: str, layout: tuple[int, int, int, int, int], cluster: ClusterSpec,
                      order: str) -> GroupPlacement:
    tp, cp, dp, pp, ep = layout
    rows = _group_ranks(kind, {"tp": tp, "cp": cp, "dp": dp, "pp": pp}, ep, _parse_order(order))
    fewest, domains = _worst_spread(rows, scale_up_domain_size(cluster))
    return GroupPlacement(kind=kind, size=rows.shape[1], gpus_per_node=fewest, num_domains=domains,
                          crosses_nodes=domains > 1)
