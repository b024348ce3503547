"""Measured operator tables from the ``aiconfigurator-core==0.12.0`` package.

This is the only module in parplan that knows that package's file layout. It
reads the parquet tables shipped under ``aiconfigurator_core/systems/data/``
directly and never imports ``aiconfigurator_core``: its API (a Rust engine and
a pandas/scipy SDK) answers inference-serving questions, and only its measured
data is of use to parplan.

Layout of 0.12.0, relative to the package directory::

    systems/<system>.yaml                                  GPU / node specs
    systems/data/<system>/gemm/<backend>/<version>/gemm_perf.parquet
    systems/data/<system>/attention/<backend>/<version>/context_attention_perf.parquet
    systems/data/<system>/comm/nccl/<nccl_version>/nccl_perf.parquet
    systems/data/<system>/comm/oneccl/<oneccl_version>/oneccl_perf.parquet   (Intel)

Every table stores ``latency`` in milliseconds. Collective tables store
``message_size`` as an element count of ``nccl_dtype`` ("half" = 2 bytes,
"int8" = 1 byte), following the nccl-tests "size" convention (all_gather and
reduce_scatter: the whole gathered buffer; all_reduce: the per-rank buffer).
Reading needs ``pyarrow`` (a dependency of aiconfigurator-core) and numpy;
pandas is never touched and no pandas object leaves this module.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Final

import numpy as np

if TYPE_CHECKING:
    from types import ModuleType

__all__ = [
    "PACKAGE_NAME",
    "PACKAGE_VERSION",
    "ProfileDataError",
    "available_devices",
    "backend_gemm_tables",
    "load_tables",
    "source_files",
    "system_for",
]

PACKAGE_NAME: Final = "aiconfigurator-core"
PACKAGE_VERSION: Final = "0.12.0"
_MODULE_NAME: Final = "aiconfigurator_core"
_INSTALL_HINT: Final = f"pip install '{PACKAGE_NAME}=={PACKAGE_VERSION}'"
_SECONDS_PER_MS: Final = 1e-3

# Collective dtype kept, and its element size: nccl-tests "half" is fp16.
_COMM_DTYPE: Final = "half"
_COMM_BYTES_PER_ELEMENT: Final = 2
_COMM_OP_NAMES: Final = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "alltoall": "all_to_all",
}

_COLLECTION_NOTE: Final = (
    "aiconfigurator collectors on one node; one latency per shape; GEMM and attention are "
    "inference-framework kernels timed with CUDA events (forward only); collectives are nccl-tests "
    "out-of-place times averaged over ranks, first of repeated runs kept as aiconfigurator does"
)


class ProfileDataError(ValueError):
    """The aiconfigurator tables cannot be read: package missing or of another
    version, pyarrow missing, device unknown or without data, file absent.

    These are expected conditions, distinct from bugs; the message is one line.
    """


@dataclass(frozen=True, kw_only=True)
class _SystemPlan:
    """Which shipped tables parplan reads for one device.

    ``backend`` supplies bf16 GEMM and attention; ``fp8_backend`` supplies fp8
    GEMM (None where there is none, with ``fp8_absent`` saying why).
    ``bf16_merge`` names the other backends' bf16 GEMM tables of the same
    system that time the same cuBLAS call (``torch.nn.functional.linear``);
    they are merged into the ``backend``'s table (see ``_merge_gemm``).
    ``comm_version`` mirrors ``misc.nccl_version`` (``oneccl_version`` for
    Intel) in ``systems/<system>.yaml``: the collective table aiconfigurator
    itself loads for that system.
    """

    system: str
    gpu_label: str
    backend: str = "vllm"
    backend_version: str = "0.24.0"
    bf16_merge: tuple[tuple[str, str], ...] = (("sglang", "0.5.14"), ("trtllm", "1.3.0rc20"))
    fp8_backend: str | None = "trtllm"
    fp8_backend_version: str | None = "1.3.0rc20"
    fp8_absent: str = ""
    comm_library: str = "nccl"
    comm_version: str


# Source choice, from a survey of the 0.12.0 tables: vLLM's bf16
# GEMM is torch.nn.functional.linear, i.e. the cuBLAS call a PyTorch training
# step makes, and its context attention is flash attention without RoPE fused
# in. FP8 comes from TensorRT-LLM (per-tensor scales, static activation quantise
# + cublas_scaled_mm, the cuBLASLt path Transformer Engine also uses): vLLM's
# CUTLASS fp8 is slower than its own bf16 on 20% of H100 shapes above 1 TFLOP,
# TensorRT-LLM's on 2%. A100 reads SGLang 0.5.10, whose table
# reaches m=32768 (35742 shapes) where vLLM 0.14.0 stops at m=8192 (9240).
#
# bf16 GEMM merge. Each shipped backend times the same kernel, F.linear -> cuBLAS: vLLM's
# UnquantizedLinearMethod (kernel_source "torch.nn.functional.linear"; "vllm_default" in the
# legacy A100 table), SGLang's collector F.linear ("sglang_torch_linear"; legacy "sglang"),
# TensorRT-LLM's unquantised tensorrt_llm._torch Linear, which calls F.linear unless
# use_custom_cublas_mm is set, and the collector leaves it unset ("torch_flow") -- collector
# sources ai-dynamo/aiconfigurator collector/{vllm,sglang,trtllm}/collect_gemm.py. One
# measurement per shape and backend is noisy: on the H100 tables the three backends differ
# from their per-shape median by 3.6 / 4.1 / 1.6% on average (shapes >= 1 GFLOP), and
# cuBLAS-version differences add systematic offsets (SGLang +4.3%, TRT-LLM +2.2% over vLLM,
# median over 35700 shapes; on A100 vLLM and TRT-LLM run 3.5% / 4.6% under SGLang). The merge
# keeps the primary backend's shapes and level and takes the per-shape median of the backends
# that measured the shape, each first scaled by its median ratio to the primary on shared
# shapes. Rows of other kernels (fp8, CuTe-DSL bf16 paths) never enter: only rows whose
# kernel_source is in _TORCH_LINEAR_SOURCES are merged.
_PLANS: Final[dict[str, _SystemPlan]] = {
    "a100-sxm4-80gb": _SystemPlan(
        system="a100_sxm", gpu_label="NVIDIA A100-SXM4-80GB", backend="sglang", backend_version="0.5.10",
        bf16_merge=(("vllm", "0.14.0"), ("trtllm", "1.0.0")),
        fp8_backend=None, fp8_backend_version=None, comm_version="2.27.3",
        fp8_absent="A100 has no FP8 tensor cores; the package ships no fp8 GEMM rows for it"),
    "h100-sxm5-80gb": _SystemPlan(system="h100_sxm", gpu_label="NVIDIA H100 80GB HBM3", comm_version="2.27.3"),
    "h200-sxm-141gb": _SystemPlan(system="h200_sxm", gpu_label="NVIDIA H200", comm_version="2.26.2"),
    "b200": _SystemPlan(system="b200_sxm", gpu_label="NVIDIA B200", comm_version="2.27.3"),
    "gb200": _SystemPlan(system="gb200", gpu_label="NVIDIA GB200", comm_version="2.23"),
    "b300": _SystemPlan(system="b300_sxm", gpu_label="NVIDIA B300 SXM6 AC", comm_version="2.27"),
    "gb300": _SystemPlan(system="gb300", gpu_label="NVIDIA GB300", comm_version="2.27"),
    "l40s": _SystemPlan(system="l40s", gpu_label="NVIDIA L40S", comm_version="2.27.3"),
    "rtx-pro-6000-server": _SystemPlan(
        system="rtx_pro_6000_server", gpu_label="NVIDIA RTX PRO 6000 Blackwell Server Edition",
        comm_version="2.29.2"),
    "arc-pro-b60": _SystemPlan(
        system="b60", gpu_label="Intel(R) Arc(TM) Pro B60 Graphics", backend_version="0.26.0", bf16_merge=(),
        fp8_backend=None, fp8_backend_version=None, comm_library="oneccl", comm_version="2021.15.9",
        fp8_absent="B60 has no native FP8 matrix engine (systems/b60.yaml); its fp8 rows are a bf16 fallback"),
}

# Names parplan may use that 0.12.0 ships no measurements for.
_WITHOUT_DATA: Final[dict[str, str]] = {
    "a100-sxm4-40gb": "its only A100 SXM data (a100_sxm) was measured on the 80 GB part",
    "a100-pcie-80gb": "systems/a100_pcie.yaml exists but systems/data/a100_pcie/ is empty",
    "h100-pcie-80gb": "systems/h100_pcie.yaml exists but systems/data/h100_pcie/ is empty",
    "a30": "systems/a30.yaml exists but systems/data/a30/ is empty",
    "l4": "systems/l4.yaml exists but systems/data/l4/ is empty",
    "gh200-96gb": "it has no GH200 system",
    "gh200-144gb": "it has no GH200 system",
    "mi300x": "it has no AMD system",
    "mi325x": "it has no AMD system",
    "mi355x": "it has no AMD system",
}

_GEMM_COLUMNS: Final = ["device", "kernel_source", "gemm_dtype", "m", "n", "k", "latency"]
# kernel_source labels of bf16 rows that time F.linear (cuBLAS); see the bf16 merge note above.
_TORCH_LINEAR_SOURCES: Final = frozenset({"torch.nn.functional.linear", "vllm_default", "sglang_torch_linear",
                                          "sglang", "torch_flow"})
# A backend is merged only when it shares at least this many shapes with the primary table
# (enough to estimate its level offset).
_MERGE_MIN_SHARED: Final = 100
_ATTENTION_COLUMNS: Final = ["kernel_source", "attn_dtype", "kv_cache_dtype", "batch_size", "isl",
                             "num_heads", "num_key_value_heads", "head_dim", "latency"]
_COMM_COLUMNS: Final = ["op_name", "nccl_dtype", "num_gpus", "message_size", "latency"]

Columns = dict[str, np.ndarray]


def available_devices() -> list[str]:
    """Device names (parplan catalog names) with tables in the pinned package.

    The list is static for ``aiconfigurator-core==0.12.0``; it does not check
    that the package is installed (``load_tables`` does).

    Returns
    -------
    list of str
        Sorted device names accepted by :func:`load_tables`.
    """
    return sorted(_PLANS)


def system_for(device: str) -> str | None:
    """aiconfigurator system name for a parplan device name.

    Parameters
    ----------
    device : str
        parplan catalog GPU name, e.g. ``"h100-sxm5-80gb"``.

    Returns
    -------
    str or None
        The system directory (e.g. ``"h100_sxm"``), or None for a known device
        the package ships no measurements for (e.g. ``"a100-sxm4-40gb"``).

    Raises
    ------
    ProfileDataError
        If ``device`` is neither mapped nor known to lack data.
    """
    if device in _PLANS:
        return _PLANS[device].system
    if device in _WITHOUT_DATA:
        return None
    raise _unknown_device(device)


def load_tables(device: str) -> dict[str, Any]:
    """Load the measured GEMM, attention and collective tables for one device.

    Parameters
    ----------
    device : str
        One of :func:`available_devices`.

    Returns
    -------
    dict
        ``"metadata"`` plus one entry per operator family the package has for
        the device; a missing family is absent. All arrays are read-only numpy
        arrays of equal length within a family; latencies are in seconds:

        - ``gemm_bf16`` / ``gemm_fp8``: ``m``, ``n``, ``k`` (int64) and
          ``latency_s`` for ``Y[m, n] = X[m, k] @ W[n, k]^T`` (a Linear layer
          forward, m = tokens). bf16 in and out; fp8 is e4m3 with per-tensor
          scales, bf16 output, the activation quantise kernel included. The
          bf16 latency is the merge of the backends timing F.linear (see
          ``_merge_gemm``; ``metadata["gemm_bf16_merge"]`` records it); fp8
          tables are one backend's (their kernels differ between backends).
        - ``attention_fwd``: ``batch``, ``seq_len``, ``num_heads``,
          ``num_kv_heads``, ``head_dim`` (int64), ``causal`` (bool, all True)
          and ``latency_s``: causal prefill attention over the whole sequence
          (no cached prefix, no sliding window), bf16 Q/K/V and bf16 KV cache.
        - ``nccl``: ``op`` (str: all_reduce, all_gather, reduce_scatter,
          all_to_all), ``num_gpus`` and ``message_bytes`` (int64, nccl-tests
          size convention, fp16 payload) and ``latency_s``.

    Raises
    ------
    ProfileDataError
        If the device is unknown or has no data, the package or pyarrow is
        missing, another package version is installed, or a file is absent.
    """
    plan = _plan_for(device)
    root = _package_root()
    parquet = _import_parquet()
    files: dict[str, str] = {}
    kernels: dict[str, list[str]] = {}
    omitted: dict[str, str] = {}
    tables: dict[str, Any] = {}

    gemm_path = _gemm_path(plan.system, plan.backend, plan.backend_version)
    gemm = _read_columns(parquet, root, gemm_path, _GEMM_COLUMNS)
    _check_gpu(plan, gemm, gemm_path)
    _add_family(tables, files, kernels, "gemm_bf16", gemm_path, gemm, _gemm_rows(gemm, "bfloat16"))
    merge_note = None
    if plan.bf16_merge and "gemm_bf16" in tables:
        others = _backend_gemms(parquet, root, plan, plan.bf16_merge)
        tables["gemm_bf16"], merge_note = _merge_gemm(tables["gemm_bf16"], others)
        for name, (relative, columns, rows) in others.items():
            if name in merge_note["offsets"]:
                files[f"gemm_bf16+{name}"] = f"{_MODULE_NAME}/{relative}"
                kernels["gemm_bf16"] = sorted({*kernels.get("gemm_bf16", []),
                                               *columns["kernel_source"][rows].tolist()})
    if plan.fp8_backend is not None and plan.fp8_backend_version is not None:
        fp8_path = _gemm_path(plan.system, plan.fp8_backend, plan.fp8_backend_version)
        fp8 = _read_columns(parquet, root, fp8_path, _GEMM_COLUMNS)
        _check_gpu(plan, fp8, fp8_path)
        _add_family(tables, files, kernels, "gemm_fp8", fp8_path, fp8, _gemm_rows(fp8, "fp8"))
    else:
        omitted["gemm_fp8"] = plan.fp8_absent

    attention_path = _attention_path(plan)
    attention = _read_columns(parquet, root, attention_path, _ATTENTION_COLUMNS, optional=("window_size",))
    _add_family(tables, files, kernels, "attention_fwd", attention_path, attention, _attention_rows(attention))

    comm_path = _comm_path(plan)
    comm = _read_columns(parquet, root, comm_path, _COMM_COLUMNS)
    _add_family(tables, files, kernels, "nccl", comm_path, comm, _collective_rows(comm))
    omitted["nccl:send_recv"] = "aiconfigurator has no point-to-point table (it models P2P analytically)"

    tables["metadata"] = _metadata(device, plan, files, kernels, omitted, tables)
    if merge_note is not None:
        tables["metadata"]["gemm_bf16_merge"] = merge_note
    return tables


def source_files(device: str) -> tuple[Path, ...]:
    """Every file :func:`load_tables` may read for ``device`` (present or not), for cache keys.

    Raises
    ------
    ProfileDataError
        As :func:`load_tables`, when the device is unknown or the pinned package is not installed.
    """
    plan = _plan_for(device)
    root = _package_root()
    relative = [_gemm_path(plan.system, plan.backend, plan.backend_version),
                *(_gemm_path(plan.system, backend, version) for backend, version in plan.bf16_merge)]
    if plan.fp8_backend is not None and plan.fp8_backend_version is not None:
        relative.append(_gemm_path(plan.system, plan.fp8_backend, plan.fp8_backend_version))
    relative += [_attention_path(plan), _comm_path(plan)]
    return tuple(root.joinpath(*path.parts) for path in relative)


def backend_gemm_tables(device: str) -> dict[str, dict[str, np.ndarray]]:
    """Every backend's own bf16 GEMM table of ``device``, unmerged (for benchmarks and audits).

    Returns
    -------
    dict
        ``"<backend> <version>"`` -> ``m``, ``n``, ``k`` (int64) and ``latency_s``,
        the primary backend first; only rows timing F.linear (cuBLAS).

    Raises
    ------
    ProfileDataError
        As :func:`load_tables`.
    """
    plan = _plan_for(device)
    root = _package_root()
    parquet = _import_parquet()
    chosen = ((plan.backend, plan.backend_version), *plan.bf16_merge)
    out = {}
    for name, (_, columns, rows) in _backend_gemms(parquet, root, plan, chosen).items():
        out[name] = _family_arrays("gemm_bf16", columns, rows)
    return out


def _backend_gemms(parquet: ModuleType, root: Path, plan: _SystemPlan,
                   backends: tuple[tuple[str, str], ...]) -> dict[str, tuple[PurePosixPath, Columns, np.ndarray]]:
    """The bf16 F.linear rows of each named backend's GEMM table (absent files are skipped)."""
    out = {}
    for backend, version in backends:
        relative = _gemm_path(plan.system, backend, version)
        if not root.joinpath(*relative.parts).is_file():
            continue
        columns = _read_columns(parquet, root, relative, _GEMM_COLUMNS)
        _check_gpu(plan, columns, relative)
        linear = np.isin(columns["kernel_source"], list(_TORCH_LINEAR_SOURCES))
        rows = _first_rows((columns["gemm_dtype"] == "bfloat16") & linear,
                           [columns["m"], columns["n"], columns["k"]])
        if rows.size:
            out[f"{backend} {version}"] = (relative, columns, rows)
    return out


def _shape_keys(m: np.ndarray, n: np.ndarray, k: np.ndarray) -> np.ndarray:
    # m < 2**23 and n, k < 2**20 in every shipped table (m <= 32768, n, k <= 65536).
    return (np.asarray(m, np.int64) << 40) | (np.asarray(n, np.int64) << 20) | np.asarray(k, np.int64)


def _merge_gemm(primary: dict[str, np.ndarray], others: dict[str, tuple[PurePosixPath, Columns, np.ndarray]]
                ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The primary bf16 table with each latency replaced by the backends' per-shape median.

    Each other backend's log latencies are shifted by their median difference to
    the primary on shared shapes (its level offset), so that the merge keeps the
    primary's level and only averages out per-shape noise. A shape measured by
    the primary alone keeps its value.
    """
    keys = _shape_keys(primary["m"], primary["n"], primary["k"])
    order = np.argsort(keys)
    logs = [np.log(primary["latency_s"])]
    offsets: dict[str, float] = {}
    shared: dict[str, int] = {}
    for name, (_, columns, rows) in others.items():
        other_keys = _shape_keys(columns["m"][rows], columns["n"][rows], columns["k"][rows])
        position = np.clip(np.searchsorted(keys, other_keys, sorter=order), 0, keys.size - 1)
        index = order[position]
        hit = keys[index] == other_keys
        if hit.sum() < _MERGE_MIN_SHARED:
            continue
        values = np.full(keys.size, np.nan)
        values[index[hit]] = np.log(columns["latency"][rows][hit].astype(np.float64) * _SECONDS_PER_MS)
        offset = float(np.nanmedian(values - logs[0]))
        logs.append(values - offset)
        offsets[name] = round(float(np.exp(offset)), 4)
        shared[name] = int(hit.sum())
    stacked = np.column_stack(logs)
    merged = dict(primary)
    latency = np.exp(np.nanmedian(stacked, axis=1))
    latency.setflags(write=False)
    merged["latency_s"] = latency
    count = np.isfinite(stacked).sum(axis=1)
    note = {
        "design": ("per-shape median over the backends that timed the shape (F.linear rows only), each "
                   "other backend first divided by its median latency ratio to the primary on shared shapes; "
                   "shapes and level of the primary table"),
        "offsets": offsets,
        "shared_shapes": shared,
        "shapes_by_measurements": {int(c): int((count == c).sum()) for c in np.unique(count)},
    }
    return merged, note


def _plan_for(device: str) -> _SystemPlan:
    if device in _PLANS:
        return _PLANS[device]
    if device in _WITHOUT_DATA:
        raise ProfileDataError(
            f"{PACKAGE_NAME} {PACKAGE_VERSION} ships no measurements for {device!r}: "
            f"{_WITHOUT_DATA[device]}; devices with data: {', '.join(available_devices())}"
        )
    raise _unknown_device(device)


def _unknown_device(device: str) -> ProfileDataError:
    known = ", ".join(sorted([*_PLANS, *_WITHOUT_DATA]))
    return ProfileDataError(f"The 'device' parameter must be one of {known}. Got {device!r} instead.")


def _package_root() -> Path:
    """Directory of the installed package, found without importing it."""
    spec = importlib.util.find_spec(_MODULE_NAME)
    if spec is None or not spec.submodule_search_locations:
        raise ProfileDataError(f"{PACKAGE_NAME}=={PACKAGE_VERSION} is not installed; {_INSTALL_HINT}")
    installed = importlib.metadata.version(PACKAGE_NAME)
    if installed != PACKAGE_VERSION:
        raise ProfileDataError(
            f"{PACKAGE_NAME} {installed} is installed but parplan reads the {PACKAGE_VERSION} layout; "
            f"{_INSTALL_HINT}"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _import_parquet() -> ModuleType:
    try:
        return importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise ProfileDataError(
            f"pyarrow is needed to read {PACKAGE_NAME} tables and is not installed; pip install pyarrow"
        ) from None


def _gemm_path(system: str, backend: str, version: str) -> PurePosixPath:
    return PurePosixPath("systems", "data", system, "gemm", backend, version, "gemm_perf.parquet")


def _attention_path(plan: _SystemPlan) -> PurePosixPath:
    return PurePosixPath("systems", "data", plan.system, "attention", plan.backend, plan.backend_version,
                         "context_attention_perf.parquet")


def _comm_path(plan: _SystemPlan) -> PurePosixPath:
    return PurePosixPath("systems", "data", plan.system, "comm", plan.comm_library, plan.comm_version,
                         f"{plan.comm_library}_perf.parquet")


def _read_columns(parquet: ModuleType, root: Path, relative: PurePosixPath, columns: list[str],
                  optional: tuple[str, ...] = ()) -> Columns:
    """Read ``columns`` (and any ``optional`` ones present) as numpy arrays.

    String columns become numpy ``str`` arrays.
    """
    path = root.joinpath(*relative.parts)
    if not path.is_file():
        raise ProfileDataError(f"{PACKAGE_NAME} {PACKAGE_VERSION} install lacks {_MODULE_NAME}/{relative}")
    source = parquet.ParquetFile(path)
    present = set(source.schema_arrow.names)
    missing = [name for name in columns if name not in present]
    if missing:
        raise ProfileDataError(f"{_MODULE_NAME}/{relative} lacks columns {', '.join(missing)}")
    wanted = columns + [name for name in optional if name in present]
    table = source.read(columns=wanted)
    out: Columns = {}
    for name in wanted:
        values = table.column(name).to_numpy(zero_copy_only=False)
        out[name] = values.astype(str) if values.dtype == object else values
    return out


def _first_rows(mask: np.ndarray, keys: list[np.ndarray]) -> np.ndarray:
    """Indices of rows selected by ``mask``, keeping the first row of each key.

    aiconfigurator's loaders keep the first row on a duplicate key; file order
    is preserved.
    """
    selected = np.flatnonzero(mask)
    if selected.size == 0:
        return selected
    stacked = np.stack([np.asarray(key)[selected] for key in keys], axis=1)
    _, first = np.unique(stacked, axis=0, return_index=True)
    return selected[np.sort(first)]


def _gemm_rows(gemm: Columns, dtype: str) -> np.ndarray:
    return _first_rows(gemm["gemm_dtype"] == dtype, [gemm["m"], gemm["n"], gemm["k"]])


def _attention_rows(attention: Columns) -> np.ndarray:
    # Older tables (a100_sxm) have no window_size column: all rows are full
    # attention, which aiconfigurator also assumes (window 0).
    window = attention.get("window_size", np.zeros_like(attention["latency"], dtype=np.int64))
    mask = (attention["attn_dtype"] == "bfloat16") & (attention["kv_cache_dtype"] == "bfloat16") & (window == 0)
    keys = [attention[name] for name in ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim")]
    return _first_rows(mask, keys)


def _collective_rows(comm: Columns) -> np.ndarray:
    known_op = np.isin(comm["op_name"], list(_COMM_OP_NAMES))
    op_code = np.searchsorted(np.array(sorted(_COMM_OP_NAMES)), comm["op_name"])
    mask = (comm["nccl_dtype"] == _COMM_DTYPE) & known_op
    return _first_rows(mask, [op_code, comm["num_gpus"], comm["message_size"]])


def _family_arrays(name: str, columns: Columns, rows: np.ndarray) -> dict[str, np.ndarray]:
    latency_s = columns["latency"][rows].astype(np.float64) * _SECONDS_PER_MS
    if name.startswith("gemm"):
        out = {axis: columns[axis][rows].astype(np.int64) for axis in ("m", "n", "k")}
    elif name == "attention_fwd":
        out = {
            "batch": columns["batch_size"][rows].astype(np.int64),
            "seq_len": columns["isl"][rows].astype(np.int64),
            "num_heads": columns["num_heads"][rows].astype(np.int64),
            "num_kv_heads": columns["num_key_value_heads"][rows].astype(np.int64),
            "head_dim": columns["head_dim"][rows].astype(np.int64),
            "causal": np.ones(rows.size, dtype=bool),
        }
    else:
        out = {
            "op": np.array([_COMM_OP_NAMES[op] for op in columns["op_name"][rows]], dtype=str),
            "num_gpus": columns["num_gpus"][rows].astype(np.int64),
            "message_bytes": columns["message_size"][rows].astype(np.int64) * _COMM_BYTES_PER_ELEMENT,
        }
    out["latency_s"] = latency_s
    for values in out.values():
        values.setflags(write=False)
    return out


def _add_family(tables: dict[str, Any], files: dict[str, str], kernels: dict[str, list[str]], name: str,
                relative: PurePosixPath, columns: Columns, rows: np.ndarray) -> None:
    if rows.size == 0:
        return
    tables[name] = _family_arrays(name, columns, rows)
    files[name] = f"{_MODULE_NAME}/{relative}"
    if "kernel_source" in columns:
        kernels[name] = sorted(set(columns["kernel_source"][rows].tolist()))


def _axis_summary(values: np.ndarray) -> str:
    return f"{values.min()}-{values.max()} ({np.unique(values).size} values)"


def _sampling(tables: dict[str, Any]) -> str:
    axes = {"gemm_bf16": ("m", "n", "k"), "gemm_fp8": ("m", "n", "k"),
            "attention_fwd": ("batch", "seq_len", "num_heads", "num_kv_heads", "head_dim"),
            "nccl": ("num_gpus", "message_bytes")}
    parts = [_COLLECTION_NOTE,
             "gemm_bf16 latency: per-shape median over the backends timing F.linear, each scaled to the "
             "primary backend's level (metadata gemm_bf16_merge)"]
    for name, names in axes.items():
        if name in tables:
            family = tables[name]
            ranges = ", ".join(f"{axis} {_axis_summary(family[axis])}" for axis in names)
            parts.append(f"{name}: {family['latency_s'].size} rows; {ranges}")
    if "nccl" in tables:
        parts.append("nccl ops: " + ", ".join(sorted(set(tables["nccl"]["op"].tolist()))))
    return "; ".join(parts)


def _check_gpu(plan: _SystemPlan, gemm: Columns, relative: PurePosixPath) -> None:
    """Guard the device mapping: the table must name the GPU we mapped to it."""
    names = sorted(set(gemm["device"].tolist()))
    if names != [plan.gpu_label]:
        raise ProfileDataError(
            f"{_MODULE_NAME}/{relative} was measured on {', '.join(names)}, expected {plan.gpu_label}"
        )


def _metadata(device: str, plan: _SystemPlan, files: dict[str, str], kernels: dict[str, list[str]],
              omitted: dict[str, str], tables: dict[str, Any]) -> dict[str, Any]:
    return {
        "device": device,
        "source": f"{PACKAGE_NAME} {PACKAGE_VERSION}",
        "system": plan.system,
        "gpu_name": plan.gpu_label,
        "backend": plan.backend,
        "backend_version": plan.backend_version,
        "fp8_backend": plan.fp8_backend,
        "fp8_backend_version": plan.fp8_backend_version,
        "comm_library": plan.comm_library,
        "comm_version": plan.comm_version,
        "files": files,
        "kernel_sources": kernels,
        "omitted": omitted,
        "sampling": _sampling(tables),
    }
