"""A synthetic Kineto trace: one CPU thread launching transformer-like layers on one stream, GPU-bound."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

LAYER = (("ampere_bf16_s16816gemm_qkv", 100.0), ("flash_fwd_kernel", 60.0), ("ampere_bf16_s16816gemm_out", 80.0),
         ("vectorized_elementwise_kernel", 20.0))


def synthetic_trace(layers: int = 4, steps: int = 2, launch_us: float = 5.0, allreduce_us: float = 0.0,
                    gemm_scale: float = 1.0) -> dict[str, Any]:
    """Events of ``steps`` iterations of ``layers`` layers, each step ending in ``cudaDeviceSynchronize``."""
    events: list[dict[str, Any]] = []
    t, corr, gpu_free, comm_free = 1000.0, 0, 0.0, 0.0

    def launch(name: str, dur: float, stream: int, free: float) -> float:
        nonlocal t, corr
        corr += 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t,
                       "dur": launch_us, "args": {"correlation": corr}})
        start = max(t + 2.0, free)
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": start, "dur": dur,
                       "args": {"correlation": corr, "stream": stream, "device": 0}})
        t += launch_us + 1.0
        return start + dur

    for step in range(steps):
        begin = t
        for _ in range(layers):
            for name, dur in LAYER:
                gpu_free = launch(name, dur * (gemm_scale if "gemm" in name else 1.0), 7, gpu_free)
        if allreduce_us:
            comm_free = launch("ncclKernel_AllReduce_RING_LL_Sum_float", allreduce_us, 20, max(gpu_free, comm_free))
            gpu_free = max(gpu_free, comm_free)
        corr += 1
        dur = max(gpu_free - t, 0.0) + 3.0
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1, "tid": 1,
                       "ts": t, "dur": dur, "args": {"correlation": corr}})
        t += dur + 1.0
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": begin - 0.5, "dur": t - begin + 0.5, "args": {}})
        t += 1.0
    return {"traceEvents": events, "distributedInfo": {"rank": 0, "world_size": 2},
            "deviceProperties": [{"name": "synthetic"}]}



def step_trace(steps_us: list[float], rank: int = 0, world: int = 1) -> dict[str, Any]:
    """A rank's trace of profiled steps of the given lengths (µs), one ``aten::mm`` inside each."""
    events: list[dict[str, Any]] = []
    t = 0.0
    for i, dur in enumerate(steps_us):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
                       "ts": t, "dur": dur, "args": {}})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 1.0,
                       "dur": dur - 2.0, "args": {}})
        t += dur + 10.0
    return {"traceEvents": events, "distributedInfo": {"rank": rank, "world_size": world}}

def write(path: Path, data: dict[str, Any]) -> Path:
    """Write ``data`` as ``.json`` or ``.json.gz`` by the suffix."""
    text = json.dumps(data).encode()
    path.write_bytes(gzip.compress(text) if path.suffix == ".gz" else text)
    return path
