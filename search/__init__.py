"""Strategy search: the legal space of a problem, a memoised objective, samplers, results, budgets, exports.

Names are imported on first use (``costmodel.lazy``), so that parsing flags stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from costmodel.lazy import lazy_exports

if TYPE_CHECKING:
    from search.budget import Budget, BudgetPlan, CountPlan, gpu_counts, plan_counts
    from search.objective import Evaluation, Evaluator
    from search.result import SearchResult, contract_prediction, strategy_label
    from search.run import Infeasibility, explain_infeasible, make_searcher, run_search
    from search.space import KNOBS, SearchProblem, StrategySpace, build_space, parse_knob_value

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "search.budget": ("Budget", "BudgetPlan", "CountPlan", "gpu_counts", "plan_counts"),
    "search.objective": ("Evaluation", "Evaluator"),
    "search.result": ("SearchResult", "contract_prediction", "strategy_label"),
    "search.run": ("Infeasibility", "explain_infeasible", "make_searcher", "run_search"),
    "search.space": ("KNOBS", "SearchProblem", "StrategySpace", "build_space", "parse_knob_value"),
}, globals())
