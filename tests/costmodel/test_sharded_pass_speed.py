"""The flat ``sharded_pass_seconds`` loop replays a pass exactly as the plain event loop it replaced."""

from __future__ import annotations

import math
import random

from costmodel.llm.sharding import sharded_pass_seconds


def _reference_finish(start: float, work: float, busy: list[tuple[float, float]], first: int,
                      slowdown: float) -> tuple[float, int]:
    """When compute started at ``start`` ends, ``1 + slowdown`` slower inside the ``busy`` intervals."""
    t, left, i = start, work, first
    while i < len(busy) and busy[i][1] <= t:
        i += 1
    while left > 0 and i < len(busy):
        begin, end = busy[i]
        if begin > t:
            free = min(left, begin - t)
            t, left = t + free, left - free
            if left <= 0:
                break
        slowed = (end - max(t, begin))
        if left * (1 + slowdown) <= slowed:
            return max(t, begin) + left * (1 + slowdown), i
        t, left = end, left - slowed / (1 + slowdown)
        i += 1
    return t + max(left, 0.0), i


def _reference_pass_seconds(layers: int, compute_s: float, gather_s: float, scatter_s: float,
                            prefetch: float, slowdown: float) -> float:
    """The pass replayed the plain way: every gather issued as soon as its trigger time is known."""
    if layers <= 0:
        return 0.0
    busy: list[tuple[float, float]] = []
    done: list[float] = []
    starts: list[float] = []
    ends: list[float] = []
    comm_free, first = 0.0, 0

    def issue(at: float, seconds: float) -> float:
        nonlocal comm_free
        begin = max(at, comm_free)
        comm_free = begin + seconds
        if seconds > 0:
            busy.append((begin, comm_free))
        return comm_free

    def trigger(j: int) -> float | None:
        p = j - prefetch
        if p <= 0:
            return 0.0
        k = math.floor(p)
        if p == k:
            return ends[k - 1] if k - 1 < len(ends) else None
        return starts[k] + (p - k) * compute_s if k < len(starts) else None

    def issue_ready() -> None:
        while len(done) < layers and (at := trigger(len(done))) is not None:
            done.append(issue(at, gather_s))

    for i in range(layers):
        issue_ready()
        starts.append(max(ends[-1] if ends else 0.0, done[i]))
        issue_ready()
        end, first = _reference_finish(starts[-1], compute_s, busy, first, slowdown)
        ends.append(end)
        if scatter_s > 0:
            issue(end, scatter_s)
    return max(ends[-1], comm_free)


def test_sharded_pass_matches_the_plain_event_loop_to_1e_12() -> None:
    rng = random.Random(20240611)

    def log_uniform(low: float, high: float) -> float:
        return math.exp(rng.uniform(math.log(low), math.log(high)))

    def comm() -> float:  # none, hidden under compute, or pacing the pass
        return 0.0 if rng.random() < 0.2 else log_uniform(1e-5, 2e-1)

    windows = [0, 0.3, 0.5, 1, 1.0, 1.5, 2.0, 2.7, 3, 7.0, 40.0, 2 + 4.4e-16, 5e7 / 2.2e8, 1e9]
    for _ in range(400):
        prefetch = rng.choice(windows) if rng.random() < 0.7 else rng.uniform(0.0, 5.0)
        args = (rng.randint(1, 130), log_uniform(1e-4, 1e-1), comm(), comm(), prefetch, rng.choice([0.0, 0.189]))
        expected = _reference_pass_seconds(*args)
        assert math.isclose(sharded_pass_seconds.__wrapped__(*args), expected, rel_tol=1e-12, abs_tol=0.0), args
        assert math.isclose(sharded_pass_seconds(*args), expected, rel_tol=1e-12, abs_tol=0.0), args
