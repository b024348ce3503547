"""Operator predictors: scikit-learn estimators fitted on a light sample of a profile's timings."""

from costmodel.predictors._attention import AttentionPredictor
from costmodel.predictors._base import OperatorPredictor
from costmodel.predictors._cache import cache_dir
from costmodel.predictors._collective import CollectivePredictor
from costmodel.predictors._fitted import (
    CODE_VERSION,
    FITTED_DIR,
    RANGE_MARGIN,
    FittedProfile,
    device_gpu,
    fit_profile,
    fitted_profile,
    forget_fitted,
    store_fitted,
)
from costmodel.predictors._gemm import GemmPredictor
from costmodel.predictors._memory import MemoryPredictor
from costmodel.predictors._sampling import grid_outliers, light_sample
from costmodel.predictors._scoring import FamilyError

__all__ = [
    "CODE_VERSION",
    "FITTED_DIR",
    "RANGE_MARGIN",
    "AttentionPredictor",
    "CollectivePredictor",
    "FamilyError",
    "FittedProfile",
    "GemmPredictor",
    "MemoryPredictor",
    "OperatorPredictor",
    "cache_dir",
    "device_gpu",
    "fit_profile",
    "fitted_profile",
    "forget_fitted",
    "grid_outliers",
    "light_sample",
    "store_fitted",
]
