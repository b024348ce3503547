"""The execution graph of one or several ranks' traces (Lumos, arXiv 2504.09307, section 3).

Nodes are the runtime calls of each CPU thread (in thread order; the CPU
operators between them are folded into the recorded *gap* before each call)
and the GPU operations of each stream (kernels, memcpy, memset, in stream
order). Edges:

- **launch**: a runtime call -> the GPU operations with its ``correlation`` id;
- **stream order**: each GPU operation after the previous one on its stream;
- **cross-stream waits**: ``cudaStreamWaitEvent``. The shared traces carry no
  event or stream ids on these calls, so a wait is attached to the next GPU
  operation its thread launches (the waiting stream), and waits for the
  operation launched last on any *other* stream of that process before the
  wait (where the matching ``cudaEventRecord`` was issued). A wait that would
  point at an operation ending after the waiter started is counted in
  ``unplaced`` and not used;
- **host synchronisation**: ``cudaDeviceSynchronize`` waits for the last
  operation launched on every stream, ``cudaStreamSynchronize`` /
  ``cudaEventSynchronize`` for the last one this thread launched (its stream,
  from ``cuda_sync`` events where the trace has them), and any runtime call
  whose own GPU operation finished before the call returned (a synchronous
  copy) waits for it;
- **collectives across ranks**: NCCL kernels of several ranks matched by
  process group and sequence (their order on the rank, per kernel name).

Iterations are the ``ProfilerStep#N`` spans; each becomes a start and an end
marker on its thread. GPU operations whose launch call the profiler lost are
placed by stream order alone and counted by name in ``weakly_placed``; what
cannot be placed at all is counted by name in ``unplaced``.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from costmodel.profiling.trace import _short
from costmodel.replay.parse import RawEvent, RawTrace

__all__ = ["Graph", "Node", "Step", "build_graph", "kernel_family"]

GPU_CATS: Final = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
HOST_SYNCS: Final = frozenset({"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
                               "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize"})
STREAM_WAITS: Final = frozenset({"cudaStreamWaitEvent", "hipStreamWaitEvent"})
_STEP: Final = re.compile(r"^ProfilerStep#\d+$")
# Substrings of kernel names per family, first match wins (cuBLAS/CUTLASS/rocBLAS GEMMs, cuDNN convolutions,
# flash / memory-efficient attention, NCCL / RCCL collectives).
_FAMILIES: Final = (
    ("collective", ("nccl", "rccl")),
    ("attention", ("flash", "fmha", "attention", "attn")),
    ("conv", ("conv", "implicit_convolve", "wgrad", "dgrad", "fprop")),
    ("gemm", ("gemm", "gemv", "cutlass", "cublas", "xmma", "s884", "s1688", "h884", "h1688", "cijk_", "matmul")),
)


def kernel_family(name: str, cat: str = "kernel") -> str:
    """``gemm``, ``attention``, ``conv``, ``collective``, ``elementwise`` (other kernels), ``memcpy`` or ``memset``."""
    if cat == "gpu_memcpy":
        return "memcpy"
    if cat == "gpu_memset":
        return "memset"
    lower = name.lower()
    for family, needles in _FAMILIES:
        if any(n in lower for n in needles):
            return family
    return "elementwise"


@dataclass(slots=True)
class Node:
    """One CPU runtime call, GPU operation or iteration marker; times in microseconds as recorded."""

    name: str
    kind: str  # "cpu", "gpu" or "marker"
    lane: tuple[str, ...]  # ("cpu", rank, pid, tid) or ("gpu", rank, pid, stream)
    rank: int
    start: float
    dur: float
    family: str = "runtime"
    gap: float = 0.0  # CPU: recorded time from the previous call's end on the thread to this start
    launch: int | None = None  # GPU: the runtime call that launched it
    latency: float | None = None  # GPU: launch-to-start delay (as recorded when launched onto an idle stream)
    launch_bound: bool = False  # GPU: launched onto an idle stream in the recording
    waits: list[int] = field(default_factory=list)  # GPU: cross-stream; CPU: host-synchronised GPU ops
    tail: float = 0.0  # CPU sync: recorded time from the end of the waited work to the call's return; a CPU
    # trace's matched collective: from the first rank's end of the transfer to its own
    collective: tuple[int, str, int] | None = None  # (group size, name, sequence) of an NCCL kernel
    correlation: object = None  # the runtime call's correlation id (GPU: its launch's)
    elements: int = 0  # CPU-only traces: elements of the operator's largest operand (record_shapes)
    nested: float = 0.0  # CPU-only traces: first nested operator's start to the last one's end (0: none), e.g.
    # an optimizer step's loop over its tensors, apart from the fixed time before and after it


@dataclass(frozen=True)
class Step:
    """One ``ProfilerStep#N`` span: its markers (node indices) and measured length in microseconds."""

    name: str
    rank: int
    begin: int
    end: int
    measured_us: float


@dataclass
class Graph:
    """Nodes, their lanes in order, the iterations and what could not be placed."""

    nodes: list[Node]
    lanes: dict[tuple[str, ...], list[int]]
    steps: list[Step]
    unplaced: Counter[str] = field(default_factory=Counter)  # reason: name -> events
    unplaced_gpu_us: float = 0.0
    weakly_placed: Counter[str] = field(default_factory=Counter)  # placed by stream order alone
    weakly_placed_gpu_us: float = 0.0
    gpu_us: float = 0.0
    cpu_work_us: float = 0.0  # CPU-only traces: time of the operators taken as work
    world_size: int = 1
    device_name: str | None = None
    notes: list[str] = field(default_factory=list)  # what the edits did, readable

    def unplaced_gpu_fraction(self) -> float:
        """Share of GPU busy time (summed over operations) the graph could not place."""
        total = self.gpu_us + self.unplaced_gpu_us
        return self.unplaced_gpu_us / total if total else 0.0


def build_graph(traces: list[RawTrace]) -> Graph:
    """The execution graph of ``traces`` (one per rank; collectives matched when there are several)."""
    graph = Graph(nodes=[], lanes={}, steps=[], world_size=max((t.world_size for t in traces), default=1),
                  device_name=traces[0].device_name if traces else None)
    sync_streams = {trace.rank: _add_rank(graph, trace) for trace in traces}
    for lane in graph.lanes.values():
        lane.sort(key=lambda i: (graph.nodes[i].start, graph.nodes[i].kind != "marker"))
    for rank, streams in sync_streams.items():
        _link_waits(graph, rank, streams)
    _set_gaps(graph)
    if not any(n.kind == "gpu" for n in graph.nodes):
        from costmodel.replay.cpu import link_cpu_collectives  # cpu.py builds on this module's Node

        link_cpu_collectives(graph)
    _number_collectives(graph)
    if len(traces) > 1 and not any(n.kind == "gpu" for n in graph.nodes):
        from costmodel.replay.cpu import transfer_of_matched

        transfer_of_matched(graph)
    return graph


def _add_rank(graph: Graph, trace: RawTrace) -> dict[object, str]:
    """Append one rank's nodes; return the stream of each ``cuda_sync`` record, by correlation id."""
    rank = trace.rank
    by_corr: dict[tuple[str, object], int] = {}
    gpu_events: list[RawEvent] = []
    sync_streams: dict[object, str] = {}
    for event in trace.events:
        if event.cat in ("cuda_runtime", "cuda_driver"):
            family = "sync" if event.name in HOST_SYNCS else "wait" if event.name in STREAM_WAITS else "runtime"
            index = _append(graph, Node(event.name, "cpu", ("cpu", str(rank), event.pid, event.tid), rank,
                                        event.ts, event.dur, family, correlation=event.args.get("correlation")))
            if "correlation" in event.args:
                by_corr[(event.pid, event.args["correlation"])] = index
        elif event.cat in GPU_CATS:
            gpu_events.append(event)
        elif event.cat == "cuda_sync" and "stream" in event.args:
            sync_streams[event.args.get("correlation")] = str(event.args["stream"])
        elif event.cat == "user_annotation" and _STEP.match(event.name):
            lane = ("cpu", str(rank), event.pid, event.tid)
            begin = _append(graph, Node(event.name, "marker", lane, rank, event.ts, 0.0, "marker"))
            end = _append(graph, Node(event.name + " end", "marker", lane, rank, event.ts + event.dur, 0.0, "marker"))
            graph.steps.append(Step(event.name, rank, begin, end, event.dur))
    if not gpu_events and not by_corr:
        from costmodel.replay.cpu import add_cpu_work  # cpu.py builds on this module's Node

        add_cpu_work(graph, trace)  # a CPU-only trace: its operators are the work
        return sync_streams
    pids = sorted({graph.nodes[i].lane[2] for (_, _), i in by_corr.items()})
    for event in gpu_events:
        launcher = next((by_corr[(pid, event.args.get("correlation"))] for pid in pids
                         if (pid, event.args.get("correlation")) in by_corr), None)
        if launcher is None:
            # Placed in stream order only (the profiler lost its launch, e.g. early in the window).
            graph.weakly_placed[f"GPU op without its launch call: {_short(event.name)}"] += 1
            graph.weakly_placed_gpu_us += event.dur
        stream = str(event.args.get("stream", event.tid))
        node = Node(event.name, "gpu", ("gpu", str(rank), str(event.args.get("device", event.pid)), stream), rank,
                    event.ts, event.dur, kernel_family(event.name, event.cat), launch=launcher,
                    correlation=event.args.get("correlation"))
        index = _append(graph, node)
        graph.gpu_us += event.dur
        host = graph.nodes[launcher] if launcher is not None else None
        if host is not None and host.family == "runtime" and event.ts + event.dur <= host.start + host.dur:
            host.waits.append(index)  # it finished before the call returned: a synchronous copy or launch
        if node.family == "collective":
            group = event.args.get("Group size")
            node.collective = (int(group) if isinstance(group, (int, float)) else trace.world_size,
                               _short(event.name), 0)
    return sync_streams


def _append(graph: Graph, node: Node) -> int:
    graph.nodes.append(node)
    index = len(graph.nodes) - 1
    graph.lanes.setdefault(node.lane, []).append(index)
    return index


def _link_waits(graph: Graph, rank: int, sync_streams: dict[object, str]) -> None:
    """Attach ``cudaStreamWaitEvent`` and host synchronisation to the GPU operations they wait for."""
    nodes = graph.nodes
    launched = sorted((i for i, n in enumerate(nodes) if n.kind == "gpu" and n.rank == rank and n.launch is not None),
                      key=lambda i: (nodes[nodes[i].launch].start, i))  # type: ignore[index]
    times = np.array([nodes[nodes[i].launch].start for i in launched])  # type: ignore[index]
    streams = sorted({nodes[i].lane for i in launched})
    by_thread: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for order, i in enumerate(launched):
        by_thread[nodes[nodes[i].launch].lane].append(order)  # type: ignore[index]
    for lane, members in graph.lanes.items():
        if lane[0] != "cpu" or lane[1] != str(rank):
            continue
        mine = by_thread.get(lane, [])
        mine_times = times[mine] if mine else np.array([])
        for index in members:
            node = nodes[index]
            before = int(np.searchsorted(times, node.start, side="left"))  # launches strictly before the call
            own = int(np.searchsorted(mine_times, node.start, side="left"))
            if node.family == "wait":
                _stream_wait(graph, node, launched, before, [launched[o] for o in mine[own:own + 1]])
            elif node.family == "sync":
                targets = _sync_targets(graph, node, launched[:before], [launched[o] for o in mine[:own]],
                                        streams, sync_streams)
                node.waits.extend(targets)
            if node.waits:
                _set_tail(graph, node)


def _stream_wait(graph: Graph, wait: Node, launched: list[int], before: int, waiter: list[int]) -> None:
    nodes = graph.nodes
    if not waiter:
        graph.unplaced[f"{wait.name} with no later launch on its thread"] += 1
        return
    target = nodes[waiter[0]]
    for order in range(before - 1, max(before - 4096, -1), -1):
        other = nodes[launched[order]]
        if other.lane != target.lane and other.lane[1] == target.lane[1]:
            if other.start + other.dur <= target.start + 1.0:  # 1 us: timestamps are rounded
                target.waits.append(launched[order])
            else:
                graph.unplaced[f"{wait.name} pointing at work that ended after the waiter began"] += 1
            return
    graph.unplaced[f"{wait.name} with no earlier launch on another stream"] += 1


def _sync_targets(graph: Graph, node: Node, before: list[int], own: list[int], streams: list[tuple[str, ...]],
                  sync_streams: dict[object, str]) -> list[int]:
    nodes = graph.nodes
    if node.name.endswith("DeviceSynchronize"):
        last: dict[tuple[str, ...], int] = {}
        for i in before:
            last[nodes[i].lane] = i
        return list(last.values())
    if not own:
        return []
    if node.name.endswith("EventSynchronize"):
        return [own[-1]]
    stream = nodes[own[-1]].lane
    named = sync_streams.get(node.correlation)
    for i in reversed(before):
        if nodes[i].lane == stream or (named is not None and nodes[i].lane[3] == named):
            return [i]
    return []


def _set_tail(graph: Graph, node: Node) -> None:
    nodes = graph.nodes
    done = max(nodes[i].start + nodes[i].dur for i in node.waits)
    end = node.start + node.dur
    if done > end + 1.0:
        graph.unplaced[f"{node.name} waiting on work that ended after it returned"] += 1
        node.waits.clear()
        return
    node.tail = max(0.0, end - max(node.start, done))


def _set_gaps(graph: Graph) -> None:
    """CPU gaps as recorded; each GPU operation's launch latency and unexplained stall.

    An operation launched onto an idle stream (its launch began after the stream's previous
    operation and its waits ended) was started by its launch: its latency is as recorded. One
    queued behind other work that still started more than 1 us after that work ended waited for
    something the trace does not show (an event without ids, a peer): that stall is kept as its
    ``gap`` after the work it queued behind, and its latency is the rank's typical one.
    """
    nodes = graph.nodes
    latencies: dict[int, list[float]] = defaultdict(list)
    queued: list[int] = []
    for members in graph.lanes.values():
        previous: Node | None = None
        for index in members:
            node = nodes[index]
            if node.kind != "gpu" or node.launch is None:
                node.gap = 0.0 if previous is None else node.start - (previous.start + previous.dur)
            else:
                ready = max([previous.start + previous.dur if previous else -np.inf]
                            + [nodes[w].start + nodes[w].dur for w in node.waits])
                launched = nodes[node.launch].start
                if launched >= ready:
                    node.latency, node.launch_bound = node.start - launched, True
                    latencies[node.rank].append(node.latency)
                else:
                    node.gap = node.start - ready if node.start > ready + 1.0 else 0.0
                    queued.append(index)
            previous = node
    typical = {rank: float(np.median(values)) for rank, values in latencies.items()}
    for index in queued:
        node = nodes[index]
        node.latency = min(typical.get(node.rank, 0.0), node.start - nodes[node.launch].start)  # type: ignore[index]


def _number_collectives(graph: Graph) -> None:
    """Sequence numbers of NCCL kernels per rank, group and name, in launch order."""
    nodes = graph.nodes
    seen: Counter[tuple[int, int, str]] = Counter()
    ordered = sorted((i for i, n in enumerate(nodes) if n.collective is not None),
                     key=lambda i: (nodes[nodes[i].launch].start if nodes[i].launch is not None else nodes[i].start, i))
    for index in ordered:
        group, name, _ = nodes[index].collective  # type: ignore[misc]
        key = (nodes[index].rank, group, name)
        nodes[index].collective = (group, name, seen[key])
        seen[key] += 1
