"""``parplan profile import-trace``: samples from a PyTorch profiler Chrome trace recorded with shapes.

The trace must come from ``torch.profiler.profile(record_shapes=True)``
(``export_chrome_trace``; ``.json`` or ``.json.gz``). Operator events
(``cpu_op``, ``user_annotation``) are nested per thread by their time spans;
an event the importer recognises *claims* every event inside it, so that a
composite (``aten::layer_norm``) and its implementation
(``aten::native_layer_norm``) give one sample, not two.

- **GPU traces** (kernel events present): a kernel belongs to the operator
  that launched it (its ``External id``), and through it to the outermost
  recognised operator around that one; a sample's latency is the sum of the
  kernels it launched. Kernels under no recognised operator are *unknown*.
- **CPU traces**: a sample's latency is the operator's own span. Leaf
  operators (no operator inside) that are not recognised and do compute
  (views, reshapes and allocations excluded) are *unknown*.

Recognised: GEMMs (``aten::mm``, ``aten::addmm``, ``aten::_scaled_mm``),
scaled-dot-product attention forward and backward (flash, efficient, cuDNN
and CPU kernels), norms (layer / RMS, forward and backward), activations,
softmax, same-shape binary element-wise ops (residual kind), fused Adam(W),
and collectives (``record_param_comms`` events with their ``Collective
name``, or ``gloo:``/``nccl:`` annotations with the group size from the
trace's ``distributedInfo``). A recognised operator that no table can hold
(a batched GEMM, an fp32 GEMM, masked attention, a broadcast) is counted as
*unsupported* with the reason, never mapped to something it is not. Repeats
of a shape are merged into one sample: the median, with the spread.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import numpy as np

from costmodel.profiles.profile import Profile
from costmodel.profiling.journal import Journal, check_session, rebuild
from costmodel.specs.errors import SpecError

__all__ = ["OperatorInstance", "TraceImport", "import_trace", "operator_instances"]

_ELEMENT_BYTES: Final = {
    "c10::BFloat16": 2, "c10::Half": 2, "float": 4, "double": 8, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1,
    "BFloat16": 2, "Half": 2, "Float": 4, "Double": 8, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "long int": 8,
    "Long": 8, "int": 4, "Int": 4, "unsigned char": 1, "Byte": 1, "Char": 1, "bool": 1, "Bool": 1,
}
_GEMM_TABLE: Final = {"c10::BFloat16": "gemm_bf16", "c10::Half": "gemm_fp16", "c10::Float8_e4m3fn": "gemm_fp8",
                      "c10::Float8_e5m2": "gemm_fp8"}
# name -> indices of the (m, k) and (k, n) operands; None: a batched GEMM
_GEMM_NAMES: Final = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::_scaled_mm": (0, 1),
                      "aten::bmm": None, "aten::baddbmm": None}
# name -> (phase, index of the query in the inputs, index of is_causal, index of the mask / bias or None)
_ATTENTION: Final = {
    "aten::scaled_dot_product_attention": ("fwd", 0, 5, 3),
    "aten::_scaled_dot_product_flash_attention": ("fwd", 0, 4, None),
    "aten::_scaled_dot_product_flash_attention_for_cpu": ("fwd", 0, 4, 5),
    "aten::_scaled_dot_product_efficient_attention": ("fwd", 0, 6, 3),
    "aten::_scaled_dot_product_cudnn_attention": ("fwd", 0, 6, 3),
    "aten::_scaled_dot_product_flash_attention_backward": ("bwd", 1, 11, None),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": ("bwd", 1, 7, 8),
    "aten::_scaled_dot_product_efficient_attention_backward": ("bwd", 1, 11, 4),
    "aten::_scaled_dot_product_cudnn_attention_backward": ("bwd", 1, 14, 8),
}
# name -> (kind, phase or None for "from the autograd context", tensors read + written per element)
_MEMORY: Final = {
    "aten::layer_norm": ("norm", "fwd", 2), "aten::native_layer_norm": ("norm", "fwd", 2),
    "aten::rms_norm": ("norm", "fwd", 2), "aten::_fused_rms_norm": ("norm", "fwd", 2),
    "aten::native_layer_norm_backward": ("norm", "bwd", 3), "aten::_fused_rms_norm_backward": ("norm", "bwd", 3),
    "aten::silu": ("activation", "fwd", 2), "aten::gelu": ("activation", "fwd", 2),
    "aten::relu": ("activation", "fwd", 2), "aten::silu_backward": ("activation", "bwd", 3),
    "aten::gelu_backward": ("activation", "bwd", 3), "aten::threshold_backward": ("activation", "bwd", 3),
    "aten::softmax": ("softmax", "fwd", 2), "aten::_softmax": ("softmax", "fwd", 2),
    "aten::_softmax_backward_data": ("softmax", "bwd", 3),
}
_BINARY: Final = frozenset({"aten::add", "aten::add_", "aten::mul", "aten::mul_", "aten::sub", "aten::sub_",
                            "aten::div", "aten::div_"})
_ADAM: Final = frozenset({"aten::_fused_adamw_", "aten::_fused_adam_"})
_COLLECTIVES: Final = {"allreduce": "all_reduce", "allgather": "all_gather", "allgatherintotensor": "all_gather",
                       "allgatherbase": "all_gather", "reducescatter": "reduce_scatter",
                       "reducescattertensor": "reduce_scatter", "reducescatterbase": "reduce_scatter",
                       "alltoall": "all_to_all", "alltoallbase": "all_to_all", "alltoallv": "all_to_all",
                       "send": "send_recv", "recv": "send_recv"}
# Operators that launch no kernel (views, allocation, metadata): not "unknown" on a CPU trace.
_NO_KERNEL: Final = frozenset(f"aten::{name}" for name in (
    "view", "reshape", "_reshape_alias", "t", "transpose", "permute", "expand", "as_strided", "slice", "select",
    "unsqueeze", "squeeze", "detach", "alias", "empty", "empty_like", "empty_strided", "resolve_conj",
    "resolve_neg", "lift_fresh", "_unsafe_view", "unbind", "split", "chunk", "narrow", "flatten", "view_as",
    "resize_", "set_", "result_type", "item", "_local_scalar_dense", "record_stream", "size", "stride", "numel",
    "is_nonzero", "contiguous", "to", "expand_as", "split_with_sizes", "unflatten", "_unsafe_split",
    "new_empty", "new_empty_strided", "is_same_size", "_has_compatible_shallow_copy_type", "dim"))


@dataclass
class TraceImport:
    """What an import found: samples written, and what it could not use, with counts."""

    out: Path
    mode: str  # "gpu kernels" or "cpu ops"
    events: int = 0
    samples: Counter[str] = field(default_factory=Counter)  # table -> distinct shapes
    instances: Counter[str] = field(default_factory=Counter)  # table -> events merged into them
    unsupported: Counter[str] = field(default_factory=Counter)  # reason -> events
    unknown: Counter[str] = field(default_factory=Counter)  # kernel / operator name -> events
    profile: Profile | None = None


@dataclass
class _Event:
    name: str
    cat: str
    thread: tuple[str, str]  # (pid, tid)
    start: float  # microseconds
    end: float
    args: dict[str, Any]
    parent: int | None = None
    children: int = 0
    owner: int | None = None  # index of the outermost recognised event around (or at) this one
    verdict: tuple[str, Any] | None = None  # ("sample", (table, row)) or ("unsupported", reason)


def import_trace(trace: str | Path, out: str | Path, device: str | None = None) -> TraceImport:
    """Turn the operator events of a Chrome trace into a profile directory (appending to one that exists).

    Parameters
    ----------
    trace : str or Path
        ``.json`` or ``.json.gz`` from ``torch.profiler`` with ``record_shapes=True``.
    out : str or Path
        Profile directory.
    device : str, optional
        The profile's device (e.g. a GPU catalog name); default the trace's GPU
        name, or ``cpu`` for a trace without kernels.

    Raises
    ------
    SpecError
        If the file is not a Chrome trace, or holds no recognised operator with shapes.
    """
    path, out = Path(trace), Path(out)
    data = _load(path)
    result = TraceImport(out=out, mode="")
    samples: dict[str, tuple[str, dict[str, Any], list[float]]] = {}
    for instance in operator_instances(data, result):
        key = f"{instance.table}|trace|" + ",".join(f"{k}={v}" for k, v in instance.row.items())
        samples.setdefault(key, (instance.table, instance.row, []))[2].append(instance.seconds)
    if not samples:
        shapes = "" if data.get("record_shapes", 1) else " (recorded without shapes: use record_shapes=True)"
        raise SpecError("trace", str(path), f"a PyTorch profiler trace with recognised operators{shapes}")
    result.profile = _write(out, path, data, device, result, samples)
    return result


@dataclass(frozen=True)
class OperatorInstance:
    """One recognised operator of a trace: its table row, whether autograd's backward ran it, its
    measured seconds and the ``correlation`` ids of the kernels it launched (empty on a CPU trace)."""

    name: str
    table: str
    row: dict[str, Any]
    backward: bool
    seconds: float
    start_us: float
    kernels: tuple[Any, ...] = ()


def operator_instances(data: dict[str, Any], result: TraceImport) -> list[OperatorInstance]:
    """Every recognised operator with a measured time in ``data`` (a Chrome trace's JSON), in trace order.

    ``result`` gets the mode, the event count and the unsupported and unknown operators and kernels.
    """
    events = [_event(e) for e in data["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    ops = [e for e in events if e.cat in ("cpu_op", "user_annotation")]
    kernels = [e for e in events if e.cat == "kernel"]
    result.mode, result.events = "gpu kernels" if kernels else "cpu ops", len(ops) + len(kernels)
    _nest(ops)
    context = _Context(ops, any("Collective name" in e.args for e in ops), _world_size(data))
    for index, event in enumerate(ops):
        inherited = ops[event.parent].owner if event.parent is not None else None
        if inherited is not None:
            event.owner = inherited
            continue
        event.verdict = _classify(event, context)
        event.owner = index if event.verdict is not None else None
    launched: dict[int, list[Any]] = defaultdict(list)
    latencies = _latencies(ops, kernels, result, launched)
    instances = []
    for index, event in enumerate(ops):
        if event.owner != index or event.verdict is None:
            continue
        kind, detail = event.verdict
        if kind == "unsupported":
            result.unsupported[detail] += 1
        elif index in latencies:
            table, row = detail
            instances.append(OperatorInstance(event.name, table, row, _in_backward(event, ops), latencies[index],
                                              event.start, tuple(launched.get(index, ()))))
    instances.sort(key=lambda i: i.start_us)
    return instances


def _load(path: Path) -> dict[str, Any]:
    # One bounded trace reader (regular files only, a size cap meant for traces, no recursion error);
    # imported here because costmodel.replay imports this module.
    from costmodel.replay.parse import read_chrome_json

    return read_chrome_json(path)


def _event(raw: dict[str, Any]) -> _Event:
    start = float(raw.get("ts", 0.0))
    return _Event(str(raw.get("name", "")), str(raw.get("cat", "")), (str(raw.get("pid")), str(raw.get("tid"))),
                  start, start + float(raw.get("dur", 0.0)), raw.get("args") or {})


def _nest(ops: list[_Event]) -> None:
    """Sort ``ops`` parents-first and set each one's ``parent`` (the innermost span around it, same thread)."""
    ops.sort(key=lambda e: (e.thread, e.start, -e.end))
    by_thread: dict[tuple[str, str], list[int]] = defaultdict(list)
    for index, event in enumerate(ops):
        stack = by_thread[event.thread]
        while stack and ops[stack[-1]].end <= event.start:
            stack.pop()
        if stack:
            event.parent = stack[-1]
            ops[stack[-1]].children += 1
        stack.append(index)


@dataclass(frozen=True)
class _Context:
    ops: list[_Event]
    param_comms: bool  # the trace has record_param_comms events (group size, dtype, counts)
    world: int | None  # the world size, when the trace has a single process group


def _world_size(data: dict[str, Any]) -> int | None:
    info = data.get("distributedInfo") or {}
    if int(info.get("pg_count", 1)) == 1 and info.get("world_size"):
        return int(info["world_size"])
    return None


def _classify(event: _Event, context: _Context) -> tuple[str, Any] | None:
    name, args = event.name, event.args
    if "Collective name" in args:
        return _collective(args)
    if re.match(r"^(gloo|nccl):", name):
        # With record_param_comms events inside, those carry the facts: let them claim the kernels.
        return None if context.param_comms else _annotated_collective(name, args, context.world)
    if not (name in _GEMM_NAMES or name in _ATTENTION or name in _MEMORY or name in _BINARY or name in _ADAM):
        return None
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list) or not dims:
        return None if name in _BINARY else ("unsupported", f"{name} (recorded without shapes)")
    if name in _GEMM_NAMES:
        return _gemm(name, dims, types)
    if name in _ATTENTION:
        return _attention(name, dims, types, args.get("Concrete Inputs") or [])
    if name in _ADAM:
        params = sum(math.prod(d) for d in dims[0]) if dims[0] and isinstance(dims[0][0], list) else math.prod(dims[0])
        return "sample", ("memory", {"kind": "optimizer", "phase": "step", "elements": int(params),
                                     "bytes": int(params) * 7 * 4})  # fp32 AdamW: 4 reads, 3 writes
    return _memory(event, context.ops, dims, types)


def _gemm(name: str, dims: list[Any], types: list[Any]) -> tuple[str, Any]:
    operands = _GEMM_NAMES[name]
    if operands is None:
        return "unsupported", f"{name} (batched GEMM: no batched table)"
    a, b = (dims[i] if i < len(dims) else [] for i in operands)
    if len(a) != 2 or len(b) != 2:
        return "unsupported", f"{name} (operands not 2-D)"
    dtype = str(types[operands[0]])
    table = _GEMM_TABLE.get(dtype)
    if table is None or (table == "gemm_fp8") != (name == "aten::_scaled_mm"):
        return "unsupported", f"{name} in {dtype} (no table for this dtype)"
    (m, k), (_, n) = a, b
    return "sample", (table, {"m": int(m), "n": int(n), "k": int(k)})


def _attention(name: str, dims: list[Any], types: list[Any], concrete: list[Any]) -> tuple[str, Any]:
    phase, query, causal_at, mask_at = _ATTENTION[name]
    if len(dims) <= query + 1 or len(dims[query]) != 4 or len(dims[query + 1]) != 4:
        return "unsupported", f"{name} (query/key not 4-D)"
    (b, h, s, d), (_, kv, s_k, _) = dims[query], dims[query + 1]
    if str(types[query]) != "c10::BFloat16":
        return "unsupported", f"attention in {types[query]} (attention tables are bf16)"
    if s != s_k:
        return "unsupported", "attention with query length != key length (no table)"
    if mask_at is not None and mask_at < len(dims) and dims[mask_at]:
        return "unsupported", "attention with an explicit mask (no table)"
    flag = str(concrete[causal_at]) if causal_at < len(concrete) else ""
    if flag not in ("True", "False"):
        return "unsupported", f"{name} (causal flag not recorded)"
    row = {"batch": int(b), "seq_len": int(s), "num_heads": int(h), "num_kv_heads": int(kv), "head_dim": int(d),
           "causal": flag == "True"}
    return "sample", (f"attention_{phase}", row)


def _memory(event: _Event, ops: list[_Event], dims: list[Any], types: list[Any]) -> tuple[str, Any] | None:
    element = _ELEMENT_BYTES.get(str(types[0]))
    if element is None or not isinstance(dims[0], list) or not dims[0]:
        return None if event.name in _BINARY else ("unsupported", f"{event.name} (no tensor input recorded)")
    elements = int(math.prod(dims[0]))
    if event.name in _BINARY:
        # Only same-shape tensor pairs are streaming residual-like kernels; broadcasts and scalars are not.
        if len(dims) < 2 or dims[1] != dims[0] or str(types[1]) != str(types[0]):
            return None
        kind, phase, tensors = "residual", None, 3
    else:
        kind, phase, tensors = _MEMORY[event.name]
    phase = phase or ("bwd" if _in_backward(event, ops) else "fwd")
    return "sample", ("memory", {"kind": kind, "phase": phase, "elements": elements,
                                 "bytes": elements * element * tensors})


def _in_backward(event: _Event, ops: list[_Event]) -> bool:
    parent = event.parent
    while parent is not None:
        if ops[parent].name.startswith("autograd::engine::evaluate_function"):
            return True
        parent = ops[parent].parent
    return False


def _collective(args: dict[str, Any]) -> tuple[str, Any]:
    raw = str(args["Collective name"])
    op = _COLLECTIVES.get(re.sub(r"[^a-z]", "", raw.lower()).removeprefix("c10d"))
    if op is None:
        return "unsupported", f"collective {raw} (no table)"
    element = _ELEMENT_BYTES.get(str(args.get("dtype")))
    group = args.get("Group size")
    if element is None or not group:
        return "unsupported", f"collective {raw} (dtype or group size not recorded)"
    incoming, outgoing = int(args.get("In msg nelems") or 0), int(args.get("Out msg nelems") or 0)
    # nccl-tests sizes: all_gather the gathered output; send/recv the bytes moved; else the input buffer.
    count = outgoing if op == "all_gather" else max(incoming, outgoing) if op == "send_recv" else incoming
    return "sample", ("nccl", {"op": op, "num_gpus": 2 if op == "send_recv" else int(group),
                               "message_bytes": count * element})


def _annotated_collective(name: str, args: dict[str, Any], world: int | None) -> tuple[str, Any]:
    op = _COLLECTIVES.get(name.split(":", 1)[1].replace("_", ""))
    if op is None:
        return "unsupported", f"{name} (no table)"
    dims, types = args.get("Input Dims") or [[]], args.get("Input type") or [""]
    element = _ELEMENT_BYTES.get(str(types[0]))
    if world is None or element is None or not dims[0]:
        return "unsupported", f"{name} (group size or input not recorded)"
    count = int(math.prod(dims[0]))
    size = count * element * (world if op == "all_gather" else 1)  # gloo records the per-rank input
    return "sample", ("nccl", {"op": op, "num_gpus": 2 if op == "send_recv" else world, "message_bytes": size})


def _latencies(ops: list[_Event], kernels: list[_Event], result: TraceImport,
               launched: dict[int, list[Any]] | None = None) -> dict[int, float]:
    """Seconds per claimed operator: its kernels' summed time on a GPU trace, its span on a CPU trace
    (``launched`` gets each operator's kernels' correlation ids)."""
    if not kernels:
        for event in ops:
            if event.owner is None and event.children == 0 and event.cat == "cpu_op" \
                    and not _launches_nothing(event.name):
                result.unknown[event.name] += 1
        return {i: (e.end - e.start) * 1e-6 for i, e in enumerate(ops)
                if e.owner == i and e.verdict is not None and e.verdict[0] == "sample" and e.end > e.start}
    by_id = {e.args["External id"]: i for i, e in enumerate(ops) if "External id" in e.args}
    out: dict[int, float] = defaultdict(float)
    for kernel in kernels:
        launcher = by_id.get(kernel.args.get("External id"))
        owner = None if launcher is None else ops[launcher].owner
        if owner is None:
            result.unknown[_short(kernel.name)] += 1
        elif ops[owner].verdict is not None and ops[owner].verdict[0] == "sample":  # type: ignore[index]
            out[owner] += (kernel.end - kernel.start) * 1e-6
            if launched is not None:
                launched[owner].append(kernel.args.get("correlation"))
    return {owner: seconds for owner, seconds in out.items() if seconds > 0}


def _launches_nothing(name: str) -> bool:
    """Views and allocations, autograd bookkeeping nodes, and c10d calls that only enqueue (their
    time is in the gloo:/nccl:/record_param_comms event of the work itself)."""
    return (name in _NO_KERNEL or name == "detach" or name.startswith(("c10d::", "autograd::", "torch::autograd::"))
            or re.fullmatch(r"\w*Backward\d*", name) is not None)


def _short(kernel: str) -> str:
    """A kernel name without its template arguments and parameter list."""
    return re.split(r"[<(]", kernel, maxsplit=1)[0].strip()[:80] or kernel[:80]


def _write(out: Path, path: Path, data: dict[str, Any], device: str | None, result: TraceImport,
           samples: dict[str, tuple[str, dict[str, Any], list[float]]]) -> Profile | None:
    gpus = [p for p in data.get("deviceProperties") or [] if isinstance(p, dict)]
    gpu_name = str(gpus[0].get("name")) if gpus and result.mode == "gpu kernels" else None
    device = device or (re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-") if gpu_name else "cpu")
    journal = Journal(out)
    check_session(journal.records(), device, out)
    journal.append({"record": "session", "source": f"PyTorch profiler trace {path.name}", "device": device,
                    "device_name": gpu_name or "cpu", "label": f"{device} (trace {path.name}, {result.mode})",
                    "started": datetime.now(UTC).isoformat(timespec="seconds"), "trace": str(path),
                    "distributed": data.get("distributedInfo"), "unknown_events": sum(result.unknown.values()),
                    "unsupported_events": sum(result.unsupported.values())})
    for key, (table, row, seconds) in samples.items():
        values = np.asarray(seconds)
        q25, median, q75 = np.quantile(values, [0.25, 0.5, 0.75])
        journal.append({"record": "sample", "table": table, "key": key, "row": row, "source": "trace",
                        "median_s": float(median), "q25_s": float(q25), "q75_s": float(q75),
                        "min_s": float(values.min()), "max_s": float(values.max()), "repeats": int(values.size),
                        "inner": 1, "timer": "trace"})
        result.samples[table] += 1
        result.instances[table] += int(values.size)
    return rebuild(out)
