"""``parplan predict`` and ``parplan search`` for DLRM run specs (a ``recsys:`` block or ``model: {kind: dlrm}``).

``parplan/cli.py`` routes a run spec here when it is a DLRM one (:func:`route`); every other spec goes on
to the LLM commands unchanged.

- ``predict RUN.yaml``: the spec's ``plan:`` priced by parplan's cost model and memory model: the step
  (slowest rank), whether every rank fits, and the per-rank table TorchRec's ``EmbeddingStats`` prints.
- ``search RUN.yaml``: the fastest plan that fits (``search.recsys_search``), the warm starts it beat,
  the same per-rank table; ``--export torchrec`` writes the plan as TorchRec ``ParameterSharding`` JSON
  (``costmodel.recsys.torchrec_plan``) into ``--out``. Exit code 3 when no plan fits.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from costmodel.specs.errors import SpecError
from costmodel.specs.gpu import GiB
from costmodel.specs.recsys import is_dlrm_mapping, load_dlrm_run_spec
from costmodel.specs.userfile import read_user_file
from parplan._json import dumps

if TYPE_CHECKING:
    from costmodel.recsys.plan import ShardingPlan
    from costmodel.specs.recsys import DLRMRunSpec

# Start-up: every `parplan predict` / `search` passes through route(); the DLRM cost and memory
# models (numpy, costmodel.recsys) are imported only once a spec is a DLRM one.

EXIT_OK, EXIT_INFEASIBLE = 0, 3
EXPORT_NAME = "torchrec"
EXPORT_FILE = "torchrec_plan.json"
DEFAULT_TRIALS = 30
LLM_ONLY = ("model", "gpu", "global_batch_size", "seq_length", "framework", "max_gpus", "tokens",
            "price_per_gpu_hour", "deadline_days", "storage", "study_name")
"""``parplan search`` flags that describe an LLM problem; refused with a DLRM run spec."""


def is_dlrm_spec(path: str | None) -> bool:
    """Whether the file at ``path`` is a DLRM run spec; False when it cannot be read (the LLM path reports why)."""
    if not path:
        return False
    try:
        return is_dlrm_mapping(read_user_file(path))
    except SpecError:
        return False


def route(parser: argparse.ArgumentParser, dlrm: Callable[[argparse.Namespace], int]) -> None:
    """Make ``parser``'s command hand DLRM run specs (its ``run_spec`` argument) to ``dlrm``."""
    other = parser.get_default("func")

    def dispatch(args: argparse.Namespace) -> int:
        return dlrm(args) if is_dlrm_spec(getattr(args, "run_spec", None)) else other(args)

    parser.set_defaults(func=dispatch)


def _run(path: str, gpus: list[int] | None = None) -> DLRMRunSpec:
    run = load_dlrm_run_spec(path)
    if gpus:
        if len(gpus) != 1:
            raise SpecError("--gpus", ",".join(map(str, gpus)), "one GPU count for a DLRM run spec")
        run = dataclasses.replace(run, cluster=dataclasses.replace(run.cluster, num_gpus=gpus[0]))
    return run


def _given_plan(run: DLRMRunSpec) -> ShardingPlan | None:
    from costmodel.recsys.plan import plan_from_mapping

    if run.plan is None:
        return None
    return plan_from_mapping(run.plan, run.model, run.cluster.num_gpus, run.cluster.gpus_per_node)


def report(run: DLRMRunSpec, plan: ShardingPlan) -> dict[str, Any]:
    """The prediction of ``plan``: step, fit, peak memory and one row per rank (the ``--json`` contract)."""
    from constraints.recsys_memory import plan_memory
    from costmodel.recsys.torchrec_stats import rank_rows
    from search.recsys_search import parplan_rank_times

    memory = plan_memory(run.model, run.cluster, plan)
    times = parplan_rank_times(run.model, run.cluster, plan)
    rows = rank_rows(plan, memory, times)
    step = max(row["perf_ms"] for row in rows) / 1e3
    return {"kind": "dlrm", "model": run.model.name, "gpu": run.cluster.gpu.name, "num_gpus": plan.world_size,
            "batch_size": run.model.batch_size, "step_time_s": step,
            "samples_per_s": run.model.batch_size / step if step > 0 else None,
            "fits": memory.fits, "peak_memory_gib": memory.peak.total_bytes / GiB,
            "usable_memory_gib": memory.usable_bytes / GiB, "peak_rank": memory.peak.rank,
            "memory": memory.peak.as_gib(), "ranks": rows,
            "plan": {name: {"sharding_type": s.sharding_type, "ranks": list(s.ranks),
                            "compute_kernel": s.compute_kernel} for name, s in plan.shardings}}


def _print_report(result: dict[str, Any]) -> None:
    from costmodel.recsys.torchrec_stats import render

    fits = "fits" if result["fits"] else "DOES NOT FIT"
    print(f"{result['model']} on {result['num_gpus']} x {result['gpu']}, batch {result['batch_size']}: "
          f"step {1e3 * result['step_time_s']:.3f} ms (slowest rank), peak {result['peak_memory_gib']:.2f} of "
          f"{result['usable_memory_gib']:.2f} GiB on rank {result['peak_rank']} ({fits})")
    print(render(result["ranks"]))


def cmd_predict(args: argparse.Namespace) -> int:
    """``parplan predict`` of a DLRM run spec: its ``plan:`` block is required."""
    run = _run(args.run_spec)
    plan = _given_plan(run)
    if plan is None:
        raise SpecError("plan", None, "given in a DLRM run spec for predict ({table: {sharding_type, ranks}}; "
                                      "`parplan search RUN.yaml` proposes one)")
    result = report(run, plan)
    if args.json:
        print(dumps(result))
    else:
        _print_report(result)
    return EXIT_OK


def cmd_search(args: argparse.Namespace) -> int:
    """``parplan search`` of a DLRM run spec."""
    from costmodel.recsys.torchrec_plan import torchrec_json, write_torchrec_json
    from search.recsys_search import search_plans

    for flag in LLM_ONLY:
        if getattr(args, flag, None) not in (None, [], False):
            raise SpecError(f"--{flag.replace('_', '-')}", getattr(args, flag), "absent with a DLRM run spec")
    exports = [part.strip() for name in args.export for part in name.split(",")]
    for name in exports:
        if name != EXPORT_NAME:
            raise SpecError("--export", name, f"{EXPORT_NAME!r} for a DLRM run spec")
    run = _run(args.run_spec, args.gpus)
    given = _given_plan(run)
    result = search_plans(run.model, run.cluster, n_trials=args.trials or DEFAULT_TRIALS, seed=args.seed)
    best = result.best
    if not best.fits:
        message = f"no plan fits: the best misses by {best.over_gib:.2f} GiB on its fullest rank"
        if args.json:
            print(dumps({"kind": "dlrm", "fits": False, "over_gib": best.over_gib, "reason": message}))
        else:
            print(f"parplan: {message}")
        return EXIT_INFEASIBLE
    out = report(run, best.plan)
    out["search"] = {"evaluations": result.evaluations, "seconds": result.seconds, "picked": best.name,
                     "warm_starts_model": "bandwidth proxy" if result.screened else "parplan",
                     "warm_starts": [{"name": c.name, "step_time_s": c.step_seconds if c.fits else None,
                                      "fits": c.fits, "over_gib": c.over_gib} for c in result.warm_starts]}
    if given is not None:
        out["given_plan_step_time_s"] = report(run, given)["step_time_s"]
    written = []
    for _ in exports[:1]:
        folder = Path(args.out)
        folder.mkdir(parents=True, exist_ok=True)
        data = torchrec_json(run.model, best.plan, min(run.cluster.gpus_per_node, best.plan.world_size))
        written.append(str(write_torchrec_json(folder / EXPORT_FILE, data)))
    out["exports"] = written
    if args.json:
        print(dumps(out))
        return EXIT_OK
    _print_report(out)
    label = " (screened by the bandwidth proxy)" if result.screened else ""
    print(f"picked {best.name} after {result.evaluations} plan evaluations in {result.seconds:.1f} s; "
          f"warm starts{label}:")
    for c in sorted(result.warm_starts, key=lambda c: (not c.fits, c.step_seconds)):
        step = f"{1e3 * c.step_seconds:.3f} ms" if math.isfinite(c.step_seconds) else f"+{c.over_gib:.1f} GiB over"
        print(f"  {c.name:<24} {step}")
    if given is not None:
        print(f"the run spec's plan: {1e3 * out['given_plan_step_time_s']:.3f} ms")
    for path in written:
        print(f"wrote {path}")
    return EXIT_OK


__all__ = ["cmd_predict", "cmd_search", "is_dlrm_spec", "report", "route"]
