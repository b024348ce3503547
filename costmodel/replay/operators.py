"""A trace's operators as parplan ``Op`` s, and parplan's time for each on a GPU kind.

The operators are those ``parplan profile import-trace`` recognises from ``record_shapes``
input dims (``costmodel.profiling.trace.operator_instances``: GEMMs, SDPA attention, norms,
activations, softmax, same-shape binary ops, fused Adam, collectives); each carries the
``correlation`` ids of the kernels it launched, which tie it to the replay graph's GPU nodes.
A backward GEMM (under autograd's engine) is timed as parplan times dgrad / wgrad GEMMs.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.comm import GroupPlacement, collective_seconds
from costmodel.factored_timing import collective_factor_for
from costmodel.ops import Op, gemm, memory_op
from costmodel.profiling.trace import OperatorInstance, TraceImport, operator_instances
from costmodel.replay.parse import RawTrace
from costmodel.specs.gpu import GPUSpec
from costmodel.timing import OperatorTimer

__all__ = ["TraceOperators", "family_of", "operator_seconds", "placement_of", "trace_operators"]

# Op names whose first part makes costmodel.analytic.memory_kind pick the trace's kernel kind.
_MEMORY_NAME = {"norm": "input_norm", "activation": "mlp", "softmax": "attention", "residual": "attn_residual"}
_BF16 = 2.0


@dataclass
class TraceOperators:
    """One rank's recognised operators, and what the recogniser could not use (``TraceImport`` counters)."""

    rank: int
    operators: list[OperatorInstance]
    report: TraceImport


def trace_operators(trace: RawTrace) -> TraceOperators:
    """The recognised operators of one rank's trace, in trace order."""
    events = [{"ph": "X", "name": e.name, "cat": e.cat, "pid": e.pid, "tid": e.tid, "ts": e.ts, "dur": e.dur,
               "args": e.args} for e in trace.events]
    report = TraceImport(out=trace.path, mode="")
    found = operator_instances({"traceEvents": events, "distributedInfo": trace.distributed}, report)
    return TraceOperators(trace.rank, found, report)


def family_of(table: str) -> str:
    """The factor family of a profile table: ``gemm``, ``attention``, ``elementwise`` or ``collective``."""
    if table.startswith("gemm_"):
        return "gemm"
    if table.startswith("attention_"):
        return "attention"
    return "collective" if table == "nccl" else "elementwise"


def as_op(instance: OperatorInstance) -> Op | None:
    """The parplan ``Op`` of a compute operator (None for a collective)."""
    row, phase = instance.row, "bwd" if instance.backward else "fwd"
    if instance.table.startswith("gemm_"):
        dtype = instance.table.removeprefix("gemm_")
        return gemm(f"trace.{'dgrad' if instance.backward else 'fwd'}", phase, row["m"], row["n"], row["k"], dtype,
                    bytes_per_element=1.0 if dtype == "fp8" else _BF16)
    if instance.table.startswith("attention_"):
        b, s, h, kv, d = (int(row[k]) for k in ("batch", "seq_len", "num_heads", "num_kv_heads", "head_dim"))
        causal = bool(row["causal"])
        fwd = 2.0 * b * s * s * h * 2 * d * (0.5 if causal else 1.0)  # QK^T and PV
        moved = _BF16 * b * s * d * 2 * (h + kv)
        bwd = instance.table == "attention_bwd"
        return Op(f"attention.{'bwd' if bwd else 'fwd'}", instance.table, "bwd" if bwd else "fwd",
                  (b, s, h, kv, d, int(causal)), fwd * (2 if bwd else 1), moved * (2 if bwd else 1), "bf16")
    if instance.table == "memory":
        if row["kind"] == "optimizer":
            return Op("adam.step", "optimizer", "step", (int(row["elements"]),), 12.0 * row["elements"],
                      float(row["bytes"]), "fp32")
        return memory_op(f"{_MEMORY_NAME.get(row['kind'], 'attn_residual')}.{row['phase']}", row["phase"],
                         row["elements"], float(row["bytes"]))
    return None


def placement_of(num_gpus: int, gpu: GPUSpec) -> GroupPlacement:
    """Ranks fill scale-up domains in order (the trace does not say where its ranks sit)."""
    domain = max(1, gpu.nvlink_domain_size)
    if num_gpus <= domain:
        return GroupPlacement.single_domain(num_gpus)
    return GroupPlacement.across_domains(domain, -(-num_gpus // domain))


def operator_seconds(instances: list[OperatorInstance], timer: OperatorTimer) -> list[float]:
    """parplan's seconds for each operator on ``timer``'s GPU (its profile, fall-backs labelled there)."""
    ops = [as_op(i) for i in instances]
    compute = [op for op in ops if op is not None]
    timed = iter(timer.time_ops(compute).seconds) if compute else iter(())
    intra = timer.intra_collective if timer.has_collectives else None
    out = []
    for instance, op in zip(instances, ops):
        if op is not None:
            out.append(float(next(timed)))
            continue
        row = instance.row
        placement = placement_of(int(row["num_gpus"]), timer.gpu)
        seconds = collective_seconds(row["op"], float(row["message_bytes"]), placement, timer.gpu, intra)
        out.append(float(seconds) * collective_factor_for(timer, placement))
    return out
