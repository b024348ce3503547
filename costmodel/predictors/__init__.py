"""Operator predictors: scikit-learn estimators fitted on a light sample of a profile's timings."""

from costmodel.predictors._attention import AttentionPredictor
from costmodel.predictors._base import OperatorPredictor
from costmodel.predictors._cache import cache_dir
from costmodel.predictors._collective import CollectivePredictor
from costmodel.predictors._fitted import (
    CODE_VERSION,
    RANGE_MARGIN,
    FittedProfile,
    fit_profile,
    fitted_profile,
    forget_fitted,
)
from costmodel.predictors._gemm import GemmPredictor
from costmodel.predictors._sampling import grid_outliers, light_sample

__all__ = [
    "CODE_VERSION",
    "RANGE_MARGIN",
    "AttentionPredictor",
    "CollectivePredictor",
    "FittedProfile",
    "GemmPredictor",
    "OperatorPredictor",
    "cache_dir",
    "fit_profile",
    "fitted_profile",
    "forget_fitted",
    "grid_outliers",
    "light_sample",
]
