"""NCCL's tuning model: per-algorithm / per-protocol latency and bandwidth, and its channel count.

Every figure is NCCL's own default, read from github.com/NVIDIA/nccl at commit 5067397c (2026-06):
``src/graph/tuning.cc`` (``ncclTunerConstantsDefaults``, ``ncclTopoTuneModel``,
``ncclTopoGetAlgoTime``), ``src/enqueue.cc`` (``topoGetAlgoInfo``: the channel count of one
call; ``calcCollChunking``: chunk sizes), ``src/transport/nvls.cc`` (NVLS channels) and
``src/device/all_reduce.h`` (the NVLS pipeline's warp groups), cited as [NCCL-TUNING]. NCCL prices every enabled (algorithm, protocol) pair as
``latency + bytes / bandwidth`` and runs the cheapest; :mod:`costmodel.comm.formulas` does the same
with these figures applied to the calibrated Simple-protocol bandwidths of the links.

The platform table maps catalog GPUs to the facts NCCL's tuner reads from the topology (compute
capability, NVLink or PCIe inside the node, host CPU, channel count, NVLink SHARP), each with its source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "BASE_LATENCY_US",
    "DEFAULT_PLATFORM",
    "HOP_LATENCY_US",
    "NET_PLUGIN_LATENCY_US",
    "PROTOCOLS",
    "NVLS_CHANNELS_ONE_NODE",
    "NVLS_EFFICIENCY",
    "NVLS_HOP_LATENCY_US",
    "NVLS_MAX_HEADS",
    "NVLS_PIPELINE_STAGES",
    "NcclPlatform",
    "channel_fraction",
    "net_hop_latency_s",
    "net_overhead_s",
    "nvls_tree_bus_cap",
    "nvls_pipeline_factor",
    "platform_for",
    "protocol_bus_bandwidth",
    "ring_plateau_factor",
    "scaled_hop_latency_s",
    "tree_correction",
]

PROTOCOLS: Final = ("LL", "LL128", "Simple")

Bytes = NDArray[np.float64]

# baseLatencies (us) per algorithm, (LL, LL128, Simple) [NCCL-TUNING].
BASE_LATENCY_US: Final[dict[str, tuple[float, float, float]]] = {
    "tree": (6.8, 14.0, 8.4),
    "ring": (6.6, 14.0, 8.4),
}

# hwLatencies (us) of one step per hardware tier and algorithm, (LL, LL128, Simple) [NCCL-TUNING].
HOP_LATENCY_US: Final[dict[str, dict[str, tuple[float, float, float]]]] = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0)},
}

# NVLS (NVLink SHARP) and NVLS Tree, Simple only: baseLatencies 0; hwLatencies NVLink NVLS 25, NVLSTree 25;
# NET NVLS 18, NVLSTree 20.9 (us) [NCCL-TUNING]. NVLS latency is one intra hop (+ one net hop with CollNet),
# NVLS Tree's ``intraLat + 2 * log2i(nNodes) * interLat``.
NVLS_HOP_LATENCY_US: Final = {"nvlink": {"nvls": 25.0, "nvls_tree": 25.0}, "net": {"nvls": 18.0, "nvls_tree": 20.9}}
# nvlsEfficiency: the share of the NVLink bandwidth an NVLS reduction through the switch reaches,
# Hopper 0.85, Blackwell 0.74 (Volta/Ampere have no NVLS) [NCCL-TUNING].
NVLS_EFFICIENCY: Final = {"hopper": 0.85, "blackwell": 0.74}
# NVLS channels: 16 on sm90, 24 on one sm100 node (NVLS_NCHANNELS_SM90 / _SM100_NVL, src/transport/nvls.cc);
# chunk 128 KiB (NCCL_NVLS_CHUNKSIZE), cut to 64 / 32 / 16 KiB below 64 / 8 / 2 x (channels x heads x
# chunk) bytes (calcCollChunking, src/enqueue.cc) [NCCL-TUNING]. One-node NVLS all_reduce runs three
# warp groups in a pipeline, scatter -> NVLS reduce + multicast -> gather (src/device/all_reduce.h).
NVLS_CHANNELS_ONE_NODE: Final = {"hopper": 16, "blackwell": 24}
NVLS_CHUNK_BYTES: Final = 128 * 1024
NVLS_CHUNK_STEPS: Final = ((64, 64 * 1024), (8, 32 * 1024), (2, 16 * 1024))
NVLS_PIPELINE_STAGES: Final = 3
# NCCL_MAX_NVLS_ARITY (src/include/device.h): at most 32 NVLS heads, so a larger domain (NVL72) has
# GPUs that only feed the switch [NCCL-TUNING].
NVLS_MAX_HEADS: Final = 32

# Latency (us) the network transport reports to NCCL (ncclNetProperties_t.latency). NCCL's tuner adds it
# to every inter-node hop of every algorithm and protocol, and once more with Simple ("Also add the flush
# extra latency"): ``interLat += graphs[a]->latencyInter`` (ncclTopoTuneModel), ``latencyInter =
# net->net.latency`` (src/graph/search.cc) [NCCL-TUNING]. The catalog's per-hop latencies are InfiniBand's,
# whose transport reports 0 ("props->latency = 0; // Not set", src/transport/net_ib/init.cc); AWS's EFA
# plugin reports a figure per instance type (github.com/aws/aws-ofi-nccl src/platform-aws.cpp at commit
# 2daf7d30, 2026-08: ``.latency`` 35.0 for "p5en/p6-b200", set in 2496e7de 2025-05-23 "based on empirical
# search"; 75.0 for p4d / p4de / p5 / p5e, and the default for an instance type it does not list,
# "empirical testing on P5"). It is what NCCL's tuner is told, tuned by AWS, not a measured wire latency.
NET_PLUGIN_LATENCY_US: Final = {"ib": 0.0, "aws-efa-p5en-p6-b200": 35.0, "aws-efa-p4d-p5": 75.0}

# getNetOverhead (us): a multi-node ring step costs at least this, 3x with Simple [NCCL-TUNING].
NET_OVERHEAD_US: Final = {"intel": 1.0, "amd": 2.0, "arm": 1.0}
SIMPLE_NET_OVERHEAD_FACTOR: Final = 3.0

# Bandwidth refinements of ncclTopoTuneModel [NCCL-TUNING]: Ring LL runs at half the Simple
# bandwidth, Ring LL128 at 120/128 (written 0.92); Tree all_reduce at 0.92 of its graph bandwidth,
# Tree LL at 1/3.8 of that, Tree LL128 at 7/9 inside one node and 120/128 across nodes.
RING_LL_FACTOR: Final = 0.5
RING_LL128_FACTOR: Final = 0.92
TREE_ALL_REDUCE_FACTOR: Final = 0.92
TREE_LL_FACTOR: Final = 1.0 / 3.8
TREE_LL128_FACTOR_ONE_NODE: Final = 7.0 / 9.0
TREE_LL128_FACTOR_NODES: Final = 120.0 / 128.0

# Caps (GB/s), indexed [nodes index] with nodes index 0: 1 node, 1: 2 nodes, 2: more [NCCL-TUNING].
# llMaxBws rows: one node by GPU architecture; several nodes by CPU vendor (Intel row 0, AMD row 1).
LL_MAX_BW_ONE_NODE_GBPS: Final = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 282.0}
LL_MAX_BW_NODES_GBPS: Final = {"intel": (39.0, 39.0, 20.4), "amd": (87.7, 22.5, 19.0), "arm": (39.0, 39.0, 20.4)}
PER_CHANNEL_RING_LL128_GBPS: Final = {"volta": (20.0,) * 3, "ampere": (20.0,) * 3, "hopper": (36.7,) * 3,
                                      "blackwell": (40.0,) * 3}
PER_CHANNEL_TREE_GBPS: Final = {"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8),
                                "hopper": (38.7, 41.4, 36.0), "blackwell": (70.0, 42.8, 24.0)}
PER_CHANNEL_TREE_LL128_GBPS: Final = {"volta": (20.0,) * 3, "ampere": (20.0,) * 3, "hopper": (36.7, 36.7, 29.0),
                                      "blackwell": (55.6, 31.67, 20.0)}
# perChMaxNVLSTreeBws: NVLS Tree's bus bandwidth per NVLS head (NCCL's NVLS graph has one channel per head),
# two nodes / more (its one-node entry is unused: NVLS Tree is disabled on one node) [NCCL-TUNING]. This is the
# clamp NCCL's own time model applies, not a measured hardware cap: 2 x HGX H100 measures 470 GB/s busbw, above
# the 8 x 57.7 = 462 GB/s it gives (benchmarks/nccl_published.yaml).
PER_HEAD_NVLS_TREE_GBPS: Final = {"hopper": (0.0, 57.7, 45.5), "blackwell": (0.0, 96.0, 80.0)}

# treeCorrectionFactor per protocol, index log2i(bytes / 64), 64 B .. 512 MB; 1 beyond. Tree all_reduce
# reads the first 23 entries (to 256 MB), NVLS Tree all 24 (``ncclTopoGetAlgoTime``) [NCCL-TUNING].
TREE_CORRECTION: Final[dict[str, tuple[float, ...]]] = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
}
TREE_CORRECTION_ENTRIES: Final = {"tree": 23, "nvls_tree": 24}

# "Plateau effect of ring": multi-node Ring/Simple all_reduce latency x1.4 on sm80+, x1.9 before,
# once each rank's share of a channel is >= 64 B [NCCL-TUNING].
RING_PLATEAU: Final = {"volta": 1.9, "ampere": 1.4, "hopper": 1.4, "blackwell": 1.4}

# Threads per channel and bytes per thread before NCCL adds a channel (topoGetAlgoInfo,
# NCCL_{LL,LL128,SIMPLE}_THREAD_THRESHOLD, NCCL_{LL,LL128,SIMPLE}_MAX_NTHREADS; Ring LL's threshold
# is multiplied by the rank count) [NCCL-TUNING] (src/include/comm.h, src/include/device.h).
THREADS_PER_CHANNEL: Final = {"LL": 512, "LL128": 640, "Simple": 512}
BYTES_PER_THREAD: Final = {"LL": 8, "LL128": 8, "Simple": 64}


@dataclass(frozen=True, kw_only=True)
class NcclPlatform:
    """What NCCL's tuner reads from one GPU kind's topology.

    ``arch`` is the compute-capability class (``ampere`` also stands for sm < 90 after Volta),
    ``scale_up`` the intra-node hop kind (``nvlink`` or ``pci``), ``cpu`` the host CPU vendor, and
    ``channels_one_node`` / ``channels_nodes`` NCCL's collective channels inside one node and
    across nodes, ``nvls`` whether the NVLink switch does multicast reductions (NVLink SHARP: an
    NVSwitch of the third generation or later with Hopper or later GPUs).
    """

    arch: str
    scale_up: str
    cpu: str
    channels_one_node: int
    channels_nodes: int
    nvls: bool = False

    @property
    def ll128(self) -> bool:
        """LL128 is enabled only over NVLink inside the node (``typeIntra <= PATH_NVB``) [NCCL-TUNING]."""
        return self.scale_up == "nvlink"


# Channel counts: "24 coll channels, 16 nvls channels" on one p5.48xlarge (8x H100) and
# "16 coll channels" on two (NCCL INFO logs in github.com/aws-samples/aws-do-eks, NCCL tests on EKS
# README). UNVERIFIED for every other GPU, which gets the same counts (8-NVLink H800 nodes show
# "16 coll channels", github.com/NVIDIA/nccl/issues/892; PCIe nodes likely run fewer). The count only
# matters below ~1 MiB (fewer channels launched) and for the LL128 / Tree per-channel caps.
_NVSWITCH_CHANNELS: Final = {"channels_one_node": 24, "channels_nodes": 16}
# NVLS: NVLink SHARP needs NVLink4 and third-generation NVSwitch (Hopper and later) [NCCL-ENV] (h&f 3c);
# HGX H100 / H200 / B200 / B300 baseboards and the GB200 / GB300 NVL72 racks have it; PCIe cards do not,
# nor (UNVERIFIED: no NVSwitch assumed) the catalog's quad-GH200 node, whose 4 GPUs are linked directly.
_NVLS: Final = {"nvls": True}
# Host CPUs: DGX A100 2x AMD EPYC 7742; DGX H100/H200/B200 2x Intel Xeon Platinum 8480C / 8570
# (NVIDIA DGX user guides); GH200 / GB200 / GB300 Grace (Arm). Compute capabilities: A100 8.0,
# L40S 8.9, H100/H200/GH200 9.0, B200/GB200 10.0, B300/GB300 10.3 (NVIDIA CUDA GPU list).
_PLATFORMS: Final[dict[str, NcclPlatform]] = {
    "a100-sxm4-40gb": NcclPlatform(arch="ampere", scale_up="nvlink", cpu="amd", **_NVSWITCH_CHANNELS),
    "a100-sxm4-80gb": NcclPlatform(arch="ampere", scale_up="nvlink", cpu="amd", **_NVSWITCH_CHANNELS),
    "a100-pcie-80gb": NcclPlatform(arch="ampere", scale_up="pci", cpu="intel", **_NVSWITCH_CHANNELS),
    "h100-sxm5-80gb": NcclPlatform(arch="hopper", scale_up="nvlink", cpu="intel", **_NVSWITCH_CHANNELS, **_NVLS),
    "h100-pcie-80gb": NcclPlatform(arch="hopper", scale_up="pci", cpu="intel", **_NVSWITCH_CHANNELS),
    "h200-sxm-141gb": NcclPlatform(arch="hopper", scale_up="nvlink", cpu="intel", **_NVSWITCH_CHANNELS, **_NVLS),
    "gh200-96gb": NcclPlatform(arch="hopper", scale_up="nvlink", cpu="arm", **_NVSWITCH_CHANNELS),
    "gh200-144gb": NcclPlatform(arch="hopper", scale_up="nvlink", cpu="arm", **_NVSWITCH_CHANNELS),
    "b200": NcclPlatform(arch="blackwell", scale_up="nvlink", cpu="intel", **_NVSWITCH_CHANNELS, **_NVLS),
    "gb200": NcclPlatform(arch="blackwell", scale_up="nvlink", cpu="arm", **_NVSWITCH_CHANNELS, **_NVLS),
    "b300": NcclPlatform(arch="blackwell", scale_up="nvlink", cpu="intel", **_NVSWITCH_CHANNELS, **_NVLS),
    "gb300": NcclPlatform(arch="blackwell", scale_up="nvlink", cpu="arm", **_NVSWITCH_CHANNELS, **_NVLS),
    "l40s": NcclPlatform(arch="ampere", scale_up="pci", cpu="intel", **_NVSWITCH_CHANNELS),
}
# Every other GPU (MI300X .. MI355X run RCCL, whose tuner differs): UNVERIFIED, NCCL's A100 figures.
DEFAULT_PLATFORM: Final = NcclPlatform(arch="ampere", scale_up="nvlink", cpu="intel",
                                       **_NVSWITCH_CHANNELS)


def platform_for(gpu_name: str) -> NcclPlatform:
    """The NCCL platform of catalog GPU ``gpu_name`` (:data:`DEFAULT_PLATFORM` when not listed)."""
    return _PLATFORMS.get(gpu_name, DEFAULT_PLATFORM)


def _nodes_index(num_domains: int) -> int:
    return 0 if num_domains <= 1 else 1 if num_domains == 2 else 2


def scaled_hop_latency_s(tier: str, algo: str, proto: str, catalog_hop_s: float) -> float:
    """One step's latency: the catalog's Ring/Simple hop of ``tier`` scaled by NCCL's ratio for ``algo``/``proto``.

    The catalog holds one measured per-hop latency per tier (Ring, Simple); NCCL's hwLatencies
    say how the other algorithms and protocols compare with it on the same hardware. ``algo``
    ``nvls`` / ``nvls_tree`` (Simple only) read :data:`NVLS_HOP_LATENCY_US`.
    """
    table = HOP_LATENCY_US[tier]
    hop = NVLS_HOP_LATENCY_US[tier][algo] if algo in ("nvls", "nvls_tree") else table[algo][PROTOCOLS.index(proto)]
    return catalog_hop_s * hop / table["ring"][2]


def net_hop_latency_s(algo: str, proto: str, catalog_hop_s: float, plugin_latency_s: float = 0.0) -> float:
    """One inter-node step: the scaled NET hop plus the transport's reported latency, twice with Simple.

    ``plugin_latency_s`` is :data:`NET_PLUGIN_LATENCY_US` of the network (0 for InfiniBand) [NCCL-TUNING].
    """
    flushes = 2.0 if proto == "Simple" else 1.0
    return scaled_hop_latency_s("net", algo, proto, catalog_hop_s) + flushes * plugin_latency_s


def net_overhead_s(platform: NcclPlatform, proto: str) -> float:
    """Floor of an intra-node ring step when the ring crosses nodes (``getNetOverhead``) [NCCL-TUNING]."""
    overhead = NET_OVERHEAD_US[platform.cpu] * (SIMPLE_NET_OVERHEAD_FACTOR if proto == "Simple" else 1.0)
    return overhead * 1e-6


def protocol_bus_bandwidth(algo: str, proto: str, simple_bus_bytes_per_s: float, platform: NcclPlatform,
                           num_domains: int, channel_share: Bytes | float = 1.0) -> Bytes:
    """Bus bandwidth (bytes/s) of ``algo``/``proto`` from the Simple one, with NCCL's factors and caps.

    ``simple_bus_bytes_per_s`` is the algorithm's bandwidth on all channels with the Simple
    protocol (for ``tree`` before NCCL's all_reduce factor); ``channel_share`` the share of the
    channels the call runs on (:func:`channel_fraction`). Per-channel caps shrink with it, the
    LL cap (a total) does not [NCCL-TUNING].
    """
    node = _nodes_index(num_domains)
    channels = (platform.channels_one_node if num_domains <= 1 else platform.channels_nodes) * channel_share
    ll_max = (LL_MAX_BW_ONE_NODE_GBPS[platform.arch] if num_domains <= 1
              else LL_MAX_BW_NODES_GBPS[platform.cpu][node]) * 1e9
    bw = simple_bus_bytes_per_s * channel_share
    if algo == "ring":
        if proto == "LL":
            return np.minimum(ll_max, bw * RING_LL_FACTOR)
        if proto == "LL128":
            return np.minimum(bw * RING_LL128_FACTOR, channels * PER_CHANNEL_RING_LL128_GBPS[platform.arch][node] * 1e9)
        return bw + 0.0 * channels
    if algo == "tree":
        bw = np.minimum(bw * TREE_ALL_REDUCE_FACTOR, channels * PER_CHANNEL_TREE_GBPS[platform.arch][node] * 1e9)
        if proto == "LL":
            return np.minimum(bw * TREE_LL_FACTOR, ll_max)
        if proto == "LL128":
            factor = TREE_LL128_FACTOR_ONE_NODE if num_domains <= 1 else TREE_LL128_FACTOR_NODES
            return np.minimum(bw * factor, channels * PER_CHANNEL_TREE_LL128_GBPS[platform.arch][node] * 1e9)
        return bw
    raise ValueError(f"The 'algo' parameter must be 'ring' or 'tree'. Got {algo!r} instead.")


def nvls_tree_bus_cap(platform: NcclPlatform, num_domains: int, heads: int) -> float:
    """NCCL's ceiling on NVLS Tree bus bandwidth (bytes/s): ``heads x perChMaxNVLSTreeBw`` [NCCL-TUNING].

    ``ncclTopoTuneModel`` takes ``nChannels x min(intraBw, interBw, perChMaxNVLSTreeBw)`` with the NVLS
    graph's channels, one per NVLS head (``connectNvls``, src/graph/connect.cc).
    """
    return heads * PER_HEAD_NVLS_TREE_GBPS[platform.arch][_nodes_index(num_domains)] * 1e9


_TREE_CORRECTION_TABLES: Final = {(algo, proto): np.asarray(table[:entries] + (1.0,))
                                   for proto, table in TREE_CORRECTION.items()
                                   for algo, entries in TREE_CORRECTION_ENTRIES.items()}


def tree_correction(proto: str, message_bytes: Bytes, algo: str = "tree") -> Bytes:
    """NCCL's static bandwidth correction of a ``tree`` / ``nvls_tree`` all_reduce (1 beyond its table)."""
    table = _TREE_CORRECTION_TABLES[(algo, proto)]
    log_size = np.floor(np.log2(np.maximum(message_bytes, 64.0) / 64.0))
    return table[np.minimum(log_size, len(table) - 1).astype(np.int64)]


def ring_plateau_factor(platform: NcclPlatform, message_bytes: Bytes, n: Bytes | int, num_domains: int) -> Bytes:
    """Latency multiplier of a multi-node Ring/Simple all_reduce (``ncclTopoGetAlgoTime``) [NCCL-TUNING]."""
    if num_domains <= 1:
        return np.ones_like(message_bytes)
    return np.where(message_bytes / (platform.channels_nodes * n) >= 64, RING_PLATEAU[platform.arch], 1.0)


def channel_fraction(proto: str, algo: str, message_bytes: Bytes, n: Bytes | int, platform: NcclPlatform,
                     num_domains: int) -> Bytes:
    """Share of its channels NCCL launches for one call (``topoGetAlgoInfo``) [NCCL-TUNING].

    NCCL drops a channel while ``bytes < channels x threads x bytes-per-thread``, so a small message
    runs on fewer channels and below the link's bandwidth.
    """
    full = platform.channels_one_node if num_domains <= 1 else platform.channels_nodes
    per_channel = THREADS_PER_CHANNEL[proto] * BYTES_PER_THREAD[proto] * (n if (algo, proto) == ("ring", "LL") else 1)
    return np.minimum(np.maximum(np.floor(message_bytes / per_channel), 1.0), full) / full


def nvls_pipeline_factor(message_bytes: Bytes, platform: NcclPlatform, heads: int) -> Bytes:
    """Time over the ideal of one-node NVLS: its three-stage pipeline fills and drains per channel.

    Each channel moves ``heads x chunk`` bytes a loop (``heads``: one NVLS head per GPU of the
    domain up to :data:`NVLS_MAX_HEADS`; UNVERIFIED, NCCL's "nHeads" log line is not in reach)
    through scatter, reduce and
    gather, so ``L`` loops take ``L + stages - 1`` loop times, and a call shorter than one loop
    still crosses all stages [NCCL-TUNING] (src/enqueue.cc, src/device/all_reduce.h).
    """
    ops = NVLS_CHANNELS_ONE_NODE[platform.arch] * heads
    chunk = np.full_like(message_bytes, float(NVLS_CHUNK_BYTES))
    for multiple, smaller in NVLS_CHUNK_STEPS:  # calcCollChunking, in its order
        chunk = np.where((message_bytes < multiple * ops * chunk) & (chunk > smaller), smaller, chunk)
    loops = np.maximum(message_bytes / (ops * chunk), 1.0)
    return (loops + NVLS_PIPELINE_STAGES - 1) / loops
