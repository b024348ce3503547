"""The shipped model and GPU catalogs (YAML package data)."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

from costmodel.specs.errors import SpecError, choices_hint
from costmodel.specs.gpu import GPUSpec, gpu_from_mapping
from costmodel.specs.model import ModelSpec, model_from_mapping
from costmodel.specs.userfile import RefusedInput, parse_yaml


def _read_catalog(filename: str) -> dict[str, Any]:
    text = resources.files("costmodel.catalog").joinpath(filename).read_text(encoding="utf-8")
    try:  # anchors name shared figures once (gpus.yaml); a duplicate entry must not silently replace one
        data = parse_yaml(text, allow_aliases=True)
    except RefusedInput as exc:  # pragma: no cover - shipped file
        raise RuntimeError(f"catalog {filename}: {exc}") from None
    if not isinstance(data, dict):  # pragma: no cover - shipped file
        raise RuntimeError(f"catalog {filename} must be a mapping of name to entry")
    return data


@lru_cache(maxsize=1)
def model_catalog() -> dict[str, ModelSpec]:
    """Every catalog model by name."""
    out = {}
    for name, entry in _read_catalog("models.yaml").items():
        out[name] = model_from_mapping({"name": name, **entry}, section=f"models.yaml:{name}")
    return out


@lru_cache(maxsize=1)
def gpu_catalog() -> dict[str, GPUSpec]:
    """Every catalog GPU by name."""
    return {name: gpu_from_mapping(name, entry, section=f"gpus.yaml:{name}")
            for name, entry in _read_catalog("gpus.yaml").items()}


def get_model(name: str) -> ModelSpec:
    """Catalog model ``name``; the error lists the known names."""
    catalog = model_catalog()
    if name not in catalog:
        raise SpecError("model", name, "a catalog model (" + choices_hint(str(name), list(catalog),
                                                                               "`parplan catalog models`") + ")")
    return catalog[name]


def get_gpu(name: str) -> GPUSpec:
    """Catalog GPU ``name``; the error lists the known names."""
    catalog = gpu_catalog()
    if name not in catalog:
        raise SpecError("cluster.gpu", name, "a catalog GPU (" + choices_hint(str(name), list(catalog),
                                                                                 "`parplan catalog gpus`") + ")")
    return catalog[name]
