"""Strategy search: the legal space of a problem, a memoised objective, samplers, results, budgets, exports."""

from search.budget import Budget, BudgetPlan, CountPlan, gpu_counts, plan_counts
from search.objective import Evaluation, Evaluator
from search.result import SearchResult, contract_prediction, strategy_label
from search.run import Infeasibility, explain_infeasible, make_searcher, run_search
from search.space import KNOBS, SearchProblem, StrategySpace, build_space, parse_knob_value

__all__ = [
    "KNOBS",
    "Budget",
    "BudgetPlan",
    "CountPlan",
    "Evaluation",
    "Evaluator",
    "Infeasibility",
    "SearchProblem",
    "SearchResult",
    "StrategySpace",
    "build_space",
    "contract_prediction",
    "explain_infeasible",
    "gpu_counts",
    "make_searcher",
    "parse_knob_value",
    "plan_counts",
    "run_search",
    "strategy_label",
]
