"""Helpers of benchmarks/sharding.py's measured miniatures (no processes started here)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks._sharding_miniature import critical_cpu_seconds  # noqa: E402


def test_each_phase_lasts_as_long_as_its_busiest_rank_and_the_fastest_step_counts():
    # phases[rank, plan, step, phase]: one plan, two steps, two phases, two ranks
    phases = np.array([[[[1.0, 5.0], [2.0, 2.0]]],
                       [[[3.0, 1.0], [1.0, 4.0]]]])
    # step 0: max(1, 3) + max(5, 1) = 8; step 1: max(2, 1) + max(2, 4) = 6
    assert critical_cpu_seconds(phases).tolist() == [6.0]


def test_a_rank_idle_in_a_phase_does_not_shorten_it():
    busy = np.array([[[[4.0]]], [[[0.0]]]])
    assert critical_cpu_seconds(busy).tolist() == [4.0]
