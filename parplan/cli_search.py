"""``parplan search``: parse, call the search library, print, return an exit code.

``register(subparsers)`` adds the subcommand to ``parplan.cli``'s parser; the
subcommand's ``func(args)`` returns 0 (found), 2 (bad input: ``SpecError``,
reported by ``parplan.cli.main``) or 3 (nothing feasible; the output says what
would make it feasible). ``--model`` goes through the one model parser
(``costmodel.specs.model_source``); ``parplan search RUN.yaml`` takes model,
cluster, batch, sequence length and framework from a run spec and compares the
best strategy with that run's.
"""

from __future__ import annotations

import argparse
import math
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from constraints.oom import default_memory_margin
from costmodel.specs.errors import SpecError
from costmodel.specs.framework import DEFAULT_FRAMEWORK, FRAMEWORK_NAMES
from parplan._argtypes import int_list, jobs, non_negative_int, number_in, positive_int, positive_number, seed
from parplan._interrupt import resumable
from parplan._json import dumps
from search.choices import DEFAULT_EXHAUSTIVE_LIMIT, SAMPLERS
from search.exporters import EXPORTERS
from search.space import KNOBS, MAX_MEMORY_MARGIN, SearchBounds

if TYPE_CHECKING:
    from costmodel.specs.runspec import RunSpec
    from search.budget import Budget, BudgetPlan
    from search.progress import SearchProgress
    from search.result import SearchResult
    from search.space import SearchProblem

# Start-up: the imports above are what the parser needs (flag choices and the defaults its help
# shows), none of them numpy, Optuna or the cost model; a flag error costs no more. What a search
# needs is imported where it runs.
EXIT_OK, EXIT_INFEASIBLE = 0, 3
"""130 = 128 + SIGINT, what shells report for a command ended by Ctrl-C."""
EPILOG = ("exit codes: 0 a strategy was found; 2 bad input (one line naming the field); 3 no legal strategy fits "
          "(the output says what would); 130 interrupted (stored trials are kept; rerun to resume)")
OBJECTIVES = ("time", "cost", "pareto")
BREAKDOWN_COLUMNS = (("compute_s", "compute"), ("tp_comm_s", "tp"), ("cp_comm_s", "cp"), ("ep_comm_s", "ep"),
                     ("pp_comm_s", "pp"), ("pp_bubble_s", "bubble"), ("dp_comm_exposed_s", "dp"),
                     ("optimizer_s", "optim"))


def register(subparsers: Any) -> None:
    """Add the ``search`` subcommand to ``subparsers`` (an ``argparse`` sub-parser action)."""
    p = subparsers.add_parser(
        "search", help="find the fastest (or cheapest) parallelism strategy",
        description="Search the legal parallelism strategies of a model on a GPU cluster: rules and the memory "
                    "model prune, the cost model times the rest. Exit code 3 when nothing fits.",
        epilog=EPILOG)
    what = p.add_argument_group("problem")
    what.add_argument("run_spec", nargs="?", default=None, metavar="RUN.yaml",
                      help="take model, cluster, batch, sequence length and framework from this run spec and report "
                           "how much faster the best strategy is than its strategy")
    what.add_argument("--model", default=None,
                      help="catalog name (see `parplan catalog models`), a model YAML or a Hugging Face config.json")
    what.add_argument("--gpu", default=None, help="catalog GPU name (see `parplan catalog gpus`)")
    count = what.add_mutually_exclusive_group()
    count.add_argument("--gpus", type=int_list(), metavar="N[,N...]",
                       help="GPU count, or a comma list of counts to compare")
    count.add_argument("--max-gpus", type=positive_int, metavar="N",
                       help="compare every power-of-two count up to N (whole nodes above one node)")
    what.add_argument("--gpus-per-node", type=positive_int, default=None,
                      help="default: the GPU catalog's node size")
    what.add_argument("--global-batch-size", type=positive_int, default=None,
                      help="sequences per step (default: about 4M tokens, as Llama 3 started with)")
    what.add_argument("--seq-length", type=positive_int, default=None, help="default: the model's")
    what.add_argument("--framework", default=None, metavar="NAME",
                      help=f"the framework the job launches under ({', '.join(FRAMEWORK_NAMES)}; default "
                           f"{DEFAULT_FRAMEWORK}, or the run spec's): the space offers only what it runs")
    knobs = p.add_argument_group("space")
    knobs.add_argument("--fix", action="append", default=[], metavar="KNOB=VALUE",
                       help=f"hold a knob at one value, e.g. tp=8 (knobs: {', '.join(KNOBS)})")
    knobs.add_argument("--allow", action="append", default=[], metavar="KNOB=V1,V2",
                       help="restrict a knob to values, e.g. recompute=none,selective")
    for knob in ("tp", "pp", "cp", "ep", "vpp", "micro-batch-size"):
        default = SearchBounds().bounds["max_" + knob.replace("-", "_")]  # None: search.problem applies it
        knobs.add_argument(f"--max-{knob}", type=positive_int, default=None, metavar="N",
                           help=f"upper bound on {knob} (default: {default or 'divisibility only'})")
    how = p.add_argument_group("search")
    how.add_argument("--objective", choices=OBJECTIVES, default="time",
                     help="time: fastest step; cost: fewest GPU-hours per token over the GPU counts; "
                          "pareto: step time vs peak memory front (NSGA-II)")
    how.add_argument("--sampler", choices=SAMPLERS, default="auto",
                     help="auto (default): the exhaustive sweep when the space holds at most --exhaustive-limit "
                          "strategies, else tpe (nsga2 for --objective pareto); exhaustive sweeps every legal "
                          "strategy")
    how.add_argument("--exhaustive-limit", type=non_negative_int, default=DEFAULT_EXHAUSTIVE_LIMIT, metavar="N",
                     help=f"largest space --sampler auto sweeps exactly (default {DEFAULT_EXHAUSTIVE_LIMIT:,}: up to "
                          "about a minute on two cores; larger spaces get tpe); several GPU counts share it")
    how.add_argument("--trials", type=positive_int, default=None, help="trials in total (default 200; 300 for nsga2)")
    how.add_argument("--seed", type=seed, default=0)
    how.add_argument("--memory-margin", type=number_in(0.0, MAX_MEMORY_MARGIN, strict=False),
                     default=None, metavar="FRACTION",  # None: search.problem applies the default
                     help=f"fraction of usable memory a pick must leave free (default {default_memory_margin():.3f}: "
                          "an oom_probability of at most 0.2 at the limit, constraints/oom.py)")
    how.add_argument("--jobs", type=jobs, default=-1, help="processes for the exhaustive sweep (default: all CPUs)")
    how.add_argument("--top", type=positive_int, default=5, help="strategies to list")
    how.add_argument("--profile", metavar="DIR", default=None, help="a profile directory from `parplan profile`")
    how.add_argument("--storage", default=None, help="Optuna storage URL (e.g. sqlite:///search.db, postgresql://...)")
    how.add_argument("--study-name", default=None,
                     help="study name; alone, trials go to the SQLite file NAME.db; re-running resumes")
    money = p.add_argument_group("budget")
    money.add_argument("--tokens", type=positive_number, default=None, help="training tokens, e.g. 1.5e13")
    money.add_argument("--price-per-gpu-hour", type=positive_number, default=None, metavar="USD")
    money.add_argument("--deadline-days", type=positive_number, default=None,
                       help="pick the cheapest GPU count that trains --tokens within this many days")
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print only JSON")
    out.add_argument("--explain", action="store_true",
                     help="for every searched knob, the best strategy's fastest one-knob alternative (step time, "
                          "%% slower, peak memory) and why each rejected value is rejected: 'why not X' "
                          "(with --json: an explain list)")
    out.add_argument("--export", action="append", default=[], metavar="FORMAT",
                     help=f"write launcher settings of the best strategy ({', '.join(EXPORTERS)}); repeatable")
    out.add_argument("--out", default=".", metavar="DIR", help="directory for --export files (default: .)")
    p.set_defaults(func=cmd_search)


# -- parsing ------------------------------------------------------------------------------------
def _pairs(items: list[str], flag: str) -> list[tuple[str, str, str]]:
    """``(knob, value, item)`` of each ``KNOB=VALUE`` item of ``--flag``."""
    out = []
    for item in items:
        if "=" not in item:
            raise SpecError(f"--{flag}", item, "KNOB=VALUE")
        knob, value = item.split("=", 1)
        out.append((knob.strip().replace("-", "_"), value, item))
    return out


def _knob_value(flag: str, knob: str, text: str, item: str) -> Any:
    from search.space import parse_knob_value

    try:
        return parse_knob_value(knob, text)
    except SpecError as exc:  # name the flag the user typed, not only the knob
        raise SpecError(f"--{flag} {exc.field}", item, exc.allowed) from None


def _allowed_values(knob: str, text: str, item: str) -> tuple[Any, ...]:
    values = text.split(",")
    if any(not v.strip() for v in values):
        raise SpecError(f"--allow {knob}", item, "KNOB=V1,V2,... with no empty value")
    return tuple(_knob_value("allow", knob, v, item) for v in values)


def baseline_run(args: argparse.Namespace) -> RunSpec | None:
    """The run spec named on the command line (flags given beside it override its values), or ``None``."""
    from costmodel.specs.runspec import load_run_spec

    if args.run_spec is None:
        for flag, value in (("--model", args.model), ("--gpu", args.gpu)):
            if value is None:
                raise SpecError(flag, None, "given (or a run spec: parplan search RUN.yaml)")
        if args.gpus is None and args.max_gpus is None:
            raise SpecError("--gpus", None, "given, or --max-gpus (or a run spec: parplan search RUN.yaml)")
        return None
    return load_run_spec(args.run_spec)


def problem_from_args(args: argparse.Namespace, num_gpus: int, run: RunSpec | None = None) -> SearchProblem:
    """The search problem the arguments (and the run spec ``run``, if any) describe, on ``num_gpus`` GPUs.

    Flags given beside a run spec override its values; the defaults are ``search.problem``'s.
    """
    from costmodel.specs.catalog import get_gpu
    from costmodel.specs.framework import get_framework
    from costmodel.specs.model_source import parse_model
    from search.exporters import implied_framework, launcher_restrictions
    from search.problem import build_problem
    from search.space import BOUND_NAMES

    model = None if args.model is None else parse_model(args.model, seq_length=args.seq_length)[0]
    fixed = {k: _knob_value("fix", k, v, item) for k, v, item in _pairs(args.fix, "fix")}
    allowed = {k: _allowed_values(k, v, item) for k, v, item in _pairs(args.allow, "allow")}
    exports = [p.strip() for n in args.export for p in n.split(",")]
    framework = None if args.framework is None else get_framework(args.framework)
    if framework is None and run is None and exports and implied_framework(exports):
        framework = get_framework(implied_framework(exports))  # --export X searches X's framework
    launcher = launcher_restrictions(exports, model if model is not None else run.model)  # type: ignore[union-attr]
    bounds = {b: getattr(args, b) for b in BOUND_NAMES if getattr(args, b) is not None}
    return build_problem(run=run, model=model, gpu=None if args.gpu is None else get_gpu(args.gpu),
                         num_gpus=num_gpus, global_batch_size=args.global_batch_size, seq_length=args.seq_length,
                         gpus_per_node=args.gpus_per_node, framework=framework, fixed=fixed,
                         allowed=tuple(allowed.items()) + launcher, bounds=bounds, memory_margin=args.memory_margin)


def _counts(args: argparse.Namespace, run: RunSpec | None = None) -> list[int]:
    from costmodel.specs.catalog import get_gpu

    if args.max_gpus is not None:
        from search.budget import gpu_counts

        node = args.gpus_per_node or (get_gpu(args.gpu).gpus_per_node if args.gpu is not None or run is None
                                      else run.cluster.gpus_per_node)
        counts = gpu_counts(args.max_gpus, node)
        if not counts:
            raise SpecError("--max-gpus", args.max_gpus, f"at least one GPU count that is whole nodes of {node}")
        return counts
    if args.gpus is None:
        assert run is not None
        return [run.cluster.num_gpus]
    return list(dict.fromkeys(args.gpus))


def _check_out(args: argparse.Namespace) -> None:
    """``--out`` must be a folder (or not exist yet) before anything is searched."""
    out = Path(args.out)
    if args.export and out.exists() and not out.is_dir():
        raise SpecError("--out", args.out, "a folder for the --export files (this is a file)")


def _check_profile(args: argparse.Namespace, gpu: Any) -> None:
    """Load the profile once, before any trial: a bad folder is one error, not one per trial or per count."""
    if args.profile is None:
        return
    from search.objective import search_timer

    try:
        search_timer(gpu, args.profile)
    except SpecError as exc:
        if exc.field != "profile":
            raise
        raise SpecError("--profile", exc.value, exc.allowed) from None


# -- the command --------------------------------------------------------------------------------
def cmd_search(args: argparse.Namespace) -> int:
    """Run ``parplan search``; see :func:`register` for the arguments.

    Ctrl-C ends it with one line and exit code 130: trials stored with
    ``--study-name`` / ``--storage`` are kept, and the same command resumes.
    """
    return resumable(_search_command)(args)


def _search_command(args: argparse.Namespace) -> int:
    from search.exporters import get_exporter

    sampler = args.sampler
    objective = "pareto" if args.objective == "pareto" else "time"
    for name in args.export:
        for part in name.split(","):
            get_exporter(part.strip())
    _check_out(args)
    if args.storage is not None:
        from search.storage import check_storage_url  # Optuna and SQLAlchemy: only for a storage URL

        check_storage_url(args.storage)
    run = baseline_run(args)
    counts = _counts(args, run)
    first = problem_from_args(args, counts[0], run)
    # Imported once the cheap checks passed (start-up): search.budget brings the search results.
    # The budget is checked before the profile, whose fit can take minutes.
    from threadpoolctl import threadpool_limits

    from search.budget import Budget, plan_counts
    from search.progress import SearchProgress

    budget = Budget(tokens=args.tokens, price_per_gpu_hour=args.price_per_gpu_hour, deadline_days=args.deadline_days)
    _check_profile(args, first.gpu)
    args.baseline = run
    progress = SearchProgress(sys.stderr, live=None if not args.json else False)
    # several GPU counts share the exhaustive limit, so a budget over ten counts sweeps no longer than one would
    search = partial(_search_one, args=args, sampler=sampler, objective=objective, many=len(counts) > 1,
                     progress=progress, exhaustive_limit=args.exhaustive_limit // len(counts))
    try:
        with threadpool_limits(limits=1):
            if len(counts) == 1 and args.objective != "cost" and args.deadline_days is None:
                result = search(first)
                progress.close()
                return _single(args, result, budget)
            progress.counts(len(counts))
            plan = plan_counts(first, counts, budget, search)
            progress.close()
            return _plan(args, plan)
    finally:
        progress.close()


def run_search(problem: SearchProblem, **kwargs: Any) -> SearchResult:
    """``search.run.run_search``, imported on the first search (Optuna and the cost model: start-up)."""
    from search.run import run_search as search

    return search(problem, **kwargs)


def _search_one(problem: SearchProblem, *, args: argparse.Namespace, sampler: str, objective: str,
                many: bool, progress: SearchProgress, exhaustive_limit: int) -> SearchResult:
    name = args.study_name
    if name is not None and many:
        name = f"{name}-{problem.num_gpus}gpus"
    progress.start(problem.num_gpus)
    # a run spec searched from: its own strategy is tried first (when this problem's space holds it)
    starts = () if getattr(args, "baseline", None) is None else (args.baseline.strategy,)
    result = run_search(problem, sampler=sampler, objective=objective, n_trials=args.trials, seed=args.seed,
                        profile_dir=args.profile, storage=args.storage, study_name=name, n_jobs=args.jobs,
                        on_trial=progress.trial, starts=starts, exhaustive_limit=exhaustive_limit)
    progress.finished(result)
    return result


def _exports(args: argparse.Namespace, result: SearchResult) -> list[dict[str, Any]]:
    from search.exporters import get_exporter

    best = result.best
    if best is None:
        return []
    written = []
    for name in (p.strip() for n in args.export for p in n.split(",")):
        exporter = get_exporter(name)
        path = exporter.write(best.strategy, result.problem, args.out)
        written.append({"format": name, "path": str(path), "notes": exporter.notes(best.strategy)})
    return written


def _single(args: argparse.Namespace, result: SearchResult, budget: Budget) -> int:
    from search.run import explain_infeasible

    if result.best is None:
        why = explain_infeasible(result)
        if args.json:
            out = result.to_json(args.top)
            out["infeasible"] = why.to_json() | {"explanation": why.lines(result.problem)}
            print(dumps(out))
        else:
            print("\n".join(why.lines(result.problem)))
        return EXIT_INFEASIBLE
    exports = _exports(args, result)
    baseline = None if getattr(args, "baseline", None) is None else compare_with_run(args.baseline, result)
    if args.json:
        out = result.to_json(args.top, explain=args.explain)
        if exports:
            out["exports"] = exports
        if baseline is not None:
            out["baseline"] = baseline
        print(dumps(out))
        return EXIT_OK
    _print_result(result, args.top, args.explain)
    if baseline is not None:
        print(_baseline_line(baseline))
    _print_exports(exports)
    return EXIT_OK


def compare_with_run(run: RunSpec, result: SearchResult) -> dict[str, Any]:
    """The run spec's own strategy, timed as the search times, and how much faster the best strategy is.

    ``speedup`` is the run's step time over the best one's (``None`` when the
    run breaks a rule or does not fit, so that it has no comparable time).
    """
    from costmodel.predict import predict_run
    from search.objective import search_timer
    from search.result import strategy_label

    best = result.best
    assert best is not None
    predicted = predict_run(run, result.profile_dir, timer=search_timer(run.cluster.gpu, result.profile_dir))
    step = predicted.get("step_time_s")
    comparable = predicted["fits"] and not predicted["violations"] and step is not None and math.isfinite(step)
    return {"strategy": run.strategy.to_dict(), "label": strategy_label(run.strategy),
            "step_time_s": step if comparable else None, "fits": predicted["fits"],
            "violations": predicted["violations"],
            "speedup": step / best.step_time_s if comparable else None}


def _baseline_line(baseline: dict[str, Any]) -> str:
    if baseline["speedup"] is None:
        why = "; ".join(baseline["violations"]) or "it does not fit in memory"
        return f"the run spec's strategy ({baseline['label']}) has no comparable step time: {why}"
    if baseline["speedup"] < 1.0:  # it sets knobs the space does not hold (an explicit layout, flushes, ...)
        return (f"the run spec's strategy ({baseline['label']}, {baseline['step_time_s']:.3f} s/step) is "
                f"{1.0 / baseline['speedup']:.2f}x as fast as the best one found, which the searched space "
                f"does not improve on: keep it")
    return (f"vs the run spec's strategy ({baseline['label']}, {baseline['step_time_s']:.3f} s/step): the best is "
            f"{baseline['speedup']:.2f}x as fast")


def _plan(args: argparse.Namespace, plan: BudgetPlan) -> int:
    from search.result import contract_prediction

    objective = "cost" if args.objective == "cost" else "time"
    chosen = plan.recommended(objective)
    trials = sum(r.result.trials for r in plan.rows)
    if args.json:
        out: dict[str, Any] = {
            "problem": plan.rows[0].result.problem.describe() | {"num_gpus": [r.num_gpus for r in plan.rows]},
            "plan": plan.to_json(objective),
            "best": None, "top": [],
            "trials": trials, "feasible": sum(len(r.result.feasible) for r in plan.rows),
            "elapsed_s": sum(r.result.elapsed_s for r in plan.rows),
        }
        if chosen is not None:
            best = chosen.result.best
            assert best is not None
            out["best"] = {"num_gpus": chosen.num_gpus, "strategy": best.strategy.to_dict(),
                           "prediction": contract_prediction(chosen.result.problem, best.strategy,
                                                             chosen.result.profile_dir)}
            out["top"] = [e.to_dict() for e in chosen.result.top(args.top)]
            if args.explain:
                out["explain"] = [k.to_dict() for k in chosen.result.knob_alternatives()]
            if exports := _exports(args, chosen.result):
                out["exports"] = exports
        else:
            out["explanation"] = _plan_failure(plan)
        print(dumps(out))
        return EXIT_OK if chosen is not None else EXIT_INFEASIBLE
    _print_plan(plan, objective)
    if chosen is None:
        print("\n".join(_plan_failure(plan)))
        return EXIT_INFEASIBLE
    print()
    _print_result(chosen.result, args.top, args.explain)
    _print_exports(_exports(args, chosen.result))
    return EXIT_OK


def _plan_failure(plan: BudgetPlan) -> list[str]:
    from search.budget import human_days
    from search.run import explain_infeasible

    if not plan.feasible:
        last = plan.rows[-1].result
        return explain_infeasible(last).lines(last.problem) if last.trials else \
            [f"No legal strategy on any of {', '.join(str(r.num_gpus) for r in plan.rows)} GPUs."]
    fastest = plan.fastest
    assert fastest is not None
    assert fastest.days is not None and plan.budget.deadline_days is not None
    # Assumes throughput keeps scaling linearly: a lower bound on the GPUs needed, to size the next search.
    needed = fastest.num_gpus * fastest.days / plan.budget.deadline_days
    suggest = 2 ** math.ceil(math.log2(needed))
    return [f"No GPU count meets the {plan.budget.deadline_days:g}-day deadline: the fastest, "
            f"{fastest.num_gpus} GPUs, needs {human_days(fastest.days)} days. At its throughput per GPU the "
            f"deadline needs at least {needed:,.0f} GPUs: try --max-gpus {suggest}, or allow more days."]


# -- printing -----------------------------------------------------------------------------------
def _table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(x.ljust(w) if i < 2 else x.rjust(w) for i, (x, w) in enumerate(zip(row, widths))).rstrip())


def _print_result(result: SearchResult, top: int, explain: bool = False) -> None:
    from search.result import strategy_label

    p = result.problem
    print(f"{p.model.name} on {p.num_gpus} x {p.gpu.name}, global batch {p.global_batch_size} x "
          f"{p.seq_length} tokens, under {p.framework.display_name}")
    rows = []
    ranked = result.pareto_front() if result.objective == "pareto" else result.top(top)
    for i, e in enumerate(ranked, 1):
        b = dict(e.breakdown)
        rows.append([str(i), strategy_label(e.strategy), f"{e.step_time_s:.3f}", f"{e.tokens_per_s_per_gpu:.0f}",
                     f"{e.mfu:.3f}", f"{e.peak_memory_gib:.1f}", f"{e.headroom_gib:.1f}", f"{e.oom_probability:.3f}"]
                    + [f"{b.get(k, 0.0):.3f}" for k, _ in BREAKDOWN_COLUMNS])
    _table(rows, ["#", "strategy", "step s", "tok/s/GPU", "MFU", "mem GiB", "headroom GiB", "P(OOM)"]
           + [h for _, h in BREAKDOWN_COLUMNS])
    print(f"(feasible: at least {p.memory_margin:.1%} of usable memory left free; "
          "P(OOM) from constraints/oom.py)")
    if result.objective == "pareto":
        print("(Pareto front: each row is faster than the next or needs less memory)")
    if explain:
        print("\n".join(result.explain()))
    else:
        for line in result.why_not():
            print(f"why not {line}")
    why = f" ({result.sampler_reason})" if result.sampler_reason else ""
    print(f"{result.trials} trials ({len(result.distinct)} distinct, {len(result.feasible)} feasible), "
          f"{result.sampler}{why}, {result.elapsed_s:.1f} s")


def _print_plan(plan: BudgetPlan, objective: str) -> None:
    from search.budget import human_days
    from search.result import strategy_label

    rows = []
    for r in plan.rows:
        best = r.result.best
        rows.append([str(r.num_gpus), "-" if best is None else strategy_label(best.strategy),
                     "-" if r.step_time_s is None else f"{r.step_time_s:.3f}",
                     "-" if best is None else f"{best.tokens_per_s_per_gpu:.0f}",
                     "-" if best is None else f"{best.mfu:.3f}",
                     "-" if r.gpu_hours_per_million_tokens is None else f"{r.gpu_hours_per_million_tokens:.2f}",
                     human_days(r.days), "-" if r.cost is None else f"{r.cost:,.0f}",
                     {True: "yes", False: "no", None: "-"}[r.meets_deadline]])
    _table(rows, ["GPUs", "best strategy", "step s", "tok/s/GPU", "MFU", "GPU-h/Mtok", "days", "cost", "deadline"])
    named = [("fastest", plan.fastest), ("cheapest (most tokens per dollar)", plan.cheapest)]
    if plan.budget.deadline_days is not None:
        named.append((f"cheapest within {plan.budget.deadline_days:g} days", plan.cheapest_within_deadline))
    for label, row in named:
        print(f"{label}: {'-' if row is None else f'{row.num_gpus} GPUs'}")


def _print_exports(exports: list[dict[str, Any]]) -> None:
    for e in exports:
        print(f"wrote {e['path']}")
        for note in e["notes"]:
            print(f"  note: {note}", file=sys.stderr)
