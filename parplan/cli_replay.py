"""``parplan replay``: replay a profiler trace's iterations, and what-if edits of it (costmodel/replay)."""

from __future__ import annotations

import argparse
from pathlib import Path
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
                    "critical path. --what-if edits the graph first. `parplan replay fit TRACE... --gpu GPU "
                    "--out DIR` instead fits per-family correction factors of parplan's operator times to the "
                    "trace's kernels and writes them as a profile that predict, search and study take with "
                    "--profile DIR.")
    rep.add_argument("traces", nargs="+", metavar="TRACE", help="one trace per rank (after `fit`: traces to fit)")
    rep.add_argument("--what-if", default=None, metavar="EDITS",
                     help="comma-separated edits: gemm|attention|conv|elementwise|collective|memcpy|memset=FACTOR "
                          "(time x FACTOR), network=FACTOR (bandwidth x FACTOR), dp=FACTORx, layers=+N|-N, "
                          "sync=none|stream|host, gpu=CATALOG_GPU (recognised operators' kernels at parplan's "
                          "times for that GPU), cores=N (CPU traces: the target host's cores, ranks beyond them "
                          "time-sliced), corun=F (CPU traces: slowdown with every core busy, as host.json measures)")
    rep.add_argument("--plot", default=None, metavar="PNG", help="write a timeline and breakdown PNG here")
    rep.add_argument("--gpu", default=None, help="fit: the catalog GPU whose parplan times are compared")
    rep.add_argument("--profile", default=None, metavar="DIR",
                     help="fit: compare with this profile's times (default the GPU's built-in profile); "
                          "with --what-if gpu=...: time operators with it")
    rep.add_argument("--out", default=None, metavar="DIR", help="fit: the factor profile directory to write")
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

    if args.traces[0] == "fit":  # `parplan replay fit TRACE...` (a trace named fit: ./fit)
        return cmd_fit(args)
    for flag in ("gpu", "out"):
        if getattr(args, flag) is not None:
            raise SpecError(f"--{flag}", getattr(args, flag), "only with `parplan replay fit`")
    edits = parse_what_if(args.what_if) if args.what_if is not None else None  # before any file is read
    if args.profile is not None and not any(key == "gpu" for key, _ in edits or ()):
        raise SpecError("--profile", args.profile, "used with `parplan replay fit` or a --what-if gpu=... edit")
    traces = [read_trace(path) for path in args.traces]
    ranks = [t.rank for t in traces]
    if len(set(ranks)) != len(ranks):
        raise SpecError("traces", ", ".join(args.traces), "one trace per rank (two have the same rank)")
    graph = build_graph(traces)
    if not graph.steps:
        raise SpecError("traces", ", ".join(args.traces), "traces with ProfilerStep#N spans "
                        "(torch.profiler with a schedule and prof.step())")
    baseline = simulate(graph)
    edited = apply_what_if(graph, edits, traces, args.profile) if edits else graph
    result = simulate(edited) if edits else baseline
    rows = [_iteration(it, base if edits else None) for it, base in zip(result.iterations, baseline.iterations)]
    out = {"iterations": rows, "unplaced": dict(graph.unplaced), "unplaced_gpu_fraction": graph.unplaced_gpu_fraction(),
           "weakly_placed": dict(graph.weakly_placed), "what_if": args.what_if, "notes": edited.notes}
    if args.plot is not None:
        from costmodel.replay.plot import plot_replay

        out["plot"] = str(plot_replay(edited, result, args.plot, title=", ".join(args.traces)[:100]))
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
    for note in edited.notes:
        print(f"what-if: {note}")
    if args.plot is not None:
        print(f"wrote {out['plot']}")
    if graph.weakly_placed:
        print(f"placed by stream order only (launch call not in the trace): {sum(graph.weakly_placed.values())} "
              f"GPU ops")
    return EXIT_OK


def cmd_fit(args: argparse.Namespace) -> int:
    """``parplan replay fit``: factors of parplan's times against the traces' kernels, written to --out."""
    from costmodel.predict import timer_for
    from costmodel.replay.fit import fit_factors, save_fit
    from costmodel.replay.operators import trace_operators
    from costmodel.replay.parse import read_trace
    from costmodel.specs.catalog import get_gpu

    paths = args.traces[1:]
    if not paths:
        raise SpecError("replay fit", "", "one or more traces: parplan replay fit TRACE... --gpu GPU --out DIR")
    if args.gpu is None or args.out is None:
        raise SpecError("--gpu" if args.gpu is None else "--out", None, "a catalog GPU and an output directory "
                        "(parplan replay fit TRACE... --gpu GPU --out DIR)")
    if args.what_if is not None or args.plot is not None:
        raise SpecError("--what-if" if args.what_if is not None else "--plot", args.what_if or args.plot,
                        "not with `parplan replay fit`")
    gpu = get_gpu(args.gpu)
    timer = timer_for(gpu, args.profile)
    if hasattr(timer, "factors"):
        raise SpecError("--profile", args.profile, "a profile of measured tables, not a factor profile")
    traces = [trace_operators(read_trace(path)) for path in paths]
    fit = fit_factors(traces, [str(p) for p in paths], timer,
                      None if args.profile is None else str(Path(args.profile).resolve()))
    directory = save_fit(fit, args.out)
    out = {**fit.to_dict(), "out": str(directory)}
    if args.json:
        print(dumps(out))
        return EXIT_OK
    print(f"parplan {gpu.name} ({timer.profile_name or 'roofline'}) vs {len(paths)} trace(s): measured / predicted")
    print(f"{'family':12} {'factor':>7} {'p10':>6} {'median':>6} {'p90':>6} {'ops':>6} {'shapes':>6} "
          f"{'measured ms':>11} {'per trace':>10}")
    for name, f in fit.families.items():
        spread = f"{min(f.per_trace):.3f}-{max(f.per_trace):.3f}" if len(f.per_trace) > 1 else ""
        print(f"{name:12} {f.factor:7.3f} {f.p10:6.3f} {f.median:6.3f} {f.p90:6.3f} {f.operators:6d} {f.shapes:6d} "
              f"{1e3 * f.measured_s:11.3f} {spread:>10}")
    skipped = sum(fit.unsupported.values()) + sum(fit.unknown.values())
    if skipped:
        print(f"not used: {sum(fit.unsupported.values())} unsupported operators, {sum(fit.unknown.values())} "
              f"kernels under no recognised operator (--json lists them)")
    print(f"wrote {directory / 'metadata.yaml'}: use it with --profile {directory}")
    return EXIT_OK
