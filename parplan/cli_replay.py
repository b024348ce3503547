"""``parplan replay``: replay a profiler trace's iterations, and what-if edits of it (costmodel/replay)."""

from __future__ import annotations

import argparse
from typing import Any

from costmodel.specs.errors import SpecError
from parplan._json import dumps

EXIT_OK = 0


def register(subparsers: Any) -> None:
    """Add the ``replay`` subcommand."""
    rep = subparsers.add_parser(
        "replay", help="replay a PyTorch profiler trace; what-if edits of it",
        description="Build the execution graph of one or several ranks' Kineto traces (.json / .json.gz), "
                    "replay every ProfilerStep and print measured vs replayed time, the breakdown and the "
                    "critical path. --what-if edits the graph first.")
    rep.add_argument("traces", nargs="+", metavar="TRACE", help="one trace per rank")
    rep.add_argument("--what-if", default=None, metavar="EDITS",
                     help="comma-separated edits: gemm|attention|conv|elementwise|collective|memcpy|memset=FACTOR "
                          "(time x FACTOR), network=FACTOR (bandwidth x FACTOR), dp=FACTORx, layers=+N|-N, "
                          "sync=none|stream|host")
    rep.add_argument("--json", action="store_true", help="print only JSON")
    rep.set_defaults(func=cmd_replay)


def _iteration(it: Any, baseline: Any | None) -> dict[str, Any]:
    row = {"name": it.name, "rank": it.rank, "measured_s": it.measured_s, "replayed_s": it.replayed_s,
           "error": it.error, "breakdown_s": it.breakdown_s, "critical_path_s": it.critical_path_s}
    if baseline is not None:
        row["baseline_replayed_s"] = baseline.replayed_s
    return row


def cmd_replay(args: argparse.Namespace) -> int:
    """Read, build, (edit,) replay, print."""
    from costmodel.replay.edit import apply_what_if, parse_what_if
    from costmodel.replay.graph import build_graph
    from costmodel.replay.parse import read_trace
    from costmodel.replay.simulate import simulate

    edits = parse_what_if(args.what_if) if args.what_if is not None else None  # before any file is read
    traces = [read_trace(path) for path in args.traces]
    ranks = [t.rank for t in traces]
    if len(set(ranks)) != len(ranks):
        raise SpecError("traces", ", ".join(args.traces), "one trace per rank (two have the same rank)")
    graph = build_graph(traces)
    if not graph.steps:
        raise SpecError("traces", ", ".join(args.traces), "traces with ProfilerStep#N spans "
                        "(torch.profiler with a schedule and prof.step())")
    baseline = simulate(graph)
    result = simulate(apply_what_if(graph, edits)) if edits else baseline
    rows = [_iteration(it, base if edits else None) for it, base in zip(result.iterations, baseline.iterations)]
    out = {"iterations": rows, "unplaced": dict(graph.unplaced), "unplaced_gpu_fraction": graph.unplaced_gpu_fraction(),
           "weakly_placed": dict(graph.weakly_placed), "what_if": args.what_if}
    if args.json:
        print(dumps(out))
        return EXIT_OK
    head = f"{'iteration':20} {'rank':>4} {'measured ms':>11} {'replayed ms':>11}"
    print(head + (f" {'baseline ms':>11}" if edits else f" {'error':>7}") +
          f" {'compute':>8} {'exp.comm':>8} {'cpu idle':>8} {'sync':>8}")
    for row in rows:
        b = row["breakdown_s"]
        extra = f" {1e3 * row['baseline_replayed_s']:11.2f}" if edits else f" {100 * row['error']:6.2f}%"
        print(f"{row['name']:20} {row['rank']:4} {1e3 * row['measured_s']:11.2f} {1e3 * row['replayed_s']:11.2f}"
              f"{extra} {1e3 * b['compute']:8.2f} {1e3 * b['exposed_communication']:8.2f} "
              f"{1e3 * b['cpu_bound_idle']:8.2f} {1e3 * b['synchronisation']:8.2f}")
    last = rows[-1]["critical_path_s"]
    print("critical path of the last iteration: " + ", ".join(f"{k} {1e3 * v:.2f} ms" for k, v in last.items()))
    unplaced = sum(graph.unplaced.values())
    print(f"unplaced: {unplaced} events" + (" (" + "; ".join(f"{k}: {v}" for k, v in
                                                           graph.unplaced.most_common(4)) + ")" if unplaced else ""))
    if graph.weakly_placed:
        print(f"placed by stream order only (launch call not in the trace): {sum(graph.weakly_placed.values())} "
              f"GPU ops")
    return EXIT_OK
