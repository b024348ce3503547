"""Operator predictors: scikit-learn estimators fitted on a light sample of a profile's timings.

Names are imported on first use (``costmodel.lazy``): scikit-learn is imported
only to fit; fitted predictors are compiled to numpy arrays
(``CompiledPredictor``), which is what predictions and the cache use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from costmodel.lazy import lazy_exports

if TYPE_CHECKING:
    from costmodel.predictors._attention import AttentionPredictor
    from costmodel.predictors._base import OperatorPredictor
    from costmodel.predictors._cache import cache_dir
    from costmodel.predictors._collective import CollectivePredictor
    from costmodel.predictors._compiled import CompiledPredictor, compile_predictor
    from costmodel.predictors._fitted import (
        CODE_VERSION,
        FITTED_DIR,
        FittedProfile,
        device_gpu,
        fit_profile,
        fitted_profile,
        forget_fitted,
        store_fitted,
    )
    from costmodel.predictors._gemm import GemmPredictor
    from costmodel.predictors._memory import MemoryPredictor
    from costmodel.predictors._range import RANGE_MARGIN
    from costmodel.predictors._sampling import grid_outliers, light_sample
    from costmodel.predictors._scoring import FamilyError

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "costmodel.predictors._attention": ("AttentionPredictor",),
    "costmodel.predictors._base": ("OperatorPredictor",),
    "costmodel.predictors._cache": ("cache_dir",),
    "costmodel.predictors._collective": ("CollectivePredictor",),
    "costmodel.predictors._compiled": ("CompiledPredictor", "compile_predictor"),
    "costmodel.predictors._fitted": ("CODE_VERSION", "FITTED_DIR", "FittedProfile", "device_gpu", "fit_profile",
                                     "fitted_profile", "forget_fitted", "store_fitted"),
    "costmodel.predictors._gemm": ("GemmPredictor",),
    "costmodel.predictors._memory": ("MemoryPredictor",),
    "costmodel.predictors._range": ("RANGE_MARGIN",),
    "costmodel.predictors._sampling": ("grid_outliers", "light_sample"),
    "costmodel.predictors._scoring": ("FamilyError",),
}, globals())
