"""Frozen specifications: models, GPUs, clusters, strategies and run specs."""

from costmodel.specs.catalog import get_gpu, get_model, gpu_catalog, model_catalog
from costmodel.specs.errors import SpecError
from costmodel.specs.gpu import ClusterSpec, GPUSpec
from costmodel.specs.model import ModelSpec
from costmodel.specs.runspec import RunSpec, load_run_spec, run_spec_from_mapping
from costmodel.specs.strategy import Strategy

__all__ = [
    "ClusterSpec",
    "GPUSpec",
    "ModelSpec",
    "RunSpec",
    "SpecError",
    "Strategy",
    "get_gpu",
    "get_model",
    "gpu_catalog",
    "load_run_spec",
    "model_catalog",
    "run_spec_from_mapping",
]
