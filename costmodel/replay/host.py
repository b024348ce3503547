"""What-if physics of CPU-only traces, whose "device" is a CPU core (the measured miniatures).

- :func:`time_slicing`: ranks on a host with fewer cores than ranks share them, so every operator of a
  rank (and the interpreter's time between them) stretches by the ranks per core;
- :func:`change_cpu_ranks`: the data-parallel degree of a CPU trace: its gloo collectives re-timed for
  the new rank count and its work for the new ranks per core;
- :func:`scale_gradient_bucket`: the layer edit's share of the gradient all-reduce: the collective and
  the operators on its flat bucket (one operand as large as the collective's) scale with the parameters.

The host's core count is part of the target hardware (``cores=N`` in ``--what-if``; the benchmark passes
``len(os.sched_getaffinity(0))``); it is the same host for the recording and the target.
"""

from __future__ import annotations

from costmodel.comm.formulas import bus_factor
from costmodel.replay.graph import Graph

__all__ = ["change_cpu_ranks", "scale_gradient_bucket", "time_slicing"]


def time_slicing(ranks: int, cores: int | None) -> float:
    """How many ranks share one core (1 when each has its own, or the host's cores are not given)."""
    return max(1.0, ranks / cores) if cores else 1.0


def _collective_op(name: str) -> str | None:
    from costmodel.replay.edit import collective_op  # edit.py calls this module

    return collective_op(name)


def change_cpu_ranks(graph: Graph, factor: float, cores: int | None) -> Graph:
    """``graph`` (CPU-only, edited in place and returned) on ``factor`` times as many ranks, ``cores`` shared.

    A collective's transfer scales with the bus factor of its op: ProcessGroupGloo's CPU all-reduce is
    ``gloo::allreduce``, a segmented ring (reduce-scatter, then all-gather; gloo/allreduce.cc @1d9e62af),
    which sends ``2(n-1)/n`` of the bytes per rank like NCCL's ring. On one rank there is nothing to
    synchronise: the collective and the operators on its flat bucket (the copies into and out of it,
    the division by the world size) go, as in the miniature's one-rank program. With fewer ranks than
    the graph holds, ranks ``new`` and up leave the matched collectives: a rank waits only for the
    slowest of the ranks the job keeps (on one, for none). The ranks' work then
    shares the cores anew: every operator and gap of a rank (the
    interpreter's time to a step's end marker too) x slicing(new) / slicing(old).
    """
    old = max(graph.world_size, 1)
    new = max(1, round(old * factor))
    stretch = time_slicing(new, cores) / time_slicing(old, cores)
    if new == 1:
        _drop_synchronisation(graph)
    for node in graph.nodes:
        if node.kind == "gpu":
            continue
        if node.collective is not None and node.rank >= new:
            node.collective = None  # fewer ranks: the first ``new`` of the recording stand for the job's
        if node.collective is not None:
            op, size = _collective_op(node.name), node.collective[0]
            if op is not None and op != "send_recv" and size > 1:
                node.dur *= bus_factor(op, max(1, round(size * factor))) / bus_factor(op, size) if new > 1 else 0.0
        node.dur *= stretch
        node.gap *= stretch
        node.tail *= stretch
        node.latency = None if node.latency is None else node.latency * stretch
    graph.world_size = new
    graph.notes.append(f"{old} -> {new} CPU ranks on {cores or 'unstated'} cores: work x{stretch:.2f} "
                       "(ranks per core), gloo ring collectives by their bus factor")
    return graph


def scale_gradient_bucket(graph: Graph, step_index: int, factor: float) -> None:
    """The step's collectives and the operators on their flat gradient bucket x ``factor`` (bytes ~ parameters)."""
    step, nodes = graph.steps[step_index], graph.nodes
    lo, hi = nodes[step.begin].start, nodes[step.end].start
    inside = [n for n in nodes if n.rank == step.rank and n.kind == "cpu" and lo <= n.start < hi]
    buckets = {n.elements for n in inside if n.collective is not None and n.elements > 0}
    for node in inside:
        if node.collective is not None or node.elements in buckets:
            node.dur *= factor
            node.tail *= factor  # a bucket operator that waited for the collective: its time after it


def _drop_synchronisation(graph: Graph) -> None:
    """One rank: the collectives, the operators on their buckets and the waits for them take no time."""
    for step_index in range(len(graph.steps)):
        scale_gradient_bucket(graph, step_index, 0.0)
    dropped = {i for i, n in enumerate(graph.nodes) if n.kind == "cpu" and n.collective is not None}
    for index in dropped:
        graph.nodes[index].latency = 0.0  # no work queued for a worker to pick up
    for node in graph.nodes:
        if node.kind == "cpu" and dropped.intersection(node.waits):
            node.waits = [w for w in node.waits if w not in dropped]
            node.tail = 0.0 if not node.waits else node.tail  # its own time is its dur again, without a wake-up
