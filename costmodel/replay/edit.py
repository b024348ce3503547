"""What-if edits over an execution graph (Lumos, arXiv 2504.09307, section 5). Each returns a new graph.

- :func:`scale_family`: every GPU operation of a family (``gemm``, ``attention``, ``conv``,
  ``elementwise``, ``collective``, ``memcpy``, ``memset``) takes ``factor`` times as long;
- :func:`scale_network`: collectives on links ``factor`` times as fast (bandwidth-bound: time / factor);
- :func:`change_group_size`: collectives of a group re-timed for another group size with the
  nccl-tests bus factor of ``costmodel/comm/formulas.py`` (bandwidth term; compute unchanged), the
  data-parallel degree edit;
- :func:`change_layers`: repeat or remove the graph's repeated layer block, per iteration;
- :func:`remove_syncs`: drop cross-stream waits or host synchronisation, to show what overlap gains;
- :func:`typical_launch_latency`: every launch at the rank's median latency (a stricter replay);
- ``gpu=NAME`` (:func:`costmodel.replay.retime.retime_for_gpu`): kernels at parplan's operator times for another GPU.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Final

import numpy as np

from costmodel.comm.formulas import bus_factor
from costmodel.replay.graph import Graph
from costmodel.replay.host import change_cpu_ranks, scale_gradient_bucket
from costmodel.replay.parse import RawTrace
from costmodel.specs.errors import SpecError

__all__ = ["apply_what_if", "change_group_size", "change_layers", "collective_op", "fastest_steps", "parse_what_if",
           "remove_syncs", "scale_family", "scale_network", "typical_launch_latency"]

FAMILIES: Final = ("gemm", "attention", "conv", "elementwise", "collective", "memcpy", "memset")
_NCCL_OPS: Final = (("allreduce", "all_reduce"), ("allgather", "all_gather"), ("reducescatter", "reduce_scatter"),
                    ("alltoall", "all_to_all"), ("sendrecv", "send_recv"), ("send", "send_recv"),
                    ("recv", "send_recv"), ("broadcast", "all_gather"))


def _copy(graph: Graph) -> Graph:
    nodes = [replace(n, waits=list(n.waits)) for n in graph.nodes]
    return replace(graph, nodes=nodes, lanes={k: list(v) for k, v in graph.lanes.items()}, notes=list(graph.notes))


def scale_family(graph: Graph, family: str, factor: float) -> Graph:
    """GPU operations of ``family`` take ``factor`` times their duration."""
    out = _copy(graph)
    for node in out.nodes:
        if node.family == family and node.kind != "marker":  # GPU operations; a CPU-only trace's operators
            node.dur *= factor
            node.nested *= factor
    return out


def scale_network(graph: Graph, factor: float) -> Graph:
    """Collectives on a network ``factor`` times as fast (their time divided by ``factor``)."""
    return scale_family(graph, "collective", 1.0 / factor)


def collective_op(kernel: str) -> str | None:
    """The collective an NCCL/RCCL kernel name runs (``ncclKernel_AllReduce_RING_LL_Sum_float`` -> all_reduce)."""
    flat = re.sub(r"[^a-z]", "", kernel.lower())
    return next((op for needle, op in _NCCL_OPS if needle in flat), None)


def change_group_size(graph: Graph, factor: float, group: int | None = None, cores: int | None = None,
                      corun: float | None = None) -> Graph:
    """Collectives of ``group`` ranks (default: the world, the data-parallel group of a pure-DP job) on
    ``factor`` times as many ranks; time scales with the bus factor ``busbw / algbw`` of the op.

    A CPU-only trace (ranks are processes on one host's ``cores``) goes to
    :func:`costmodel.replay.host.change_cpu_ranks`: its work also shares the cores anew (``corun``: the
    host's measured slowdown with all cores busy).
    """
    out = _copy(graph)
    if group is None and out.nodes and not any(n.kind == "gpu" for n in out.nodes):
        return change_cpu_ranks(out, factor, cores, corun)
    for node in out.nodes:
        if node.collective is None or (group is not None and node.collective[0] != group):
            continue
        op, size = collective_op(node.name), node.collective[0]
        new = max(1, round(size * factor))
        if op is None or op == "send_recv" or size < 2:
            continue
        node.dur *= (bus_factor(op, new) / bus_factor(op, size)) if new > 1 else 0.0
    return out


def remove_syncs(graph: Graph, kind: str = "all") -> Graph:
    """Drop cross-stream waits (``stream``), host synchronisation (``host``) or both (``all``)."""
    out = _copy(graph)
    for node in out.nodes:
        if node.kind == "gpu" and kind in ("stream", "all"):
            node.waits.clear()
        elif node.kind == "cpu" and node.family == "sync" and kind in ("host", "all") and node.waits:
            node.waits.clear()
            node.dur = node.tail  # what the call costs when it need not wait
    return out


def typical_launch_latency(graph: Graph) -> Graph:
    """Every asynchronously launched GPU operation at its rank's median launch latency instead of its
    recorded one (a synchronous copy keeps its own: the host call it blocks is what starts it)."""
    out = _copy(graph)
    nodes = out.nodes
    asynchronous = [n for i, n in enumerate(nodes) if n.kind == "gpu" and n.launch is not None
                    and i not in nodes[n.launch].waits]
    by_rank: dict[int, list[float]] = {}
    for node in asynchronous:
        if node.launch_bound:
            by_rank.setdefault(node.rank, []).append(node.latency or 0.0)
    median = {rank: float(np.median(v)) for rank, v in by_rank.items()}
    for node in asynchronous:
        node.latency = median.get(node.rank, node.latency)
    return out


def fastest_steps(graph: Graph) -> Graph:
    """Each iteration's operators and gaps at their fastest among the iterations that ran the same sequence.

    For CPU-only traces on a shared machine, where preemption lands on whichever operator was running:
    interference only adds time, so the fastest instance of each position is the closest to its own time.
    Iterations of one thread with equal operator names in order form a group; on one rank, a worker
    thread's collective issued at one position takes its fastest pickup and time. GPU graphs are returned as they are
    (their kernels are not preempted that way).
    """
    out = _copy(graph)
    nodes = out.nodes
    if any(n.kind == "gpu" for n in nodes):
        return out
    groups: dict[tuple[object, ...], list[list[int]]] = {}
    for step in out.steps:
        lane = out.lanes[nodes[step.begin].lane]
        members = lane[lane.index(step.begin) + 1:lane.index(step.end) + 1]  # its work, then its end marker
        names = tuple(nodes[i].name for i in members[:-1])  # the end marker is named for its step
        groups.setdefault((nodes[step.begin].lane, names), []).append(members)
    issued = {n.launch: i for i, n in enumerate(nodes) if n.kind == "cpu" and n.launch is not None}
    for runs in groups.values():
        if len(runs) < 2:
            continue
        for position in zip(*runs):
            dur, gap = min(nodes[i].dur for i in position), min(nodes[i].gap for i in position)
            tail, nested = min(nodes[i].tail for i in position), min(nodes[i].nested for i in position)
            for i in position:
                nodes[i].dur, nodes[i].gap, nodes[i].tail, nodes[i].nested = dur, gap, tail, min(nested, dur)
            # A one-rank worker collective issued here: its pickup and time at their fastest too. Matched
            # ones keep theirs: a step's transfer can be near zero when a peer arrived late, no possible step.
            workers = [issued[i] for i in position if i in issued]
            if len(workers) == len(position) and out.world_size <= 1:
                latency = min(nodes[w].latency or 0.0 for w in workers)
                transfer = min(nodes[w].dur for w in workers)
                for w in workers:
                    nodes[w].latency, nodes[w].dur = latency, transfer
    return out


def _longest_repeat(names: np.ndarray, min_period: int = 4, repeats: int | None = None) -> tuple[int, int, int] | None:
    """(start, period, repeats) of the longest run of a repeated block in ``names`` (with exactly ``repeats``
    repeats if given), or None."""
    best: tuple[int, int, int] | None = None
    best_cover = 0
    for period in range(min_period, len(names) // 2 + 1):
        same = np.concatenate(([False], names[:-period] == names[period:], [False]))
        edges = np.flatnonzero(np.diff(same.astype(np.int8)))
        if edges.size == 0:
            continue
        runs = edges[1::2] - edges[::2]
        count = (runs + period) // period
        usable = (runs >= period) & ((count == repeats) if repeats is not None else True)
        if not usable.any():
            continue
        at = int(np.flatnonzero(usable)[np.argmax(runs[usable])])
        cover = int(count[at]) * period
        if cover > best_cover:
            best, best_cover = (int(edges[::2][at]), period, int(count[at])), cover
    return best


_MAX_BLOCKS: Final = 8  # forward, backward, per-layer loops: a transformer step has a handful


def layer_blocks(graph: Graph, step_index: int) -> list[list[list[int]]]:
    """The repeated layer blocks of one iteration on its busiest stream: per block, each repeat's kernels.

    The longest repeated kernel sequence is the forward (or backward) layer; the other sequences with
    as many repeats, elsewhere in the iteration, are the other direction and any per-layer loop (the
    copies of each layer's gradients out of a flat all-reduce bucket); a loop that repeats once per
    tensor has other counts and is not a layer.
    """
    step, nodes = graph.steps[step_index], graph.nodes
    lo, hi = nodes[step.begin].start, nodes[step.end].start
    lanes = [lane for lane in graph.lanes if lane[0] == "gpu" and lane[1] == str(step.rank)]
    if lanes:
        busiest = max(lanes, key=lambda lane: len(graph.lanes[lane]))
        kernels = [i for i in graph.lanes[busiest] if nodes[i].launch is not None
                   and lo <= nodes[nodes[i].launch].start < hi]  # type: ignore[index]
    else:  # a CPU-only trace: the operators of the iteration's thread
        kernels = [i for i in graph.lanes[nodes[step.begin].lane] if nodes[i].kind == "cpu"
                   and nodes[i].family not in ("runtime", "sync", "wait") and lo <= nodes[i].start < hi]
    codes: dict[str, int] = {}
    names = np.array([codes.setdefault(nodes[i].name, len(codes)) for i in kernels], dtype=np.int64)
    found = _longest_repeat(names)
    if found is None:
        return []
    start, period, repeats = found
    blocks = [[kernels[start + r * period:start + (r + 1) * period] for r in range(repeats)]]
    masked = names.copy()
    for _ in range(_MAX_BLOCKS - 1):
        masked[start:start + period * repeats] = -1 - start - np.arange(period * repeats)  # equal to nothing
        other = _longest_repeat(masked, repeats=repeats)  # not, say, a per-tensor loop with other counts
        if other is None:
            break
        start, period, _ = other
        blocks.append([kernels[start + r * period:start + (r + 1) * period] for r in range(repeats)])
    return blocks


def _span(graph: Graph, kernels: list[int]) -> set[int]:
    """The CPU calls launching ``kernels`` (and everything between them on their threads) and the GPU
    operations those calls launched."""
    nodes = graph.nodes
    launchers = [nodes[i].launch if nodes[i].kind == "gpu" else i for i in kernels]  # CPU work is its own
    span: set[int] = set()
    for lane in {nodes[i].lane for i in launchers}:  # type: ignore[index]
        times = [nodes[i].start for i in launchers if nodes[i].lane == lane]  # type: ignore[index]
        lo, hi = min(times), max(times)
        span.update(i for i in graph.lanes[lane] if nodes[i].kind == "cpu" and lo <= nodes[i].start <= hi)
    span.update(i for i, n in enumerate(nodes) if n.kind == "gpu" and n.launch in span)
    return span


def change_layers(graph: Graph, delta: int) -> Graph:
    """``delta`` more (or, negative, fewer) copies of each iteration's repeated layer block(s)."""
    out = _copy(graph)
    for step_index in range(len(graph.steps)):
        blocks = layer_blocks(graph, step_index)
        if blocks:
            _scale_per_parameter(out, step_index, (len(blocks[0]) + delta) / len(blocks[0]))
            scale_gradient_bucket(out, step_index, (len(blocks[0]) + delta) / len(blocks[0]))
        for repeats in blocks:
            if -delta >= len(repeats):
                raise SpecError("what-if layers", delta, f"more than -{len(repeats)} (the trace has "
                                                         f"{len(repeats)} repeated layers)")
            if delta > 0:  # copies of the repeat of median time: one disturbed repeat is not copied N times
                typical = sorted(repeats, key=lambda r: sum(graph.nodes[i].dur for i in r))[(len(repeats) - 1) // 2]
                _repeat(out, _span(graph, typical), delta)
            for kernels in repeats[:max(0, -delta)]:
                _remove(out, _span(graph, kernels))
    return out


# Work whose time is proportional to the parameter count: the optimizer step and zero_grad annotations of
# torch.optim (CPU traces), and the multi-tensor-apply / fused optimizer kernels (GPU traces).
_PER_PARAMETER: Final = re.compile(r"^Optimizer\.(step|zero_grad)#|multi_tensor_apply|fused_adam", re.IGNORECASE)


def _scale_per_parameter(graph: Graph, step_index: int, factor: float) -> None:
    """Per-parameter work of one iteration x ``factor``: the layers hold (nearly) all parameters.

    Of a CPU trace's ``Optimizer.step`` only its loop over the tensors (first to last nested operator,
    one ``aten::add_`` per parameter for SGD) scales; the time before and after it is the step's own
    (hooks, ``_init_group``, the profiler's record_function): in the kept miniature recordings it grew
    1.1-1.3x where the loop grew 2.1-2.5x for twice the parameters, at the same operator speed.
    An annotation with nothing nested (``zero_grad(set_to_none=True)`` only loops in Python) scales whole.
    """
    step, nodes = graph.steps[step_index], graph.nodes
    lo, hi = nodes[step.begin].start, nodes[step.end].start
    for node in nodes:
        if node.rank == step.rank and node.kind != "marker" and lo <= node.start < hi \
                and _PER_PARAMETER.search(node.name):
            loop = node.nested if 0.0 < node.nested <= node.dur else node.dur
            node.dur += loop * (factor - 1.0)
            node.nested = loop * factor if node.nested else 0.0


def _repeat(graph: Graph, span: set[int], copies: int) -> None:
    nodes = graph.nodes
    for _ in range(copies):
        mapping: dict[int, int] = {}
        for index in sorted(span):
            mapping[index] = len(nodes)
            nodes.append(replace(nodes[index], waits=list(nodes[index].waits)))
        for new in mapping.values():
            node = nodes[new]
            if node.launch is not None:
                node.launch = mapping.get(node.launch, node.launch)
            node.waits = [mapping.get(w, w) for w in node.waits]
        for members in graph.lanes.values():
            inside = [p for p, i in enumerate(members) if i in span]
            if inside:
                at = inside[-1] + 1
                members[at:at] = [mapping[members[p]] for p in inside]
        # Who waited for the block (a sync, another stream) now waits for its last copy.
        for index, node in enumerate(nodes[:min(mapping.values())]):
            if index not in span and any(w in span for w in node.waits):
                node.waits = [mapping.get(w, w) for w in node.waits]
        span = set(mapping.values())


def _remove(graph: Graph, span: set[int]) -> None:
    """Zero the time of ``span`` (its nodes stay as placeholders, so no index moves)."""
    for index in span:
        node = graph.nodes[index]
        node.dur, node.gap, node.tail, node.nested = 0.0, 0.0, 0.0, 0.0
        node.latency = 0.0 if node.kind == "gpu" else node.latency
        node.waits = [] if node.kind != "gpu" else node.waits


def parse_what_if(text: str) -> list[tuple[str, str]]:
    """``'gemm=0.5,network=2,layers=+8,dp=2x,sync=none'`` -> ordered ``(key, value)`` pairs, checked."""
    allowed = ", ".join(FAMILIES) + ", network, layers, dp, cores, corun, sync, gpu"
    pairs = []
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not value:
            raise SpecError("what-if", item, f"KEY=VALUE items, KEY one of {allowed}")
        if key not in FAMILIES and key not in ("network", "layers", "dp", "cores", "corun", "sync", "gpu"):
            raise SpecError("what-if", key, f"one of {allowed}")
        pairs.append((key, value))
    for key, value in pairs:
        _value(key, value)
    return pairs


def _value(key: str, value: str) -> float | int | str:
    if key == "gpu":
        from costmodel.specs.catalog import get_gpu

        try:
            return get_gpu(value).name
        except SpecError as exc:
            raise SpecError("what-if gpu", value, exc.allowed) from None
    if key == "sync":
        if value not in ("none", "stream", "host"):
            raise SpecError("what-if sync", value, "none (drop all), stream or host")
        return value
    if key == "cores":
        if not re.fullmatch(r"\d{1,5}", value) or not 1 <= int(value) <= 65536:
            raise SpecError("what-if cores", value, "the host's core count, an integer 1..65536")
        return int(value)
    if key == "corun":
        try:
            ratio = float(value)
        except ValueError:
            ratio = float("nan")
        if not (np.isfinite(ratio) and 0.1 <= ratio <= 10.0):
            raise SpecError("what-if corun", value, "the host's measured slowdown with all cores busy, 0.1..10")
        return ratio
    if key == "layers":
        if not re.fullmatch(r"[+-]\d{1,4}", value) or int(value) == 0:
            raise SpecError("what-if layers", value, "a signed non-zero count such as +8 or -2")
        return int(value)
    number = value[:-1] if key == "dp" and value.endswith("x") else value
    try:
        factor = float(number)
    except ValueError:
        factor = float("nan")
    if not (np.isfinite(factor) and 0 < factor <= 1e6):
        hint = " (a factor, e.g. 2x)" if key == "dp" else ""
        raise SpecError(f"what-if {key}", value, "a number > 0 and <= 1e6" + hint)
    return factor


def apply_what_if(graph: Graph, pairs: list[tuple[str, str]], traces: list[RawTrace] | None = None,
                  profile_dir: str | None = None) -> Graph:
    """Apply parsed ``pairs`` in order. ``dp=2x`` doubles the data-parallel degree; ``network=2`` doubles link
    bandwidth; ``gemm=0.5`` halves GEMM time; ``layers=+8`` adds 8 layers; ``sync=none`` drops waits;
    ``gpu=h100-sxm5-80gb`` times the recognised operators of ``traces`` as parplan does on that GPU (with
    ``profile_dir``'s profile if given); ``cores=2``: the host's cores that a CPU trace's ranks share
    (recording and target alike), which the ``dp`` edit of a CPU-only trace needs for time slicing;
    ``corun=1.15``: that host's measured slowdown of a rank's work with all its cores busy (the ``dp``
    edit of a CPU-only trace applies it as the busy cores change; unmeasured, none)."""
    cores = next((int(_value(k, v)) for k, v in pairs if k == "cores"), None)
    corun = next((float(_value(k, v)) for k, v in pairs if k == "corun"), None)
    for key, raw in pairs:
        value = _value(key, raw)
        if key == "gpu":
            from costmodel.predict import timer_for
            from costmodel.replay.retime import retime_for_gpu
            from costmodel.specs.catalog import get_gpu

            if not traces:
                raise SpecError("what-if gpu", raw, "an edit of a graph built from traces (pass them)")
            graph = retime_for_gpu(graph, traces, timer_for(get_gpu(str(value)), profile_dir))
        elif key in FAMILIES:
            graph = scale_family(graph, key, float(value))
        elif key == "network":
            graph = scale_network(graph, float(value))
        elif key == "dp":
            graph = change_group_size(graph, float(value), cores=cores, corun=corun)
        elif key == "layers":
            graph = change_layers(graph, int(value))
        elif key in ("cores", "corun"):
            continue  # facts of the host, read above
        else:
            graph = remove_syncs(graph, "all" if value == "none" else str(value))
    return graph
