"""A synthetic GPU trace recorded with shapes: layers of aten::mm / aten::add / all_reduce operators, each
launching one kernel, with kernel times given by a function of the operator (e.g. parplan's time x 1.2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from costmodel.profiling.trace import OperatorInstance

BF16 = "c10::BFloat16"
# (m, n, k) of one layer's forward GEMMs; backward runs each as dgrad (m, k, n) and wgrad (n, k, m)
GEMMS = ((4096, 6144, 4096), (4096, 4096, 4096), (4096, 28672, 4096), (4096, 4096, 14336))
ADD = (4096, 4096)
ALLREDUCE_ELEMENTS = 64 * 2**20


def _instance(table: str, row: dict[str, Any], backward: bool) -> OperatorInstance:
    return OperatorInstance("synthetic", table, row, backward, 0.0, 0.0)


def shaped_trace(kernel_us: Callable[[OperatorInstance], float], layers: int = 2, steps: int = 2,
                 rank: int = 0, world: int = 8) -> dict[str, Any]:
    """``steps`` iterations: ``layers`` forward layers, their backward under autograd, one gradient all_reduce."""
    events: list[dict[str, Any]] = []
    t, gpu_free, ident = 1000.0, 0.0, 0

    def op(name: str, table: str, row: dict[str, Any], dims: list[Any], types: list[str], backward: bool,
           extra: dict[str, Any] | None = None, stream: int = 7, kernel: str = "sm90_xmma_gemm_bf16bf16") -> None:
        nonlocal t, gpu_free, ident
        ident += 1
        args = {"External id": ident, "Input Dims": dims, "Input type": types, **(extra or {})}
        outer = t
        if backward:
            events.append({"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: MmBackward0",
                           "pid": 1, "tid": 1, "ts": outer, "dur": 20.0, "args": {"External id": 10**6 + ident}})
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": t + 1, "dur": 15.0,
                       "args": args})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": t + 5, "dur": 5.0, "args": {"correlation": ident, "External id": ident}})
        dur = kernel_us(_instance(table, row, backward))
        start = max(t + 12, gpu_free)
        events.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": stream, "ts": start,
                       "dur": dur, "args": {"correlation": ident, "External id": ident, "stream": stream,
                                            "device": 0}})
        gpu_free = start + dur
        t += 25.0

    def gemm(m: int, n: int, k: int, backward: bool) -> None:
        op("aten::mm", "gemm_bf16", {"m": m, "n": n, "k": k}, [[m, k], [k, n]], [BF16, BF16], backward)

    def add(backward: bool) -> None:
        op("aten::add", "memory", {"kind": "residual", "phase": "bwd" if backward else "fwd",
                                   "elements": ADD[0] * ADD[1], "bytes": ADD[0] * ADD[1] * 2 * 3},
           [list(ADD), list(ADD), []], [BF16, BF16, "Scalar"], backward, kernel="vectorized_elementwise_kernel")

    for step in range(steps):
        begin = t
        for _ in range(layers):
            for m, n, k in GEMMS:
                gemm(m, n, k, False)
            add(False)
        for _ in range(layers):
            add(True)
            for m, n, k in reversed(GEMMS):
                gemm(m, k, n, True)
                gemm(n, k, m, True)
        # the NCCL stream waits for the backward (an event recorded on the compute stream), as DDP's does
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamWaitEvent", "pid": 1, "tid": 1,
                       "ts": t, "dur": 2.0, "args": {"correlation": 10**8 + step}})
        t += 3.0
        op("record_param_comms", "nccl", {"op": "all_reduce", "num_gpus": world,
                                          "message_bytes": ALLREDUCE_ELEMENTS * 2}, [], [], False,
           {"Collective name": "allreduce", "dtype": "BFloat16", "In msg nelems": ALLREDUCE_ELEMENTS,
            "Out msg nelems": ALLREDUCE_ELEMENTS, "Group size": world}, stream=20,
           kernel="ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
        sync = max(gpu_free - t, 0.0) + 3.0
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1, "tid": 1,
                       "ts": t, "dur": sync, "args": {"correlation": 10**7 + step}})
        t += sync + 1.0
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": begin - 0.5, "dur": t - begin + 0.5, "args": {}})
        t += 1.0
    return {"traceEvents": events, "distributedInfo": {"rank": rank, "world_size": world},
            "deviceProperties": [{"name": "NVIDIA H100 80GB HBM3"}], "record_shapes": 1}
