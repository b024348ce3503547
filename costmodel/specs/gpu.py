"""GPU and cluster descriptions.

Catalog YAML and run-spec overrides use the field names of ``GPU_FIELDS`` in
readable units (TFLOP/s, GiB, GB/s, microseconds); ``GPUSpec`` stores SI units.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from costmodel.specs.errors import SpecError, reject_unknown_keys, require_int, require_number
from costmodel.specs.hashing import hash_once

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
GiB = 1024**3

# YAML key -> (GPUSpec attribute, factor to SI)
GPU_FIELDS: dict[str, tuple[str, float]] = {
    "hbm_capacity_GiB": ("hbm_capacity_bytes", GiB),
    "hbm_bandwidth_GBps": ("hbm_bandwidth_bytes_per_s", 1e9),
    "intra_node_bandwidth_GBps": ("intra_node_bandwidth_bytes_per_s", 1e9),
    "inter_node_bandwidth_GBps": ("inter_node_bandwidth_bytes_per_s", 1e9),
    "intra_node_latency_us": ("intra_node_latency_s", 1e-6),
    "inter_node_latency_us": ("inter_node_latency_s", 1e-6),
}
GPU_INT_FIELDS = ("num_sms", "gpus_per_node", "nvlink_domain_size")
# Optional integer figure: GPUs of each NVLink domain a job is given (absent: the whole domain).
DOMAIN_USED_KEY = "gpus_per_nvlink_domain_used"
GPU_KEYS = frozenset({"display_name", "vendor", "peak_tflops", "sources", *GPU_FIELDS, *GPU_INT_FIELDS,
                      DOMAIN_USED_KEY})


@hash_once
@dataclass(frozen=True, kw_only=True)
class GPUSpec:
    """One accelerator kind and the node it usually sits in (SI units).

    ``peak_flops`` maps a dtype to dense (no sparsity) tensor-core FLOP/s;
    a dtype the GPU cannot run is absent. Bandwidths are per GPU, one
    direction. ``sources`` maps each catalog key to where its figure comes from.
    """

    name: str
    display_name: str
    vendor: str
    peak_flops: tuple[tuple[str, float], ...]
    hbm_capacity_bytes: float
    hbm_bandwidth_bytes_per_s: float
    num_sms: int
    intra_node_bandwidth_bytes_per_s: float
    intra_node_latency_s: float
    gpus_per_node: int
    nvlink_domain_size: int
    inter_node_bandwidth_bytes_per_s: float
    inter_node_latency_s: float
    # GPUs of one NVLink domain a scheduler gives a job (NVL72 racks: 64 of 72); None = all of it
    gpus_per_nvlink_domain_used: int | None = None
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; raises if the GPU lacks it."""
        table = dict(self.peak_flops)
        if dtype not in table:
            raise SpecError("precision", dtype,
                            f"a dtype {self.name} supports ({', '.join(table)})")
        return table[dtype]

    def supports(self, dtype: str) -> bool:
        return dtype in dict(self.peak_flops)

    def to_dict(self) -> dict[str, Any]:
        """Catalog-unit mapping (the same keys a YAML entry uses)."""
        out: dict[str, Any] = {"name": self.name, "display_name": self.display_name, "vendor": self.vendor,
                               "peak_tflops": {k: v / 1e12 for k, v in self.peak_flops}}
        for key, (attr, factor) in GPU_FIELDS.items():
            out[key] = getattr(self, attr) / factor
        for key in GPU_INT_FIELDS:
            out[key] = getattr(self, key)
        if self.gpus_per_nvlink_domain_used is not None:
            out[DOMAIN_USED_KEY] = self.gpus_per_nvlink_domain_used
        out["sources"] = dict(self.sources)
        return out


def _peak_from_mapping(section: str, data: Any) -> tuple[tuple[str, float], ...]:
    if not isinstance(data, dict):
        raise SpecError(f"{section}.peak_tflops", data, "a mapping of dtype to TFLOP/s")
    reject_unknown_keys(f"{section}.peak_tflops", data, frozenset(DTYPES))
    peaks = []
    for dtype in DTYPES:
        value = data.get(dtype)
        if value is not None:
            peaks.append((dtype, require_number(f"{section}.peak_tflops.{dtype}", value) * 1e12))
    return tuple(peaks)


def gpu_from_mapping(name: str, data: dict[str, Any], section: str = "gpu") -> GPUSpec:
    """Build a ``GPUSpec`` from catalog-unit keys (every key required)."""
    reject_unknown_keys(section, data, GPU_KEYS)
    kwargs: dict[str, Any] = {"name": name,
                              "display_name": str(data.get("display_name", name)),
                              "vendor": str(data.get("vendor", "unknown"))}
    for key in ("peak_tflops", *GPU_FIELDS, *GPU_INT_FIELDS):
        if key not in data:
            raise SpecError(f"{section}.{key}", None, "given for every catalog GPU")
    kwargs["peak_flops"] = _peak_from_mapping(section, data["peak_tflops"])
    for key, (attr, factor) in GPU_FIELDS.items():
        kwargs[attr] = require_number(f"{section}.{key}", data[key], strict=not key.endswith("latency_us")) * factor
    for key in GPU_INT_FIELDS:
        kwargs[key] = require_int(f"{section}.{key}", data[key])
    if DOMAIN_USED_KEY in data:
        kwargs[DOMAIN_USED_KEY] = _domain_used(section, data[DOMAIN_USED_KEY], kwargs["nvlink_domain_size"])
    sources = data.get("sources", {})
    if not isinstance(sources, dict):
        raise SpecError(f"{section}.sources", sources, "a mapping of field to source")
    kwargs["sources"] = tuple((str(k), str(v)) for k, v in sources.items())
    return GPUSpec(**kwargs)


def _domain_used(section: str, value: Any, domain_size: int) -> int:
    """``gpus_per_nvlink_domain_used``: an integer in [1, ``nvlink_domain_size``]."""
    return require_int(f"{section}.{DOMAIN_USED_KEY}", value, maximum=domain_size)


# Figures a run spec may not override, and why: nothing they would change is modelled from them.
NOT_OVERRIDABLE = {
    "num_sms": ("left to the catalog: the SM count only tells the fitted predictors how the measured GPU "
                "quantises waves; override peak_tflops to model a faster GPU"),
}
# Peak dtypes that time nothing: runs compute in bf16, fp16 or fp8 (optimizer and norms are bandwidth-bound).
UNUSED_PEAK_DTYPES = ("fp32", "tf32")


def override_gpu(gpu: GPUSpec, overrides: dict[str, Any], section: str = "cluster") -> GPUSpec:
    """Return ``gpu`` with catalog-unit ``overrides`` applied (e.g. ``inter_node_bandwidth_GBps``).

    Each figure reaches every formula that uses it (``costmodel.timing`` scales times a profile
    measured on the catalog GPU to the overridden figures, and labels them a what-if):

    - ``peak_tflops.{bf16,fp16,fp8}``: GEMMs of that precision (attention at bf16) and the MFU;
    - ``hbm_bandwidth_GBps``: memory-bound kernels, the optimizer step, memory-bound GEMMs/attention;
    - ``hbm_capacity_GiB``: usable memory, hence which runs fit;
    - ``intra_node_*`` / ``inter_node_*``: collectives inside / across scale-up domains;
    - ``nvlink_domain_size``: which groups stay inside a domain, and the TP-within-domain rule;
    - ``gpus_per_nvlink_domain_used``: how many GPUs of each domain the job's ranks fill
      (``costmodel.comm.placement``), hence which groups cross the NIC.

    ``num_sms`` and the fp32/tf32 peaks are refused (``NOT_OVERRIDABLE``, ``UNUSED_PEAK_DTYPES``).
    """
    changes: dict[str, Any] = {}
    sources = dict(gpu.sources)
    for key, value in overrides.items():
        if key in NOT_OVERRIDABLE:
            raise SpecError(f"{section}.{key}", value, NOT_OVERRIDABLE[key])
        if key == "peak_tflops":
            merged = {k: v / 1e12 for k, v in gpu.peak_flops}
            if not isinstance(value, dict):
                raise SpecError(f"{section}.peak_tflops", value, "a mapping of dtype to TFLOP/s")
            for dtype in UNUSED_PEAK_DTYPES:
                if dtype in value:
                    raise SpecError(f"{section}.peak_tflops.{dtype}", value[dtype],
                                    "left to the catalog: no run computes in fp32 or tf32 (precision is bf16, "
                                    "fp16 or fp8); override those peaks")
            merged.update(value)
            changes["peak_flops"] = _peak_from_mapping(section, merged)
        elif key in GPU_FIELDS:
            attr, factor = GPU_FIELDS[key]
            changes[attr] = require_number(f"{section}.{key}", value,
                                           strict=not key.endswith("latency_us")) * factor
        elif key in GPU_INT_FIELDS:
            changes[key] = require_int(f"{section}.{key}", value)
        elif key == DOMAIN_USED_KEY:
            changes[key] = value  # checked below against the (possibly overridden) domain size
        else:  # pragma: no cover - callers filter keys first
            raise SpecError(f"{section}.{key}", key, "a GPU figure")
        sources[key] = "run spec override"
    if DOMAIN_USED_KEY in changes:
        domain = changes.get("nvlink_domain_size", gpu.nvlink_domain_size)
        changes[DOMAIN_USED_KEY] = _domain_used(section, changes[DOMAIN_USED_KEY], domain)
    return replace(gpu, sources=tuple(sources.items()), **changes)


# Runtime reserve: HBM of the catalog's (nvidia-smi) capacity that a training process cannot give to
# tensors, in three measured parts (docs/hardware_and_formulas.md section 5c):
#  - capacity CUDA does not expose (nvidia-smi total less torch's total): H200 140.4 vs 139.80 GiB
#    (ml-engineering @744d01e debug/pytorch.md "Discovering how many GBs is allocatable"), A100 80GB
#    80.0 vs 79.15-79.21 GiB ([MLE-PERF], gpus.yaml): 0.6 GiB taken;
RESERVE_HIDDEN_GIB = 0.6
#  - CUDA context and kernels with lazy loading, 0.47 GiB (torch 2.1.1, A100, [MLE-PERF]);
RESERVE_CUDA_CONTEXT_GIB = 0.5
#  - NCCL initialisation, +1.5 GiB after the first barrier with 2 ranks ([MLE-PERF]: "~1-2 GiB").
RESERVE_NCCL_GIB = 1.5
# Workspaces parplan sizes itself (Transformer Engine userbuffers, DeepEP's buffers) are part of the
# peak (constraints.workspace, constraints.moe_buffers), not of this reserve: none is counted twice.
DEFAULT_MEMORY_RESERVE_GIB = RESERVE_HIDDEN_GIB + RESERVE_CUDA_CONTEXT_GIB + RESERVE_NCCL_GIB
# No allocator-fragmentation share is taken off by default: no magnitude is published (section 5c:
# UNVERIFIED), and a framework that preallocates its gradient / parameter buffers and repeats the same
# shapes every micro-batch leaves the caching allocator little to fragment (ml-engineering
# training/fault-tolerance: pre-allocating tensors and reusing them "preventing the issue of fragmentation
# altogether"). The former 5% guess was wrong for published runs that ran (constraints/README.md, issue 14).
# Its uncertainty is constraints/oom.py's sigma and the search's --memory-margin; a run spec sets
# cluster.fragmentation_fraction where its stack is known to fragment.
DEFAULT_FRAGMENTATION_FRACTION = 0.0
CLUSTER_KEYS = frozenset({"gpu", "num_gpus", "gpus_per_node", "memory_reserve_GiB",
                          "fragmentation_fraction", *GPU_FIELDS, "peak_tflops", "num_sms",
                          "nvlink_domain_size", DOMAIN_USED_KEY})


@hash_once
@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    """``num_gpus`` GPUs of one kind, ``gpus_per_node`` per node."""

    gpu: GPUSpec
    num_gpus: int
    gpus_per_node: int
    memory_reserve_bytes: float = DEFAULT_MEMORY_RESERVE_GIB * GiB
    fragmentation_fraction: float = DEFAULT_FRAGMENTATION_FRACTION

    def __post_init__(self) -> None:
        require_int("cluster.num_gpus", self.num_gpus)
        require_int("cluster.gpus_per_node", self.gpus_per_node)
        if self.num_gpus > self.gpus_per_node and self.num_gpus % self.gpus_per_node:
            raise SpecError("cluster.num_gpus", self.num_gpus,
                            f"a multiple of gpus_per_node={self.gpus_per_node} (whole nodes)")
        if not 0 <= self.fragmentation_fraction < 1:
            raise SpecError("cluster.fragmentation_fraction", self.fragmentation_fraction, "in [0, 1)")

    @property
    def num_nodes(self) -> int:
        return max(1, self.num_gpus // self.gpus_per_node)

    @property
    def nvlink_domain_size(self) -> int:
        """GPUs that share one scale-up domain (a node, or a rack for NVL72; PCIe for GPUs without NVLink)."""
        return min(self.gpu.nvlink_domain_size, self.num_gpus)

    @property
    def gpus_per_nvlink_domain_used(self) -> int:
        """GPUs of each scale-up domain the job's ranks fill: the catalog's figure (NVL72: 64 of 72,
        ``costmodel/catalog/gpus.yaml``) or a run-spec override, never more than the domain; the
        whole domain where the catalog gives none."""
        domain = self.gpu.nvlink_domain_size
        used = self.gpu.gpus_per_nvlink_domain_used
        return domain if used is None else min(used, domain)

    @property
    def usable_memory_bytes(self) -> float:
        """HBM a training job can fill: capacity less fragmentation share and runtime reserve."""
        cap = self.gpu.hbm_capacity_bytes
        return cap * (1.0 - self.fragmentation_fraction) - self.memory_reserve_bytes
