"""A fitted ``SplineTransformer`` + ``Ridge`` pipeline as knots and weights, evaluated in numpy.

The B-spline basis is de Boor's recursion (Piegl & Tiller, *The NURBS Book*,
algorithm A2.2) on scikit-learn's knot vector. ``extrapolation="constant"``
holds each basis function at its value on the nearer boundary knot, which is
the basis evaluated at the input clipped to ``[t[degree], t[-degree - 1]]``.
It agrees with scikit-learn (scipy's ``BSpline``) to rounding (~1e-15 relative).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["SplineRidge", "from_spline_ridge"]


@dataclass(frozen=True, eq=False)
class SplineRidge:
    """``intercept + sum_i sum_j coef[i, j] * B_ij(x_i)`` over input columns i, with constant extrapolation.

    Attributes
    ----------
    knots : ndarray of shape (n_features, n_basis + degree + 1)
        Each column's full knot vector ``t`` (scikit-learn's ``bsplines_[i].t``).
    coef : ndarray of shape (n_features * n_basis,)
        Ridge weights of the basis functions, column by column (scikit-learn's order).
    intercept : float
    degree : int
    """

    knots: np.ndarray
    coef: np.ndarray
    intercept: float
    degree: int

    def basis(self, x: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Design matrix (n_samples, n_basis) of the 1-D input ``x`` on knots ``t``; NaN rows are NaN."""
        k = self.degree
        n_basis = t.size - k - 1
        x = np.clip(np.asarray(x, dtype=np.float64), t[k], t[n_basis])
        # Knot span: t[span] <= x < t[span + 1], the last span closed on the right.
        span = np.clip(np.searchsorted(t, x, side="right") - 1, k, n_basis - 1)
        values = np.zeros((x.size, k + 1))
        values[:, 0] = 1.0
        left = np.zeros((x.size, k + 1))
        right = np.zeros((x.size, k + 1))
        for j in range(1, k + 1):
            left[:, j] = x - t[span + 1 - j]
            right[:, j] = t[span + j] - x
            saved = np.zeros(x.size)
            for r in range(j):
                temp = values[:, r] / (right[:, r + 1] + left[:, j - r])
                values[:, r] = saved + right[:, r + 1] * temp
                saved = left[:, j - r] * temp
            values[:, j] = saved
        out = np.zeros((x.size, n_basis))
        columns = span[:, None] - k + np.arange(k + 1)
        np.put_along_axis(out, columns, values, axis=1)
        out[np.isnan(x)] = np.nan
        return out

    @property
    def min_features(self) -> int:
        """Columns an input must have: one per knot vector."""
        return int(self.knots.shape[0])

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The fitted curve at the rows of ``X`` (n_samples, n_features).

        Raises
        ------
        ValueError
            If ``X`` is not 2-D with at least ``min_features`` columns.
        """
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] < self.min_features:
            raise ValueError(f"The 'X' parameter must be 2-D with at least {self.min_features} columns. "
                             f"Got shape {X.shape} instead.")
        design = np.hstack([self.basis(X[:, i], t) for i, t in enumerate(self.knots)])
        return design @ self.coef + self.intercept

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Numeric arrays that :meth:`from_arrays` rebuilds this curve from."""
        return {"knots": self.knots, "coef": self.coef,
                "scalars": np.array([self.intercept, self.degree], dtype=np.float64)}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> SplineRidge:
        """The curve :meth:`to_arrays` wrote.

        Raises
        ------
        KeyError, ValueError
            If an array is missing, not finite floats, of the wrong shape (``coef``
            one weight per basis function of every knot vector), the degree not a
            whole number the knots allow, or a knot vector decreasing.
        """
        knots, coef, scalars = arrays["knots"], arrays["coef"], arrays["scalars"]
        if knots.ndim != 2 or coef.ndim != 1 or scalars.shape != (2,) \
                or any(a.dtype.kind != "f" or not np.isfinite(a).all() for a in (knots, coef, scalars)):
            raise ValueError(f"spline arrays knots {knots.shape}, coef {coef.shape}, scalars {scalars.shape} are "
                             f"not finite floats of the shapes written")
        intercept, degree = scalars.tolist()
        n_basis = knots.shape[1] - int(degree) - 1
        if degree != int(degree) or degree < 0 or n_basis < 1 or knots.shape[0] < 1 \
                or coef.size != knots.shape[0] * n_basis or (np.diff(knots, axis=1) < 0).any():
            raise ValueError(f"spline of degree {degree} with knots {knots.shape} and {coef.size} weights is not "
                             f"one this version writes")
        return cls(knots.astype(np.float64), coef.astype(np.float64), float(intercept), int(degree))


def from_spline_ridge(pipeline: Any) -> SplineRidge:
    """Export a fitted ``make_pipeline(SplineTransformer(extrapolation="constant"), Ridge())``."""
    spline, ridge = (step for _, step in pipeline.steps)
    if spline.extrapolation != "constant" or not spline.include_bias or spline.sparse_output:
        raise ValueError("only a dense SplineTransformer with extrapolation='constant' and its bias is exported")
    if np.ndim(ridge.coef_) != 1:
        raise ValueError("only a single-output Ridge is exported")
    knots = np.vstack([np.asarray(bspline.t, dtype=np.float64) for bspline in spline.bsplines_])
    return SplineRidge(knots=knots, coef=np.asarray(ridge.coef_, dtype=np.float64),
                       intercept=float(ridge.intercept_), degree=int(spline.degree))
