"""The machine-speed probe of the miniature benchmark, and the speed normalisation it allows.

This VM's host changes speed under it: on 2026-12-02 01:23-01:27 (``/work/notes/s6/mini7``) nothing else
ran in the VM (other processes 0.01 cores busy), yet one configuration's fastest step swung up to 2x between
rounds a minute apart (L4-dp1-b8 40.5 / 60.2 / 65.8 ms) and the co-running measurement's two "alone" medians
were 14.9 and 30.4 ms. The load average and the other processes' busy time cannot see it: the slower CPU time
is the recording's own. So every recording is bracketed by :func:`probe_speed`, a fixed single-thread
workload of the miniature's own operators, timed on each core the ranks may use, one core at a time.

Why each core alone: the ranks are not pinned and migrate over every core of the affinity mask, and the
cores of this VM differ (01:35: a 4-iteration chunk 6.3 ms on cpu0, 5.4 ms on cpu1), so the probe's figure is
the mean over the cores. It runs alone on each core, never beside the ranks or beside another probe, so it
measures the machine's speed and not what the what-if models itself (ranks per core, co-running slowdown):
a figure that changed with the configuration would cancel the very effects the edits predict.

:func:`speed_factors` turns the probes into each recording's speed relative to the median over all
recordings, and :func:`probe_tracking` says whether the probe tracked the recordings' own drift.

It does not track it well enough (first probed recording, 01:37-01:43, ``/work/notes/s6/mini8`` and
``probe_findings.md``): probe vs median step over rounds, correlation 0.42 and slope 0.43 over 36
recordings (dp1 -0.31, dp2 0.67, dp4 0.75), and normalising widens a configuration's spread over rounds
(max/min x1.381 raw, x1.424 normalised). Back-to-back probes show why: each core sits at one of two speeds
(a chunk ~7.3 or ~10.0 ms) and flips between probes 0.2 s apart, independently per core, so a probe seconds
from the profiled window (spawn and warm-up lie between) samples another state; only the longer multi-rank
windows average over states.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Mapping, Sequence

PROBE_WORK = (
    "v1: chunks of 4 x (gelu(x[512,128] @ w1[128,512]) @ w2[512,128], add, layer_norm), fp32, 1 torch "
    "thread; median of 15 chunks per core, each core alone (sched_setaffinity)")
"""What :func:`probe_speed` times, kept in every note: probes of different work are never compared."""
PROBE_CHUNKS, PROBE_ITERATIONS, PROBE_WARMUP = 15, 4, 3
_ROWS, _HIDDEN, _FFN = 512, 128, 512  # a b8 miniature's activations (8 x 64 tokens) and one MLP's widths


def _workload():  # type: ignore[no-untyped-def]
    """One chunk of the probe as a closure: the miniature's MLP operators at its shapes, fixed inputs."""
    import torch
    from torch.nn import functional

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(_ROWS, _HIDDEN, generator=generator)
    w1 = torch.randn(_HIDDEN, _FFN, generator=generator) * 0.05
    w2 = torch.randn(_FFN, _HIDDEN, generator=generator) * 0.05

    def chunk() -> None:
        for _ in range(PROBE_ITERATIONS):
            functional.layer_norm(x + functional.gelu(x @ w1) @ w2, (_HIDDEN,))

    return chunk


def probe_speed(cores: Sequence[int] | None = None) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The probe's median chunk time (s) on each of ``cores`` (default: this process's affinity), one
    core at a time; the process's affinity and torch thread count are restored afterwards (the ranks
    spawned next inherit the affinity)."""
    import torch

    allowed = os.sched_getaffinity(0)
    chosen = tuple(sorted(allowed if cores is None else cores))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    chunk, medians = _workload(), []
    try:
        for core in chosen:
            os.sched_setaffinity(0, {core})
            for _ in range(PROBE_WARMUP):
                chunk()
            times = []
            for _ in range(PROBE_CHUNKS):
                start = time.perf_counter()
                chunk()
                times.append(time.perf_counter() - start)
            medians.append(statistics.median(times))
    finally:
        os.sched_setaffinity(0, allowed)
        torch.set_num_threads(threads)
    return chosen, tuple(medians)


def recording_probe_s(before: Sequence[float], after: Sequence[float]) -> float:
    """One recording's probe time (s): the mean over its cores of the mean of the probes before and after."""
    return statistics.fmean((b + a) / 2.0 for b, a in zip(before, after, strict=True))


def speed_factors(probes: Mapping[str, float]) -> dict[str, float]:
    """Each recording's probe time / the median probe time over all recordings (> 1: the machine was slower).

    Dividing a recording's times by its factor expresses them at one common machine speed, that of the
    median recording; the reference is the same for every recording of a run, so a pair's error does not
    depend on it (the source's prediction / its factor over the target's step / its factor is the same
    ratio as the prediction x target-probe / source-probe).
    """
    reference = statistics.median(probes.values())
    return {key: value / reference for key, value in probes.items()}


def probe_tracking(step_s: Mapping[str, Sequence[float]],
                   probe_s: Mapping[str, Sequence[float]]) -> dict[str, float] | None:
    """Whether the probe tracked the recordings' drift: per configuration (a key), each round's step and probe
    over that configuration's median over rounds, compared over all recordings on a log scale.

    Returns the Pearson correlation and the least-squares slope of log step ratio on log probe ratio (1:
    the step slowed as much as the probe), and the mean over configurations of the step's max/min over
    rounds, raw and divided by the probe ratio; None with fewer than 3 recordings or a constant probe.
    """
    xs, ys, raw, normalised = [], [], [], []
    for key, steps in step_s.items():
        probes = probe_s[key]
        step_mid, probe_mid = statistics.median(steps), statistics.median(probes)
        ratios = [(math.log(p / probe_mid), math.log(s / step_mid)) for s, p in zip(steps, probes, strict=True)]
        xs += [x for x, _ in ratios]
        ys += [y for _, y in ratios]
        raw.append(max(steps) / min(steps))
        scaled = [s / (p / probe_mid) for s, p in zip(steps, probes, strict=True)]
        normalised.append(max(scaled) / min(scaled))
    if len(xs) < 3 or statistics.pvariance(xs) == 0.0 or statistics.pvariance(ys) == 0.0:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    cov = statistics.fmean((x - mx) * (y - my) for x, y in zip(xs, ys))
    return {"correlation": cov / math.sqrt(statistics.pvariance(xs) * statistics.pvariance(ys)),
            "slope": cov / statistics.pvariance(xs), "recordings": float(len(xs)),
            "spread_raw": statistics.fmean(raw), "spread_normalised": statistics.fmean(normalised)}
