"""What-if accuracy on measured CPU miniatures: predict one configuration's step from another's trace.

Records torch-profiler traces of a small transformer training step on this machine's CPU
(``benchmarks/_replay_miniature.py``): 2 and 4 layers, 1, 2 and 4 gloo ranks (data parallel,
same sequences per rank), two batch sizes. From each configuration's traces (all its ranks: the
collectives matched, so a rank's wait for its peer is apart from the transfer) it predicts every
other configuration of the same batch size with ``layers=+N|-N`` and ``dp=Kx,cores=C,corun=F`` and
compares with that configuration's measured rank-0 steps. ``C`` (the cores the ranks share) and ``F``
(a rank's step with all cores busy / alone, ``_replay_miniature.measure_corun``) are the recording
host's, measured when recording and kept in ``host.json`` (``costmodel.replay.host.HostProfile``);
for traces without one, ``C`` is ``os.sched_getaffinity`` and ``F`` is not applied unless
``--measure-host`` measures it now (only meaningful on the recording host, and on a quiet one).

Recordings from before one rank ran the bucket path (no collective in its trace) are a different
program from the edit's one-rank target; such pairs are flagged ``program differs`` and the MAPE is
printed with and without them.

Three estimates, predicted and measured alike: ``wall``, the fastest profiled step; ``median``, the
median step; ``fastest-ops``, every operator and gap at its fastest instance across the steps
(``costmodel.replay.edit.fastest_steps``). Interference only adds time, so the fastest step is the
closest to a configuration's own time; fastest-ops goes further but is no possible step where ranks
outnumber cores (each rank's fastest operators ran while its core's other rank was idle). A 1-rank
trace has no transfer to re-time into more ranks (its 1-rank all-reduce moves nothing): those pairs
are skipped. Target: <= 10 % on
layer-count and DP-degree edits.

    python benchmarks/replay_miniatures.py [--out DIR | --from DIR [--measure-host]] [--cores C] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402
from _replay_miniature import Config, record_config  # noqa: E402

from costmodel.replay.edit import apply_what_if, fastest_steps, parse_what_if  # noqa: E402
from costmodel.replay.graph import Graph, build_graph  # noqa: E402
from costmodel.replay.host import HostProfile  # noqa: E402
from costmodel.replay.parse import read_trace  # noqa: E402
from costmodel.replay.simulate import simulate  # noqa: E402

LAYERS, WORLDS, BATCHES = (2, 4), (1, 2, 4), (2, 8)
ESTIMATORS = ("wall", "median", "fastest_ops")


def edits_between(source: Config, target: Config) -> str | None:
    """The what-if that turns ``source`` into ``target`` (None: not predictable from ``source``'s trace)."""
    parts = []
    if target.layers != source.layers:
        parts.append(f"layers={target.layers - source.layers:+d}")
    if target.world != source.world:
        if source.world == 1:
            return None
        parts.append(f"dp={target.world / source.world:g}x")
    return ",".join(parts)


def kind_of(source: Config, target: Config) -> str:
    return "+".join(k for k, changed in (("layers", source.layers != target.layers),
                                         ("dp", source.world != target.world)) if changed)


def _rank0(replay_iterations: list, measured: bool = False) -> list[float]:  # type: ignore[type-arg]
    return [it.measured_s if measured else it.replayed_s for it in replay_iterations if it.rank == 0]


def estimates(graph: Graph, fastest: Graph) -> dict[str, float]:
    """Rank 0's step by each estimator: fastest and median replayed step, and the fastest-ops composite."""
    steps = _rank0(simulate(graph).iterations)
    return {"wall": min(steps), "median": float(np.median(steps)),
            "fastest_ops": min(_rank0(simulate(fastest).iterations))}


def pairs(traces: dict[Config, list[Path]], host: HostProfile) -> tuple[list[dict[str, object]], list[str]]:
    """Every ordered pair of configurations of one batch size: predicted and measured step time.

    The source graph holds all its ranks' traces (collectives matched: the wait for a peer is apart
    from the transfer); the target's measured step is rank 0's, by the same estimator. A row's
    ``program_differs`` says one of the two ran no collective (a one-rank recording of the old program).
    """
    graphs = {c: build_graph([read_trace(p) for p in paths]) for c, paths in traces.items()}
    reduces = {c: any(n.family == "collective" for n in g.nodes) for c, g in graphs.items()}
    fastest = {c: fastest_steps(g) for c, g in graphs.items()}
    measured = {}
    for c, g in graphs.items():
        steps = _rank0(simulate(g).iterations, measured=True)
        measured[c] = {"wall": min(steps), "median": float(np.median(steps)),
                       "fastest_ops": min(_rank0(simulate(fastest[c]).iterations))}
    rows, skipped = [], []
    for source, target in itertools.permutations(traces, 2):
        if source.batch != target.batch:
            continue
        edit = edits_between(source, target)
        if edit is None:
            skipped.append(f"{source.name} -> {target.name}")
            continue
        what_if = parse_what_if(f"{edit},{host.what_if()}")
        got = estimates(apply_what_if(graphs[source], what_if), apply_what_if(fastest[source], what_if))
        row: dict[str, object] = {"source": source.name, "target": target.name, "edit": edit,
                                  "kind": kind_of(source, target),
                                  "program_differs": reduces[source] != reduces[target]}
        for name in ESTIMATORS:
            row[f"{name}_predicted_s"], row[f"{name}_measured_s"] = got[name], measured[target][name]
            row[f"{name}_error"] = got[name] / measured[target][name] - 1.0
        rows.append(row)
    return rows, skipped


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="keep the traces here (default: a temporary folder)")
    parser.add_argument("--from", dest="source", default=None, metavar="DIR",
                        help="analyse the traces an earlier run kept in DIR (--out) instead of recording")
    parser.add_argument("--cores", type=int, default=None,
                        help="cores the ranks shared when recorded (default: the recording's host.json, else "
                             "this process's os.sched_getaffinity)")
    parser.add_argument("--measure-host", action="store_true",
                        help="with --from: measure this host's co-running slowdown now and apply it (the traces "
                             "must come from this host; kept nowhere)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = Path(args.source or args.out or tempfile.mkdtemp(prefix="parplan-miniatures-"))
    began, traces = time.perf_counter(), {}
    for port, (layers, world, batch) in enumerate(itertools.product(LAYERS, WORLDS, BATCHES), start=29611):
        config = Config(layers, world, batch)
        if args.source is None:
            record_config(config, out / config.name, port)
            print(f"recorded {config.name} ({time.perf_counter() - began:.0f} s)", file=sys.stderr)
        traces[config] = [out / config.name / f"rank{r}.json" for r in range(world)]
    host = _host_profile(out / "host.json", args)
    rows, skipped = pairs(traces, host)
    mape = _mape(rows)
    same_program = _mape([r for r in rows if not r["program_differs"]])
    if args.json:
        print(json.dumps({"pairs": rows, "skipped": skipped, "mape": mape, "mape_same_program": same_program,
                          "host": {"cores": host.cores, "corun_slowdown": host.corun_slowdown,
                                   "corun_source": host.corun_source}, "traces": str(out)}, indent=1))
        return 0
    print(f"{'':48} " + " ".join(f"{name.replace('_', ' '):^31}" for name in ESTIMATORS))
    print(f"{'source':14} {'target':14} {'edit':18} " + " ".join(
        f"{'predicted':>10} {'measured':>10} {'error':>9}" for _ in ESTIMATORS))
    for r in rows:
        print(f"{r['source']:14} {r['target']:14} {r['edit']:18} " + " ".join(
            f"{1e3 * float(r[f'{n}_predicted_s']):10.2f} {1e3 * float(r[f'{n}_measured_s']):10.2f} "
            f"{100 * float(r[f'{n}_error']):8.1f}%" for n in ESTIMATORS)
              + ("  program differs" if r["program_differs"] else ""))
    corun = (f"co-running slowdown {host.corun_slowdown:.4f} ({host.corun_source})" if host.corun_slowdown
             else "co-running slowdown not measured for these traces: none applied"
             + (f" ({host.corun_source})" if host.corun_source else ""))
    print(f"\nskipped (a 1-rank trace has no transfer to re-time): {len(skipped)} pairs; {host.cores} cores; {corun}")
    for label, table, chosen in (("", mape, rows), (" (same program)", same_program,
                                                    [r for r in rows if not r["program_differs"]])):
        if label and len(chosen) == len(rows):
            continue
        for name in ESTIMATORS:
            print(f"MAPE {name}{label}: " + ", ".join(
                f"{k} edits {100 * v:.1f}% ({sum(r['kind'] == k for r in chosen)} pairs)"
                for k, v in table[name].items()) + " (target <= 10% on layer and DP edits)")
    print(f"traces in {out}")
    return 0


def _mape(rows: list[dict[str, object]]) -> dict[str, dict[str, float]]:
    kinds = ("layers", "dp", "layers+dp")
    return {name: {k: float(np.mean([abs(float(r[f"{name}_error"])) for r in rows if r["kind"] == k]))
                   for k in kinds if any(r["kind"] == k for r in rows)} for name in ESTIMATORS}


def _host_profile(path: Path, args: argparse.Namespace) -> HostProfile:
    """The recording host: measured and written beside new traces; read from ``host.json`` of kept ones."""
    cores = args.cores or len(os.sched_getaffinity(0))
    if args.source is None or args.measure_host:
        from _replay_miniature import measure_corun

        ratio, source = measure_corun(cores)
        host = HostProfile(cores=cores, corun_slowdown=ratio, corun_source=source)
        if args.source is None:
            host.write(path)
        shown = "not kept" if ratio is None else f"{ratio:.4f}"
        print(f"host: {cores} cores, co-running slowdown {shown} ({source})", file=sys.stderr)
        return host
    if path.is_file():
        kept = HostProfile.read(path)
        return HostProfile(cores=args.cores or kept.cores, corun_slowdown=kept.corun_slowdown,
                           corun_source=kept.corun_source)
    return HostProfile(cores=cores)


if __name__ == "__main__":
    from costmodel.specs.errors import SpecError

    try:
        raise SystemExit(main())
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
