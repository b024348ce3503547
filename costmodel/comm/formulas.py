"""Alpha-beta formulas for NCCL collectives, inside one NVLink domain and across domains.

Every formula of the collective model is here, each with its source. Message sizes follow
nccl-tests [NCCLT-PERF]: ``S`` is the all_reduce buffer, the whole gathered buffer of an
all_gather / reduce_scatter, the per-rank send buffer of an alltoall, the bytes of a send.
``n`` ranks in the group, ``g`` of them per domain, ``k`` domains (``n = g * k``). Bandwidths
are per GPU, one direction, with the calibrated efficiency already applied
(:class:`LinkFigures`); times in seconds. Citation keys are those of
shared/research/hardware_and_formulas.md section 8.

Bus bandwidth [NCCLT-PERF]: ``busbw = S / t * factor``, factor ``2(n-1)/n`` for all_reduce,
``(n-1)/n`` for all_gather, reduce_scatter and alltoall, 1 for send/recv. An ideal ring moves
``factor * S`` bytes through every GPU's link, so ``t = factor * S / B`` and busbw is the link
bandwidth ``B``.

Latency follows NCCL's own tuning model (src/graph/tuning.cc) [NCCL-TUNING]: a per-collective
base of 8.4 us (Ring/Tree, Simple protocol) plus one per-hop latency per ring step,
``(nsteps - nInterSteps) * intraLat + nInterSteps * interLat`` with ``nsteps = 2(n-1)`` for
all_reduce and ``n-1`` for all_gather / reduce_scatter, ``nInterSteps = 2(k-1)`` and ``k-1``; tree
all_reduce ``2 * ((g-1) * intraLat + log2(k) * interLat)``. The per-hop latencies are the
catalog's ``intra_node_latency_us`` / ``inter_node_latency_us``.

Across domains NCCL runs one of two algorithms for all_reduce and picks the faster by its
model [NCCL-TUNING]; all_gather and reduce_scatter always use the ring:

* **Ring**: one flat ring through all ``n`` ranks, one ring per channel, each channel leaving a
  domain through a different GPU's NIC. Every GPU sends ``factor * S`` bytes; the share it sends
  as the channel's exit GPU, ``1/g``, goes over its NIC and the rest over NVLink, both at once
  (chunks are pipelined), so the time is the slower tier. Network-bound, the busbw is
  ``g * NIC`` per domain: DGX A100 8 x 24 = 192 GB/s [NCCL-812], DGX H100 8 x 46 = 370
  [GTC25-S72583], flat from 32 to 8192 H100s [GTC24-S62129]; "on 3+ nodes ... the busbw is
  going to reflect exactly what's going through the NICs" (NCCL maintainer,
  github.com/NVIDIA/nccl-tests/issues/160).
* **Tree (hierarchical)**: reduce-scatter inside each domain, the per-GPU shards reduced across
  domains over each GPU's NIC with a double binary tree, all-gather inside the domain (NCCL's
  Tree / NVLSTree). The tiers again overlap. Per domain the double binary tree sends ``S`` over
  the domain's ``g`` NICs when ``k = 2`` (each domain is the root of one tree and a leaf of the
  other) and about ``2 S`` when ``k > 2`` (interior in one tree: up and down), which is why a
  2-node tree busbw can exceed the NIC limit [NCCLT-196] while at 4 nodes the ring is as fast.

The phases are combined by ``max``, not by a sum, because NCCL pipelines chunks through the
tiers. A sequential sum (intra reduce-scatter + inter ring + intra all-gather) would predict
126 GB/s for 4 x DGX A100 where NCCL measures 192 [NCCL-812], and an ideal hierarchical ring of
shards (``2(k-1)/k * S/g`` per NIC) would predict 248; neither matches, the ring above does.

alltoall across domains: each GPU sends ``(g-1)/n * S`` to its own domain over NVLink and
``(n-g)/n * S`` to other domains over one NIC, since alltoall "cannot aggregate the bandwidth
of multiple NICs" [NCCLT-267], [NCCLT-130]; that gives busbw ``(n-1)/(n-g) * NIC``, i.e.
``k/(k-1)`` times the NIC rate (2x on 2 nodes) as those threads state. Its latency counts one
hop per peer (NCCL's alltoall is ``n-1`` grouped send/recv pairs).

Not modelled: NVLink SHARP (NVLS, +20-30% all_reduce busbw on Hopper and later [MLE-NET]),
IB SHARP, NCCL's protocol switch (LL / LL128) for small messages, the reduced channel count
of mid-size messages, and direct-mesh NVLink topologies (HGX-4 / Perlmutter pairs get 4 of 12
links [NCCLT-331]): the scale-up tier is treated as a switch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

from costmodel.comm.nccl_tuning import (
    BASE_LATENCY_US,
    DEFAULT_PLATFORM,
    PROTOCOLS,
    NcclPlatform,
    channel_fraction,
    net_overhead_s,
    protocol_bus_bandwidth,
    ring_plateau_factor,
    scaled_hop_latency_s,
    tree_correction,
)

__all__ = [
    "NCCL_BASE_LATENCY_S",
    "OPS",
    "LinkFigures",
    "all_to_all_across_seconds",
    "bus_factor",
    "bus_bandwidth",
    "ring_across_seconds",
    "ring_hops",
    "send_recv_seconds",
    "single_domain_seconds",
    "tree_all_reduce_seconds",
]

OPS: Final = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")

# NCCL baseLat for Ring and Tree with the Simple protocol, the one large messages use (us -> s)
# [NCCL-TUNING] (src/graph/tuning.cc; h&f 3e).
NCCL_BASE_LATENCY_S: Final = 8.4e-6

Bytes = NDArray[np.float64]


@dataclass(frozen=True, kw_only=True)
class LinkFigures:
    """Effective per-GPU, one-direction bandwidths (bytes/s, efficiency applied) and latencies (s).

    ``up_*`` is the scale-up (NVLink / xGMI / PCIe) tier, ``out_*`` the scale-out NIC of the GPU.
    """

    up_ring_bytes_per_s: float
    up_all_to_all_bytes_per_s: float
    up_p2p_bytes_per_s: float
    out_ring_bytes_per_s: float
    out_all_to_all_bytes_per_s: float
    out_p2p_bytes_per_s: float
    up_latency_s: float
    out_latency_s: float
    base_latency_s: float = NCCL_BASE_LATENCY_S
    platform: NcclPlatform = DEFAULT_PLATFORM


def bus_factor(op: str, n: int) -> float:
    """nccl-tests busbw factor of ``op`` on ``n`` ranks [NCCLT-PERF]."""
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def ring_hops(op: str, n: int) -> int:
    """Sequential ring steps of ``op`` on ``n`` ranks: NCCL's ``nsteps`` [NCCL-TUNING]."""
    return 2 * (n - 1) if op == "all_reduce" else n - 1


def bus_bandwidth(op: str, message_bytes: Bytes, seconds: Bytes, n: int) -> Bytes:
    """nccl-tests bus bandwidth (bytes/s) of ``op`` moving ``message_bytes`` in ``seconds``."""
    return bus_factor(op, n) * message_bytes / seconds


def _protocols(links: LinkFigures, across: bool) -> tuple[str, ...]:
    """Protocols priced: NCCL's three inside a domain (LL128 only over NVLink), Simple across domains.

    Inside one NVLink domain NCCL's LL / LL128 estimates match nccl-tests (see the module notes);
    across the network they run 1.5-1.7x faster than every published mid-size multi-node sweep,
    which NCCL's Simple-protocol ring and tree estimates match, so those price it.
    """
    if across:
        return ("Simple",)
    return PROTOCOLS if links.platform.ll128 else ("LL", "Simple")


def _ring_seconds(op: str, message_bytes: Bytes, n: Bytes | int, k: int, simple_bus_bytes_per_s: float,
                  links: LinkFigures, *, one_rank_per_domain: bool = False) -> Bytes:
    """NCCL's ring at its fastest protocol: ``nsteps`` hops, ``nInterSteps`` of them over the NIC [NCCL-TUNING]."""
    platform, up_tier = links.platform, links.platform.scale_up
    hops, out_hops = ring_hops(op, n), (ring_hops(op, k) if k > 1 else 0)
    best = np.full(np.shape(message_bytes), np.inf)
    for proto in _protocols(links, across=k > 1):
        up_hop = scaled_hop_latency_s(up_tier, "ring", proto, links.up_latency_s)
        out_hop = 0.0
        if k > 1:
            up_hop = max(up_hop, net_overhead_s(platform, proto))
            # with one rank per node NCCL prices the ring's network steps at the Tree latency
            out_hop = scaled_hop_latency_s("net", "tree" if one_rank_per_domain else "ring", proto,
                                           links.out_latency_s)
        latency = BASE_LATENCY_US["ring"][PROTOCOLS.index(proto)] * 1e-6 + (hops - out_hops) * up_hop \
            + out_hops * out_hop
        if proto == "Simple":
            # NCCL applies its ring plateau to all_reduce, the one op with a second algorithm to rank
            # against; all_gather and reduce_scatter run the same ring pipeline, so they carry it too
            # (an all_reduce ring is a reduce-scatter then an all-gather)
            latency = latency * ring_plateau_factor(platform, message_bytes, n, k)
        share = channel_fraction(proto, "ring", message_bytes, n, platform, k)
        bus = protocol_bus_bandwidth("ring", proto, simple_bus_bytes_per_s, platform, k, share)
        best = np.minimum(best, latency + bus_factor(op, n) * message_bytes / bus)
    return best


def _tree_seconds(message_bytes: Bytes, g: int, k: int, simple_seconds_per_byte: float,
                  links: LinkFigures) -> Bytes:
    """NCCL's Tree all_reduce at its fastest protocol (a chain inside a domain, double binary tree across)."""
    platform, up_tier = links.platform, links.platform.scale_up
    levels = int(math.floor(math.log2(k))) if k > 1 else 0  # NCCL's log2i
    best = np.full(np.shape(message_bytes), np.inf)
    for proto in _protocols(links, across=k > 1):
        up_hop = scaled_hop_latency_s(up_tier, "tree", proto, links.up_latency_s)
        out_hop = scaled_hop_latency_s("net", "tree", proto, links.out_latency_s)
        latency = BASE_LATENCY_US["tree"][PROTOCOLS.index(proto)] * 1e-6 + 2 * ((g - 1) * up_hop + levels * out_hop)
        # algbw = busbw / 2 for the tree [NCCL-TUNING], so its Simple bus bandwidth is 2 / seconds-per-byte
        share = channel_fraction(proto, "tree", message_bytes, g * k, platform, k)
        bus = protocol_bus_bandwidth("tree", proto, 2.0 / simple_seconds_per_byte, platform, k, share) \
            * tree_correction(proto, message_bytes)
        best = np.minimum(best, latency + 2.0 * message_bytes / bus)
    return best


def single_domain_seconds(op: str, message_bytes: Bytes, n: Bytes | int, links: LinkFigures) -> Bytes:
    """``op`` among ``n`` ranks of one NVLink domain over the scale-up tier.

    Ring (all_reduce: the faster of ring and tree), each at its fastest protocol; alltoall direct.
    """
    if op == "send_recv":
        return links.base_latency_s + links.up_latency_s + message_bytes / links.up_p2p_bytes_per_s
    if op == "all_to_all":
        moved = bus_factor(op, n) * message_bytes
        return links.base_latency_s + (n - 1) * links.up_latency_s + moved / links.up_all_to_all_bytes_per_s
    ring = _ring_seconds(op, message_bytes, n, 1, links.up_ring_bytes_per_s, links)
    if op != "all_reduce" or np.ndim(n) > 0:
        return ring  # an array of group sizes (what-if ratios) prices the ring, the large-message algorithm
    return np.minimum(ring, _tree_seconds(message_bytes, int(n), 1, 2.0 / links.up_ring_bytes_per_s, links))


def ring_across_seconds(op: str, message_bytes: Bytes, g: int, k: int, links: LinkFigures,
                        n: int | None = None) -> Bytes:
    """all_reduce / all_gather / reduce_scatter as one flat NCCL ring over ``k`` domains of ``g`` ranks.

    ``n`` (default ``g * k``): ranks in all, where domains hold unequal counts and ``g`` is the fewest.
    The fastest of NCCL's protocols (LL, LL128, Simple) with their latencies and bandwidths.
    """
    n = g * k if n is None else n
    seconds_per_byte = max((g - 1) / g / links.up_ring_bytes_per_s, 1.0 / g / links.out_ring_bytes_per_s)
    return _ring_seconds(op, message_bytes, n, k, 1.0 / seconds_per_byte, links, one_rank_per_domain=g == 1)


def tree_all_reduce_seconds(message_bytes: Bytes, g: int, k: int, links: LinkFigures) -> Bytes:
    """Hierarchical all_reduce: reduce-scatter in each domain, double binary tree across, all-gather.

    NCCL's Tree with its all_reduce factor and medium-size correction [NCCL-TUNING].
    """
    up = 2.0 * (g - 1) / g / links.up_ring_bytes_per_s
    tree_sends_per_domain = 1.0 if k == 2 else 2.0
    seconds_per_byte = max(up, tree_sends_per_domain / g / links.out_ring_bytes_per_s)
    return _tree_seconds(message_bytes, g, k, seconds_per_byte, links)


def all_to_all_across_seconds(message_bytes: Bytes, g: int, k: int, links: LinkFigures,
                              n: int | None = None) -> Bytes:
    """alltoall over ``k`` domains of ``g`` ranks: local share over NVLink, the rest over one NIC.

    ``n`` (default ``g * k``): ranks in all, where domains hold unequal counts; a rank of the
    fewest-populated domain (``g``) sends the most, ``(n - g) / n``, over its NIC.
    """
    n = g * k if n is None else n
    latency = links.base_latency_s + (g - 1) * links.up_latency_s + (n - g) * links.out_latency_s
    seconds_per_byte = max((g - 1) / n / links.up_all_to_all_bytes_per_s,
                           (n - g) / n / links.out_all_to_all_bytes_per_s)
    return latency + seconds_per_byte * message_bytes


def send_recv_seconds(message_bytes: Bytes, across: bool, links: LinkFigures) -> Bytes:
    """One send/recv pair, over the NIC when ``across`` domains, else over the scale-up tier."""
    if not across:
        return single_domain_seconds("send_recv", message_bytes, 2, links)
    return links.base_latency_s + links.out_latency_s + message_bytes / links.out_p2p_bytes_per_s
