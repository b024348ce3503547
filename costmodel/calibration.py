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


def framework_overhead() -> tuple[float, float]:
    """(compute_scale, layer_overhead_s) fitted on the public runs; (1, 0) when not calibrated.

    ``compute_scale`` stretches the timed operators (sustained clocks and kernel
    gaps of a real training loop against isolated-kernel tables);
    ``layer_overhead_s`` is a fixed cost per layer and micro-batch (launch and
    framework work that small kernels cannot hide).
    """
    f = calibration().get("framework") or {}
    return float(f.get("compute_scale", 1.0)), float(f.get("layer_overhead_s", 0.0))
