"""CPU-only traces (a training step on the CPU, e.g. the measured miniatures): their operators are the work.

- :func:`cpu_family`: an operator's family from its name;
- :func:`add_cpu_work`: each thread's outermost operators as work nodes, with the element count of
  their largest operand (``record_shapes``);
- :func:`link_cpu_collectives`: a collective that ProcessGroupGloo runs on one of its worker
  threads (``gloo:all_reduce``) is launched by the ``c10d::`` call on the issuing thread, and the
  first operator that thread runs after the collective ended waited for it (``work.wait()`` is
  not an operator: the wait is recorded only as that gap). Without the link the issuing thread
  keeps the recorded wait whatever an edit does to the collective;
- :func:`transfer_of_matched`: with several ranks' traces, a collective's time is its transfer only.
"""

from __future__ import annotations

import math
import re
from typing import Final

import numpy as np

from costmodel.profiling.trace import _short
from costmodel.replay.graph import Graph, Node
from costmodel.replay.parse import RawTrace

__all__ = ["add_cpu_work", "cpu_family", "link_cpu_collectives", "operand_elements", "transfer_of_matched"]

_STEP: Final = re.compile(r"^ProfilerStep#\d+$")


def cpu_family(name: str) -> str:
    """The family of a CPU operator (or its autograd backward node) on a CPU-only trace."""
    lower = name.lower()
    if lower.startswith(("gloo:", "nccl:", "c10d::")) or lower == "record_param_comms":
        return "collective"
    if "scaled_dot_product" in lower or "attention" in lower:
        return "attention"
    if "conv" in lower:
        return "conv"
    if any(n in lower for n in ("aten::linear", "aten::mm", "aten::addmm", "aten::matmul", "aten::bmm",
                                "mmbackward", "addmmbackward", "bmmbackward")):
        return "gemm"
    return "elementwise"


def _elements(dims: object) -> int:
    """Elements of one operand's dims: a tensor's ``[d0, d1, ...]``, or a tensor list's ``[[...], [...]]`` summed."""
    if not isinstance(dims, list) or not dims:
        return 0
    if all(isinstance(x, int) for x in dims):
        return math.prod(dims)
    return sum(_elements(d) for d in dims if isinstance(d, list))


def operand_elements(args: dict[str, object]) -> int:
    """Elements of the largest operand in ``Input Dims`` (a tensor list counts all its tensors; 0 without shapes)."""
    dims = args.get("Input Dims")
    return max((_elements(d) for d in dims), default=0) if isinstance(dims, list) else 0


def add_cpu_work(graph: Graph, trace: RawTrace) -> None:
    """The outermost operators of each thread of a CPU-only trace as work nodes (nested ones are inside them).

    Iteration markers are not work; a ``gloo:`` / ``record_param_comms`` collective is numbered like an
    NCCL kernel (group size from its ``Group size`` or the trace's world size). A node's ``nested`` is the
    span of the operators inside it (an optimizer step's loop over its tensors).
    """
    work = sorted((e for e in trace.events if e.cat in ("cpu_op", "user_annotation") and not _STEP.match(e.name)),
                  key=lambda e: (e.pid, e.tid, e.ts, -e.dur))
    end_of: dict[tuple[str, str], float] = {}
    outer: dict[tuple[str, str], tuple[Node, float]] = {}  # a thread's outermost node, its first nested start
    for event in work:
        thread = (event.pid, event.tid)
        if event.ts < end_of.get(thread, -np.inf):  # inside the previous outermost operator of its thread
            node, first = outer[thread]
            first = min(first, event.ts)
            node.nested = max(node.nested, event.ts + event.dur - first)
            outer[thread] = (node, first)
            continue
        end_of[thread] = event.ts + event.dur
        node = Node(event.name, "cpu", ("cpu", str(trace.rank), event.pid, event.tid), trace.rank, event.ts,
                    event.dur, cpu_family(event.name), elements=operand_elements(event.args))
        if node.family == "collective":
            group = event.args.get("Group size")
            node.collective = (int(group) if isinstance(group, (int, float)) else trace.world_size,
                               _short(event.name), 0)
        graph.nodes.append(node)
        graph.lanes.setdefault(node.lane, []).append(len(graph.nodes) - 1)
        graph.cpu_work_us += event.dur
        outer[thread] = (node, np.inf)


def link_cpu_collectives(graph: Graph) -> None:
    """Tie each worker-thread collective to the call that issued it and to the operator that waited for it.

    The issuer is the last ``c10d::`` call on another thread of the process before the collective started
    (it queues the work and may return before a worker picks it up); the issuer becomes a ``runtime``
    call, like a kernel launch, and is no longer matched across ranks. The waiter is the issuing thread's
    first operator starting after the collective ended. The collective
    starts its recorded latency after the issuer started; the waiter's recorded gap was the wait, so it
    gets none, and its ``tail`` (wake-up and own time) runs from the collective's end. Where the
    collective ended before the thread's previous operator returned (the issuing call itself ran past
    it), the gap held no wait: the waiter keeps it and its ``tail`` is its own time.
    """
    nodes = graph.nodes
    threads_with_steps = {nodes[s.begin].lane for s in graph.steps}
    for lane, members in graph.lanes.items():
        if lane[0] != "cpu" or lane in threads_with_steps:
            continue
        for index in members:
            node = nodes[index]
            if node.family != "collective" or node.kind != "cpu":
                continue
            issuer, waiter = _issuer_and_waiter(graph, node)
            if issuer is None or waiter is None:
                graph.unplaced[f"{node.name} on a worker thread with no issuing call"] += 1
                continue
            node.launch, node.latency, node.gap = issuer, node.start - nodes[issuer].start, 0.0
            nodes[issuer].family, nodes[issuer].collective = "runtime", None  # it only queued the work
            done, late = node.start + node.dur, nodes[waiter]
            late.waits.append(index)
            before = _previous_end(graph, waiter)
            if done >= before:  # the thread waited in the gap: the waiter's time runs from the collective's end
                late.tail, late.gap = late.start + late.dur - done, 0.0
            else:  # done before the thread asked (the issuing call returned late): no wait in the recorded gap
                late.tail = late.dur


def _previous_end(graph: Graph, index: int) -> float:
    """When the operator before ``index`` on its thread ended (``-inf`` for the thread's first)."""
    members = graph.lanes[graph.nodes[index].lane]
    position = members.index(index)
    if position == 0:
        return -np.inf
    node = graph.nodes[members[position - 1]]
    return node.start + node.dur


def _issuer_and_waiter(graph: Graph, node: Node) -> tuple[int | None, int | None]:
    """The last ``c10d::`` call that started before ``node`` on another thread of its process (the work is
    queued: the worker may pick it up after the call returned), and that thread's first operator after it."""
    nodes = graph.nodes
    best: tuple[float, tuple[str, ...], int] | None = None
    for lane, members in graph.lanes.items():
        if lane == node.lane or lane[:3] != node.lane[:3]:
            continue
        for position, i in enumerate(members):
            other = nodes[i]
            if other.start > node.start:
                break
            if other.kind == "cpu" and other.name.startswith("c10d::") and (best is None or other.start > best[0]):
                best = (other.start, lane, position)
    if best is None:
        return None, None
    _, lane, position = best
    members = graph.lanes[lane]
    done = node.start + node.dur
    after = next((i for i in members[position + 1:] if nodes[i].kind == "cpu" and nodes[i].start >= done - 1.0),
                 None)
    return members[position], after


def transfer_of_matched(graph: Graph) -> None:
    """Each collective matched across ranks (group, name, sequence) lasts its transfer: from the last rank's
    recorded arrival to the first recorded end. The ranks of a CPU trace share one host's clock, so this is
    exact. Before the last arrival a rank's span was waiting for the slowest peer, which the replay now
    derives; after the first end it was the rank's own (its wake-up, or a preemption after the data had
    arrived): that part is its ``tail``, which the replay adds after the transfer and no edit of the
    transfer scales."""
    groups: dict[tuple[int, str, int], list[Node]] = {}
    for node in graph.nodes:
        if node.collective is not None and node.kind == "cpu":
            groups.setdefault(node.collective, []).append(node)
    for members in groups.values():
        if len({n.rank for n in members}) != len(members) or len(members) < 2:
            continue
        first_end = min(n.start + n.dur for n in members)
        transfer = max(0.0, first_end - max(n.start for n in members))
        for node in members:
            node.tail = node.start + node.dur - first_end
            node.dur = transfer
