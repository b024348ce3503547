"""Fitted tree ensembles as flat numpy arrays, evaluated without scikit-learn and bit-identical to it.

Two exports: ``HistGradientBoostingRegressor`` (raw = baseline, then each
tree's leaf added in order) and ``ExtraTreesRegressor`` (inputs cast to
float32, leaves summed from 0 in estimator order, then divided by their count).
All trees' nodes share one set of arrays; every query row walks every tree at
once, one level per step, so that a call costs a few dozen numpy operations
whatever the number of trees (scikit-learn's own predict pays ~15 us per tree).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["TreeEnsemble", "from_extra_trees", "from_hist_gradient_boosting"]


@dataclass(frozen=True, eq=False)
class TreeEnsemble:
    """Trees whose leaves are summed (after ``start``) and divided by ``divisor``.

    A leaf's two children are itself, so that rows that reach a leaf early stay
    there while deeper trees are walked.

    Attributes
    ----------
    feature, threshold, missing_left : ndarray of shape (n_nodes,)
        Split of each node: go left when ``x[feature] <= threshold``; a NaN goes
        left where ``missing_left``.
    children : ndarray of shape (2 * n_nodes,)
        ``children[2 * i]`` is node i's right child, ``children[2 * i + 1]`` its left.
    value : ndarray of shape (n_nodes,)
        Leaf values (unused at inner nodes).
    roots : ndarray of shape (n_trees,)
        Each tree's root, in summation order.
    depths : ndarray of shape (n_trees,)
        Levels of each tree (edges on its longest root-to-leaf path).
    start, divisor : float
        The sum starts at ``start`` (the boosting baseline, or 0) and is divided by ``divisor``.
    float32_inputs : bool
        Whether inputs are rounded to float32 before comparing (scikit-learn's trees do).
    """

    feature: np.ndarray
    threshold: np.ndarray
    missing_left: np.ndarray
    children: np.ndarray
    value: np.ndarray
    roots: np.ndarray
    depths: np.ndarray
    start: float
    divisor: float
    float32_inputs: bool

    def __post_init__(self) -> None:
        # Deepest trees first, so that level L walks only the trees deeper than L: a prefix of the rows
        # of the (trees, samples) node array, contiguous in memory.
        order = np.argsort(-self.depths, kind="stable")
        levels = np.searchsorted(-self.depths[order], -np.arange(int(self.depths.max(initial=0))), side="right")
        object.__setattr__(self, "_order", order)
        object.__setattr__(self, "_levels", levels.tolist())

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The ensemble's output for each row of ``X`` (n_samples, n_features), float64."""
        X = np.asarray(X, dtype=np.float32 if self.float32_inputs else np.float64)
        rows = X.shape[0]
        by_feature = np.ascontiguousarray(X.T).ravel()  # feature f of sample i at f * rows + i
        has_nan = bool(np.isnan(by_feature).any())
        samples = np.arange(rows, dtype=np.intp)[None, :]
        feature_start = self.feature * rows
        order = self._order  # type: ignore[attr-defined]
        node = np.repeat(self.roots[order][:, None], rows, axis=1)
        for count in self._levels:  # type: ignore[attr-defined]
            walking = node[:count]
            x = by_feature[feature_start[walking] + samples]
            go_left = x <= self.threshold[walking]  # a float32 x compares as its float64 value, as in the Cython
            if has_nan:
                go_left |= np.isnan(x) & self.missing_left[walking]
            node[:count] = self.children[2 * walking + go_left]
        leaves = np.empty_like(node)
        leaves[order] = node  # back to summation order
        # add.accumulate sums strictly left to right, the order of scikit-learn's `raw += tree(x)`
        # (np.sum would pair terms and differ in the last bits).
        terms = np.concatenate([np.full((1, rows), self.start), self.value[leaves]], axis=0)
        return np.add.accumulate(terms, axis=0)[-1] / self.divisor

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Numeric arrays that :meth:`from_arrays` rebuilds this ensemble from."""
        scalars = np.array([self.start, self.divisor, self.float32_inputs], dtype=np.float64)
        return {"feature": self.feature, "threshold": self.threshold, "missing_left": self.missing_left,
                "children": self.children, "value": self.value, "roots": self.roots, "depths": self.depths,
                "scalars": scalars}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> TreeEnsemble:
        """The ensemble :meth:`to_arrays` wrote."""
        start, divisor, float32_inputs = arrays["scalars"].tolist()
        return cls(arrays["feature"].astype(np.intp), arrays["threshold"].astype(np.float64),
                   arrays["missing_left"].astype(bool), arrays["children"].astype(np.intp),
                   arrays["value"].astype(np.float64), arrays["roots"].astype(np.intp),
                   arrays["depths"].astype(np.intp), float(start), float(divisor), bool(float32_inputs))


def _flatten(trees: list[dict[str, np.ndarray]], start: float, divisor: float,
             float32_inputs: bool) -> TreeEnsemble:
    """One ensemble from per-tree node arrays (``feature, threshold, missing_left, left, right, value, leaf``)."""
    offsets = np.cumsum([0] + [tree["value"].size for tree in trees])[:-1]
    parts: dict[str, list[np.ndarray]] = {name: [] for name in ("feature", "threshold", "missing_left", "value")}
    children, depths = [], []
    for offset, tree in zip(offsets, trees):
        own = np.arange(tree["value"].size)
        left = np.where(tree["leaf"], own, tree["left"]) + offset
        right = np.where(tree["leaf"], own, tree["right"]) + offset
        children.append(np.column_stack([right, left]).ravel())
        for name in parts:
            parts[name].append(tree[name])
        depths.append(_depth(tree))
    return TreeEnsemble(
        feature=np.concatenate(parts["feature"]).astype(np.intp),
        threshold=np.concatenate(parts["threshold"]).astype(np.float64),
        missing_left=np.concatenate(parts["missing_left"]).astype(bool),
        children=np.concatenate(children).astype(np.intp), value=np.concatenate(parts["value"]).astype(np.float64),
        roots=offsets.astype(np.intp), depths=np.array(depths, dtype=np.intp), start=start, divisor=divisor,
        float32_inputs=float32_inputs)


def _depth(tree: dict[str, np.ndarray]) -> int:
    """Edges on the longest root-to-leaf path."""
    level, frontier = 0, np.array([0])
    while True:
        inner = frontier[~tree["leaf"][frontier]]
        if inner.size == 0:
            return level
        frontier = np.concatenate([tree["left"][inner], tree["right"][inner]])
        level += 1


def from_hist_gradient_boosting(model: Any) -> TreeEnsemble:
    """Export a fitted single-output, squared-error ``HistGradientBoostingRegressor`` without categorical splits."""
    if model.n_trees_per_iteration_ != 1 or np.asarray(model._baseline_prediction).size != 1:
        raise ValueError("only single-output histogram boosting is exported")
    if type(model._loss).__name__ != "HalfSquaredError":
        raise ValueError(f"loss {type(model._loss).__name__} has a non-identity link; only squared error is exported")
    trees = []
    for (predictor,) in model._predictors:
        nodes = predictor.nodes
        if nodes["is_categorical"].any():
            raise ValueError("categorical splits (bitsets) are not exported")
        trees.append({"feature": nodes["feature_idx"], "threshold": nodes["num_threshold"],
                      "missing_left": nodes["missing_go_to_left"].astype(bool), "left": nodes["left"].astype(np.intp),
                      "right": nodes["right"].astype(np.intp), "value": nodes["value"],
                      "leaf": nodes["is_leaf"].astype(bool)})
    baseline = float(np.asarray(model._baseline_prediction).ravel()[0])
    return _flatten(trees, start=baseline, divisor=1.0, float32_inputs=False)


def from_extra_trees(model: Any) -> TreeEnsemble:
    """Export a fitted single-output ``ExtraTreesRegressor`` (or any forest of regression trees)."""
    if model.n_outputs_ != 1:
        raise ValueError("only single-output forests are exported")
    trees = []
    for estimator in model.estimators_:
        tree = estimator.tree_
        leaf = tree.children_left == -1  # scikit-learn's TREE_LEAF
        missing = getattr(tree, "missing_go_to_left", np.zeros(tree.node_count, dtype=bool))
        trees.append({"feature": np.where(leaf, 0, tree.feature), "threshold": tree.threshold,
                      "missing_left": np.asarray(missing).astype(bool), "left": tree.children_left.astype(np.intp),
                      "right": tree.children_right.astype(np.intp), "value": tree.value[:, 0, 0], "leaf": leaf})
    return _flatten(trees, start=0.0, divisor=float(len(model.estimators_)), float32_inputs=True)
