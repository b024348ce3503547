"""One rank of the collective sweep: ``python -m costmodel.profiling.comm_worker`` (or in-process under torchrun).

Every rank runs the same plan; rank 0 decides, item by item, whether to go
on (budget left), skip (already in the journal) or stop, and broadcasts the
decision, so that ranks on different machines never disagree. For each item
the members of the group (ranks ``0 .. g-1``) warm up, agree on the slowest
warm-up time, derive the same inner-loop and repeat counts from it, and time
``inner`` back-to-back calls after a barrier; the time of a repeat is the
slowest rank's, and the median over repeats is recorded by rank 0.

Message sizes follow nccl-tests: all_reduce the buffer; all_gather and
reduce_scatter the whole gathered buffer; all_to_all the per-rank send
buffer; send_recv the bytes one send moves (timed as half a ping-pong).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np

from costmodel.profiling.journal import Journal
from costmodel.profiling.kernels import import_torch

__all__ = ["COMM_OPS", "comm_plan", "main", "message_sizes", "run_worker"]

COMM_OPS: Final = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
_GO, _SKIP, _STOP = 1, 2, 0


def message_sizes(low: int, high: int) -> list[int]:
    """Powers of two in ``[low, high]``, coarse to fine: both ends, the middle, the quarters, ...

    Each next size is the one farthest (in log size) from those before it, so that
    a budget that stops the sweep early still leaves each curve spanning the range.
    """
    sizes = [2**e for e in range(math.ceil(math.log2(low)), math.floor(math.log2(high)) + 1)]
    order = [0, len(sizes) - 1] if len(sizes) > 1 else list(range(len(sizes)))
    left = [i for i in range(len(sizes)) if i not in order]
    while left:
        best = max(left, key=lambda i: (min(abs(i - j) for j in order), -i))
        order.append(best)
        left.remove(best)
    return [sizes[i] for i in order]


def group_sizes(world: int) -> list[int]:
    """Group sizes measured: powers of two up to ``world``, and ``world`` itself."""
    sizes = [2**e for e in range(1, int(math.log2(world)) + 1)] if world >= 2 else []
    return sorted(set(sizes + ([world] if world >= 2 else [])))


def comm_plan(world: int, sizes: Sequence[int], ops: Sequence[str] = COMM_OPS) -> list[tuple[str, int, int]]:
    """``(op, group size, message bytes)`` in measuring order: sizes outermost, coarse to fine."""
    plan = []
    for size in sizes:
        for group in group_sizes(world):
            for op in ops:
                if op != "send_recv" or group == 2:
                    plan.append((op, group, size))
    return plan


def sample_key(op: str, group: int, size: int) -> str:
    """Journal key of one collective sample."""
    return f"nccl||{op},{group},{size}"


def run_worker(out: str, device: str, deadline_epoch: float, min_bytes: int, max_bytes: int,
               ops: Sequence[str] = COMM_OPS) -> int:
    """Run this rank's part of the sweep (rank and world from the torchrun environment variables)."""
    torch = import_torch()
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if device == "cuda" else "gloo")
    tensor_device = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
    groups = {g: (None if g == world else dist.new_group(list(range(g)))) for g in group_sizes(world)}
    journal = Journal(out)
    done = journal.measured_keys() if rank == 0 else set()
    flag = torch.zeros(1, dtype=torch.int32, device=tensor_device)
    shown = time.monotonic()
    measured = 0
    for op, group, size in comm_plan(world, message_sizes(min_bytes, max_bytes), ops):
        if rank == 0:
            key = sample_key(op, group, size)
            flag[0] = _STOP if time.time() >= deadline_epoch else _SKIP if key in done else _GO
        dist.broadcast(flag, src=0)
        if int(flag[0]) == _STOP:
            break
        if int(flag[0]) == _SKIP or rank >= group:
            continue
        record = _time_collective(torch, dist, op, groups[group], group, size, tensor_device)
        if rank == 0:
            journal.append({"record": "sample", "table": "nccl", "key": sample_key(op, group, size),
                            "row": {"op": op, "num_gpus": group, "message_bytes": size}, "source": "design",
                            "backend": dist.get_backend(), "world_size": world, **record})
            measured += 1
            if time.monotonic() - shown >= 1.0:
                shown = time.monotonic()
                print(f"parplan profile: comm {op} on {group} ranks, {size} B: {record['median_s'] * 1e6:.1f} us "
                      f"({measured} measured)", file=sys.stderr, flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def _time_collective(torch: Any, dist: Any, op: str, group: Any, size_ranks: int, size: int,
                     device: Any) -> dict[str, Any]:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32  # gloo reduces fp32 only reliably
    call = _collective(torch, dist, op, group, size_ranks, size, dtype, device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    warm = math.inf
    for _ in range(2):
        dist.barrier(group=group)
        start = time.perf_counter()
        call()
        sync()
        warm = min(warm, time.perf_counter() - start)
    slowest = torch.tensor([warm], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
    warm = float(slowest[0])
    # Derived from the agreed warm-up time, so that every member runs the same number of calls.
    inner = max(1, min(20, math.ceil(5e-4 / max(warm, 1e-9))))
    repeats = max(5, min(10, math.ceil(0.02 / max(warm * inner, 1e-9))))
    times = torch.zeros(repeats, dtype=torch.float64, device=device)
    for index in range(repeats):
        dist.barrier(group=group)
        sync()
        start = time.perf_counter()
        for _ in range(inner):
            call()
        sync()
        times[index] = (time.perf_counter() - start) / inner
    dist.all_reduce(times, op=dist.ReduceOp.MAX, group=group)
    values = times.cpu().numpy()
    if op == "send_recv":
        values = values / 2.0  # a ping-pong is two sends
    q25, median, q75 = np.quantile(values, [0.25, 0.5, 0.75])
    return {"median_s": float(median), "q25_s": float(q25), "q75_s": float(q75), "min_s": float(values.min()),
            "max_s": float(values.max()), "repeats": repeats, "inner": inner, "timer": "perf_counter"}


def _collective(torch: Any, dist: Any, op: str, group: Any, ranks: int, size: int, dtype: Any,
                device: Any) -> Callable[[], Any]:
    element = torch.tensor([], dtype=dtype).element_size()
    count = max(ranks, size // element // ranks * ranks)  # divisible among the ranks
    if op == "all_reduce":
        buffer = torch.ones(size // element, dtype=dtype, device=device)
        return lambda: dist.all_reduce(buffer, group=group)
    if op == "all_gather":
        output = torch.empty(count, dtype=dtype, device=device)
        shard = torch.ones(count // ranks, dtype=dtype, device=device)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: gather(output, shard, group=group)
    if op == "reduce_scatter":
        full = torch.ones(count, dtype=dtype, device=device)
        shard = torch.empty(count // ranks, dtype=dtype, device=device)
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: scatter(shard, full, group=group)
    if op == "all_to_all":
        source = torch.ones(count, dtype=dtype, device=device)
        target = torch.empty(count, dtype=dtype, device=device)
        return lambda: dist.all_to_all_single(target, source, group=group)
    buffer = torch.ones(size // element, dtype=dtype, device=device)
    rank = dist.get_rank()

    def ping_pong() -> None:
        if rank == 0:
            dist.send(buffer, dst=1)
            dist.recv(buffer, src=1)
        else:
            dist.recv(buffer, src=0)
            dist.send(buffer, dst=0)

    return ping_pong


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of one spawned rank."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", choices=("cpu", "cuda"), required=True)
    parser.add_argument("--deadline-epoch", type=float, required=True)
    parser.add_argument("--min-bytes", type=int, required=True)
    parser.add_argument("--max-bytes", type=int, required=True)
    parser.add_argument("--ops", default=",".join(COMM_OPS))
    args = parser.parse_args(argv)
    return run_worker(args.out, args.device, args.deadline_epoch, args.min_bytes, args.max_bytes,
                      tuple(args.ops.split(",")))


if __name__ == "__main__":
    raise SystemExit(main())
