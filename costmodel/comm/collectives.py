"""Time of one NCCL collective on a placed process group.

Inside one NVLink domain a measured-NCCL predictor (``intra``) is used where it covers the
group size and message; elsewhere, and across domains, the alpha-beta formulas of
:mod:`costmodel.comm.formulas` with the link figures of the GPU catalog and the efficiencies
of ``calibration.yaml``: every algorithm/protocol NCCL's tuner weighs, and the cheapest of them
(:func:`nccl_algorithm` names it).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from costmodel.comm.calibration import CommCalibration, default_calibration
from costmodel.comm.formulas import OPS, LinkFigures, candidate_seconds
from costmodel.comm.nccl_tuning import NET_PLUGIN_LATENCY_US, platform_for
from costmodel.comm.placement import GroupPlacement
from costmodel.specs.errors import SpecError
from costmodel.specs.gpu import GPUSpec

__all__ = ["ALGORITHMS", "IntraPredictor", "collective_seconds", "link_figures", "nccl_algorithm"]

IntraPredictor = Callable[[str, int, NDArray[np.float64]], tuple[NDArray[np.float64], NDArray[np.bool_]]]
"""``(op, num_gpus, message_bytes) -> (seconds, in_range)``: measured NCCL inside one domain."""


def link_figures(gpu: GPUSpec, calibration: CommCalibration | None = None, network: str = "ib") -> LinkFigures:
    """Effective bandwidths of ``gpu``'s two tiers: catalog link rate times calibrated efficiency.

    ``network`` names the scale-out transport NCCL runs on (a key of
    :data:`~costmodel.comm.nccl_tuning.NET_PLUGIN_LATENCY_US`; InfiniBand by default).
    """
    if not isinstance(network, str) or network not in NET_PLUGIN_LATENCY_US:
        raise SpecError("network", network, "one of " + ", ".join(NET_PLUGIN_LATENCY_US))
    return _link_figures(gpu, calibration or default_calibration(), network)


@lru_cache(maxsize=256)  # a search prices thousands of collectives on the same GPU
def _link_figures(gpu: GPUSpec, cal: CommCalibration, network: str) -> LinkFigures:
    up, out = gpu.intra_node_bandwidth_bytes_per_s, gpu.inter_node_bandwidth_bytes_per_s
    return LinkFigures(
        up_ring_bytes_per_s=up * cal.ring_efficiency_for(gpu.name),
        up_all_to_all_bytes_per_s=up * cal.all_to_all_efficiency_for(gpu.name),
        up_p2p_bytes_per_s=up * cal.p2p_efficiency,
        out_ring_bytes_per_s=out * cal.net_bus_efficiency,
        out_all_to_all_bytes_per_s=out * cal.net_all_to_all_efficiency,
        out_p2p_bytes_per_s=min(out * cal.net_bus_efficiency, cal.net_p2p_peer_bandwidth_bytes_per_s),
        up_latency_s=gpu.intra_node_latency_s,
        out_latency_s=gpu.inter_node_latency_s,
        platform=platform_for(gpu.name),
        net_plugin_latency_s=NET_PLUGIN_LATENCY_US[network] * 1e-6,
    )


ALGORITHMS = ("ring", "tree", "nvls", "nvls_tree")
"""Algorithms ``algorithms=`` may name (NCCL_ALGO's Ring, Tree, NVLS, NVLSTree)."""


def _candidates(op: str, message_bytes: NDArray[np.float64], placement: GroupPlacement,
                links: LinkFigures, algorithms: tuple[str, ...] | None = None) -> dict[str, NDArray[np.float64]]:
    n = placement.size
    if not placement.crosses_nodes:
        candidates = candidate_seconds(op, message_bytes, n, 1, links)
    else:
        # An uneven spread (a group cut 8 + 24 by a domain boundary) is priced by the domains it really
        # spans and its n ranks, with the NIC share of its fewest-populated domain (g): that domain's
        # ranks send the most bytes across, and its NICs carry every ring channel's crossing.
        candidates = candidate_seconds(op, message_bytes, placement.gpus_per_node, max(placement.num_domains, 2),
                                       links, n=n)
    if algorithms is None:
        return candidates
    unknown = [a for a in algorithms if a not in ALGORITHMS]
    if unknown or not algorithms:
        raise SpecError("algorithms", algorithms, "a non-empty subset of " + ", ".join(ALGORITHMS))
    # like NCCL_ALGO: alltoall and send/recv ("direct", "p2p") have no algorithm to choose
    kept = {name: t for name, t in candidates.items() if name.split("/")[0] in algorithms or "/" not in name}
    if not kept:
        raise SpecError("algorithms", algorithms, f"one that NCCL runs {op} with here: "
                        + ", ".join(sorted({name.split('/')[0] for name in candidates})))
    return kept


def nccl_algorithm(op: str, message_bytes: ArrayLike, placement: GroupPlacement, gpu: GPUSpec, *,
                   calibration: CommCalibration | None = None,
                   algorithms: tuple[str, ...] | None = None, network: str = "ib") -> list[str]:
    """The algorithm/protocol NCCL's tuner runs for each message size (``"ring/LL128"``, ``"nvls/Simple"``, ...).

    The analytic model's choice, the cheapest of :func:`costmodel.comm.formulas.candidate_seconds`
    (of those in ``algorithms``, as ``NCCL_ALGO`` restricts them, when given).
    """
    if op not in OPS:
        raise SpecError("op", op, "one of " + ", ".join(OPS))
    sizes = np.atleast_1d(np.asarray(message_bytes, dtype=np.float64))
    candidates = _candidates(op, sizes, placement, link_figures(gpu, calibration, network), algorithms)
    names = list(candidates)
    best = np.argmin(np.stack([candidates[name] for name in names]), axis=0)
    return [names[i] for i in best]


@overload
def collective_seconds(op: str, message_bytes: float, placement: GroupPlacement, gpu: GPUSpec,
                       intra: IntraPredictor | None = None, *,
                       calibration: CommCalibration | None = None,
                       algorithms: tuple[str, ...] | None = None, network: str = "ib") -> float: ...


@overload
def collective_seconds(op: str, message_bytes: NDArray[np.float64], placement: GroupPlacement, gpu: GPUSpec,
                       intra: IntraPredictor | None = None, *,
                       calibration: CommCalibration | None = None,
                       algorithms: tuple[str, ...] | None = None, network: str = "ib") -> NDArray[np.float64]: ...


def collective_seconds(op: str, message_bytes: ArrayLike, placement: GroupPlacement, gpu: GPUSpec,
                       intra: IntraPredictor | None = None, *,
                       calibration: CommCalibration | None = None,
                       algorithms: tuple[str, ...] | None = None, network: str = "ib") -> float | NDArray[np.float64]:
    """Seconds one ``op`` takes on the group ``placement`` describes.

    Parameters
    ----------
    op : str
        ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all`` or ``send_recv``.
    message_bytes : float or array_like
        nccl-tests size: the all_reduce buffer; the whole gathered buffer of all_gather and
        reduce_scatter; the per-rank send buffer of all_to_all; the bytes one send moves.
    placement : GroupPlacement
        The group (``send_recv``: a pair of its ranks, across domains when it crosses nodes).
    gpu : GPUSpec
        Link rates and per-hop latencies of both tiers.
    intra : callable, optional
        Measured NCCL inside one domain, ``(op, num_gpus, message_bytes) -> (seconds, in_range)``;
        used where ``in_range``, the analytic model elsewhere.
    calibration : CommCalibration, optional
        Efficiencies; the shipped ``calibration.yaml`` by default.
    algorithms : tuple of str, optional
        Only these of :data:`ALGORITHMS` compete, as ``NCCL_ALGO`` restricts NCCL; all by default.
    network : str, optional
        The scale-out transport (``"ib"``, ``"aws-efa-p5en-p6-b200"``, ...): the latency it reports to
        NCCL's tuner is added to every inter-node hop (:data:`~costmodel.comm.nccl_tuning.NET_PLUGIN_LATENCY_US`).

    Returns
    -------
    float or ndarray
        Seconds, shaped like ``message_bytes``; 0 for a one-rank group.
    """
    if op not in OPS:
        raise SpecError("op", op, "one of " + ", ".join(OPS))
    sizes = np.asarray(message_bytes, dtype=np.float64)
    if np.any(sizes < 0) or not np.all(np.isfinite(sizes)):
        raise SpecError("message_bytes", message_bytes, "finite and >= 0")
    if placement.size == 1:
        seconds = np.zeros_like(sizes)
    else:
        flat = np.atleast_1d(sizes)
        candidates = _candidates(op, flat, placement, link_figures(gpu, calibration, network), algorithms)
        seconds = np.minimum.reduce(list(candidates.values()))
        if intra is not None and not placement.crosses_nodes:
            ranks = 2 if op == "send_recv" else placement.size
            measured, in_range = intra(op, ranks, flat)
            seconds = np.where(np.asarray(in_range, dtype=bool), np.asarray(measured, dtype=np.float64), seconds)
        seconds = np.where(flat > 0, seconds, 0.0).reshape(sizes.shape)
    return float(seconds) if seconds.ndim == 0 else seconds
