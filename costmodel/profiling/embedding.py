"""Time ``torch.nn.functional.embedding_bag`` over a design of rows x dim x pooling x distribution.

Used by ``parplan profile run --ops embedding_bag`` and ``benchmarks/embedding.py``. Each point draws
a fresh batch of ids from its distribution for every call, warm-up and timed (Zipf ranks hashed onto row ids,
so that hot rows are scattered over the table as hashed production ids are), so a call finds a row in cache
only where the distribution makes it hot, as a training step with a new batch does. (Cycling 8 sets let
the timed calls find the rows they touched 8 calls before: 1.5-2.2x faster at pooling 1-4 on 10^6-10^7
rows on this project's CPU, a reuse no training batch has.)
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from costmodel.profiling.measure import Measurement
from costmodel.specs.recsys import AccessDistribution

if TYPE_CHECKING:
    from costmodel.recsys.embedding import CacheLevels  # scikit-learn: imported where a model is fitted

INDEX_SETS: Final = 8
_HASH: Final = 2654435761  # Knuth's multiplicative hash constant: odd and not a multiple of 5, so a bijection mod 10^k
DISTRIBUTIONS: Final[dict[str, AccessDistribution]] = {
    "uniform": AccessDistribution(),
    "zipf1.05": AccessDistribution(kind="zipf", zipf_exponent=1.05),
    "zipf1.2": AccessDistribution(kind="zipf", zipf_exponent=1.2),
}
"""The benchmark's distributions (issue 17: uniform, Zipf 1.05, Zipf 1.2)."""


@dataclass(frozen=True)
class EmbeddingPoint:
    """One timed configuration: ``batch`` bags of ``pooling`` ids into a ``rows x dim`` fp32 table."""

    rows: int
    dim: int
    pooling: int
    distribution: str
    batch: int

    @property
    def table_bytes(self) -> int:
        return self.rows * self.dim * 4


def grid(rows: Sequence[int], dims: Sequence[int], poolings: Sequence[int], batch: int,
         distributions: Sequence[str] = tuple(DISTRIBUTIONS), max_table_bytes: float = 1.5e9) -> list[EmbeddingPoint]:
    """Every combination whose table fits in ``max_table_bytes`` (the machine's memory is shared)."""
    return [EmbeddingPoint(r, d, p, name, batch) for name, r, d, p in itertools.product(distributions, rows, dims,
                                                                                         poolings)
            if r * d * 4 <= max_table_bytes]


def draw_ids(distribution: str, rows: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` row ids: uniform, or Zipf ranks (exact inverse CDF over ``rows`` ranks) hashed onto rows."""
    access = DISTRIBUTIONS[distribution]
    if access.kind == "uniform":
        return rng.integers(0, rows, size=count, dtype=np.int64)
    cdf = _zipf_cdf(rows, access.zipf_exponent)
    ranks = np.searchsorted(cdf, rng.random(count) * cdf[-1]).astype(np.int64)
    return (ranks * _HASH) % rows


_CDF_CACHE: dict[tuple[int, float], np.ndarray] = {}


def _zipf_cdf(rows: int, exponent: float) -> np.ndarray:
    key = (rows, exponent)
    if key not in _CDF_CACHE:
        _CDF_CACHE[key] = np.cumsum(np.arange(1, rows + 1, dtype=np.float64) ** -exponent)
    return _CDF_CACHE[key]


CPU_TLB_REACH_BYTES: Final = 2048 * 4096
"""Second-level TLB reach with 4-KiB pages: 2048 entries (Intel 64 and IA-32 Architectures Optimization
Reference Manual, Golden Cove STLB). torch allocates tables in 4-KiB pages unless transparent huge pages are
``always`` (they are ``madvise`` on the benchmark machine)."""


def cpu_caches() -> CacheLevels:
    """This CPU's per-core L2, its L3 (bytes, read from sysfs; 0 where unknown) and the TLB reach."""
    from costmodel.recsys.embedding import CacheLevels

    sizes = {level: _sysfs_cache(level) for level in (2, 3)}
    return CacheLevels(sizes[2], sizes[3] or sizes[2], CPU_TLB_REACH_BYTES)


def _sysfs_cache(level: int) -> float:
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = sorted(e for e in os.listdir(base) if e.startswith("index"))
    except OSError:
        return 0.0
    for entry in entries:
        try:
            with open(f"{base}/{entry}/level") as handle:
                if int(handle.read()) != level:
                    continue
            with open(f"{base}/{entry}/type") as handle:
                if handle.read().strip() == "Instruction":
                    continue
            with open(f"{base}/{entry}/size") as handle:
                text = handle.read().strip()
        except (OSError, ValueError):
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        try:
            return float(text.rstrip("KMG")) * scale
        except ValueError:
            return 0.0
    return 0.0


def _time_call(call: Any, repeats: int, warmup: int = INDEX_SETS) -> list[float]:
    """Per-call seconds of ``call`` on this thread's CPU clock, after ``warmup`` untimed calls.

    The default warm-up runs ``INDEX_SETS`` fresh batches: the hot rows of a skewed distribution are then in cache
    as they are in steady-state training, where other tables' lookups do not run between two batches.

    The thread's CPU time, not wall time: on a shared machine the process is descheduled for whole
    timeslices (milliseconds) that a wall clock would charge to whichever call was running.
    """
    for _ in range(warmup):
        call()
    out = []
    for _ in range(repeats):
        start = time.thread_time_ns()
        call()
        out.append((time.thread_time_ns() - start) * 1e-9)
    return out


def time_points(points: Sequence[EmbeddingPoint], *, seed: int = 0, rounds: int = 3, repeats: int = INDEX_SETS,
                deadline_s: float = 600.0) -> list[tuple[EmbeddingPoint, Measurement]]:
    """Time the forward of each point on one CPU thread; each point keeps its fastest of ``rounds`` passes.

    One table (``rows x dim``) is allocated at a time (the grid's ``max_table_bytes`` bounds it) and its
    points are timed ``rounds`` times in shuffled order: interference from other processes only adds
    time, and shuffling spreads a busy spell over many points instead of one. Points not reached by
    ``deadline_s`` are left out.
    """
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)  # the op runs on the calling thread, whose CPU clock times it
    rng = np.random.default_rng(seed)
    deadline = time.monotonic() + deadline_s
    groups: dict[tuple[int, int], list[int]] = {}
    for index, point in enumerate(points):
        groups.setdefault((point.rows, point.dim), []).append(index)
    best: dict[int, Measurement] = {}
    for key in sorted(groups):
        if time.monotonic() > deadline:
            break
        weight = torch.empty(*key).uniform_(-0.01, 0.01)  # touched: no zero-page reads
        for index in (int(i) for _ in range(rounds) for i in rng.permutation(groups[key])):
            if time.monotonic() > deadline:
                break
            result = _measure_point(points[index], weight, rng, repeats, F)
            if index not in best or result.min_s < best[index].min_s:
                best[index] = result
        del weight
    return [(points[i], best[i]) for i in sorted(best)]


def _measure_point(point: EmbeddingPoint, weight: Any, rng: np.random.Generator, repeats: int, F: Any) -> Measurement:
    import torch

    count = point.batch * point.pooling
    sets = iter([torch.from_numpy(draw_ids(point.distribution, point.rows, count, rng))
                 for _ in range(INDEX_SETS + repeats)])  # never a repeated batch (module docstring)
    offsets = torch.arange(0, count, point.pooling, dtype=torch.int64)
    samples = np.array(_time_call(lambda: F.embedding_bag(next(sets), weight, offsets, mode="sum"), repeats))
    q25, median, q75 = np.quantile(samples, [0.25, 0.5, 0.75])
    return Measurement(median_s=float(median), q25_s=float(q25), q75_s=float(q75), min_s=float(samples.min()),
                       max_s=float(samples.max()), repeats=repeats, inner=1, timer="thread_time")


# -- `parplan profile run --ops embedding_bag` / `parplan profile fit` ----------------------------------------
TABLE_FILE: Final = "embedding_bag.json"
"""The profile directory's embedding-bag timings: a JSON list of records (data only, rewritten atomically)."""
DESIGN: Final = {"rows": (10**4, 10**5, 10**6, 10**7), "dims": (32, 64, 128, 256), "poolings": (1, 4, 16, 64, 100),
                 "batch": 1024}
"""The sampling design of ``profile run``: rows x dim x pooling x the three ``DISTRIBUTIONS``."""
_RECORD_KEYS: Final = ("distribution", "rows", "dim", "pooling", "batch", "median_s", "min_s")


def run_embedding_profile(out: Path, device: str, budget_s: float, seed: int = 0,
                          max_table_bytes: float = 1.25 * 2**30) -> int:
    """Time the design (cells in a seeded random order until ``budget_s``) and write ``out/TABLE_FILE``.

    Returns the number of cells measured. Only ``device="cpu"`` is timed here (the thread-clock loop);
    a GPU's lookups are timed by the same design once a CUDA-event loop is added (not yet).
    """
    from costmodel.specs.errors import SpecError

    if device != "cpu":
        raise SpecError("ops", "embedding_bag", "measured on --device cpu for now (the CUDA timing loop is not "
                                                "written yet)")
    points = grid(DESIGN["rows"], DESIGN["dims"], DESIGN["poolings"], DESIGN["batch"],
                  max_table_bytes=max_table_bytes)
    order = np.random.default_rng(seed).permutation(len(points))
    timed = time_points([points[i] for i in order], seed=seed, rounds=2, deadline_s=budget_s)
    records = [{"distribution": p.distribution, "rows": p.rows, "dim": p.dim, "pooling": p.pooling,
                "batch": p.batch, "median_s": m.median_s, "min_s": m.min_s, "timer": m.timer} for p, m in timed]
    _write_json(Path(out) / TABLE_FILE, records)
    return len(records)


def _write_json(target: Path, data: Any) -> None:
    import json
    import tempfile

    target.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            json.dump(data, file)
        os.chmod(name, 0o644)
        os.replace(name, target)
    finally:
        if os.path.exists(name):
            os.unlink(name)


def read_embedding_table(folder: Path) -> list[Any] | None:
    """The ``TimedLookup`` rows of a profile directory's ``TABLE_FILE`` (None when it has none).

    Raises
    ------
    SpecError
        If the file is not a list of records with the expected fields (bounded reader, JSON only).
    """
    path = Path(folder) / TABLE_FILE
    if not path.exists():
        return None
    from costmodel.recsys.lookup_fit import TimedLookup  # scikit-learn: only when a table is there
    from costmodel.specs.errors import SpecError, require_choice, require_int, require_number
    from costmodel.specs.userfile import read_user_file

    data = read_user_file(path, field=TABLE_FILE, fmt="json")
    if not isinstance(data, list):
        raise SpecError(TABLE_FILE, type(data).__name__, "a list of timing records")
    rows = []
    for index, record in enumerate(data):
        where = f"{TABLE_FILE}[{index}]"
        if not isinstance(record, dict) or any(key not in record for key in _RECORD_KEYS):
            raise SpecError(where, record, "a record with " + ", ".join(_RECORD_KEYS))
        name = require_choice(f"{where}.distribution", record["distribution"], tuple(DISTRIBUTIONS))
        rows.append(TimedLookup(DISTRIBUTIONS[name], require_int(f"{where}.rows", record["rows"]),
                                require_int(f"{where}.dim", record["dim"]),
                                require_number(f"{where}.pooling", record["pooling"]),
                                require_int(f"{where}.batch", record["batch"]),
                                require_number(f"{where}.min_s", record["min_s"])))
    return rows


def fit_embedding_table(folder: Path, fraction: float = 0.1, seed: int = 0) -> dict[str, Any] | None:
    """Held-out errors of the aware and blind lookup models on a profile's table (None without one)."""
    rows = read_embedding_table(folder)
    if not rows:
        return None
    from costmodel.recsys.lookup_fit import held_out_errors  # scikit-learn, only when there is a table

    # at least 30 training rows for the 14 unit costs, even where 10% of a short table is fewer
    fraction = min(0.5, max(fraction, 30 / len(rows)))
    result = held_out_errors(rows, cpu_caches(), fraction=fraction, seed=seed)
    return {"rows": len(rows), "train": result.train, "test": result.test,
            "aware_mape": round(result.aware_mape, 2), "blind_mape": round(result.blind_mape, 2)}


def lookup_model_from_profile(folder: Path) -> tuple[Any, CacheLevels] | None:
    """An ``EmbeddingBagPredictor`` fitted on all of a profile's lookup timings, and the caches its columns
    assume, for ``costmodel.recsys.step.plan_step_seconds(lookup_model=..., caches=...)`` (None without any).

    The fit is a non-negative least-squares solve (milliseconds), so nothing is pickled: it is refitted from
    the table each time.
    """
    from costmodel.recsys.embedding import CPU_LINE_BYTES, EmbeddingBagPredictor
    from costmodel.recsys.lookup_fit import CPU_NOMINAL_BANDWIDTH, columns

    rows = read_embedding_table(folder)
    if not rows:
        return None
    caches = cpu_caches()
    model = EmbeddingBagPredictor(hbm_bandwidth_bytes_per_s=CPU_NOMINAL_BANDWIDTH, sector=CPU_LINE_BYTES)
    return model.fit(columns(rows, caches, aware=True), np.array([r.seconds for r in rows])), caches
