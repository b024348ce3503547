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

    @property
    def min_features(self) -> int:
        """Columns an input must have: one more than the highest feature any node reads."""
        return int(self.feature.max(initial=-1)) + 1

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The ensemble's output for each row of ``X`` (n_samples, n_features), float64.

        Raises
        ------
        ValueError
            If ``X`` is not 2-D with at least ``min_features`` columns (a narrower
            input would read another sample's values through the flat index).
        """
        X = np.asarray(X, dtype=np.float32 if self.float32_inputs else np.float64)
        if X.ndim != 2 or X.shape[1] < self.min_features:
            raise ValueError(f"The 'X' parameter must be 2-D with at least {self.min_features} columns. "
                             f"Got shape {X.shape} instead.")
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
        """The ensemble :meth:`to_arrays` wrote.

        Raises
        ------
        KeyError, ValueError
            If an array is missing, of the wrong kind or length, or an index is out
            of range (children, roots), a node is reached twice, or a stored depth
            is not its tree's: a file this version did not write.
        """
        kinds = {"feature": "iu", "threshold": "f", "missing_left": "b", "children": "iu", "value": "f",
                 "roots": "iu", "depths": "iu", "scalars": "f"}
        for name, allowed in kinds.items():
            if arrays[name].ndim != 1 or arrays[name].dtype.kind not in allowed:
                raise ValueError(f"tree array {name}: {arrays[name].dtype} {arrays[name].shape} is not a 1-D "
                                 f"array of kind {allowed!r}")
        nodes, trees = arrays["value"].size, arrays["roots"].size
        if nodes == 0 or trees == 0 or arrays["children"].size != 2 * nodes or arrays["depths"].size != trees \
                or any(arrays[name].size != nodes for name in ("feature", "threshold", "missing_left")):
            raise ValueError(f"tree arrays of inconsistent lengths for {nodes} nodes and {trees} trees")
        feature, children, roots = (arrays[name].astype(np.intp) for name in ("feature", "children", "roots"))
        if feature.min() < 0 or children.min() < 0 or children.max() >= nodes or roots.min() < 0 \
                or roots.max() >= nodes:
            raise ValueError("tree node indices (feature, children, roots) out of range")
        if arrays["scalars"].size != 3 or not np.isfinite(arrays["scalars"]).all() \
                or not np.isfinite(arrays["value"]).all():
            raise ValueError("tree leaf values or scalars are not finite")
        start, divisor, float32_inputs = arrays["scalars"].tolist()
        if divisor <= 0 or float32_inputs not in (0.0, 1.0):
            raise ValueError(f"tree scalars divisor={divisor}, float32_inputs={float32_inputs} out of range")
        depths = arrays["depths"].astype(np.intp)
        if not np.array_equal(depths, _walked_depths(children, roots)):
            raise ValueError("stored tree depths are not the trees' own")
        return cls(feature, arrays["threshold"].astype(np.float64), arrays["missing_left"].astype(bool), children,
                   arrays["value"].astype(np.float64), roots, depths, float(start), float(divisor),
                   bool(float32_inputs))


def _walked_depths(children: np.ndarray, roots: np.ndarray) -> np.ndarray:
    """Each tree's depth, walking ``children`` (in range) from ``roots`` level by level.

    Raises
    ------
    ValueError
        If a node is reached twice (shared between trees, or a cycle), so the walk ends within the node count.
    """
    own = np.arange(children.size // 2)
    leaf = (children[0::2] == own) & (children[1::2] == own)
    seen = np.zeros(own.size, dtype=bool)
    depths = np.zeros(roots.size, dtype=np.intp)
    frontier, tree = roots, np.arange(roots.size)
    level = marked = 0
    while frontier.size:
        already = seen[frontier].any()
        seen[frontier] = True
        # A node listed twice in one level marks fewer new nodes than the level holds.
        if already or np.count_nonzero(seen) - marked != frontier.size:
            raise ValueError("a tree node is reached twice: not a forest")
        marked += frontier.size
        inner = ~leaf[frontier]
        frontier, tree = frontier[inner], tree[inner]
        if frontier.size:
            level += 1
            depths[tree] = level
            frontier = np.concatenate([children[2 * frontier], children[2 * frontier + 1]])
            tree = np.concatenate([tree, tree])
    return depths


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
