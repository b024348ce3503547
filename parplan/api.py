"""The public API: thin functions over the library layers, returning contract-shaped data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from constraints import check
from costmodel.specs import RunSpec, gpu_catalog, load_run_spec, model_catalog
from costmodel.specs.gpu import GiB


def predict(run: RunSpec) -> dict[str, Any]:
    """Prediction of one run in the shape of ``parplan predict --json`` (contract version 1).

    Time fields are added only by the cost model; they are never invented here.
    """
    verdict = check(run)
    return {
        "fits": verdict.fits,
        "peak_memory_gib": round(verdict.peak_memory_gib, 4),
        "usable_memory_gib": round(verdict.usable_bytes / GiB, 4),
        "peak_memory_stage": verdict.memory.stage,
        "memory": {k: round(v, 4) for k, v in verdict.memory.as_gib().items()},
        "violations": list(verdict.violations),
    }


def predict_file(path: str | Path) -> dict[str, Any]:
    """Load a run spec file and predict it."""
    return predict(load_run_spec(path))


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
