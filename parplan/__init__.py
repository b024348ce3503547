"""parplan: plan the parallelism of LLM training jobs."""

from parplan.api import list_gpus, list_models, predict, predict_file

__all__ = ["list_gpus", "list_models", "predict", "predict_file"]
__version__ = "0.1.0"
