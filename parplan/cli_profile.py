"""``parplan profile run | fit | import-trace``: each parses, calls one library function, prints, returns a code."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from costmodel.specs.errors import SpecError
from parplan._argtypes import positive_int, positive_number, seed
from parplan._json import dumps

__all__ = ["register"]

EXIT_OK, EXIT_FAILED = 0, 1
_SEARCH_KEYS = ("model", "gpu", "num_gpus", "global_batch_size", "seq_length", "gpus_per_node", "max_runs")
_DEFAULT_OPS = "gemm,attention,norm,elementwise,optimizer,comm"


def register(subparsers: Any) -> None:
    """Add ``profile`` and its sub-commands to the ``parplan`` sub-parsers."""
    profile = subparsers.add_parser(
        "profile", help="measure operator timings on this machine, fit them, or import a trace",
        description="Build a profile directory (tables + metadata.yaml, see costmodel/profiles/README.md) that "
                    "`parplan predict --profile DIR` uses instead of the GPU's built-in profile.")
    sub = profile.add_subparsers(dest="profile_command", required=True, parser_class=type(profile))

    run = sub.add_parser("run", help="time real operators with PyTorch within a budget",
                         description="Time GEMM, attention, norm, element-wise, optimizer and collective operators "
                                     "on this machine: the shapes of --for-run / --for-search first, then a "
                                     "space-filling design, until the budget is spent. An interrupted run keeps what "
                                     "it measured; run it again to resume.")
    run.add_argument("--device", choices=("cuda", "cpu"), required=True)
    run.add_argument("--ops", default=_DEFAULT_OPS, help=f"comma-separated op groups (default: {_DEFAULT_OPS})")
    run.add_argument("--budget-seconds", type=positive_number, default=300.0, help="wall-clock budget (default: 300)")
    run.add_argument("--out", required=True, metavar="DIR", help="profile directory (resumed if it exists)")
    run.add_argument("--for-run", action="append", default=[], metavar="RUN.yaml",
                     help="measure the operator shapes of this run spec first (repeatable)")
    run.add_argument("--for-search", nargs="+", default=None, metavar="KEY=VALUE",
                     help="measure first the shapes a search would query: model=, gpu=, num_gpus=, "
                          "global_batch_size= (required), seq_length=, gpus_per_node=, max_runs=")
    run.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16", help="GEMM dtype of the design")
    run.add_argument("--threads", type=positive_int, default=None,
                     help="CPU threads for torch (default 1: the steadiest timings)")
    run.add_argument("--num-procs", type=positive_int, default=None,
                     help="local ranks for --ops comm (default: 2 on CPU, every GPU on CUDA)")
    run.add_argument("--gpu", default=None, metavar="NAME", help="device name to record (e.g. the catalog GPU)")
    run.add_argument("--seed", type=seed, default=0)
    run.add_argument("--quiet", action="store_true", help="no progress on stderr")
    run.add_argument("--json", action="store_true", help="print only JSON (and no progress)")
    run.set_defaults(func=cmd_run)

    fit = sub.add_parser("fit", help="fit a profile's predictors and print their held-out error",
                         description="Fit every operator family's predictor on three quarters of the profile's "
                                     "rows, print the error on the quarter held out (a fit worse than the roofline "
                                     "is not used), write DIR/fitted/report.yaml and cache the fitted predictors in "
                                     "your private cache for `--profile DIR`.")
    fit.add_argument("profile_dir", metavar="DIR")
    fit.add_argument("--gpu", default=None, metavar="NAME",
                     help="catalog GPU whose figures to use when the profile carries none (imported traces)")
    fit.add_argument("--json", action="store_true", help="print only JSON")
    fit.set_defaults(func=cmd_fit)

    trace = sub.add_parser("import-trace", help="turn a PyTorch profiler trace into profile samples",
                           description="Read a Chrome trace from torch.profiler (record_shapes=True) and write its "
                                       "GEMM, attention, norm/element-wise and collective events as samples; "
                                       "operators it cannot place are counted and reported, not guessed.")
    trace.add_argument("trace", metavar="TRACE.json")
    trace.add_argument("--out", required=True, metavar="DIR")
    trace.add_argument("--device", default=None, metavar="NAME",
                       help="device name to record (default: the trace's GPU, or cpu)")
    trace.add_argument("--json", action="store_true", help="print only JSON")
    trace.set_defaults(func=cmd_import_trace)


def cmd_run(args: argparse.Namespace) -> int:
    from costmodel.profiling.kinds import parse_ops
    from costmodel.specs import load_run_spec

    ops = parse_ops(args.ops)  # bad flags and run specs fail before torch and the sampler are imported
    runs = [load_run_spec(path) for path in args.for_run]
    if args.for_search:
        runs += _search_runs(args.for_search)
    from costmodel.profiling.sampler import SamplerConfig, run_profile

    config = SamplerConfig(out=Path(args.out), device=args.device, ops=ops,
                           budget_s=args.budget_seconds, dtype=args.dtype, runs=tuple(runs), threads=args.threads,
                           num_procs=args.num_procs, device_name=args.gpu, seed=args.seed,
                           progress=None if args.quiet or args.json else sys.stderr)
    try:
        report = run_profile(config)
    except KeyboardInterrupt:
        # run_profile has rebuilt the tables from the journal on its way out
        sys.stderr.write(f"parplan: interrupted; every finished measurement is kept in {args.out}: "
                         f"run the same command again to resume\n")
        return 130
    profile = report.profile
    label = profile.name if profile is not None else args.out
    comm_failed = report.comm is not None and bool(report.comm.error)
    if args.json:
        print(dumps({"profile": str(label), "out": str(args.out), "elapsed_s": report.elapsed_s,
                     "budget_s": args.budget_seconds, "measured": dict(report.measured), "resumed": report.resumed,
                     "skipped": {"too_slow": report.too_slow, "too_large": report.too_large, "cut": report.cut},
                     "targeted": report.targeted, "targeted_measured": report.targeted_measured,
                     "not_targeted": dict(report.not_targeted), "failed": dict(report.failed),
                     "comm_error": report.comm.error if comm_failed else None}))
        return EXIT_FAILED if comm_failed else EXIT_OK
    print(f"profile {label}: {sum(report.measured.values())} operators measured in {report.elapsed_s:.1f} s "
          f"(budget {args.budget_seconds:g} s)")
    for stream, count in sorted(report.measured.items()):
        print(f"  {stream:<24} {count}")
    if report.targeted:
        print(f"targeted: {report.targeted_measured} of {report.targeted} shapes measured")
    if report.not_targeted:
        print(f"not measured (no sampler kernel; the cost model keeps its analytic fit): "
              f"{_counts(report.not_targeted)}")
    print(f"skipped: {report.too_slow} too slow for the budget left, {report.too_large} too large for memory, "
          f"{report.cut} cut by the deadline; {report.resumed} already measured (resumed)")
    if report.failed:
        print(f"failed: {_counts(report.failed)}")
    if profile is not None and "nccl" in profile.tables:
        print(f"collectives: {profile.tables['nccl']['latency_s'].size} samples in {args.out}/nccl.csv")
    if report.comm is not None and report.comm.error:
        sys.stderr.write(f"parplan: error: collective sweep ({report.comm.backend}): {report.comm.error}\n")
        return EXIT_FAILED
    print(f"next: parplan profile fit {args.out}")
    return EXIT_OK


def cmd_fit(args: argparse.Namespace) -> int:
    from costmodel.profiling.embedding import fit_embedding_table
    from costmodel.profiling.fit import fit_directory
    from costmodel.specs import get_gpu

    lookups = fit_embedding_table(Path(args.profile_dir))  # --ops embedding_bag timings, when measured
    if lookups is not None:
        if args.json and not (Path(args.profile_dir) / "metadata.yaml").exists():
            print(dumps({"embedding_bag": lookups}))
        elif not args.json:
            print(f"embedding_bag: {lookups['train']} cells fitted, {lookups['test']} held out: MAPE "
                  f"{lookups['aware_mape']:.1f}% distribution-aware, {lookups['blind_mape']:.1f}% blind")
        if not (Path(args.profile_dir) / "metadata.yaml").exists():  # nothing but lookups was measured
            return EXIT_OK
    report = fit_directory(args.profile_dir, get_gpu(args.gpu) if args.gpu else None)
    used = report.fitted.families
    rows: list[dict[str, Any]] = [{**e.to_dict(), "used": e.family in used} for e in report.errors]
    notes = list(report.fitted.notes)  # fits worse than the roofline: stored as not used
    for note in notes:
        sys.stderr.write(f"parplan: warning: {note}\n")
    if args.json:
        cached = None if report.cached is None else str(report.cached)
        print(dumps({"profile": report.fitted.profile.name, "families": rows, "warnings": notes,
                     "stored": str(report.stored), "cached": cached, "embedding_bag": lookups}))
        return EXIT_OK
    print(f"profile {report.fitted.profile.name}")
    print(f"{'family':<28} {'train':>6} {'held-out':>8} {'MAPE':>7} {'p90':>7} {'roofline MAPE':>14}  used")
    for row in rows:
        print(f"{row['family']:<28} {row['n_train']:>6} {row['n_test']:>8} {_pct(row['mape']):>7} "
              f"{_pct(row['p90']):>7} {_pct(row['roofline_mape']):>14}  {'yes' if row['used'] else 'NO'}")
    print("MAPE/p90: |predicted/measured - 1| on the held-out rows (mean, 90th percentile); "
          "roofline: the same for max(FLOPs/peak, bytes/bandwidth); a fit worse than the roofline is not used")
    print(f"held-out report written to {report.stored}")
    if report.cached is not None:
        print(f"fitted predictors cached in {report.cached} (private to you; others refit from the tables)")
    return EXIT_OK


def cmd_import_trace(args: argparse.Namespace) -> int:
    from costmodel.profiling.trace import import_trace

    result = import_trace(args.trace, args.out, args.device)
    if args.json:
        print(dumps({"trace": str(args.trace), "out": str(args.out), "mode": result.mode, "events": result.events,
                     "samples": dict(result.samples), "instances": dict(result.instances),
                     "unsupported": dict(result.unsupported), "unknown": dict(result.unknown)}))
        return EXIT_OK
    print(f"trace {Path(args.trace).name} ({result.mode}): {result.events} events -> "
          f"{sum(result.samples.values())} samples from {sum(result.instances.values())} events in {args.out}")
    for table, count in sorted(result.samples.items()):
        print(f"  {table:<16} {count} shapes ({result.instances[table]} events)")
    print(f"unsupported (recognised, no table holds them): {_counts(result.unsupported) or 'none'}")
    print(f"unknown (not recognised, not guessed): {sum(result.unknown.values())} events"
          + (f": {_counts(result.unknown)}" if result.unknown else ""))
    return EXIT_OK


def _search_runs(items: list[str]) -> list[Any]:
    """The run specs of a search space's distinct layouts (``--for-search key=value ...``)."""
    from costmodel.specs import get_gpu, get_model
    from search.space import SearchProblem, build_space

    values: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in _SEARCH_KEYS:
            raise SpecError("for-search", item, "KEY=VALUE with KEY one of " + ", ".join(_SEARCH_KEYS))
        values[key] = value
    for key in ("model", "gpu", "num_gpus", "global_batch_size"):
        if key not in values:
            raise SpecError(f"for-search {key}", None, "given (model=, gpu=, num_gpus=, global_batch_size=)")
    model = get_model(values["model"])
    problem = SearchProblem(model=model, gpu=get_gpu(values["gpu"]), num_gpus=_int("num_gpus", values),
                            global_batch_size=_int("global_batch_size", values),
                            seq_length=_int("seq_length", values) if "seq_length" in values else model.seq_length,
                            gpus_per_node=_int("gpus_per_node", values) if "gpus_per_node" in values else None)
    limit = _int("max_runs", values) if "max_runs" in values else 2000
    runs, seen = [], set()
    for strategy in build_space(problem):
        # Operator shapes depend on the layout, precision and recompute only.
        shape_key = (strategy.tp, strategy.pp, strategy.cp, strategy.ep, strategy.micro_batch_size,
                     strategy.sequence_parallel, strategy.precision, strategy.recompute, strategy.flash_attention)
        if shape_key not in seen:
            seen.add(shape_key)
            runs.append(problem.run(strategy))
            if len(runs) >= limit:
                break
    return runs


def _int(key: str, values: dict[str, str]) -> int:
    try:
        return int(values[key])
    except ValueError:
        raise SpecError(f"for-search {key}", values[key], "an integer") from None


def _counts(counter: Counter[str], limit: int = 8) -> str:
    items = [f"{name} x{count}" for name, count in counter.most_common(limit)]
    if len(counter) > limit:
        items.append(f"{len(counter) - limit} more")
    return ", ".join(items)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"
