"""``parplan profile run``: time real operators within a budget and write a profile directory.

Order of work: the device's peak figures (a large GEMM and a large copy,
recorded as the profile's physics), then the targeted points of the given
runs, then the space-filling design streams, always drawing from the
stream that has used the least time, until the budget is spent; then the
collective sweep (``--ops comm``) in its share of the budget. A point whose
estimated time (roofline from the measured peaks, corrected by what the
stream's earlier points actually took) does not fit in what is left, or in
``max_point_fraction`` of the budget, is skipped and counted, not started.
Each measurement goes to the journal at once (see ``journal``).
"""

from __future__ import annotations

import math
import os
import platform
import re
import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from costmodel.profiles.profile import Profile
from costmodel.profiling import kernels
from costmodel.profiling.comm import CommResult, run_comm, under_torchrun
from costmodel.profiling.design import (
    CPU_BOUNDS,
    CUDA_BOUNDS,
    DesignBounds,
    SamplePoint,
    Targets,
    design_streams,
    targeted_points,
)
from costmodel.profiling.journal import Journal, check_session, rebuild
from costmodel.profiling.kinds import OP_GROUPS, SAMPLED_DTYPES
from costmodel.profiling.measure import TimingPolicy, measure
from costmodel.progress import StatusLine
from costmodel.specs.errors import SpecError, require_choice
from costmodel.specs.runspec import RunSpec

__all__ = ["SamplerConfig", "SamplerReport", "run_profile"]

_REBUILD_EVERY_S = 1.0  # the directory is a loadable profile within a second of each measurement
_PHYSICS_SHARE = 0.2  # of the budget, at most, for the peak probes
_CALL_OVERHEAD_S = {"cpu": 5e-6, "cuda": 10e-6}


@dataclass(frozen=True, kw_only=True)
class SamplerConfig:
    """What ``parplan profile run`` measures, where, for how long.

    Parameters
    ----------
    out : Path
        Profile directory (created; an existing one of the same device is resumed).
    device : str
        ``cpu`` or ``cuda``.
    ops : tuple of str
        ``--ops`` groups (``OP_GROUPS``).
    budget_s : float
        Wall-clock seconds for the whole run.
    dtype : str
        GEMM dtype of the design (``bf16`` or ``fp16``); targeted GEMMs keep their run's dtype.
    runs : tuple of RunSpec
        Runs whose operator shapes are measured first.
    threads : int, optional
        CPU threads for torch (default 1 on CPU: the steadiest timings on a shared machine; more
        threads profile a multi-threaded CPU, with more noise). Ignored on CUDA.
    num_procs : int, optional
        Local ranks of the collective sweep (default: 2 on CPU, every visible GPU on CUDA).
    device_name : str, optional
        Name to record as the profile's device (e.g. the GPU catalog name); default
        ``cpu`` or the CUDA device's name.
    seed : int
        Seed of the design and of the operators' input data.
    bounds : DesignBounds, optional
        Box of the space-filling design (default: ``CPU_BOUNDS`` or ``CUDA_BOUNDS``).
    policy : TimingPolicy
        Warm-up and repeats.
    max_point_fraction : float
        Largest share of the budget one point may take.
    progress : text stream, optional
        Where progress lines go (None: silent).
    """

    out: Path
    device: str = "cpu"
    ops: tuple[str, ...] = ("gemm",)
    budget_s: float = 300.0
    dtype: str = "bf16"
    runs: tuple[RunSpec, ...] = ()
    threads: int | None = None
    num_procs: int | None = None
    device_name: str | None = None
    seed: int = 0
    bounds: DesignBounds | None = None
    policy: TimingPolicy = field(default_factory=TimingPolicy)
    max_point_fraction: float = 0.1
    progress: TextIO | None = None

    def __post_init__(self) -> None:
        require_choice("device", self.device, ("cpu", "cuda"))
        require_choice("dtype", self.dtype, SAMPLED_DTYPES)
        for group in self.ops:
            require_choice("ops", group, tuple(OP_GROUPS))
        if not self.ops:
            raise SpecError("ops", "", "at least one of " + ", ".join(OP_GROUPS))
        if not (isinstance(self.budget_s, (int, float)) and math.isfinite(self.budget_s) and self.budget_s > 0):
            raise SpecError("budget-seconds", self.budget_s, "a positive number of seconds")
        if self.threads is not None and self.threads < 1:
            raise SpecError("threads", self.threads, "an integer >= 1")
        if self.num_procs is not None and self.num_procs < 2:
            raise SpecError("num-procs", self.num_procs, "an integer >= 2 (a collective needs two ranks)")
        if not 0 < self.max_point_fraction <= 1:
            raise SpecError("max_point_fraction", self.max_point_fraction, "in (0, 1]")


@dataclass
class SamplerReport:
    """What a sampler run did."""

    out: Path
    elapsed_s: float = 0.0
    measured: Counter[str] = field(default_factory=Counter)  # stream -> points measured now
    resumed: int = 0  # points already in the journal, not measured again
    too_slow: int = 0  # skipped: estimated time beyond the budget left or the per-point cap
    too_large: int = 0  # skipped: tensors beyond half the free memory
    cut: int = 0  # started, but the deadline came before enough repeats
    failed: Counter[str] = field(default_factory=Counter)  # error line -> count
    targeted: int = 0
    targeted_measured: int = 0
    not_targeted: Counter[str] = field(default_factory=Counter)  # ops of the runs no kernel measures
    comm: CommResult | None = None
    profile: Profile | None = None


def run_profile(config: SamplerConfig) -> SamplerReport:
    """Measure, journal and write the profile; see the module docstring.

    Raises
    ------
    SpecError
        If torch is missing, the device is not available, or the directory
        holds another device's profile.
    """
    start, epoch = time.monotonic(), time.time()
    torch = kernels.import_torch()
    if config.device == "cuda" and not torch.cuda.is_available():
        raise SpecError("device", "cuda", "a device torch can use (torch.cuda.is_available() is False); "
                                          "use --device cpu")
    if config.device == "cpu":
        torch.set_num_threads(config.threads or 1)
    if under_torchrun() and config.ops != ("comm",):
        raise SpecError("ops", ",".join(config.ops), "comm alone under torchrun (measure the rest on one node)")
    procs = config.num_procs or (max(2, torch.cuda.device_count()) if config.device == "cuda" else 2)
    if "comm" in config.ops and config.device == "cuda" and not under_torchrun() \
            and procs > torch.cuda.device_count():
        raise SpecError("num-procs", procs, f"at most the {torch.cuda.device_count()} visible GPU(s), and at least 2 "
                                            "(one GPU per rank; several nodes: run under torchrun)")
    lead = int(os.environ.get("RANK", "0")) == 0 if under_torchrun() else True
    out = Path(config.out)
    journal = Journal(out)
    session = _session(config)
    check_session(journal.records(), session["device"], out)
    if lead:
        journal.append(session)
    report = SamplerReport(out=out)
    compute = tuple(group for group in config.ops if group not in ("comm", "embedding_bag"))
    share = len(compute) / len(config.ops)
    progress = _Progress(config.progress, config.budget_s, start)
    try:
        if compute:
            _sample_compute(config, journal, report, progress, start + config.budget_s * share)
    finally:
        progress.close()  # erased before the collective sweep and the command's report
        if lead:
            report.profile = rebuild(out)
    if "embedding_bag" in config.ops and lead:  # recommendation models (costmodel.profiling.embedding)
        from costmodel.profiling.embedding import run_embedding_profile

        report.measured["embedding_bag"] = run_embedding_profile(out, config.device, config.budget_s / len(config.ops),
                                                                 seed=config.seed)
    if "comm" in config.ops:
        bounds = config.bounds or (CUDA_BOUNDS if config.device == "cuda" else CPU_BOUNDS)
        report.comm = run_comm(out, config.device, procs, epoch + config.budget_s, bounds.message_bytes)
        if lead:
            report.profile = rebuild(out)
    report.elapsed_s = time.monotonic() - start
    return report


def _session(config: SamplerConfig) -> dict[str, Any]:
    described = kernels.device_description(config.device)
    name = described["name"]
    # The label names the device first: a profile used for a run on another device says what it measured.
    if config.device == "cpu":
        device = config.device_name or "cpu"
        label = f"{device} ({name}, {described['threads']} thread(s), torch {described['torch']})"
    else:
        device = config.device_name or re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        label = f"{device} ({name}, torch {described['torch']}, CUDA {described.get('cuda')})"
    bounds = config.bounds or (CUDA_BOUNDS if config.device == "cuda" else CPU_BOUNDS)
    return {
        "record": "session", "source": "parplan profile run", "device": device, "device_name": name,
        "label": label, "started": datetime.now(UTC).isoformat(timespec="seconds"), "budget_s": config.budget_s,
        "ops": list(config.ops), "dtype": config.dtype, "seed": config.seed, "software": described,
        "platform": f"{platform.system()} {platform.machine()}, Python {platform.python_version()}",
        "timer": "cuda_events" if config.device == "cuda" else "perf_counter",
        "timing_policy": asdict(config.policy), "design_bounds": asdict(bounds),
        "targeted_runs": [f"{r.model.name} on {r.cluster.num_gpus} x {r.cluster.gpu.name}, "
                          f"tp={r.strategy.tp} pp={r.strategy.pp} cp={r.strategy.cp} mbs={r.strategy.micro_batch_size}"
                          for r in config.runs[:20]],
    }


def _sample_compute(config: SamplerConfig, journal: Journal, report: SamplerReport, progress: _Progress,
                    deadline: float) -> None:
    physics = _physics(config, journal, deadline)
    variants = {}
    if config.runs:
        variants = {"norm": config.runs[0].model.normalization, "activation": config.runs[0].model.activation}
    compute = tuple(group for group in config.ops if group not in ("comm", "embedding_bag"))
    targets = targeted_points(config.runs, compute) if config.runs else Targets([], Counter())
    report.targeted, report.not_targeted = len(targets.points), targets.not_sampled
    bounds = config.bounds or (CUDA_BOUNDS if config.device == "cuda" else CPU_BOUNDS)
    points = _Schedule(targets.points, design_streams(compute, bounds, dtype=config.dtype, seed=config.seed,
                                                      variants=variants))
    done = journal.measured_keys()
    memory_limit = kernels.memory_limit_bytes(config.device)
    cap = max(1.0, config.budget_s * config.max_point_fraction)
    calls = config.policy.warmup + config.policy.min_repeats
    last_rebuild = time.monotonic()
    for point in points:
        now = time.monotonic()
        if now >= deadline:
            break
        if point.key in done:
            report.resumed += 1
            continue
        estimate = points.correction(point.stream) * _roofline_s(point, physics, config.device)
        if estimate * calls > min(cap, deadline - now):
            report.too_slow += 1
            continue
        if point.footprint_bytes() > memory_limit:
            report.too_large += 1
            continue
        began = time.monotonic()
        result = _measure_point(config, point, deadline, report)
        points.spend(point.stream, time.monotonic() - began)
        if result is None:
            continue
        points.observe(point.stream, result.median_s / max(estimate, 1e-12))
        journal.append({"record": "sample", "table": point.table, "key": point.key, "row": point.row(),
                        "source": point.source, "shape": list(point.shape), **result.as_record()})
        done.add(point.key)
        report.measured[point.stream] += 1
        report.targeted_measured += int(point.source == "targeted")
        progress.show(point, result.median_s, result.spread, report)
        if time.monotonic() - last_rebuild >= _REBUILD_EVERY_S:
            rebuild(config.out)
            last_rebuild = time.monotonic()


def _measure_point(config: SamplerConfig, point: SamplePoint, deadline: float, report: SamplerReport) -> Any:
    try:
        fn = kernels.make_kernel(point, config.device, config.seed)
        result = measure(fn, device=config.device, deadline=deadline, policy=config.policy)
        del fn
    except (RuntimeError, MemoryError) as exc:  # out of memory, an unsupported shape or dtype on this device
        report.failed[str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__] += 1
        if config.device == "cuda":
            kernels.import_torch().cuda.empty_cache()
        return None
    if result is None:
        report.cut += 1
    return result


def _physics(config: SamplerConfig, journal: Journal, deadline: float) -> dict[str, Any]:
    """The device's peak figures: the journal's (resumed run, same dtype) or measured now and journaled."""
    for record in reversed(journal.records()):
        if record["record"] == "physics" and config.dtype in record["physics"].get("peak_flops", {}) \
                and record.get("threads") == kernels.import_torch().get_num_threads():
            return dict(record["physics"])
    limit = time.monotonic() + config.budget_s * _PHYSICS_SHARE
    physics = kernels.measure_physics(config.device, config.dtype, min(deadline, limit))
    journal.append({"record": "physics", "physics": physics, "threads": kernels.import_torch().get_num_threads()})
    return physics


def _roofline_s(point: SamplePoint, physics: dict[str, Any], device: str) -> float:
    flops, moved = point.work()
    peaks = physics["peak_flops"]
    peak = peaks.get(point.table.removeprefix("gemm_"), max(peaks.values()))
    return flops / peak + moved / physics["hbm_bandwidth_bytes_per_s"] + _CALL_OVERHEAD_S[device]


class _Schedule:
    """Targeted points first, then the design stream that has used the least time."""

    def __init__(self, targeted: list[SamplePoint], streams: dict[str, Iterator[SamplePoint]]) -> None:
        self._targeted = deque(targeted)
        self._streams = dict(streams)
        self._spent = dict.fromkeys(streams, 0.0)
        self._ratios: dict[str, list[float]] = {}

    def __iter__(self) -> Iterator[SamplePoint]:
        while self._targeted:
            yield self._targeted.popleft()
        while self._streams:
            name = min(self._streams, key=lambda stream: self._spent[stream])
            point = next(self._streams[name], None)
            if point is None:
                del self._streams[name]
                continue
            yield point

    def spend(self, stream: str, seconds: float) -> None:
        self._spent[stream] = self._spent.get(stream, 0.0) + seconds

    def observe(self, stream: str, ratio: float) -> None:
        self._ratios.setdefault(stream, []).append(ratio)

    def correction(self, stream: str) -> float:
        """Measured / roofline time of the stream so far (median; 1 before its first point)."""
        ratios = sorted(self._ratios.get(stream, [1.0]))
        return ratios[len(ratios) // 2]


class _Progress:
    """The run's status line on a terminal (``costmodel.progress.StatusLine``); silent on files and pipes."""

    def __init__(self, stream: TextIO | None, budget_s: float, start: float) -> None:
        self._line, self._budget, self._start = StatusLine(stream), budget_s, start

    def show(self, point: SamplePoint, seconds: float, spread: float, report: SamplerReport) -> None:
        def text() -> str:
            shape = ",".join(str(v) for v in point.shape)
            return (f"parplan profile: {time.monotonic() - self._start:6.1f}/{self._budget:.0f} s  "
                    f"{sum(report.measured.values())} measured ({report.resumed} resumed, "
                    f"{report.too_slow} too slow)  {point.stream}({shape}) {seconds * 1e3:.3f} ms +-{spread:.0%}")
        self._line.show(text)

    def close(self) -> None:
        """Erase the line before the command prints its report."""
        self._line.close()
