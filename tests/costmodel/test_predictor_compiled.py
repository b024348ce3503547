"""Compiled predictors (numpy only) predict what the scikit-learn estimators predict.

Trees (histogram boosting, extra trees) must agree bit for bit, the spline
family to 1e-12 relative, on random shapes inside and far outside the sampled
range, and after a round trip through the data-only cache format.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.ensemble import HistGradientBoostingRegressor

from costmodel.predictors import AttentionPredictor, CollectivePredictor, GemmPredictor, MemoryPredictor
from costmodel.predictors._compiled import CompiledPredictor, compile_predictor
from costmodel.predictors._physics import gemm_roofline_s
from costmodel.predictors._trees import from_hist_gradient_boosting

RNG_SEED = 0


def _gemm(rng: np.random.Generator) -> tuple[GemmPredictor, np.ndarray, np.ndarray]:
    X = np.exp2(rng.uniform([4, 8, 8], [14, 14, 14], size=(500, 3))).round()
    y = gemm_roofline_s(*X.T, 989.4e12, 3350e9) / rng.uniform(0.4, 0.8, 500) + 4e-6
    return GemmPredictor(random_state=0), X, y


def _attention(rng: np.random.Generator) -> tuple[AttentionPredictor, np.ndarray, np.ndarray]:
    X = np.column_stack([rng.integers(1, 16, 400), np.exp2(rng.integers(8, 15, 400)), rng.choice([8, 32, 64], 400),
                         rng.choice([1, 8], 400), rng.choice([64, 128], 400)]).astype(float)
    y = 2.0 * X[:, 0] * X[:, 1] ** 2 * X[:, 2] * X[:, 4] / 4e14 * rng.uniform(1.0, 1.5, 400) + 1e-5
    return AttentionPredictor(max_iter=50, random_state=0), X, y


def _collective(rng: np.random.Generator) -> tuple[CollectivePredictor, np.ndarray, np.ndarray]:
    X = np.column_stack([rng.choice([2, 4, 8], 60), np.exp2(rng.integers(9, 30, 60))]).astype(float)
    y = 8e-6 + X[:, 1] / 3.5e11 * rng.uniform(1.0, 1.3, 60)
    return CollectivePredictor(op="all_gather", random_state=0), X, y


def _memory(rng: np.random.Generator) -> tuple[MemoryPredictor, np.ndarray, np.ndarray]:
    X = np.exp2(rng.uniform(12, 28, (25, 1))).round()
    y = 4.0 * X[:, 0] / 2.5e12 * rng.uniform(1.0, 1.2, 25) + 3e-6
    return MemoryPredictor(), X, y


FAMILIES = {"gemm": _gemm, "attention": _attention, "collective": _collective, "memory": _memory}


def _queries(X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Shapes inside the sample's range and up to 1e4x beyond it on either side, plus the training rows."""
    low, high = np.log(X.min(axis=0)), np.log(X.max(axis=0))
    inside = np.exp(rng.uniform(low, high, size=(300, X.shape[1]))).round()
    outside = np.exp(rng.uniform(low - np.log(1e4), high + np.log(1e4), size=(300, X.shape[1]))).round()
    return np.vstack([X, inside, np.maximum(outside, 1.0)])


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def fitted(request) -> tuple[str, object, np.ndarray]:
    rng = np.random.default_rng(RNG_SEED)
    estimator, X, y = FAMILIES[request.param](rng)
    return request.param, estimator.fit(X, y), _queries(X, rng)


def _assert_agree(kind: str, compiled: np.ndarray, reference: np.ndarray) -> None:
    if kind == "memory":
        np.testing.assert_allclose(compiled, reference, rtol=1e-12, atol=0)
    else:
        np.testing.assert_array_equal(compiled, reference)  # bit for bit


def test_compiled_predicts_what_the_estimator_predicts(fitted):
    kind, estimator, Q = fitted
    compiled = compile_predictor(estimator)
    _assert_agree(kind, compiled.predict(Q), estimator.predict(Q))
    np.testing.assert_array_equal(compiled.roofline_s(Q), estimator.roofline_s(Q))


def test_compiled_agrees_row_by_row(fitted):
    """One row at a time (the timer's usual call) gives the same answer as the batch."""
    kind, estimator, Q = fitted
    compiled = compile_predictor(estimator)
    single = np.array([compiled.predict(row[None, :])[0] for row in Q[::37]])
    _assert_agree(kind, single, estimator.predict(Q[::37]))


def test_round_trip_through_arrays_changes_nothing(fitted):
    kind, estimator, Q = fitted
    compiled = compile_predictor(estimator)
    arrays, meta = compiled.to_arrays()
    assert all(not np.asarray(value).dtype.hasobject for value in arrays.values())
    again = CompiledPredictor.from_arrays({k: np.array(v) for k, v in arrays.items()}, meta)
    np.testing.assert_array_equal(again.predict(Q), compiled.predict(Q))
    assert again.kind == kind and again.shape_columns == estimator.shape_columns


def test_unknown_family_or_regressor_is_refused(fitted):
    kind, estimator, _ = fitted
    arrays, meta = compile_predictor(estimator).to_arrays()
    with pytest.raises(ValueError, match="known family"):
        CompiledPredictor.from_arrays(arrays, {**meta, "kind": "fft"})
    with pytest.raises(KeyError):
        CompiledPredictor.from_arrays(arrays, {**meta, "regressor": "neural"})


def test_missing_values_follow_the_learned_side():
    """NaN inputs go where scikit-learn sends them (its missing_go_to_left), bit for bit."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 3))
    X[rng.random(X.shape) < 0.2] = np.nan
    y = np.nan_to_num(X[:, 0]) * 2 + np.isnan(X[:, 1]) + rng.normal(scale=0.1, size=400)
    model = HistGradientBoostingRegressor(max_iter=30, random_state=0).fit(X, y)
    Q = rng.normal(size=(200, 3))
    Q[rng.random(Q.shape) < 0.3] = np.nan
    np.testing.assert_array_equal(from_hist_gradient_boosting(model).predict(Q), model.predict(Q))


def test_categorical_splits_are_not_exported():
    rng = np.random.default_rng(2)
    X = np.column_stack([rng.integers(0, 5, 300), rng.normal(size=300)]).astype(float)
    y = (X[:, 0] == 3) * 1.0 + X[:, 1]
    model = HistGradientBoostingRegressor(max_iter=5, categorical_features=[0], random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="categorical"):
        from_hist_gradient_boosting(model)


@pytest.mark.parametrize("bad", [[], [1.0, 2.0], [[]], [[[1.0]]]], ids=["empty-list", "1-d", "no-columns", "3-d"])
def test_input_that_is_not_rows_of_shape_columns_is_refused(fitted, bad):
    """As scikit-learn's validation would: no silent single prediction from ``[]`` or a 1-D row."""
    _, estimator, _ = fitted
    compiled = compile_predictor(estimator)
    with pytest.raises(ValueError, match="'X' parameter must be a 2-D array"):
        compiled.predict(bad)
    with pytest.raises(ValueError, match="'X' parameter must be a 2-D array"):
        compiled.roofline_s(bad)


def test_too_few_columns_are_refused(fitted):
    _, estimator, Q = fitted
    compiled = compile_predictor(estimator)
    with pytest.raises(ValueError, match=f"at least the {len(compiled.shape_columns)} shape columns"):
        compiled.predict(Q[:, :-1])


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_shapes_are_refused(fitted, value):
    _, estimator, Q = fitted
    compiled = compile_predictor(estimator)
    bad = Q[:5].copy()
    bad[3, 0] = value
    with pytest.raises(ValueError, match=r"finite shapes\. Got (nan|inf|-inf) in row 3, column 0"):
        compiled.predict(bad)
    with pytest.raises(ValueError, match="finite shapes"):
        compiled.roofline_s(bad)


def test_an_empty_batch_gives_an_empty_answer(fitted):
    _, estimator, Q = fitted
    compiled = compile_predictor(estimator)
    empty = np.empty((0, Q.shape[1]))
    assert compiled.predict(empty).shape == (0,) and compiled.roofline_s(empty).shape == (0,)


def test_a_regressor_given_too_few_columns_refuses_them(fitted):
    """A narrower input would read another row's values through the trees' flat index."""
    _, estimator, Q = fitted
    regressor = compile_predictor(estimator).regressor
    narrow = np.ones((4, regressor.min_features - 1))
    with pytest.raises(ValueError, match=f"at least {regressor.min_features} columns"):
        regressor.predict(narrow)
