"""Calibration fitted on published runs, kept apart from datasheet figures.

Reads ``costmodel/calibration.yaml`` (written by ``python benchmarks/calibrate.py``,
which records how every value was fitted). Absent values mean "not calibrated":
the prediction then carries no interval rather than an invented one.
"""

from __future__ import annotations

import math
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml


@lru_cache(maxsize=1)
def calibration() -> dict[str, Any]:
    """The shipped calibration mapping (empty when the file is absent)."""
    path = resources.files("costmodel").joinpath("calibration.yaml")
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def step_time_interval(step_time_s: float) -> list[float] | None:
    """80% interval from the validation residual quantiles (split-conformal on log ratios)."""
    q = calibration().get("interval")
    if not q:
        return None
    return [step_time_s * math.exp(q["log_ratio_q10"]), step_time_s * math.exp(q["log_ratio_q90"])]


def compute_scale() -> float:
    """The one global factor on the timed forward and backward operators; 1 when not calibrated.

    What the named mechanisms (``costmodel.llm.overheads``: kernel launch, data-parallel
    stragglers) and the timed optimizer step leave between isolated-kernel tables and a
    real training loop: sustained clocks under power limits and the gaps between kernels.
    Fitted once on all public runs by ``benchmarks/calibrate.py`` (never per family).
    """
    f = calibration().get("framework") or {}
    return float(f.get("compute_scale", 1.0))
