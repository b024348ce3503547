"""What-if physics of CPU-only traces, whose "device" is a CPU core (the measured miniatures).

- :class:`HostProfile`: the recording host's cores and its measured co-running slowdown (``host.json``);
- :func:`time_slicing`: ranks on a host with fewer cores than ranks share them, so every operator of a
  rank (and the interpreter's time between them) stretches by the ranks per core;
- :func:`corun_slowdown`: a rank's work with ``b`` cores busy vs one alone (shared memory bandwidth,
  last-level cache, SMT siblings), from the host's measured all-cores-busy figure;
- :func:`change_cpu_ranks`: the data-parallel degree of a CPU trace: its gloo collectives re-timed for
  the new rank count and its work for the new ranks per core;
- :func:`scale_gradient_bucket`: the layer edit's share of the gradient all-reduce: the collective and
  the operators on its flat bucket (one operand as large as the collective's) scale with the parameters.

The host's core count and co-running slowdown are part of the target hardware (``cores=N`` and
``corun=F`` in ``--what-if``; the benchmark measures both and keeps them in ``host.json``); it is the
same host for the recording and the target.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from costmodel.comm.formulas import bus_factor
from costmodel.replay.graph import Graph
from costmodel.specs.errors import SpecError

__all__ = ["HostProfile", "change_cpu_ranks", "corun_slowdown", "read_json_note", "scale_gradient_bucket",
           "time_slicing"]

MAX_HOST_JSON_BYTES = 64 * 1024  # host.json holds a few numbers


def read_json_note(path: Path, field: str, max_bytes: int) -> object:
    """The JSON value of a small note file beside a recording; SpecError naming ``field`` if it is none."""
    if path.stat().st_size > max_bytes:
        raise SpecError(field, str(path), f"a file of at most {max_bytes} bytes")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpecError(field, str(path), f"JSON ({exc.__class__.__name__})") from None


@dataclass(frozen=True, kw_only=True)
class HostProfile:
    """The host a CPU trace was recorded on, as the what-if of its ranks needs it (``host.json``)."""

    cores: int
    """Cores the ranks shared (``os.sched_getaffinity`` of the recording)."""
    corun_slowdown: float | None = None
    """A rank's step with all ``cores`` busy / the same step on one core alone, measured on the host at
    record time with the miniature's own operators; None: not measured (the what-if then applies none)."""
    corun_source: str = ""
    """How and when ``corun_slowdown`` was measured (the steps timed, the load average then)."""

    def __post_init__(self) -> None:
        if not isinstance(self.cores, int) or isinstance(self.cores, bool) or not 1 <= self.cores <= 65536:
            raise SpecError("host.json cores", self.cores, "the host's core count, an integer 1..65536")
        ratio = self.corun_slowdown
        if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, (int, float))
                                  or not math.isfinite(ratio) or not 0.1 <= ratio <= 10.0):
            raise SpecError("host.json corun_slowdown", ratio, "a measured ratio between 0.1 and 10, or null")

    @classmethod
    def read(cls, path: Path) -> HostProfile:
        """The profile in ``path`` (a ``host.json`` written by :meth:`write`); SpecError if it is not one."""
        data = read_json_note(path, "host.json", MAX_HOST_JSON_BYTES)
        if not isinstance(data, dict) or "cores" not in data:
            raise SpecError("host.json", str(path), 'an object with "cores"')
        unknown = set(data) - {"cores", "corun_slowdown", "corun_source"}
        if unknown:
            raise SpecError("host.json key", sorted(unknown)[0], "cores, corun_slowdown, corun_source")
        return cls(cores=data["cores"], corun_slowdown=data.get("corun_slowdown"),
                   corun_source=str(data.get("corun_source", "")))

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1) + "\n", encoding="utf-8")

    def what_if(self) -> str:
        """The ``--what-if`` items that carry this host (``cores=N[,corun=F]``)."""
        return f"cores={self.cores}" + (f",corun={self.corun_slowdown:.4f}" if self.corun_slowdown else "")


def time_slicing(ranks: int, cores: int | None) -> float:
    """How many ranks share one core (1 when each has its own, or the host's cores are not given)."""
    return max(1.0, ranks / cores) if cores else 1.0


def corun_slowdown(ranks: int, cores: int | None, corun: float | None) -> float:
    """A rank's work with ``min(ranks, cores)`` cores busy relative to one core alone (1 unmeasured).

    ``corun`` is the host's measured slowdown with all ``cores`` busy; between one and all busy cores
    it is interpolated linearly in the busy count (on a 2-core host there is nothing in between).
    """
    if not cores or corun is None or cores == 1:
        return 1.0
    busy = min(max(ranks, 1), cores)
    return 1.0 + (corun - 1.0) * (busy - 1) / (cores - 1)


def _collective_op(name: str) -> str | None:
    from costmodel.replay.edit import collective_op  # edit.py calls this module

    return collective_op(name)


def change_cpu_ranks(graph: Graph, factor: float, cores: int | None, corun: float | None = None) -> Graph:
    """``graph`` (CPU-only, edited in place and returned) on ``factor`` times as many ranks, ``cores`` shared.

    A collective's transfer scales with the bus factor of its op: ProcessGroupGloo's CPU all-reduce is
    ``gloo::allreduce``, a segmented ring (reduce-scatter, then all-gather; gloo/allreduce.cc @1d9e62af),
    which sends ``2(n-1)/n`` of the bytes per rank like NCCL's ring: none on one rank. The program
    around it stays: a DDP job on one rank still builds its reducer and runs the bucket copies and a
    1-rank all-reduce (torch/nn/parallel/distributed.py has no world-size-1 path), and so does the
    miniature. With fewer ranks than the graph holds, ranks ``new`` and up leave the matched
    collectives: a rank waits only for the slowest of the ranks the job keeps (on one, for none). The
    ranks' work then shares the cores anew: every operator and gap of a rank (the interpreter's time to
    a step's end marker too) x slicing(new) / slicing(old) x corun(new) / corun(old), ``corun`` the
    host's measured slowdown with all cores busy (:func:`corun_slowdown`).
    """
    old = max(graph.world_size, 1)
    new = max(1, round(old * factor))
    slicing = time_slicing(new, cores) / time_slicing(old, cores)
    sharing = corun_slowdown(new, cores, corun) / corun_slowdown(old, cores, corun)
    stretch = slicing * sharing
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
        node.nested *= stretch
        node.gap *= stretch
        node.tail *= stretch
        node.latency = None if node.latency is None else node.latency * stretch
    graph.world_size = new
    shared = (f"x{sharing:.3f} (busy cores, measured co-running slowdown {corun:g})" if corun is not None
              else "co-running slowdown not measured on the host: none applied")
    graph.notes.append(f"{old} -> {new} CPU ranks on {cores or 'unstated'} cores: work x{slicing:.2f} (ranks per "
                       f"core), {shared}; gloo ring collectives by their bus factor")
    return graph


# Operators that only make a view of their operand: their time does not grow with its size.
_VIEWS = frozenset({"aten::slice", "aten::view", "aten::view_as", "aten::as_strided", "aten::narrow",
                    "aten::select", "aten::reshape", "aten::alias"})


def scale_gradient_bucket(graph: Graph, step_index: int, factor: float) -> None:
    """The step's collectives and the operators on their flat gradient bucket x ``factor`` (bytes ~ parameters);
    views of the bucket (the copy-back's slices) and the call that queued the collective cost the same at
    any size."""
    step, nodes = graph.steps[step_index], graph.nodes
    lo, hi = nodes[step.begin].start, nodes[step.end].start
    inside = [n for n in nodes if n.rank == step.rank and n.kind == "cpu" and lo <= n.start < hi]
    buckets = {n.elements for n in inside if n.collective is not None and n.elements > 0}
    for node in inside:
        if node.family == "runtime":
            continue  # the c10d:: call that only queued the collective: its time is not the bucket's
        if node.collective is not None or (node.elements in buckets and node.name not in _VIEWS):
            if node.waits:  # it waited for the collective: its own time grows, the wake-up before it does not
                node.tail += node.dur * (factor - 1.0)
            node.dur *= factor

