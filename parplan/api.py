"""The public API: thin functions over the library layers, returning contract-shaped data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from costmodel.predict import predict_run
from costmodel.specs import RunSpec, gpu_catalog, load_run_spec, model_catalog


def predict(run: RunSpec, profile_dir: str | Path | None = None) -> dict[str, Any]:
    """Prediction of one run in the shape of ``parplan predict --json`` (contract version 1)."""
    return {**predict_run(run, profile_dir), "framework": run.framework.name}


def predict_file(path: str | Path, profile_dir: str | Path | None = None) -> dict[str, Any]:
    """Load a run spec file and predict it."""
    return predict(load_run_spec(path), profile_dir)


def validate_file(path: str | Path, profile_dir: str | Path | None = None) -> dict[str, Any]:
    """Predict a validation set (see ``studies.validate``)."""
    from studies.validate import validate_file as _validate_file

    return _validate_file(path, profile_dir)


def list_models() -> list[dict[str, Any]]:
    """Catalog models with their computed parameter counts."""
    rows = []
    for name, m in model_catalog().items():
        rows.append({
            "name": name,
            "num_params": m.num_params,
            "num_active_params": m.num_active_params,
            "published_params": m.published_params,
            "num_layers": m.num_layers,
            "hidden_size": m.hidden_size,
            "num_attention_heads": m.num_attention_heads,
            "num_query_groups": m.num_query_groups,
            "ffn_hidden_size": m.ffn_hidden_size,
            "vocab_size": m.vocab_size,
            "seq_length": m.seq_length,
            "num_experts": m.num_experts,
            "source": m.source,
        })
    return rows


def list_gpus() -> list[dict[str, Any]]:
    """Catalog GPUs in catalog units, with their sources."""
    return [gpu.to_dict() for gpu in gpu_catalog().values()]
