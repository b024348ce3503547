"""Why the best strategy: each searched knob changed alone, the others held, and what that costs.

One evaluation of the best strategy's one-knob alternatives (:func:`knob_alternatives`) serves both
the short why-not lines of every search and ``parplan search --explain``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from costmodel.specs.strategy import Strategy
from search.objective import Evaluation, Evaluator
from search.space import (
    KNOBS,
    LAYOUT_KNOBS,
    MOE_KNOBS,
    SPLIT_KNOB,
    SWITCHES,
    SearchProblem,
    StrategySpace,
    change_knob,
    knob_value,
)

ILLEGAL = "not a legal strategy with the other knobs held"
"""The reason of an alternative the space does not contain (its time and memory are not predicted)."""


@dataclass(frozen=True)
class Alternative:
    """The best strategy with one knob at ``value``: its evaluation, or ``None`` where it is illegal."""

    value: Any
    evaluation: Evaluation | None

    @property
    def feasible(self) -> bool:
        return self.evaluation is not None and self.evaluation.feasible

    @property
    def reason(self) -> str:
        """Why it is rejected (``""`` when it fits)."""
        return ILLEGAL if self.evaluation is None else self.evaluation.reason

    def to_dict(self) -> dict[str, Any]:
        e = self.evaluation
        return {"value": self.value, "step_time_s": None if e is None else e.step_time_s,
                "peak_memory_gib": None if e is None else e.peak_memory_gib, "feasible": self.feasible,
                "reason": self.reason}


@dataclass(frozen=True)
class KnobAlternatives:
    """One searched knob: the best strategy's value and every other value the space lists for it.

    ``only_because`` says why ``best_value`` is the only legal value here (``""``: it is not, or
    the space does not know why).
    """

    knob: str
    best_value: Any
    alternatives: tuple[Alternative, ...]
    only_because: str = ""

    @property
    def legal(self) -> list[Alternative]:
        return [a for a in self.alternatives if a.evaluation is not None]

    @property
    def fastest(self) -> Alternative | None:
        """The fastest feasible alternative (ties: less memory), or ``None``."""
        timed = [(a.evaluation.step_time_s, a.evaluation.peak_memory_gib, i) for i, a in enumerate(self.alternatives)
                 if a.evaluation is not None and a.feasible and a.evaluation.step_time_s is not None]
        return self.alternatives[min(timed)[2]] if timed else None

    def to_dict(self) -> dict[str, Any]:
        """One item of the ``explain`` list of ``parplan search --json --explain``."""
        fastest = self.fastest
        return {"knob": self.knob, "best_value": self.best_value,
                "fastest_alternative": None if fastest is None else fastest.value,
                "only_value_because": self.only_because or None,
                "alternatives": [a.to_dict() for a in self.alternatives]}


def searched_knobs(problem: SearchProblem, space: StrategySpace) -> list[str]:
    """The knobs a search varies, in ``KNOBS`` order (``pipeline_split`` after the layout knobs).

    Left out: ``dp`` (derived), the MoE knobs of a dense model, and launch switches the user
    neither fixed nor allowed (they stay at the ``Strategy`` defaults).
    """
    dense = not problem.model.is_moe
    restricted = {k for k, _ in (*problem.fixed, *problem.allowed)}
    order = [k for k in KNOBS if k in LAYOUT_KNOBS] + [SPLIT_KNOB] + [k for k in KNOBS if k not in LAYOUT_KNOBS]
    out = []
    for knob in order:
        if knob == "dp" or knob not in space.choices or dense and knob in ("etp", *MOE_KNOBS):
            continue
        if knob in SWITCHES and knob not in restricted:
            continue
        out.append(knob)
    return out


def knob_alternatives(problem: SearchProblem, space: StrategySpace, best: Evaluation,
                      evaluator: Evaluator) -> list[KnobAlternatives]:
    """Every searched knob of ``best`` changed alone (dp re-derived), evaluated where the space holds it.

    The evaluator is memoised, so alternatives the search already tried cost nothing.
    """
    fw = problem.framework
    current = space.knobs_of(best.strategy)
    knobs = searched_knobs(problem, space)
    pending: list[tuple[str, Any, Strategy | None]] = []
    for knob in knobs:
        for value in space.choices[knob]:
            if value == knob_value(best.strategy, knob, fw):
                continue
            if knob == SPLIT_KNOB:
                alt = space._with_split(current, value)  # noqa: SLF001 - the space rebuilds split fields
            else:
                alt = change_knob(best.strategy, knob, value, problem.num_gpus)
            if alt == best.strategy:  # the value collapses to the best's (sequence parallelism at tp = 1)
                continue
            pending.append((knob, value, alt if alt is not None and space.contains(alt) else None))
    evaluations = iter(evaluator.evaluate_many(alt for _, _, alt in pending if alt is not None))
    by_knob: dict[str, list[Alternative]] = {k: [] for k in knobs}
    for knob, value, alt in pending:
        by_knob[knob].append(Alternative(value, None if alt is None else next(evaluations)))
    out = []
    for knob, alts in by_knob.items():
        value = knob_value(best.strategy, knob, fw)
        out.append(KnobAlternatives(knob, value, tuple(alts), _only_because(problem, knob, value, alts)))
    return out


def _only_because(problem: SearchProblem, knob: str, value: Any, alts: list[Alternative]) -> str:
    """Why ``value``, the best strategy's, is the only legal one for ``knob`` ("" when it is not / unknown)."""
    if any(a.evaluation is not None for a in alts):
        return ""
    if alts:
        return f"the other values ({', '.join(_fmt(a.value) for a in alts)}) are illegal with the other knobs held"
    fixed, allowed = dict(problem.fixed), dict(problem.allowed)
    if knob in fixed:
        return "it is fixed"
    if knob in allowed:
        return "it is the only allowed value legal here"
    fw, gpu = problem.framework, problem.gpu
    reasons = {
        "cp": "" if fw.supports_context_parallel else f"{fw.display_name} runs no context parallelism",
        "sequence_parallel": (f"{fw.display_name} runs no sequence parallelism" if not fw.supports_sequence_parallel
                              else "sequence parallelism needs tp > 1 and a sequence divisible by tp"),
        "precision": ("" if problem.restriction("precision") else
                      f"{gpu.name} runs no FP8" if not gpu.supports("fp8") else
                      f"{fw.display_name} runs no FP8" if not fw.supports_fp8 else ""),
        "tp": (f"tp must divide the heads, KV heads and FFN and fit one NVLink domain of "
               f"{gpu.nvlink_domain_size} GPUs"),
        "ep": "" if problem.model.is_moe else "the model has no experts",
        "vpp": "interleaving needs pp > 1 and micro-batches divisible by pp",
        "cp_comm_type": "cp = 1 exchanges nothing" if value == "p2p" else "",
        SPLIT_KNOB: "the layers split evenly over the pipeline stages" if value == "even" else "",
    }
    return reasons.get(knob, "")


def why_not_lines(knobs: list[KnobAlternatives], best: Evaluation, rejected_count: dict[tuple[str, Any], int],
                  limit: int = 6) -> list[str]:
    """Short why-not lines: rejected alternatives first (most often rejected in the search first), then
    feasible ones, closest first, with how much slower they are."""
    rejected, slower = [], []
    for k in knobs:
        if k.knob == SPLIT_KNOB:  # not a Strategy field: kept for --explain
            continue
        for a in k.legal:
            e = a.evaluation
            assert e is not None
            if not e.feasible:
                rejected.append((-rejected_count.get((k.knob, a.value), 0), f"{k.knob}={_fmt(a.value)}: {e.reason}"))
            elif e.step_time_s is not None and best.step_time_s is not None:
                pct = percent(e, best)
                slower.append((pct, f"{k.knob}={_fmt(a.value)}: fits ({e.peak_memory_gib:.1f} GiB), "
                                    f"{_verdict(pct)} ({e.step_time_s:.3f} s)"))
    lines = [line for _, line in sorted(rejected)[:limit]]
    return lines + [line for _, line in sorted(slower)[:max(0, limit - len(lines))]]


def explain_lines(knobs: list[KnobAlternatives], best: Evaluation) -> list[str]:
    """``parplan search --explain``: per knob, the fastest feasible alternative and each rejected value."""
    lines = ["explain: each knob changed alone from the best strategy (dp re-derived, the others held)"]
    for k in knobs:
        head = f"  {k.knob}: {_fmt(k.best_value)}"
        legal = k.legal
        if not legal:
            lines.append(f"{head} is the only legal value here" + (f" because {k.only_because}" if k.only_because
                                                                    else ""))
            continue
        fastest = k.fastest
        if fastest is None:
            lines.append(f"{head}; no alternative fits")
        else:
            e = fastest.evaluation
            assert e is not None and e.step_time_s is not None
            lines.append(f"{head}; next best {k.knob}={_fmt(fastest.value)}: {e.step_time_s:.3f} s "
                         f"({_verdict(percent(e, best))}), {e.peak_memory_gib:.1f} GiB")
        for a in legal:
            if not a.feasible:
                lines.append(f"    {k.knob}={_fmt(a.value)} rejected: {a.reason}")
        illegal = [_fmt(a.value) for a in k.alternatives if a.evaluation is None]
        if illegal:
            lines.append(f"    {k.knob}={','.join(illegal)}: {ILLEGAL}")
    return lines


def percent(e: Evaluation, best: Evaluation) -> float:
    """How much slower ``e`` is than ``best``, in percent (negative: faster)."""
    assert e.step_time_s is not None and best.step_time_s is not None
    return 100.0 * (e.step_time_s / best.step_time_s - 1.0)


def _verdict(pct: float) -> str:
    return f"{pct:.1f}% slower" if pct >= 0 else f"{-pct:.1f}% faster (the search missed it)"


def _fmt(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
