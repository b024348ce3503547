"""Budgets: training tokens, price, GPU-count ranges and deadlines turned into one recommendation.

For each GPU count the best strategy's step time gives the training time
(``tokens / tokens_per_step * step_time``) and, with a price, the cost
(``num_gpus * hours * price``). The plan names the fastest count, the cheapest
(the most tokens per dollar: cost per token does not depend on the token count)
and, with a deadline, the cheapest count that meets it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from costmodel.specs.errors import SpecError, require_int, require_number
from search.result import SearchResult
from search.space import SearchProblem

SECONDS_PER_DAY = 86_400.0


def gpu_counts(max_gpus: int, gpus_per_node: int, min_gpus: int = 1) -> list[int]:
    """GPU counts up to ``max_gpus``: powers of two that are whole nodes above one node, and ``max_gpus``.

    ``max_gpus`` itself is included when it is a whole number of nodes, so
    ``--max-gpus 768`` also tries 768.
    """
    require_int("max-gpus", max_gpus)
    counts = []
    n = 1
    while n <= max_gpus:
        if n >= min_gpus and (n <= gpus_per_node or n % gpus_per_node == 0):
            counts.append(n)
        n *= 2
    if max_gpus >= min_gpus and max_gpus not in counts and max_gpus % gpus_per_node == 0:
        counts.append(max_gpus)
    return counts


@dataclass(frozen=True, kw_only=True)
class Budget:
    """What the user wants: tokens to train on, a price per GPU-hour, a deadline (all optional)."""

    tokens: float | None = None
    price_per_gpu_hour: float | None = None
    deadline_days: float | None = None

    def __post_init__(self) -> None:
        for name in ("tokens", "price_per_gpu_hour", "deadline_days"):
            if getattr(self, name) is not None:
                require_number(name.replace("_", "-"), getattr(self, name))
        if self.deadline_days is not None and self.tokens is None:
            raise SpecError("tokens", None, "given with --deadline-days (training time needs a token count)")


@dataclass(frozen=True)
class CountPlan:
    """The best strategy on one GPU count and what training would take with it."""

    num_gpus: int
    result: SearchResult
    budget: Budget

    @property
    def step_time_s(self) -> float | None:
        best = self.result.best
        return None if best is None else best.step_time_s

    @property
    def tokens_per_s(self) -> float | None:
        t = self.step_time_s
        return None if t is None else self.result.problem.global_batch_size * self.result.problem.seq_length / t

    @property
    def gpu_hours_per_million_tokens(self) -> float | None:
        rate = self.tokens_per_s
        return None if rate is None else self.num_gpus / rate * 1e6 / 3600.0

    @property
    def days(self) -> float | None:
        rate = self.tokens_per_s
        if rate is None or self.budget.tokens is None:
            return None
        return self.budget.tokens / rate / SECONDS_PER_DAY

    @property
    def cost(self) -> float | None:
        """Total cost with ``tokens``, else ``None``."""
        days = self.days
        if days is None or self.budget.price_per_gpu_hour is None:
            return None
        return days * 24.0 * self.num_gpus * self.budget.price_per_gpu_hour

    @property
    def cost_per_million_tokens(self) -> float | None:
        h = self.gpu_hours_per_million_tokens
        return None if h is None or self.budget.price_per_gpu_hour is None else h * self.budget.price_per_gpu_hour

    @property
    def meets_deadline(self) -> bool | None:
        if self.budget.deadline_days is None or self.days is None:
            return None
        return self.days <= self.budget.deadline_days

    def to_json(self) -> dict[str, Any]:
        best = self.result.best
        return {
            "num_gpus": self.num_gpus,
            "feasible": best is not None,
            "strategy": None if best is None else best.strategy.to_dict(),
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": None if best is None else best.tokens_per_s_per_gpu,
            "mfu": None if best is None else best.mfu,
            "peak_memory_gib": None if best is None else best.peak_memory_gib,
            "gpu_hours_per_million_tokens": self.gpu_hours_per_million_tokens,
            "cost_per_million_tokens": self.cost_per_million_tokens,
            "days": self.days,
            "cost": self.cost,
            "meets_deadline": self.meets_deadline,
            "trials": self.result.trials,
            "elapsed_s": self.result.elapsed_s,
        }


@dataclass(frozen=True)
class BudgetPlan:
    """Per-count plans and the counts that answer the usual questions."""

    rows: tuple[CountPlan, ...]
    budget: Budget

    @property
    def feasible(self) -> list[CountPlan]:
        return [r for r in self.rows if r.step_time_s is not None]

    @property
    def fastest(self) -> CountPlan | None:
        return min(self.feasible, key=lambda r: (r.step_time_s, r.num_gpus), default=None)

    @property
    def cheapest(self) -> CountPlan | None:
        """Fewest GPU-hours per token (the most tokens per dollar at any price)."""
        return min(self.feasible, key=lambda r: (r.gpu_hours_per_million_tokens, r.num_gpus), default=None)

    @property
    def cheapest_within_deadline(self) -> CountPlan | None:
        meeting = [r for r in self.feasible if r.meets_deadline]
        return min(meeting, key=lambda r: (r.gpu_hours_per_million_tokens, r.num_gpus), default=None)

    def recommended(self, objective: str = "time") -> CountPlan | None:
        """Deadline given: the cheapest count meeting it; ``cost``: the cheapest; else the fastest."""
        if self.budget.deadline_days is not None:
            return self.cheapest_within_deadline
        return self.cheapest if objective == "cost" else self.fastest

    def to_json(self, objective: str = "time") -> dict[str, Any]:
        def count(plan: CountPlan | None) -> int | None:
            return None if plan is None else plan.num_gpus

        return {
            "counts": [r.to_json() for r in self.rows],
            "fastest": count(self.fastest),
            "cheapest": count(self.cheapest),
            "most_tokens_per_dollar": count(self.cheapest),
            "deadline_days": self.budget.deadline_days,
            "cheapest_within_deadline": count(self.cheapest_within_deadline),
            "recommended": count(self.recommended(objective)),
            "tokens": self.budget.tokens,
            "price_per_gpu_hour": self.budget.price_per_gpu_hour,
        }


def plan_counts(problem: SearchProblem, counts: Sequence[int], budget: Budget,
                search: Callable[[SearchProblem], SearchResult]) -> BudgetPlan:
    """Search ``problem`` on each of ``counts`` GPUs with ``search`` and cost the best strategy of each."""
    rows = []
    for n in counts:
        sub = problem.with_gpus(n)
        try:
            result = search(sub)
        except SpecError:  # no legal layout on this count (e.g. the batch does not split): nothing fits
            result = SearchResult(problem=sub, evaluations=(), sampler="-", objective="time", elapsed_s=0.0)
        rows.append(CountPlan(n, result, budget))
    return BudgetPlan(tuple(rows), budget)


def human_days(days: float | None) -> str:
    if days is None or math.isinf(days):
        return "-"
    return f"{days:.1f}"
