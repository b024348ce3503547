"""CPU miniatures for the replay what-if benchmark: a small transformer's training step, profiled.

Each rank runs ``layers`` pre-norm transformer blocks (LayerNorm, QKV, causal SDPA, output
projection, GELU MLP) on ``batch`` sequences per rank, its gradients flattened and all-reduced
over gloo on the main thread after the backward (data parallel, one bucket, no overlap), then an
SGD step. One torch thread per rank. torch.profiler records CPU operators with shapes, one
``ProfilerStep#N`` per step, and writes ``rank{r}.json`` per rank.

Recording protocol (2026-12-02 02:20 UTC, for ``/work/notes/s6/mini9`` on): each vCPU of this VM flips between
two speeds (x1.37) on a sub-second timescale, independently per core (``/work/notes/s6/probe_findings.md``), so
one short profiled window samples one state. Each rank therefore records ``WINDOWS`` short windows of ``ACTIVE``
profiled steps spread over several seconds (``torch.profiler.schedule``'s ``repeat``): after ``CALIBRATE``
unprofiled warm-up steps the ranks agree on the step time (the slowest rank's) and put ``wait`` unprofiled steps
before each window so that a window's cycle lasts at least ``CYCLE_S``. Each window is its own trace,
``window{k}/rank{r}.json``: the replay's layer edit costs grow with the square of a trace's steps, so many short
windows analyse in linear time where one long window would not. Each rank is pinned to one core
(``rank_cores``: rank r on core ``(r + round) % cores``, so that over rounds rank 0 runs on every core), kept in
the recording's note.

One rank runs the same program (bucket, a 1-rank gloo all-reduce, copy-back), as a DDP job does:
torch/nn/parallel/distributed.py builds its reducer whatever the world size. :func:`measure_corun`
times the same step (without the collective) on one core alone and on every core at once: the
host's co-running slowdown.

:func:`record_rounds` records every configuration ``rounds`` times, interleaved (A B C ... A B C ...), into
``round{k}/{config}/`` with a ``recording.json`` beside each (:class:`RecordingNote`: the load average
before and after, when, how long, the machine-speed probe of ``_speed_probe`` before and after), so that a
load drift hits every configuration alike, each one's least-disturbed recording can be chosen and each
recording's times can be expressed at one machine speed.
"""

from __future__ import annotations

import json
import math
import os
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from _speed_probe import PROBE_WORK, probe_speed

from costmodel.replay.host import read_json_note
from costmodel.specs.errors import SpecError

HIDDEN, SEQ, HEADS = 128, 64, 4
CALIBRATE = 4
"""Unprofiled steps before the windows: warm-up (the first allocates), the last two timed to size ``wait``."""
WINDOWS, WINDOW_WARMUP, ACTIVE = 5, 1, 4
"""Profiled windows per recording, the profiler's warm-up step before each, and the profiled steps in each."""
CYCLE_S = 1.0
"""Shortest span (s) of one window's cycle (its wait, warm-up and profiled steps): 5 windows spread a recording's
profiled steps over at least 5 s, many flips of a core's speed state (about 0.2 s apart on 2026-12-02 01:42)."""
CORUN_CONFIG = (2, 8)  # layers, batch of the step that measure_corun times: the larger working set


@dataclass(frozen=True)
class Config:
    """One miniature: transformer blocks, gloo ranks, sequences per rank."""

    layers: int
    world: int
    batch: int

    @property
    def name(self) -> str:
        return f"L{self.layers}-dp{self.world}-b{self.batch}"


def _model(layers: int):  # type: ignore[no-untyped-def]
    import torch
    from torch import nn
    from torch.nn import functional

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(HIDDEN), nn.LayerNorm(HIDDEN)
            self.qkv, self.out = nn.Linear(HIDDEN, 3 * HIDDEN), nn.Linear(HIDDEN, HIDDEN)
            self.up, self.down = nn.Linear(HIDDEN, 4 * HIDDEN), nn.Linear(4 * HIDDEN, HIDDEN)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, d = x.shape
            q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
            a = functional.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
            x = x + self.out(a)
            return x + self.down(functional.gelu(self.up(self.n2(x))))

    torch.manual_seed(0)
    return nn.Sequential(*[Block() for _ in range(layers)])


def _training_step(layers: int, batch: int, rank: int, world: int, reduce: bool):  # type: ignore[no-untyped-def]
    """One rank's step as a closure: forward, backward, the gradient bucket (all-reduced if ``reduce``), SGD."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    model = _model(layers)
    optimiser = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, SEQ, HIDDEN, generator=torch.Generator().manual_seed(rank))
    params = list(model.parameters())

    def step() -> None:
        optimiser.zero_grad()
        model(x).square().mean().backward()
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        if reduce:
            dist.all_reduce(flat)
        flat /= world
        offset = 0
        for p in params:
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        optimiser.step()

    return step


def wait_steps(step_s: float, cycle_s: float = CYCLE_S) -> int:
    """Unprofiled steps before each window so that its cycle (wait, warm-up, profiled steps of ``step_s``
    each) lasts at least ``cycle_s``; at least one."""
    return max(1, math.ceil(cycle_s / step_s) - WINDOW_WARMUP - ACTIVE)


def rank_cores(world: int, round_: int, cores: Sequence[int]) -> tuple[int, ...]:
    """The core each rank is pinned to: rank r on ``cores[(r + round_) % len(cores)]`` (distinct cores while
    the ranks are no more than the cores; rank 0 moves to the next core each round)."""
    ordered = sorted(cores)
    return tuple(ordered[(r + round_) % len(ordered)] for r in range(world))


def record(config: Config, rank: int, out: Path, windows: int = WINDOWS, cycle_s: float = CYCLE_S) -> list[Path]:
    """Profile ``windows`` windows of ``ACTIVE`` steps of one rank of an initialised gloo group of
    ``config.world`` ranks, spaced so that each window's cycle lasts at least ``cycle_s`` (the ranks agree on
    the spacing: the slowest rank's step sizes it); return its traces, ``out/window{k}/rank{rank}.json``."""
    import torch
    import torch.distributed as dist

    step = _training_step(config.layers, config.batch, rank, config.world, reduce=True)
    for _ in range(CALIBRATE - 2):
        step()
    start = time.perf_counter()
    step()
    step()
    wait = torch.tensor([wait_steps((time.perf_counter() - start) / 2, cycle_s)])
    dist.all_reduce(wait, op=dist.ReduceOp.MAX)
    written: list[Path] = []

    def save(prof: torch.profiler.profile) -> None:
        folder = out / f"window{len(written)}"
        folder.mkdir(exist_ok=True)
        written.append(folder / f"rank{rank}.json")
        prof.export_chrome_trace(str(written[-1]))

    schedule = torch.profiler.schedule(wait=int(wait), warmup=WINDOW_WARMUP, active=ACTIVE, repeat=windows)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True,
                                schedule=schedule, on_trace_ready=save) as prof:
        for _ in range(windows * (int(wait) + WINDOW_WARMUP + ACTIVE)):
            step()
            prof.step()
    return written


def _worker(rank: int, config: Config, out: str, port: int, cores: tuple[int, ...] | None, windows: int,
            cycle_s: float) -> None:
    import torch.distributed as dist

    if cores is not None:  # before gloo's threads start: they inherit the affinity
        os.sched_setaffinity(0, {cores[rank]})
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    dist.init_process_group("gloo", rank=rank, world_size=config.world)
    try:
        record(config, rank, Path(out), windows, cycle_s)
    finally:
        dist.destroy_process_group()


def record_config(config: Config, out: Path, port: int, cores: tuple[int, ...] | None = None,
                  windows: int = WINDOWS, cycle_s: float = CYCLE_S) -> list[Path]:
    """Record every rank of ``config`` into ``out`` (one process per rank, a gloo group at any world size,
    one rank too; rank r pinned to ``cores[r]`` if given); the window folders, ``out/window{k}``."""
    out.mkdir(parents=True, exist_ok=True)
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(config, str(out), port, cores, windows, cycle_s), nprocs=config.world, join=True)
    return [out / f"window{k}" for k in range(windows)]


MAX_NOTE_BYTES = 64 * 1024  # recording.json holds a few numbers (two per core for the probe)
_PROBE_FIELDS = ("probe_cores", "probe_before_s", "probe_after_s")


@dataclass(frozen=True, kw_only=True)
class RecordingNote:
    """When and under what load one configuration was recorded (``recording.json`` beside its traces)."""

    round: int
    """Which pass over the configurations (0-based); the passes are interleaved A B C ... A B C ..."""
    recorded: str
    """Local time the recording began, ``YYYY-MM-DD HH:MM:SS``."""
    seconds: float
    """Wall time of the recording (process start to the last trace written)."""
    load_before: float
    """1-minute load average when it began (``os.getloadavg``)."""
    load_after: float
    """1-minute load average when it ended."""
    other_cores: float | None = None
    """Mean cores that processes other than the recording kept busy while it ran (``other_busy_cores``);
    None where unmeasured (not Linux, or a recording of an older benchmark). The load average cannot tell:
    it counts the recording's own ranks (4 on 2 cores for dp 4)."""
    steal_cores: float | None = None
    """Mean cores the hypervisor ran something else on while the VM wanted them (``/proc/stat`` steal) during
    the recording; None where unmeasured. A diagnostic: a host that slows its cores need not count it."""
    probe_cores: tuple[int, ...] | None = None
    """The cores the speed probe ran on (the recording's affinity); None: no probe (an older note)."""
    probe_before_s: tuple[float, ...] | None = None
    """The probe's median chunk time (s) on each of ``probe_cores`` just before the ranks were spawned."""
    probe_after_s: tuple[float, ...] | None = None
    """The same just after the ranks were joined."""
    probe_work: str = ""
    """What the probe timed (``_speed_probe.PROBE_WORK``): only probes of the same work are compared."""
    rank_cores: tuple[int, ...] | None = None
    """The core each rank was pinned to (``rank_cores``), rank 0 first; None: not pinned (a note before
    2026-12-02 02:20, whose ranks migrated over the affinity mask)."""

    def __post_init__(self) -> None:
        if isinstance(self.round, bool) or not isinstance(self.round, int) or not 0 <= self.round < 1000:
            raise SpecError("recording.json round", self.round, "an integer 0..999")
        for name in ("seconds", "load_before", "load_after"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not 0 <= value <= 1e6:
                raise SpecError(f"recording.json {name}", value, "a number between 0 and 1e6")
        for name in ("other_cores", "steal_cores"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or not 0 <= value <= 1e6):
                raise SpecError(f"recording.json {name}", value, "a number between 0 and 1e6, or null")
        self._check_probe()
        cores = self.rank_cores
        if cores is not None and (not isinstance(cores, tuple) or not 1 <= len(cores) <= 4096 or any(
                isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < 65536 for c in cores)):
            raise SpecError("recording.json rank_cores", cores, "a list of 1..4096 core ids 0..65535, or null")
        if not isinstance(self.recorded, str) or len(self.recorded) > 40:
            raise SpecError("recording.json recorded", self.recorded, "a time YYYY-MM-DD HH:MM:SS")

    def _check_probe(self) -> None:
        given = [getattr(self, name) is not None for name in _PROBE_FIELDS]
        if not any(given):
            return
        if not all(given):
            missing = _PROBE_FIELDS[given.index(False)]
            raise SpecError(f"recording.json {missing}", None,
                            "a list per probed core (all three probe fields or none)")
        cores = self.probe_cores
        if not isinstance(cores, tuple) or not 1 <= len(cores) <= 4096 or any(
                isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < 65536 for c in cores):
            raise SpecError("recording.json probe_cores", cores, "a list of 1..4096 core ids 0..65535")
        for name in _PROBE_FIELDS[1:]:
            times = getattr(self, name)
            if not isinstance(times, tuple) or len(times) != len(cores) or any(
                    isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t)
                    or not 0 < t <= 1e3 for t in times):
                raise SpecError(f"recording.json {name}", times,
                                f"{len(cores)} times in seconds (0 < t <= 1000), one per probe core")
        if not isinstance(self.probe_work, str) or not 0 < len(self.probe_work) <= 400:
            raise SpecError("recording.json probe_work", self.probe_work, "the probe's description, 1..400 characters")

    @property
    def probed(self) -> bool:
        """Whether the recording was bracketed by the speed probe (notes before 2026-12-02 02:00 were not)."""
        return self.probe_cores is not None

    @classmethod
    def read(cls, path: Path) -> RecordingNote:
        """The note in ``path``; SpecError (naming the field) if it is not one. Notes without the later fields
        (``other_cores``, ``steal_cores``, the probe's) read as unmeasured."""
        data = read_json_note(path, "recording.json", MAX_NOTE_BYTES)
        fields = {"round", "recorded", "seconds", "load_before", "load_after"}
        optional = {"other_cores", "steal_cores", "probe_work", "rank_cores", *_PROBE_FIELDS}
        if not isinstance(data, dict) or not fields <= set(data) <= fields | optional:
            shown = sorted(set(data) ^ fields - optional)[0] if isinstance(data, dict) else type(data).__name__
            raise SpecError("recording.json key", shown, ", ".join(sorted(fields)) + " (and "
                            + ", ".join(sorted(optional)) + ")")
        for name in (*_PROBE_FIELDS, "rank_cores"):
            if isinstance(data.get(name), list):
                data[name] = tuple(data[name])
        return cls(**data)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1) + "\n", encoding="utf-8")


def _cpu_ticks() -> list[int] | None:
    """The whole host's CPU time counters since boot (``/proc/stat``'s first line), None off Linux."""
    try:
        ticks = [int(x) for x in Path("/proc/stat").read_text(encoding="ascii").split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    return ticks if len(ticks) >= 8 else None


def _busy_cpu_s() -> float | None:
    """CPU seconds the whole host has been busy since boot (``/proc/stat``: all but idle and iowait), None off Linux.

    Steal (the 8th counter) is in the sum, as it was when ``other_cores`` was introduced: so ``other_cores``
    counts the hypervisor's stolen time as other work; ``steal_cores`` gives that part alone."""
    ticks = _cpu_ticks()
    return None if ticks is None else (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def _steal_cpu_s() -> float | None:
    """CPU seconds the hypervisor has stolen from this VM since boot (``/proc/stat``'s 8th counter), None off Linux."""
    ticks = _cpu_ticks()
    return None if ticks is None else ticks[7] / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    """CPU seconds of this process and its waited-for children (the recording's ranks once joined)."""
    me, ranks = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + ranks.ru_utime + ranks.ru_stime


def other_busy_cores(busy_before: float | None, busy_after: float | None, own_s: float, wall_s: float) -> float | None:
    """Mean cores other processes kept busy over ``wall_s``: the host's busy CPU time less ``own_s`` (ours)."""
    if busy_before is None or busy_after is None or wall_s <= 0:
        return None
    return max(0.0, (busy_after - busy_before - own_s) / wall_s)


def record_rounds(configs: Sequence[Config], out: Path, rounds: int, port: int = 29611,
                  progress: Callable[[str], None] | None = None,
                  probe: Callable[..., tuple[tuple[int, ...], tuple[float, ...]]] = probe_speed) -> None:
    """Record each of ``configs`` ``rounds`` times, interleaved, into ``out/round{k}/{name}/``, a
    :class:`RecordingNote` beside each recording (one fresh port per recording: no reuse of a closing one).
    ``probe`` times the machine's speed just before and after each recording (``_speed_probe.probe_speed``);
    its own CPU time is outside the window that ``other_cores`` and ``steal_cores`` cover."""
    began = time.perf_counter()
    for round_ in range(rounds):
        for config in configs:
            folder = out / f"round{round_}" / config.name
            cores, before = probe()
            load, start, when = os.getloadavg()[0], time.perf_counter(), time.strftime("%Y-%m-%d %H:%M:%S")
            busy, steal, own = _busy_cpu_s(), _steal_cpu_s(), _own_cpu_s()
            pinned = rank_cores(config.world, round_, cores)
            record_config(config, folder, port, pinned)
            port += 1
            wall = time.perf_counter() - start
            other = other_busy_cores(busy, _busy_cpu_s(), _own_cpu_s() - own, wall)
            stolen = other_busy_cores(steal, _steal_cpu_s(), 0.0, wall)
            load_after = os.getloadavg()[0]
            after = probe(cores)[1]
            note = RecordingNote(round=round_, recorded=when, seconds=round(wall, 3), load_before=round(load, 2),
                                 load_after=round(load_after, 2),
                                 other_cores=None if other is None else round(other, 3),
                                 steal_cores=None if stolen is None else round(stolen, 3),
                                 probe_cores=cores, probe_before_s=tuple(round(t, 7) for t in before),
                                 probe_after_s=tuple(round(t, 7) for t in after), probe_work=PROBE_WORK,
                                 rank_cores=pinned)
            note.write(folder / "recording.json")
            if progress is not None:
                probe_ms = "/".join(f"{1e3 * (b + a) / 2:.2f}" for b, a in zip(before, after))
                progress(f"recorded round {round_} {config.name} on cores {pinned} (load {note.load_before:.2f} -> "
                         f"{note.load_after:.2f}; probe {probe_ms} ms per core; {time.perf_counter() - began:.0f} s)")


def _time_steps(_: int, steps: int, began: object, times: object) -> None:
    """One process of :func:`measure_corun`: warm up, wait for the others, time ``steps`` steps."""
    layers, batch = CORUN_CONFIG
    step = _training_step(layers, batch, 0, 1, reduce=False)
    for _ in range(3):
        step()
    began.wait()  # type: ignore[attr-defined]  # every process starts timing together
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.put(time.perf_counter() - start)  # type: ignore[attr-defined]


def _median_step(processes: int, steps: int) -> float:
    """Median step time (s) of ``processes`` processes running the step at once."""
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    began, times = context.Barrier(processes), context.Queue()
    workers = [context.Process(target=_time_steps, args=(i, steps, began, times)) for i in range(processes)]
    for worker in workers:
        worker.start()
    samples = [times.get() for _ in range(processes * steps)]
    for worker in workers:
        worker.join()
    return statistics.median(samples)


QUIET_SPREAD = 1.10
"""Largest ratio of the two alone medians of :func:`measure_corun` for a quiet host; above it other work
ran during the measurement and no figure is kept (a quality bound of the measurement, not a model figure)."""


def measure_corun(cores: int, steps: int = 20) -> tuple[float | None, str]:
    """The host's co-running slowdown: the miniature's step (``CORUN_CONFIG``, no collective) with one
    process per core at once / with one process alone (alone timed before and after; the smaller is kept,
    as interference only adds time). Returns the ratio, or None when the two alone medians differ by more
    than ``QUIET_SPREAD`` (the host was not quiet), and a line saying what was timed and the load."""
    alone_before = _median_step(1, steps)
    together = _median_step(cores, steps)
    alone_after = _median_step(1, steps)
    alone = min(alone_before, alone_after)
    load = os.getloadavg()[0]
    source = (f"measured {time.strftime('%Y-%m-%d %H:%M')}: L{CORUN_CONFIG[0]}-b{CORUN_CONFIG[1]} step median "
              f"{1e3 * together:.2f} ms with {cores} processes at once vs {1e3 * alone_before:.2f} / "
              f"{1e3 * alone_after:.2f} ms alone (before / after), {steps} steps each; 1-min load {load:.2f}")
    if max(alone_before, alone_after) > QUIET_SPREAD * alone:
        return None, source + f"; not kept: the alone medians differ by more than {QUIET_SPREAD:g}x (not quiet)"
    return together / alone, source
