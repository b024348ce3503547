"""Discrete-event replay of an execution graph: per-iteration time, critical path and breakdown.

Rules (Lumos, arXiv 2504.09307, section 4):

- a CPU call starts its recorded gap after the previous call on its thread ended, and lasts
  its recorded time; a synchronising call (host sync, synchronous copy) returns its recorded
  tail after the GPU work it waits for ends, or after its own time if that work is done;
- a GPU operation starts when its launch call started plus its launch latency, its stream's
  previous operation ended, and every cross-stream wait ended, and lasts its (possibly
  edited) duration;
- matched collectives of several ranks (NCCL kernels, or a CPU trace's gloo collectives) start
  together, when the last rank is ready, and last the shortest recorded duration among them (the
  rest of a longer one was waiting for a peer: the transfer is what the last rank to arrive saw);
  CPU ranks, which share one host's clock, last from the last recorded arrival to the first
  recorded end, and each then its own recorded time after that end (its ``tail``: a wake-up, or a
  preemption once the data had arrived);
- a worker thread's collective on a CPU trace starts its recorded latency after the ``c10d::``
  call that issued it, and the operator that waited for it ends its recorded tail after it.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field

import numpy as np

from costmodel.replay.graph import Graph, Node, Step

__all__ = ["IterationReplay", "Replay", "simulate"]

# How a node's start was bound, for the critical path and the idle breakdown.
LANE, LAUNCH, WAIT, PEER, FIRST = "lane", "launch", "wait", "peer", "first"


@dataclass(frozen=True)
class IterationReplay:
    """One ``ProfilerStep``: measured and replayed seconds, GPU-time breakdown and critical path."""

    name: str
    rank: int
    measured_s: float
    replayed_s: float
    breakdown_s: dict[str, float]  # compute, exposed_communication, cpu_bound_idle, synchronisation
    critical_path_s: dict[str, float]  # family (or cpu / gap / launch_latency) -> seconds on the path

    @property
    def error(self) -> float:
        """``replayed / measured - 1``."""
        return self.replayed_s / self.measured_s - 1.0 if self.measured_s else 0.0


@dataclass
class Replay:
    """Simulated start and end (microseconds) of every node, and each node's binding predecessor."""

    start: np.ndarray
    end: np.ndarray
    bound_by: np.ndarray  # index of the predecessor that set the start, -1 for none
    reason: list[str]
    previous: list[int]  # lane predecessor of each node, -1 for the first
    iterations: list[IterationReplay] = field(default_factory=list)


def _edges(graph: Graph) -> tuple[list[int], list[list[int]], list[list[int]], dict[tuple[int, str, int], list[int]]]:
    """Lane predecessors, successors released by a node's start (its launches) and by its end, collective groups."""
    nodes = graph.nodes
    previous = [-1] * len(nodes)
    for members in graph.lanes.values():
        for a, b in zip(members, members[1:]):
            previous[b] = a
    on_start: list[list[int]] = [[] for _ in nodes]
    on_end: list[list[int]] = [[] for _ in nodes]
    for index, node in enumerate(nodes):
        if previous[index] >= 0:
            on_end[previous[index]].append(index)
        if node.launch is not None:
            on_start[node.launch].append(index)
        for w in node.waits:
            on_end[w].append(index)
    groups: dict[tuple[int, str, int], list[int]] = defaultdict(list)
    if len({n.rank for n in nodes}) > 1:
        for index, node in enumerate(nodes):
            if node.collective is not None:
                groups[node.collective].append(index)
        groups = {k: v for k, v in groups.items() if len({nodes[i].rank for i in v}) == len(v) > 1}
    return previous, on_start, on_end, groups


def simulate(graph: Graph) -> Replay:
    """Replay ``graph``; raises ``ValueError`` on a dependency cycle (a graph edit gone wrong).

    A CPU call starts once its thread's previous call ended; the operations it launches may
    start from then on, and a call that waits for GPU work ends only after that work.
    """
    nodes = graph.nodes
    count = len(nodes)
    previous, on_start, on_end, groups = _edges(graph)
    member_of = {i: key for key, members in groups.items() for i in members}
    to_start = np.zeros(count, dtype=np.int64)  # unmet dependencies of a node's start
    to_end = np.zeros(count, dtype=np.int64)  # CPU: GPU work still awaited before it can end
    for index, node in enumerate(nodes):
        gpu_waits = len(node.waits) if node.kind == "gpu" else 0
        to_start[index] = (previous[index] >= 0) + (node.launch is not None) + gpu_waits
        to_end[index] = len(node.waits) if node.kind != "gpu" else 0
    start, end = np.zeros(count), np.zeros(count)
    bound_by, reason = np.full(count, -1, dtype=np.int64), [FIRST] * count
    ready_group: dict[tuple[int, str, int], list[int]] = defaultdict(list)
    queue = deque(i for i in range(count) if to_start[i] == 0)
    ended = 0

    def release(successors: list[int]) -> None:
        for nxt in successors:
            to_start[nxt] -= 1
            if to_start[nxt] == 0:
                queue.append(nxt)

    def close(index: int) -> None:
        nonlocal ended
        ended += 1
        release(on_end[index])
        for waiter in on_end_cpu[index]:  # GPU work, or a CPU trace's worker-thread collective
            to_end[waiter] -= 1
            if to_end[waiter] == 0 and started[waiter]:
                _end_cpu(nodes, waiter, start, end, bound_by, reason)
                close(waiter)

    on_end_cpu: list[list[int]] = [[] for _ in nodes]
    for index, node in enumerate(nodes):
        if node.kind != "gpu":
            for w in node.waits:
                on_end_cpu[w].append(index)
                on_end[w].remove(index)
    started = np.zeros(count, dtype=bool)
    while queue:
        index = queue.popleft()
        started[index] = True
        _start(nodes, index, previous[index], start, end, bound_by, reason)
        release(on_start[index])
        if nodes[index].kind != "gpu" and index not in member_of:
            if to_end[index] == 0:
                _end_cpu(nodes, index, start, end, bound_by, reason)
                close(index)
            continue
        key = member_of.get(index)
        if key is None:
            close(index)
            continue
        ready_group[key].append(index)
        if len(ready_group[key]) == len(groups[key]):
            _release(nodes, groups[key], start, end, bound_by, reason)
            for member in groups[key]:
                close(member)
    if ended != count:
        raise ValueError(f"the execution graph has a dependency cycle ({count - ended} nodes never ended)")
    replay = Replay(start=start, end=end, bound_by=bound_by, reason=reason, previous=previous)
    gpu_by_rank: dict[int, list[int]] = defaultdict(list)
    for index, node in enumerate(nodes):
        if node.kind == "gpu":
            gpu_by_rank[node.rank].append(index)
    replay.iterations = [_iteration(graph, replay, step, gpu_by_rank[step.rank]) for step in graph.steps]
    return replay


def _start(nodes: list[Node], index: int, previous: int, start: np.ndarray, end: np.ndarray,
           bound_by: np.ndarray, reason: list[str]) -> None:
    node = nodes[index]
    if node.kind != "gpu":
        # The first node of a lane starts when recorded, unless it was issued: a worker thread's first
        # collective starts after its c10d:: call like every later one (an edit may move the call earlier).
        first = -np.inf if node.launch is not None else node.start
        begin = end[previous] + node.gap if previous >= 0 else first
        start[index], bound_by[index], reason[index] = begin, previous, LANE if previous >= 0 else FIRST
        if node.launch is not None and start[node.launch] + (node.latency or 0.0) > begin:  # a worker thread's
            begin = start[node.launch] + (node.latency or 0.0)  # collective, issued by its c10d:: call
            start[index], bound_by[index], reason[index] = begin, node.launch, LAUNCH
        end[index] = begin + node.dur
        return
    stall = max(node.gap, 0.0)  # an unexplained wait the recording showed after the work it queued behind
    options = [(end[previous] + stall, previous, LANE)] if previous >= 0 else []
    options += [(end[w] + stall, w, WAIT) for w in node.waits]
    if node.launch is not None:
        options.append((start[node.launch] + (node.latency or 0.0), node.launch, LAUNCH))
    if options:
        begin, bound_by[index], reason[index] = max(options, key=lambda o: o[0])
    else:
        begin = node.start
    start[index], end[index] = begin, begin + node.dur


def _end_cpu(nodes: list[Node], index: int, start: np.ndarray, end: np.ndarray, bound_by: np.ndarray,
             reason: list[str]) -> None:
    node, begin = nodes[index], start[index]
    finish = begin + node.dur
    if node.waits:  # its recorded time held the wait: only the tail after the work is its own
        waited = max(node.waits, key=lambda w: end[w])
        finish = max(begin, end[waited]) + node.tail
        if end[waited] > begin:
            bound_by[index], reason[index] = waited, WAIT  # the call's return was set by the GPU
    end[index] = finish


def _release(nodes: list[Node], members: list[int], start: np.ndarray, end: np.ndarray, bound_by: np.ndarray,
             reason: list[str]) -> None:
    latest = max(members, key=lambda i: start[i])
    duration = min(nodes[i].dur for i in members)
    for member in members:
        if member != latest and start[member] < start[latest]:
            bound_by[member], reason[member] = latest, PEER
        start[member] = start[latest]
        end[member] = start[latest] + duration + nodes[member].tail  # tail: a CPU rank's own time after it


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in intervals)


def _iteration(graph: Graph, replay: Replay, step: Step, gpu: list[int]) -> IterationReplay:
    nodes = graph.nodes
    lo, hi = replay.start[step.begin], replay.start[step.end]
    compute, comm, starts = [], [], []
    for index in gpu:
        node = nodes[index]
        a, b = max(replay.start[index], lo), min(replay.end[index], hi)
        if b > a:
            (comm if node.family == "collective" else compute).append((a, b))
        if lo <= replay.start[index] < hi:
            starts.append((replay.start[index], replay.reason[index]))
    busy = _union(compute + comm)
    compute_u = _union(compute)
    breakdown = {"compute": _length(compute_u), "exposed_communication": _length(busy) - _length(compute_u),
                 "cpu_bound_idle": 0.0, "synchronisation": 0.0}
    starts.sort()
    times = [t for t, _ in starts]
    edges = [lo] + [x for ab in busy for x in ab] + [hi]
    for a, b in zip(edges[::2], edges[1::2]):  # idle stretches between busy intervals
        if b <= a:
            continue
        at = bisect_left(times, b - 1e-9)
        nxt = starts[at][1] if at < len(starts) else LAUNCH
        breakdown["synchronisation" if nxt in (WAIT, PEER) else "cpu_bound_idle"] += b - a
    return IterationReplay(step.name, step.rank, step.measured_us * 1e-6, float(hi - lo) * 1e-6,
                           {k: float(v) * 1e-6 for k, v in breakdown.items()},
                           _critical_path(graph, replay, step.end, lo))


def _critical_path(graph: Graph, replay: Replay, last: int, lo: float) -> dict[str, float]:
    """Seconds per family along the chain of binding predecessors back from ``last`` to the iteration start."""
    nodes, path, seen = graph.nodes, Counter(), set()
    index = last
    while index >= 0 and replay.end[index] > lo:
        node = nodes[index]
        begin = max(replay.start[index], lo)
        path["cpu" if node.kind == "cpu" else node.family if node.kind == "gpu" else "marker"] += \
            replay.end[index] - begin
        seen.add(index)
        parent = int(replay.bound_by[index])
        while parent in seen:  # a synchronous copy: the call waited for its own launch; step to its thread
            parent = replay.previous[parent]
        if parent < 0:
            break
        slack = begin - max(replay.end[parent], lo)  # a gap or a launch latency, not work
        if slack > 0:
            path["cpu_gap" if node.kind != "gpu" else "launch_latency"] += slack
        index = parent
    return {k: float(v) * 1e-6 for k, v in sorted(path.items()) if v > 0}
