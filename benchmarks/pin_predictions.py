"""Pin every per-run prediction of the public set and of the benchmark problems (issue 18, item 1).

Issue 18 rewrites the evaluation over arrays and must change no number. This script evaluates

- every run of ``studies/validation/public.yaml`` as ``parplan validate`` builds it (the row's
  framework, the fitting completion of unstated knobs where the stated run does not fit), and
- every problem of the scale table (``benchmarks/scale_table.py``: 8B / 70B / 405B on 64 ... 16,384
  H100, strong and weak scaling) and of the search-quality cases of ``benchmarks/search.py``: a fixed
  seeded sample of legal strategies per problem (fitting and not fitting ones) plus the recipe
  starts of the search (``search.samplers._recipes``),

and records everything ``predict_run`` returns but its text notes: step time, every breakdown field,
throughput and MFU, the memory total and every memory term, the per-stage times, feasibility and the
violations. ``tests/regression/test_pinned_predictions.py`` recomputes them and compares to 1e-9
relative (strings and booleans exactly).

Usage::

    python benchmarks/pin_predictions.py           # compare with the pin file; exit 1 on a difference
    python benchmarks/pin_predictions.py --write   # regenerate it (after a deliberate physics change:
                                                   # say so in the commit message)

The strategies are stored in the pin file, so a change of the search space (new knobs, new bounds)
does not change what is compared; only ``--write`` draws the sample again.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import random
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # before benchmarks/: its search.py would shadow the search package

from constraints import check  # noqa: E402
from costmodel.predict import predict_run  # noqa: E402
from costmodel.specs import get_gpu, get_model  # noqa: E402
from costmodel.specs.errors import SpecError  # noqa: E402
from costmodel.specs.runspec import RunSpec, run_spec_from_mapping  # noqa: E402
from costmodel.specs.strategy import Strategy  # noqa: E402
from costmodel.timing import OperatorTimer  # noqa: E402
from search import Evaluator, SearchProblem, build_space  # noqa: E402
from search.samplers._recipes import recipe_starts  # noqa: E402
from search.space import LAYOUT_KNOBS, StrategySpace, setting_conflicts  # noqa: E402
from studies.validate import load_validation_set, nearest_fitting_completion, with_row_framework  # noqa: E402

PIN_FILE = ROOT / "tests" / "regression" / "pinned_predictions.json"
PUBLIC_SET = ROOT / "studies" / "validation" / "public.yaml"
REL_TOL = 1e-9
REGENERATE = "python benchmarks/pin_predictions.py --write"
UNPINNED = frozenset({"warnings", "defaults_assumed", "profile"})
"""Text of ``predict_run`` that is no prediction: notes, assumed defaults, the profile's name."""
SEED = 0
SCALE_SAMPLE = (8, 4)
"""(fitting, not fitting) strategies drawn per scale-table problem; sized for a CI run well under 60 s."""
CASE_SAMPLE = (4, 2)
"""The same for each search-quality case of ``benchmarks/search.py``."""
MAX_DRAWS = 20_000
_DEFAULTS = {f.name: f.default for f in fields(Strategy)}


def _load_benchmark(name: str) -> Any:
    """A sibling benchmark module by path (``benchmarks/search.py`` cannot be imported as ``search``)."""
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class PinnedProblem:
    """A problem as the pin file stores it: what ``SearchProblem.run`` needs, nothing the search bounds."""

    name: str
    model: str
    gpu: str
    num_gpus: int
    global_batch_size: int
    seq_length: int

    def problem(self, **bounds: int) -> SearchProblem:
        """The search problem (``bounds``: the ``max_*`` limits the sample is drawn under)."""
        return SearchProblem(model=get_model(self.model), gpu=get_gpu(self.gpu), num_gpus=self.num_gpus,
                             global_batch_size=self.global_batch_size, seq_length=self.seq_length, **bounds)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def benchmark_problems() -> list[tuple[PinnedProblem, tuple[int, int], tuple[tuple[str, int], ...]]]:
    """Each benchmark problem with its sample size and the search bounds its space is drawn under."""
    scale = _load_benchmark("scale_table")
    cases = _load_benchmark("search").CASES
    out = [(PinnedProblem(c.name, c.model, scale.GPU, c.num_gpus, c.global_batch_size, scale.SEQ_LENGTH),
            SCALE_SAMPLE, ()) for c in scale.SCALE_CASES]
    out += [(PinnedProblem(f"search-{c.name}", c.model, c.gpu, c.num_gpus, c.global_batch_size, c.seq_length),
             CASE_SAMPLE, c.bounds) for c in cases]
    return out


# -- the sample ----------------------------------------------------------------------------------
def _draws(space: StrategySpace, rng: random.Random) -> Iterator[Strategy]:
    """Legal strategies drawn uniformly: a layout and a setting uniformly, conflicting pairs rejected."""
    names, fw = [k for k, _ in space.settings], space.problem.framework
    for _ in range(MAX_DRAWS):
        layout = space.layouts[rng.randrange(len(space.layouts))]
        setting = [rng.choice(values) for _, values in space.settings]
        picked = dict(zip(LAYOUT_KNOBS, layout))
        if not any(setting_conflicts(picked, k, v, fw) for k, v in zip(names, setting)):
            yield space.strategy_of(layout, setting)


def sample_strategies(problem: SearchProblem, fitting: int, not_fitting: int,
                      seed: int = SEED) -> list[tuple[str, Strategy]]:
    """``fitting`` + ``not_fitting`` distinct drawn strategies and the recipe starts, each with its role."""
    space = build_space(problem)
    rng = random.Random(seed)
    chosen: dict[Strategy, str] = {}
    wanted = {True: fitting, False: not_fitting}
    for strategy in _draws(space, rng):
        if strategy in chosen:
            continue
        fits = check(problem.run(strategy)).fits
        if wanted[fits] > 0:
            wanted[fits] -= 1
            chosen[strategy] = "sample-fits" if fits else "sample-infeasible"
        if not any(wanted.values()):
            break
    for strategy in recipe_starts(space, Evaluator(problem)):
        chosen.setdefault(strategy, "recipe")
    return [(role, s) for s, role in chosen.items()]


def strategy_fields(strategy: Strategy) -> dict[str, Any]:
    """The fields that differ from ``Strategy``'s defaults (enough to rebuild it, short to read)."""
    return {k: v for k, v in strategy.to_dict().items() if v != _DEFAULTS.get(k, object())}


# -- one prediction, flattened ----------------------------------------------------------------
def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """``predict_run``'s output as ``{"breakdown.compute_s": ..., "stages.0.forward_s": ...}``."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not prefix and key in UNPINNED:
                continue
            out.update(flatten(item, f"{prefix}{key}."))
        return out
    if isinstance(value, (list, tuple)) and any(isinstance(v, Mapping) for v in value):
        return {k: v for i, item in enumerate(value) for k, v in flatten(item, f"{prefix}{i}.").items()}
    if isinstance(value, (list, tuple)):
        return {prefix[:-1]: [_plain(v) for v in value]}
    return {prefix[:-1]: _plain(value)}


def _plain(value: Any) -> Any:
    """JSON-ready: numpy scalars to Python, non-finite floats as strings (JSON has no inf)."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return value


TimerOf = Callable[[RunSpec], "OperatorTimer | None"]
"""The timer a run is predicted with (``None``: ``predict_run``'s own, memoised per GPU)."""


def _default_timer(run: RunSpec) -> OperatorTimer | None:
    return None


def pin_of(run: RunSpec, timer_of: TimerOf = _default_timer) -> dict[str, Any]:
    """The flattened prediction of ``run``."""
    return flatten(predict_run(run, timer=timer_of(run)))


def public_runs(path: Path = PUBLIC_SET) -> Iterator[tuple[str, RunSpec | None, dict[str, Any], str]]:
    """(id, run, completed knobs, error) of every row, the run built as ``studies.validate.validate`` does."""
    for entry in load_validation_set(path):
        try:
            run = run_spec_from_mapping(with_row_framework(entry), path.resolve().parent)
        except (SpecError, KeyError, ValueError) as exc:
            yield entry["id"], None, {}, str(exc)
            continue
        completed: dict[str, Any] = {}
        if not check(run).fits and entry.get("unstated"):
            found = nearest_fitting_completion(run, entry["unstated"])
            if found is not None:
                run, completed = found
        yield entry["id"], run, completed, ""


# -- the pin document ---------------------------------------------------------------------------
Order = Callable[[list[Any]], Iterable[Any]]
"""The order runs are evaluated in (``list``: as stored); the records come back in stored order."""


def compute_public(path: Path = PUBLIC_SET, order: Order = list, timer_of: TimerOf = _default_timer,
                   ids: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """One record per public row (only ``ids`` if given), sorted by id."""
    keep = None if ids is None else set(ids)
    rows = [r for r in public_runs(path) if keep is None or r[0] in keep]
    out = {}
    for rid, run, completed, error in order(rows):
        record: dict[str, Any] = {"id": rid, "completed": completed}
        if run is None:
            record["error"] = error
        else:
            record["pred"] = pin_of(run, timer_of)
        out[rid] = record
    return [out[k] for k in sorted(out)]


def compute_problem(pinned: PinnedProblem, strategies: Sequence[tuple[str, dict[str, Any]]],
                    order: Order = list, timer_of: TimerOf = _default_timer) -> list[dict[str, Any]]:
    """One record per (role, strategy fields) of ``pinned``, in the given order of ``strategies``."""
    problem = pinned.problem()
    indexed = list(enumerate(strategies))
    out: dict[int, dict[str, Any]] = {}
    for i, (role, values) in order(indexed):
        record: dict[str, Any] = {"role": role, "strategy": values}
        try:
            record["pred"] = pin_of(problem.run(Strategy(**values)), timer_of)
        except SpecError as exc:
            record["error"] = str(exc)
        out[i] = record
    return [out[i] for i in range(len(strategies))]


def build_document(problems: Sequence[tuple[PinnedProblem, tuple[int, int], tuple[tuple[str, int], ...]]] | None = None,
                   public: Path = PUBLIC_SET) -> dict[str, Any]:
    """A fresh pin document: the sample drawn again and every prediction recomputed."""
    doc: dict[str, Any] = {"regenerate": REGENERATE, "rel_tol": REL_TOL, "seed": SEED,
                           "public_set": str(public.relative_to(ROOT)), "public": compute_public(public),
                           "problems": []}
    for pinned, (fitting, not_fitting), bounds in problems if problems is not None else benchmark_problems():
        drawn = [(role, strategy_fields(s))
                 for role, s in sample_strategies(pinned.problem(**dict(bounds)), fitting, not_fitting)]
        doc["problems"].append({"problem": pinned.to_dict(), "bounds": dict(bounds),
                                "runs": compute_problem(pinned, drawn)})
    return doc


def recompute(doc: Mapping[str, Any], reverse: bool = False, timer_of: TimerOf = _default_timer,
              public_ids: Iterable[str] | None = None) -> dict[str, Any]:
    """The pin document's runs predicted again (the same strategies), optionally in reverse order.

    The problems are those of ``doc``; the public rows every row of its public set, or ``public_ids``.
    """
    order: Order = (lambda xs: list(reversed(xs))) if reverse else list
    out: dict[str, Any] = {**doc, "problems": []}
    problems = list(doc["problems"])
    if reverse:  # problems last-first too, and the public set after them
        problems = problems[::-1]
    computed = []
    for entry in problems:
        pinned = PinnedProblem(**entry["problem"])
        strategies = [(r["role"], r["strategy"]) for r in entry["runs"]]
        computed.append({**entry, "runs": compute_problem(pinned, strategies, order, timer_of)})
    out["problems"] = computed[::-1] if reverse else computed
    out["public"] = compute_public(ROOT / doc["public_set"], order, timer_of, public_ids)
    return out


def dumps(doc: Mapping[str, Any]) -> str:
    """The pin document as JSON with one run per line, keys sorted (readable diffs)."""
    def line(obj: Any) -> str:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)

    head = {k: v for k, v in doc.items() if k not in ("public", "problems")}
    parts = ["{", *(f"{line(k)}:{line(v)}," for k, v in sorted(head.items())), '"public":[']
    parts.append(",\n".join(line(r) for r in doc["public"]))
    parts.append('],\n"problems":[')
    problems = []
    for entry in doc["problems"]:
        meta = {k: v for k, v in entry.items() if k != "runs"}
        runs = ",\n".join(line(r) for r in entry["runs"])
        problems.append("{" + ",".join(f"{line(k)}:{line(v)}" for k, v in sorted(meta.items()))
                        + ',"runs":[\n' + runs + "]}")
    parts.append(",\n".join(problems))
    parts.append("]}")
    return "\n".join(parts) + "\n"


def load(path: Path = PIN_FILE) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


# -- comparison -------------------------------------------------------------------------------
def _as_number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if value in ("inf", "-inf", "nan"):
        return float(value)
    return None


def values_agree(pinned: Any, now: Any, rel_tol: float = REL_TOL) -> bool:
    """Numbers to ``rel_tol`` relative (of the larger magnitude), everything else exactly; lists elementwise."""
    if isinstance(pinned, list) or isinstance(now, list):
        return (isinstance(pinned, list) and isinstance(now, list) and len(pinned) == len(now)
                and all(values_agree(a, b, rel_tol) for a, b in zip(pinned, now)))
    a, b = _as_number(pinned), _as_number(now)
    if a is None or b is None or type(pinned) is bool or type(now) is bool:
        return pinned == now and type(pinned) is type(now)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= rel_tol * max(abs(a), abs(b))


def _record_diffs(where: str, pinned: Mapping[str, Any], now: Mapping[str, Any],
                  rel_tol: float) -> list[str]:
    out = []
    for key in ("error", "completed", "role", "strategy"):
        if pinned.get(key) != now.get(key):
            out.append(f"{where}: {key} pinned {pinned.get(key)!r}, now {now.get(key)!r}")
    p, n = pinned.get("pred", {}), now.get("pred", {})
    for key in sorted(set(p) | set(n)):
        if key not in n:
            out.append(f"{where}: {key} pinned {p[key]!r}, now absent")
        elif key not in p:
            out.append(f"{where}: {key} not pinned, now {n[key]!r}")
        elif not values_agree(p[key], n[key], rel_tol):
            rel = _relative(p[key], n[key])
            out.append(f"{where}: {key} pinned {p[key]!r}, now {n[key]!r}" + (f" ({rel:+.3g} relative)" if rel else ""))
    return out


def _relative(pinned: Any, now: Any) -> float | None:
    a, b = _as_number(pinned), _as_number(now)
    if a is None or b is None or not math.isfinite(a) or not math.isfinite(b) or a == 0:
        return None
    return b / a - 1


def differences(pinned: Mapping[str, Any], now: Mapping[str, Any], rel_tol: float = REL_TOL) -> list[str]:
    """One line per differing field of a run (and per run pinned on one side only), in file order."""
    out: list[str] = []
    now_public = {r["id"]: r for r in now["public"]}
    pinned_ids = {r["id"] for r in pinned["public"]}
    for record in pinned["public"]:
        other = now_public.get(record["id"])
        if other is None:
            out.append(f"public {record['id']}: pinned, no longer in the public set")
        else:
            out += _record_diffs(f"public {record['id']}", record, other, rel_tol)
    out += [f"public {rid}: in the public set, not pinned" for rid in sorted(set(now_public) - pinned_ids)]
    now_problems = {e["problem"]["name"]: e for e in now["problems"]}
    for entry in pinned["problems"]:
        name = entry["problem"]["name"]
        other = now_problems.get(name)
        if other is None:
            out.append(f"{name}: pinned, not recomputed")
            continue
        for i, (a, b) in enumerate(zip(entry["runs"], other["runs"])):
            out += _record_diffs(f"{name} run {i} ({a['role']})", a, b, rel_tol)
        if len(entry["runs"]) != len(other["runs"]):
            out.append(f"{name}: {len(entry['runs'])} runs pinned, {len(other['runs'])} recomputed")
    return out


SEARCH_FIELDS = ("step_time_s", "tokens_per_s_per_gpu", "mfu", "peak_memory_gib", "usable_memory_gib")
"""Fields of the search's ``Evaluation`` that ``predict_run`` reports under the same name."""


def search_differences(doc: Mapping[str, Any], rel_tol: float = REL_TOL) -> list[str]:
    """The pinned problems evaluated as a search does (``Evaluator.evaluate_many``), against the pins.

    The search ranks by ``Evaluation``: its fields must be the pinned ``predict_run`` ones (the time
    only where the strategy fits: the search never predicts the others).
    """
    out: list[str] = []
    for entry in doc["problems"]:
        pinned = PinnedProblem(**entry["problem"])
        runs = [r for r in entry["runs"] if "pred" in r]
        evaluations = Evaluator(pinned.problem()).evaluate_many(Strategy(**r["strategy"]) for r in runs)
        for i, (record, ev) in enumerate(zip(runs, evaluations)):
            pred = record["pred"]
            now: dict[str, Any] = {"fits": ev.feasible, "violations": list(ev.violations)}
            now.update({k: getattr(ev, k) for k in SEARCH_FIELDS if ev.feasible or k.endswith("memory_gib")})
            now.update({f"breakdown.{k}": v for k, v in ev.breakdown})
            wanted = {k: pred.get(k) for k in now}
            out += _record_diffs(f"{pinned.name} run {i} ({record['role']}) as searched", {"pred": wanted},
                                 {"pred": now}, rel_tol)
    return out


def report(diffs: Sequence[str], runs_shown: int = 8, fields_shown: int = 4) -> str:
    """The first differing runs, a few fields of each, and how to regenerate the pins."""
    by_run: dict[str, list[str]] = {}
    for d in diffs:
        by_run.setdefault(d.split(":", 1)[0], []).append(d.split(":", 1)[1].strip())
    lines = [f"{len(diffs)} pinned prediction fields differ, in {len(by_run)} runs; the first:"]
    for run, fields_of in list(by_run.items())[:runs_shown]:
        more = f" (+{len(fields_of) - fields_shown} more fields)" if len(fields_of) > fields_shown else ""
        lines.append(f"  {run}{more}:")
        lines += [f"    {f}" for f in fields_of[:fields_shown]]
    lines.append(f"If the physics changed on purpose, regenerate the pins with `{REGENERATE}` "
                 "and say so in the commit message.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="draw the sample again and rewrite the pin file")
    parser.add_argument("--out", type=Path, default=PIN_FILE, help="pin file (default: %(default)s)")
    parser.add_argument("--rel-tol", type=float, default=REL_TOL, help="relative tolerance (0: bit-identical)")
    parser.add_argument("--reverse", action="store_true", help="recompute in reverse order")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.write:
        doc = build_document()
        text = dumps(doc)
        tmp = args.out.with_suffix(".json.tmp")  # nothing half-written: replace at the end
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(args.out)
        n = len(doc["public"]) + sum(len(e["runs"]) for e in doc["problems"])
        print(f"wrote {args.out} ({len(text) / 1e6:.2f} MB, {n} runs) in {time.perf_counter() - start:.1f} s")
        return 0
    pinned = load(args.out)
    diffs = differences(pinned, recompute(pinned, reverse=args.reverse), args.rel_tol)
    if diffs:
        print(report(diffs))
        return 1
    n = len(pinned["public"]) + sum(len(e["runs"]) for e in pinned["problems"])
    print(f"{n} pinned runs agree to {args.rel_tol:g} relative ({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
