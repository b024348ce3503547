"""Shared fixtures: small run-spec builders."""

from __future__ import annotations

import copy
from typing import Any

import pytest

BASE_RUN: dict[str, Any] = {
    "model": "llama3.1-8b",
    "seq_length": 4096,
    "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 16},
    "strategy": {"tp": 2, "pp": 2, "micro_batch_size": 1, "global_batch_size": 64,
                 "sequence_parallel": True, "recompute": "selective", "zero_stage": 1},
}


@pytest.fixture
def base_run() -> dict[str, Any]:
    """A legal, fitting run spec mapping that tests may modify."""
    return copy.deepcopy(BASE_RUN)


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Fitted predictors go to a per-session cache, never the user's ~/.cache."""
    import os

    os.environ.setdefault("PARPLAN_CACHE_DIR", str(tmp_path_factory.mktemp("parplan-cache")))
