"""The regressor settings each family is fitted with, in one sklearn-free place.

The estimators take them as their constructor defaults and
``_fitted._family_layout`` passes them explicitly, so that the cache key of a
fitted profile names every setting its fit used (and a changed default misses
the cache instead of serving an older fit).
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["REGRESSOR_SETTINGS"]

REGRESSOR_SETTINGS: Final[dict[str, dict[str, Any]]] = {
    # Histogram boosting: each round costs about 15 us per predict call through scikit-learn, so 100
    # rounds keep a 200-shape batch near 1.5 ms; 200 rounds at half the rate were no more accurate.
    "gemm": {"max_iter": 100, "learning_rate": 0.2, "max_leaf_nodes": 31},
    "attention": {"max_iter": 200, "learning_rate": 0.1, "max_leaf_nodes": 31},
    # Spline + ridge: alpha 1.0 was steadier than 1e-3 or 0.1 on held-out CPU rows of each kind with
    # 3-10 training rows; 10 underfits.
    "memory": {"n_knots": 4, "alpha": 1.0},
    # Extra trees: 100 keep a batch prediction within a few milliseconds.
    "collective": {"n_estimators": 100},
}
