"""What-if "another GPU kind": the trace's kernels at parplan's own operator times for that GPU.

Each operator ``record_shapes`` identifies (``costmodel.replay.operators``) is timed by parplan
on the target GPU (its profile, or a user's ``--profile``); that time is split over the kernels
the operator launched in their recorded proportions. A kernel under no recognised operator
takes its family's ratio (parplan's time / recorded time, summed over the family's matched
kernels); a family with no matched kernel (copies, memsets, convolutions, most often) keeps its
recorded times. What was re-timed how is counted in the graph's ``notes``.
"""

from __future__ import annotations

from collections import defaultdict

from costmodel.replay.graph import Graph
from costmodel.replay.operators import operator_seconds, trace_operators
from costmodel.replay.parse import RawTrace
from costmodel.timing import OperatorTimer

__all__ = ["retime_for_gpu"]


def retime_for_gpu(graph: Graph, traces: list[RawTrace], timer: OperatorTimer) -> Graph:
    """A copy of ``graph`` whose GPU operations take parplan's times on ``timer``'s GPU (module docstring)."""
    from costmodel.replay.edit import _copy

    out = _copy(graph)
    nodes = out.nodes
    by_launch: dict[tuple[int, object], list[int]] = defaultdict(list)
    for index, node in enumerate(nodes):
        if node.kind == "gpu" and node.correlation is not None:
            by_launch[(node.rank, node.correlation)].append(index)  # layer copies share their original's id
    new: dict[int, float] = {}
    for trace in traces:
        found = trace_operators(trace)
        for instance, seconds in zip(found.operators, operator_seconds(found.operators, timer)):
            kernels = [i for c in instance.kernels for i in by_launch.get((trace.rank, c), ())]
            recorded = sum(nodes[i].dur for i in kernels)
            if recorded <= 0 or seconds <= 0:
                continue
            for i in kernels:
                new[i] = 1e6 * seconds * nodes[i].dur / recorded * _copies(kernels, i, nodes)
    ratio: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for i, dur in new.items():
        ratio[nodes[i].family][0] += dur
        ratio[nodes[i].family][1] += nodes[i].dur
    counts = {"matched": 0.0, "scaled": 0.0, "kept": 0.0}
    for index, node in enumerate(nodes):
        if node.kind != "gpu":
            continue
        if index in new:
            counts["matched"] += node.dur
            node.dur = new[index]
        elif node.family in ratio and ratio[node.family][1] > 0:
            counts["scaled"] += node.dur
            node.dur *= ratio[node.family][0] / ratio[node.family][1]
        else:
            counts["kept"] += node.dur
    total = sum(counts.values()) or 1.0
    out.notes.append(f"gpu={timer.gpu.name} ({timer.profile_name or 'roofline'}): "
                     f"{100 * counts['matched'] / total:.1f}% of recorded GPU time in recognised operators at "
                     "parplan's times, "
                     f"{100 * counts['scaled'] / total:.1f}% scaled by its family's ratio, "
                     f"{100 * counts['kept'] / total:.1f}% kept as recorded")
    return out


def _copies(kernels: list[int], index: int, nodes: list) -> float:
    """Copies of the kernel's launch among ``kernels`` (a layer edit's copies share its id; each takes a full share)."""
    same = sum(1 for i in kernels if nodes[i].correlation == nodes[index].correlation)
    return float(same)
