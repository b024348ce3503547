"""parplan: plan the parallelism of LLM training jobs."""

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

__all__ = ["Prediction", "SearchOutcome", "StudyOutcome", "list_gpus", "list_models", "predict", "predict_file",
           "search", "study"]
__version__ = "0.1.0"
