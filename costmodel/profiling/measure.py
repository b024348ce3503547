"""The timing loop: warm-up, repeats, median and spread; CUDA events on a GPU, ``perf_counter`` on a CPU."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Measurement", "TimingPolicy", "measure"]


@dataclass(frozen=True, kw_only=True)
class TimingPolicy:
    """How hard to look at one operator.

    Parameters
    ----------
    warmup : int
        Untimed calls first (allocator, kernel selection, caches, clocks).
    min_repeats, max_repeats : int
        Timed samples: at least ``min_repeats`` (fewer, cut by the deadline,
        and the point is dropped), at most ``max_repeats``.
    target_s : float
        Stop repeating once the timed samples add up to this much (after
        ``min_repeats``): small kernels get many samples, large ones few.
    min_sample_s : float
        A sample shorter than this runs the operator ``inner`` times back to
        back and divides: a lone 10-microsecond call is dominated by timer and
        launch jitter.
    max_spread : float
        When the interquartile range exceeds this fraction of the median
        (another process took the device for part of the time), the samples
        are taken again, up to ``retries`` times, and the set with the lowest
        median kept: interference only ever adds time (the reasoning of
        ``timeit``'s best-of-N), so the lowest median is the one least
        disturbed. Each set's own median and spread are still what is recorded.
    retries : int
        Extra sets of samples allowed for a noisy point.
    """

    warmup: int = 2
    min_repeats: int = 5
    max_repeats: int = 50
    target_s: float = 0.1
    min_sample_s: float = 1e-3
    max_spread: float = 0.25
    retries: int = 2

    def __post_init__(self) -> None:
        if self.warmup < 1 or self.min_repeats < 1 or self.max_repeats < self.min_repeats:
            raise ValueError(f"The timing policy needs warmup >= 1 and 1 <= min_repeats <= max_repeats. "
                             f"Got {self.warmup}, {self.min_repeats}, {self.max_repeats} instead.")


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """The timed samples of one operator, seconds per call."""

    median_s: float
    q25_s: float
    q75_s: float
    min_s: float
    max_s: float
    repeats: int
    inner: int
    timer: str  # "cuda_events" or "perf_counter"

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median."""
        return (self.q75_s - self.q25_s) / self.median_s

    def as_record(self) -> dict[str, Any]:
        """Journal fields."""
        return {"median_s": self.median_s, "q25_s": self.q25_s, "q75_s": self.q75_s, "min_s": self.min_s,
                "max_s": self.max_s, "repeats": self.repeats, "inner": self.inner, "timer": self.timer}


def measure(fn: Callable[[], Any], *, device: str, deadline: float,
            policy: TimingPolicy | None = None) -> Measurement | None:
    """Time ``fn`` with warm-up and repeats.

    Parameters
    ----------
    fn : callable
        One execution of the operator (its inputs already allocated).
    device : str
        ``cuda`` (CUDA events around each sample, the GPU's own clock) or ``cpu``
        (``time.perf_counter``).
    deadline : float
        ``time.monotonic()`` value after which no new sample starts.
    policy : TimingPolicy, optional

    Returns
    -------
    Measurement or None
        None when the deadline cut the samples below ``policy.min_repeats``.
    """
    policy = policy or TimingPolicy()
    best: Measurement | None = None
    for _ in range(1 + policy.retries):
        result = _measure_once(fn, device, deadline, policy)
        if result is None:
            break
        if best is None or result.median_s < best.median_s:
            best = result
        if result.spread <= policy.max_spread:
            break
    return best


def _measure_once(fn: Callable[[], Any], device: str, deadline: float,
                  policy: TimingPolicy) -> Measurement | None:
    sync = _synchronizer(device)
    warm = math.inf
    for _ in range(policy.warmup):
        if time.monotonic() > deadline:
            return None
        start = time.perf_counter()
        fn()
        sync()
        warm = min(warm, time.perf_counter() - start)
    inner = max(1, min(1000, math.ceil(policy.min_sample_s / max(warm, 1e-9))))
    sample = _cuda_sample(fn, inner) if device == "cuda" else _cpu_sample(fn, inner)
    samples: list[float] = []
    while len(samples) < policy.max_repeats and time.monotonic() <= deadline:
        samples.append(sample())
        if len(samples) >= policy.min_repeats and sum(samples) * inner >= policy.target_s:
            break
    if len(samples) < policy.min_repeats:
        return None
    values = np.asarray(samples)
    q25, median, q75 = np.quantile(values, [0.25, 0.5, 0.75])
    return Measurement(median_s=float(median), q25_s=float(q25), q75_s=float(q75), min_s=float(values.min()),
                       max_s=float(values.max()), repeats=len(samples), inner=inner,
                       timer="cuda_events" if device == "cuda" else "perf_counter")


def _synchronizer(device: str) -> Callable[[], None]:
    if device != "cuda":
        return lambda: None
    import torch

    return torch.cuda.synchronize


def _cpu_sample(fn: Callable[[], Any], inner: int) -> Callable[[], float]:
    def sample() -> float:
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        return (time.perf_counter() - start) / inner

    return sample


def _cuda_sample(fn: Callable[[], Any], inner: int) -> Callable[[], float]:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def sample() -> float:
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()  # per sample, so that the deadline is checked against real progress
        return start.elapsed_time(end) * 1e-3 / inner

    return sample
