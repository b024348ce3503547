"""parplan: plan the parallelism of LLM training jobs.

The public API (:mod:`parplan.api`) is imported on first use (PEP 562, ``costmodel.lazy``):
``parplan --help`` and a command that fails on its flags start without the cost model,
numpy, scikit-learn or Optuna.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from costmodel.lazy import lazy_exports

if TYPE_CHECKING:
    from parplan.api import (
        Prediction,
        SearchOutcome,
        StudyOutcome,
        list_gpus,
        list_models,
        predict,
        predict_file,
        search,
        study,
    )

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "parplan.api": ("Prediction", "SearchOutcome", "StudyOutcome", "list_gpus", "list_models", "predict",
                    "predict_file", "search", "study"),
}, globals())
__version__ = "0.1.0"
