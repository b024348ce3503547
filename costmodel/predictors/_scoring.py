"""Held-out accuracy of a fitted family against its bare roofline: what decides whether the fit is used."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np

if TYPE_CHECKING:
    from costmodel.predictors._base import OperatorPredictor
    from costmodel.predictors._compiled import CompiledPredictor

__all__ = ["MAX_SCORED_ROWS", "FamilyError", "score_family"]

# Held-out rows scored per family, evenly spaced over the held-out set: a user profile (25% held
# out of at most 20,000 rows) is scored on all of its rows; a built-in table's 30,000 held-out
# GEMM rows would cost ~2 s of predictions on every fit, for an answer 5,000 rows already give.
MAX_SCORED_ROWS: Final = 5000


@dataclass(frozen=True)
class FamilyError:
    """Held-out accuracy of one family's predictor.

    ``mape`` is the mean of ``|predicted / measured - 1|`` over the held-out
    rows scored (``n_test``, at most ``MAX_SCORED_ROWS``), ``p90`` its 90th
    percentile; ``roofline_mape`` the same for the bare roofline (the
    predictor's ``roofline_s``, the baseline the fit must beat). None when
    nothing was held out.
    """

    family: str
    n_train: int
    n_test: int
    mape: float | None
    p90: float | None
    roofline_mape: float | None

    @property
    def worse_than_roofline(self) -> bool:
        """Whether the fit misses the held-out rows by more than the bare roofline does (False untested)."""
        return self.mape is not None and self.roofline_mape is not None and self.mape > self.roofline_mape

    def to_dict(self) -> dict[str, Any]:
        """Plain fields, for a report or a JSON line."""
        return asdict(self)


def score_family(family: str, predictor: CompiledPredictor | OperatorPredictor, X: np.ndarray,
                 latency: np.ndarray, n_train: int) -> FamilyError:
    """Score ``predictor`` on held-out shapes ``X`` with measured ``latency`` (s)."""
    if latency.size == 0:
        return FamilyError(family, n_train, 0, None, None, None)
    if latency.size > MAX_SCORED_ROWS:
        keep = np.unique(np.linspace(0, latency.size - 1, MAX_SCORED_ROWS).round().astype(np.int64))
        X, latency = X[keep], latency[keep]
    error = np.abs(predictor.predict(X) / latency - 1.0)
    roofline = np.abs(predictor.roofline_s(X) / latency - 1.0)
    return FamilyError(family, n_train, int(latency.size), float(error.mean()), float(np.quantile(error, 0.9)),
                       float(roofline.mean()))
