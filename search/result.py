"""What a search found: ranked strategies, the Pareto front, why-not lines and the contract JSON."""

from __future__ import annotations

from collections import Counter
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from constraints.table import check_many, context_memo
from costmodel.predict import predict_run
from costmodel.specs.gpu import GiB
from costmodel.specs.strategy import Strategy
from search.explain import KnobAlternatives, explain_lines, knob_alternatives, why_not_lines
from search.objective import Evaluation, Evaluator, search_timer, violation_value
from search.space import KNOBS, SearchProblem, build_space


@dataclass(frozen=True)
class SearchResult:
    """Every evaluation of one search, in trial order, with its problem and cost.

    Parameters
    ----------
    problem : SearchProblem
    evaluations : tuple of Evaluation
        One per trial (repeats included), in the order the sampler proposed them.
    sampler, objective : str
        How the search ran.
    elapsed_s : float
        Wall time of the search (evaluations included, the final prediction not).
    profile_dir : str, optional
        The user profile the evaluations used.
    sampler_reason : str
        Why ``sampler`` ran when the search asked for ``auto`` (``search.run.resolve_sampler``), else "".
    """

    problem: SearchProblem
    evaluations: tuple[Evaluation, ...]
    sampler: str
    objective: str
    elapsed_s: float
    profile_dir: str | None = None
    evaluator: Evaluator | None = field(default=None, compare=False, repr=False)
    sampler_reason: str = ""
    _alternatives: list[KnobAlternatives] | None = field(default=None, init=False, compare=False, repr=False)

    @property
    def trials(self) -> int:
        return len(self.evaluations)

    @property
    def distinct(self) -> list[Evaluation]:
        """Each evaluated strategy once, first occurrence order."""
        return list({e.strategy: e for e in reversed(self.evaluations)}.values())[::-1]

    @property
    def feasible(self) -> list[Evaluation]:
        """Distinct feasible evaluations, fastest first (ties: less memory)."""
        ok = [e for e in self.distinct if e.feasible]
        return sorted(ok, key=lambda e: (e.step_time_s, e.peak_memory_gib))

    @property
    def best(self) -> Evaluation | None:
        ranked = self.feasible
        return ranked[0] if ranked else None

    def top(self, k: int = 5) -> list[Evaluation]:
        return self.feasible[:k]

    def best_after(self, n_trials: int) -> float | None:
        """Best step time among the first ``n_trials`` trials (None if none was feasible)."""
        times = [e.step_time_s for e in self.evaluations[:n_trials] if e.feasible and e.step_time_s is not None]
        return min(times) if times else None

    def pareto_front(self) -> list[Evaluation]:
        """Feasible strategies no other beats on both step time and peak memory, fastest first."""
        front: list[Evaluation] = []
        for e in sorted(self.feasible, key=lambda e: (e.step_time_s, e.peak_memory_gib)):
            if not front or e.peak_memory_gib < front[-1].peak_memory_gib:
                front.append(e)
        return front

    def closest_to_fitting(self) -> Evaluation | None:
        """The legal strategy that misses the memory budget by the least (memory checks over the whole space):
        the first of the space's order with the least ``(violation, peak memory)``; its time is predicted only
        when it fits.

        The space is checked as one table of its (layout, setting) pairs (``SpaceRows``), so only the strategies
        the rules and memory terms read are built, and its memo is the context's (``context_memo``).
        """
        space = build_space(self.problem)
        rows = space.rows(space.legal_settings())
        if not rows:
            return None
        run, margin = self.problem.run(rows[0]), self.problem.memory_margin
        verdict = check_many(run, rows, margin, context_memo(run))
        usable = float(verdict.usable_bytes / GiB)
        peaks = [float(b / GiB) for b in verdict.peak_bytes]
        keys = [(violation_value(v, peak, usable, margin), peak) for v, peak in zip(verdict.violations, peaks)]
        best = min(range(len(rows)), key=keys.__getitem__)  # the first of equal keys, as min() over a list
        if verdict.fits(best):
            evaluator = self.evaluator or Evaluator(self.problem, self.profile_dir)
            return evaluator.evaluate(rows[best])
        return Evaluation(rows[best], verdict.violations[best], peaks[best], usable, memory_margin=margin)

    def knob_alternatives(self) -> list[KnobAlternatives]:
        """The best strategy with each searched knob changed alone (``search.explain``); ``[]`` if none fits.

        Evaluated once per result: the why-not lines and ``--explain`` read the same list.
        """
        best = self.best
        if best is None:
            return []
        if self._alternatives is None:
            evaluator = self.evaluator or Evaluator(self.problem, self.profile_dir)
            alternatives = knob_alternatives(self.problem, build_space(self.problem), best, evaluator)
            object.__setattr__(self, "_alternatives", alternatives)
        return list(self._alternatives)  # type: ignore[arg-type]

    def why_not(self, limit: int = 6) -> list[str]:
        """Why the best strategy's one-knob alternatives lose: rejected ones first, then slower ones.

        A rejected alternative gives its reason with the numbers; rejected lines come first, most
        often rejected knob value (over all trials) first. Feasible alternatives follow, closest
        first, with how much slower they are.
        """
        best = self.best
        if best is None:
            return []
        rejected_count: Counter[tuple[str, Any]] = Counter()
        for e in self.distinct:
            if not e.feasible:
                rejected_count.update((k, getattr(e.strategy, k)) for k in KNOBS)
        return why_not_lines(self.knob_alternatives(), best, rejected_count, limit)

    def explain(self) -> list[str]:
        """``parplan search --explain``: for every searched knob, the fastest feasible alternative and why the
        rejected values are rejected (``[]`` when nothing fits)."""
        best = self.best
        return [] if best is None else explain_lines(self.knob_alternatives(), best)

    def to_json(self, top_k: int = 5, explain: bool = False) -> dict[str, Any]:
        """The ``parplan search --json`` object (``best`` is ``None`` when nothing fits).

        ``explain`` adds the ``explain`` list (:meth:`KnobAlternatives.to_dict` per searched knob).
        """
        best = self.best
        out: dict[str, Any] = {
            "problem": self.problem.describe(),
            "best": None,
            "top": [e.to_dict() for e in self.top(top_k)],
            "trials": self.trials,
            "feasible": len(self.feasible),
            "elapsed_s": self.elapsed_s,
            "sampler": self.sampler,
            "sampler_reason": self.sampler_reason,
            "strategies_evaluated": len(self.distinct),
            "objective": self.objective,
            "why_not": self.why_not(),
        }
        if best is not None:
            out["best"] = {"strategy": best.strategy.to_dict(),
                           "prediction": contract_prediction(self.problem, best.strategy, self.profile_dir)}
        if explain:
            out["explain"] = [k.to_dict() for k in self.knob_alternatives()]
        if self.objective == "pareto":
            out["pareto"] = [e.to_dict() for e in self.pareto_front()]
        return out


def contract_prediction(problem: SearchProblem, strategy: Strategy, profile_dir: str | None = None) -> dict[str, Any]:
    """The ``parplan predict --json`` object of ``strategy`` on ``problem``, timed with the search's timer."""
    return predict_run(problem.run(strategy), profile_dir, timer=search_timer(problem.gpu, profile_dir))


def _knobs(strategy: Strategy) -> dict[str, Any]:
    return {k: getattr(strategy, k) for k in KNOBS}


def strategy_label(strategy: Strategy) -> str:
    """A compact one-line description: ``tp8 pp4 vpp5 cp1 ep1 dp8 mbs1 sp sel z1 bf16``."""
    s = strategy
    parts = [f"tp{s.tp}", f"pp{s.pp}"]
    if s.vpp > 1:
        parts.append(f"vpp{s.vpp}")
    parts += [f"cp{s.cp}", f"ep{s.ep}", f"dp{s.dp}", f"mbs{s.micro_batch_size}"]
    if s.sequence_parallel:
        parts.append("sp")
    parts += [{"none": "rc-none", "selective": "rc-sel", "full": "rc-full"}[s.recompute], f"z{s.zero_stage}",
              s.precision]
    # Every other knob that differs from its default, so that two rows never read the same.
    for f in fields(s):
        value = getattr(s, f.name)
        if f.name in _LABELLED or f.default is MISSING or value == f.default:
            continue
        if f.name == "cp_comm_type" and s.cp == 1:
            continue
        parts.append(f"{_SHORT.get(f.name, f.name)}={value}")
    return " ".join(parts)


_LABELLED = frozenset({"tp", "pp", "vpp", "cp", "ep", "dp", "micro_batch_size", "global_batch_size",
                       "sequence_parallel", "recompute", "zero_stage", "precision"})
_SHORT = {"hsdp_shard_size": "hsdp", "cp_comm_type": "cp-comm", "moe_token_dispatcher": "dispatcher",
          "tp_comm_overlap": "tp-overlap", "overlap_grad_reduce": "overlap-grad", "overlap_param_gather":
          "overlap-param", "moe_capacity_factor": "capacity", "moe_shared_expert_overlap": "shared-overlap",
          "moe_a2a_overlap": "a2a-overlap", "pipeline_layout": "layout"}
