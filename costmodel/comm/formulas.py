"""Alpha-beta formulas for NCCL collectives, inside one NVLink domain and across domains.

Every formula of the collective model is here, each with its source. Message sizes follow
nccl-tests [NCCLT-PERF]: ``S`` is the all_reduce buffer, the whole gathered buffer of an
all_gather / reduce_scatter, the per-rank send buffer of an alltoall, the bytes of a send.
``n`` ranks in the group, ``g`` of them per domain, ``k`` domains (``n = g * k``). Bandwidths
are per GPU, one direction, with the calibrated efficiency already applied
(:class:`LinkFigures`); times in seconds. Citation keys are those of
docs/hardware_and_formulas.md section 8.

Bus bandwidth [NCCLT-PERF]: ``busbw = S / t * factor``, factor ``2(n-1)/n`` for all_reduce,
``(n-1)/n`` for all_gather, reduce_scatter and alltoall, 1 for send/recv. An ideal ring moves
``factor * S`` bytes through every GPU's link, so ``t = factor * S / B`` and busbw is the link
bandwidth ``B``.

Algorithms and protocols follow NCCL's tuning model (src/graph/tuning.cc, src/enqueue.cc; the
figures are in :mod:`costmodel.comm.nccl_tuning`) [NCCL-TUNING]. Every (algorithm, protocol)
pair is priced ``latency + bytes / bandwidth`` and the cheapest runs, as NCCL's tuner does:

* latency: NCCL's base latency of the pair plus one hop per step,
  ``(nsteps - nInterSteps) * intraLat + nInterSteps * interLat`` for the ring (``nsteps = 2(n-1)``
  for all_reduce, ``n-1`` for all_gather / reduce_scatter; ``nInterSteps = 2(k-1)``, ``k-1``),
  ``2 * ((g-1) * intraLat + log2i(k) * interLat)`` for the tree. A hop is the catalog's
  ``intra_node_latency_us`` / ``inter_node_latency_us`` (Ring/Simple) scaled by NCCL's
  hwLatencies ratio for the pair, and a network hop also carries the latency the network transport
  reports to NCCL (``latencyInter``, twice with Simple: 0 on InfiniBand, 35 us from AWS's EFA plugin on
  p5en / p6-b200; :data:`~costmodel.comm.nccl_tuning.NET_PLUGIN_LATENCY_US`); across nodes an
  intra-node ring step costs at least NCCL's
  network overhead (1 us, 2 us on AMD hosts, x3 with Simple), and a Simple ring's latency
  carries NCCL's x1.4 plateau once each rank's share of a channel is >= 64 B.
* bandwidth: the calibrated Simple bandwidth of the links times NCCL's protocol factor (Ring LL
  0.5 up to its LL cap, LL128 0.92 up to its per-channel cap; Tree 0.92, LL 1/3.8, LL128 7/9 or
  120/128), the tree's medium-size correction, and the share of the channels a call of that size
  launches (one per 32 KiB with Simple).

Inside one NVLink domain the three protocols compete, which reproduces the small- and mid-size
switch of nccl-tests sweeps (LL below ~4 MiB, LL128 to ~40 MiB, Simple above on 8 NVLink4 GPUs).
Across domains only Simple is priced: there NCCL's LL / LL128 estimates run 1.5-1.7x faster
than every published mid-size multi-node measurement [GTC24-S62129], [ARX-2411.13055], AWS
P6-B200 [MLE-NET], which the Simple ring and tree with NCCL's plateau and tree corrections match
within their plotted ranges (benchmarks/collectives.py).

NVLink SHARP (Hopper and later behind an NVSwitch, :attr:`NcclPlatform.nvls`) adds NCCL's NVLS
all_reduce inside a domain and NVLS Tree across domains (:func:`_nvls_candidates`): the switch
reduces, so each GPU moves its buffer once each way, ``S (g+1)/g``, at NCCL's nvlsEfficiency of
the ring bandwidth, instead of the ring's ``2 (g-1)/g S``. That reproduces the measured NVLS gain
by GPU count on 8x H200 (5 GPUs 1.13x the ring, 8 GPUs 1.29x) within 3% [MLE-NET]; NCCL's own
estimate (2x the ring bandwidth) does not. One-domain NVLS runs a three-stage chunk pipeline
whose fill stretches mid-size calls (8 MiB: 2x); NVLS Tree takes the tree's size correction where NCCL applies it (Blackwell, x86 host).
NVLS Tree's bus bandwidth stops at NCCL's ceiling of ``heads x perChMaxNVLSTreeBw`` (Hopper 57.7 GB/s per
head on two nodes, 45.5 beyond; Blackwell 96 / 80): on 2 x HGX H100 that is 462 GB/s where the
switch alone would allow 524, and 470 is measured [NCCLT-309].

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
  Tree). The tiers again overlap. Per domain the double binary tree sends ``S`` over
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

Not modelled: NVLS for all_gather / reduce_scatter (NCCL runs it only on registered buffers), IB
SHARP / CollNet, PAT (one GPU per node), and direct-mesh NVLink topologies (HGX-4 / Perlmutter
pairs get 4 of 12 links [NCCLT-331]): the scale-up tier is treated as a switch.
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
    NVLS_EFFICIENCY,
    NVLS_MAX_HEADS,
    PROTOCOLS,
    NcclPlatform,
    channel_fraction,
    net_hop_latency_s,
    net_overhead_s,
    nvls_pipeline_factor,
    nvls_tree_bus_cap,
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
    "candidate_seconds",
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
    # what the network transport reports to NCCL's tuner (nccl_tuning.NET_PLUGIN_LATENCY_US; 0: InfiniBand)
    net_plugin_latency_s: float = 0.0


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


def _ring_candidates(op: str, message_bytes: Bytes, n: Bytes | int, k: int, simple_bus_bytes_per_s: float,
                     links: LinkFigures) -> dict[str, Bytes]:
    """NCCL's ring per protocol: ``nsteps`` hops, ``nInterSteps`` of them over the NIC [NCCL-TUNING]."""
    platform, up_tier = links.platform, links.platform.scale_up
    hops, out_hops = ring_hops(op, n), (ring_hops(op, k) if k > 1 else 0)
    seconds = {}
    for proto in _protocols(links, across=k > 1):
        up_hop = scaled_hop_latency_s(up_tier, "ring", proto, links.up_latency_s)
        out_hop = 0.0
        if k > 1:
            up_hop = max(up_hop, net_overhead_s(platform, proto))
            out_hop = net_hop_latency_s("ring", proto, links.out_latency_s, links.net_plugin_latency_s)
        latency = BASE_LATENCY_US["ring"][PROTOCOLS.index(proto)] * 1e-6 + (hops - out_hops) * up_hop \
            + out_hops * out_hop
        if proto == "Simple":
            # NCCL applies its ring plateau to all_reduce, the one op with a second algorithm to rank
            # against; all_gather and reduce_scatter run the same ring pipeline, so they carry it too
            # (an all_reduce ring is a reduce-scatter then an all-gather)
            latency = latency * ring_plateau_factor(platform, message_bytes, n, k)
        share = channel_fraction(proto, "ring", message_bytes, n, platform, k)
        bus = protocol_bus_bandwidth("ring", proto, simple_bus_bytes_per_s, platform, k, share)
        seconds[f"ring/{proto}"] = latency + bus_factor(op, n) * message_bytes / bus
    return seconds


def _tree_candidates(message_bytes: Bytes, g: int, k: int, simple_seconds_per_byte: float,
                     links: LinkFigures) -> dict[str, Bytes]:
    """NCCL's Tree all_reduce per protocol (a chain inside a domain, double binary tree across)."""
    platform, up_tier = links.platform, links.platform.scale_up
    levels = int(math.floor(math.log2(k))) if k > 1 else 0  # NCCL's log2i
    seconds = {}
    for proto in _protocols(links, across=k > 1):
        up_hop = scaled_hop_latency_s(up_tier, "tree", proto, links.up_latency_s)
        out_hop = net_hop_latency_s("tree", proto, links.out_latency_s, links.net_plugin_latency_s)
        latency = BASE_LATENCY_US["tree"][PROTOCOLS.index(proto)] * 1e-6 + 2 * ((g - 1) * up_hop + levels * out_hop)
        # algbw = busbw / 2 for the tree [NCCL-TUNING], so its Simple bus bandwidth is 2 / seconds-per-byte
        share = channel_fraction(proto, "tree", message_bytes, g * k, platform, k)
        bus = protocol_bus_bandwidth("tree", proto, 2.0 / simple_seconds_per_byte, platform, k, share) \
            * tree_correction(proto, message_bytes)
        seconds[f"tree/{proto}"] = latency + 2.0 * message_bytes / bus
    return seconds


def _nvls_candidates(message_bytes: Bytes, g: int, k: int, links: LinkFigures) -> dict[str, Bytes]:
    """NCCL's NVLS all_reduce (one domain) or NVLS Tree (across domains), where the switch reduces.

    Through an NVLink SHARP switch each GPU sends its whole buffer once (the switch reads every
    GPU's copy of a shard and returns the sum to the shard's owner, ``multimem.ld_reduce``) and
    receives it once (the owner's multicast store of the result), plus its own shard each way:
    ``S (g + 1) / g`` per direction at ``nvlsEfficiency`` of the ring's NVLink bandwidth
    [NCCL-TUNING]. On 8 GPUs that is ``2 (g-1)/(g+1) = 1.56`` ring bus bandwidths before the
    efficiency, where NCCL's own estimate takes 2 (all_reduce "pipelines two operations").
    Across domains (NVLS Tree) the reduced shards go up and down a double binary tree over each
    GPU's NIC, as the Tree's do (:func:`_tree_seconds_per_byte`), and the tiers overlap, up to NCCL's
    per-head ceiling (:func:`~costmodel.comm.nccl_tuning.nvls_tree_bus_cap`). Latency:
    NCCL's NVLS / NVLS Tree hops, scaled by the catalog latencies like the other algorithms.
    Inside one domain the three-stage chunk pipeline's fill and drain stretch mid-size calls
    (:func:`~costmodel.comm.nccl_tuning.nvls_pipeline_factor`). NVLS Tree takes the tree's
    medium-size correction instead, which NCCL applies to it on Blackwell x86 hosts only: its
    tree pipeline fills the same way on every platform.
    """
    platform = links.platform
    if not platform.nvls or g < 2 or platform.arch not in NVLS_EFFICIENCY:
        return {}
    heads = min(g, NVLS_MAX_HEADS)  # a head GPU also receives its shard's sum: S (heads + 1) / heads
    nvls_bytes_per_s = NVLS_EFFICIENCY[platform.arch] * links.up_ring_bytes_per_s
    switch_seconds_per_byte = (heads + 1) / heads / nvls_bytes_per_s
    if k == 1:
        latency = scaled_hop_latency_s("nvlink", "nvls", "Simple", links.up_latency_s)
        fill = nvls_pipeline_factor(message_bytes, platform, heads)
        return {"nvls/Simple": latency + switch_seconds_per_byte * message_bytes * fill}
    levels = int(math.floor(math.log2(k)))  # NCCL's log2i
    latency = scaled_hop_latency_s("nvlink", "nvls_tree", "Simple", links.up_latency_s) \
        + 2 * levels * net_hop_latency_s("nvls_tree", "Simple", links.out_latency_s, links.net_plugin_latency_s)
    tree_sends_per_domain = 1.0 if k == 2 else 2.0
    # NCCL's per-head ceiling on NVLS Tree bus bandwidth, as a time per buffer byte (1 / algbw)
    capped_seconds_per_byte = bus_factor("all_reduce", g * k) / nvls_tree_bus_cap(platform, k, heads)
    seconds_per_byte = max(switch_seconds_per_byte, tree_sends_per_domain / g / links.out_ring_bytes_per_s,
                           capped_seconds_per_byte)
    # NCCL applies the tree's medium-size correction to NVLS Tree only on Blackwell with an x86 host
    # (ncclTopoGetAlgoTime) [NCCL-TUNING]; elsewhere its NVLS Tree estimate is the plain bandwidth term.
    corrected = platform.arch == "blackwell" and platform.cpu in ("intel", "amd")
    correction = tree_correction("Simple", message_bytes, "nvls_tree") if corrected else 1.0
    return {"nvls_tree/Simple": latency + seconds_per_byte * message_bytes / correction}


def _fastest(candidates: dict[str, Bytes]) -> Bytes:
    """The cheapest candidate per message size, as NCCL's tuner runs it (``topoGetAlgoInfo``) [NCCL-TUNING]."""
    return np.minimum.reduce(list(candidates.values()))


def candidate_seconds(op: str, message_bytes: Bytes, g: int, k: int, links: LinkFigures,
                      n: int | None = None) -> dict[str, Bytes]:
    """Time of every algorithm/protocol NCCL weighs for ``op`` on ``k`` domains of ``g`` ranks.

    Keys are ``"ring/LL"``, ``"tree/Simple"``, ...; all_to_all and send_recv have one entry
    (``"direct"``, ``"p2p"``). The time of ``op`` is the smallest entry.
    """
    n = g * k if n is None else n
    if op == "send_recv":
        return {"p2p": send_recv_seconds(message_bytes, k > 1, links)}
    if op == "all_to_all":
        return {"direct": single_domain_seconds(op, message_bytes, n, links) if k == 1
                else all_to_all_across_seconds(message_bytes, g, k, links, n=n)}
    if k == 1:
        ring = _ring_candidates(op, message_bytes, n, 1, links.up_ring_bytes_per_s, links)
        tree_seconds_per_byte = 2.0 / links.up_ring_bytes_per_s
    else:
        ring = _ring_candidates(op, message_bytes, n, k, 1.0 / _ring_seconds_per_byte(g, links), links)
        tree_seconds_per_byte = _tree_seconds_per_byte(g, k, links)
    if op != "all_reduce":
        return ring
    return ring | _tree_candidates(message_bytes, n if k == 1 else g, k, tree_seconds_per_byte, links) \
        | _nvls_candidates(message_bytes, n if k == 1 else g, k, links)


def single_domain_seconds(op: str, message_bytes: Bytes, n: Bytes | int, links: LinkFigures) -> Bytes:
    """``op`` among ``n`` ranks of one NVLink domain over the scale-up tier.

    Ring (all_reduce: the faster of ring and tree), each at its fastest protocol; alltoall direct.
    """
    if op == "send_recv":
        return links.base_latency_s + links.up_latency_s + message_bytes / links.up_p2p_bytes_per_s
    if op == "all_to_all":
        moved = bus_factor(op, n) * message_bytes
        return links.base_latency_s + (n - 1) * links.up_latency_s + moved / links.up_all_to_all_bytes_per_s
    if np.ndim(n) > 0:  # an array of group sizes (what-if ratios): the ring, priced per size
        return _fastest(_ring_candidates(op, message_bytes, n, 1, links.up_ring_bytes_per_s, links))
    return _fastest(candidate_seconds(op, message_bytes, int(n), 1, links))


def ring_across_seconds(op: str, message_bytes: Bytes, g: int, k: int, links: LinkFigures,
                        n: int | None = None) -> Bytes:
    """all_reduce / all_gather / reduce_scatter as one flat NCCL ring over ``k`` domains of ``g`` ranks.

    ``n`` (default ``g * k``): ranks in all, where domains hold unequal counts and ``g`` is the fewest.
    The fastest of NCCL's protocols (LL, LL128, Simple) with their latencies and bandwidths.
    """
    n = g * k if n is None else n
    return _fastest(_ring_candidates(op, message_bytes, n, k, 1.0 / _ring_seconds_per_byte(g, links), links))


def _ring_seconds_per_byte(g: int, links: LinkFigures) -> float:
    """Per byte the ring moves through each GPU: its NVLink share and its NIC share overlap; the slower binds."""
    return max((g - 1) / g / links.up_ring_bytes_per_s, 1.0 / g / links.out_ring_bytes_per_s)


def _tree_seconds_per_byte(g: int, k: int, links: LinkFigures) -> float:
    """Per all_reduce byte of the hierarchical tree: domain reduce-scatter / all-gather or the NICs."""
    up = 2.0 * (g - 1) / g / links.up_ring_bytes_per_s
    tree_sends_per_domain = 1.0 if k == 2 else 2.0
    return max(up, tree_sends_per_domain / g / links.out_ring_bytes_per_s)


def tree_all_reduce_seconds(message_bytes: Bytes, g: int, k: int, links: LinkFigures) -> Bytes:
    """Hierarchical all_reduce: reduce-scatter in each domain, double binary tree across, all-gather.

    NCCL's Tree with its all_reduce factor and medium-size correction [NCCL-TUNING].
    """
    return _fastest(_tree_candidates(message_bytes, g, k, _tree_seconds_per_byte(g, k, links), links))


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
