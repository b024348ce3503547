"""This machine as a "cluster" for the CPU miniatures: figures measured here, given alike to both cost models.

- memory bandwidth: the best of a few ``numpy`` copies of a 256 MiB array (read + write bytes / time);
- all-to-all: ``torch.distributed.all_to_all_single`` on ``world`` gloo processes at 64 KiB and 16 MiB per
  rank, the fastest of a few in process CPU time (the miniatures' clock); the two points give a latency
  and a bandwidth (bytes each rank sends / time);
- compute: the best of a few fp32 matmuls (for the miniatures' tiny dense part only).

No figure is taken from a datasheet: the catalog GPU the spec is built from (H100 SXM) only supplies the
fields the miniatures never exercise, and every field they do exercise is replaced by a measurement.
"""

from __future__ import annotations

import dataclasses
import math
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from costmodel.specs.catalog import get_gpu
from costmodel.specs.gpu import ClusterSpec


def memory_bandwidth(mib: int = 256, repeats: int = 5) -> float:
    src = np.ones(mib * 1024 * 1024 // 8)
    dst = np.empty_like(src)
    best = min(_timed(lambda: np.copyto(dst, src)) for _ in range(repeats))
    return 2 * src.nbytes / best


def stream_read_bandwidth(mib: int = 256, repeats: int = 5) -> float:
    """The fastest streaming read of one core from main memory, bytes/s: the best of ``repeats`` sums of a
    ``mib`` MiB array (far above any L3 here), or of copies of it (read + write bytes), whichever is faster;
    the lower bound of a main-memory line's cost (``EmbeddingBagPredictor(stream_bandwidth_bytes_per_s=)``)."""
    src = np.ones(mib * 1024 * 1024 // 8)
    read = min(_timed(lambda: src.sum()) for _ in range(repeats))
    return max(src.nbytes / read, memory_bandwidth(mib, repeats))


def matmul_flops(n: int = 1024, repeats: int = 3) -> float:
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    best = min(_timed(lambda: a @ a) for _ in range(repeats))
    return 2 * n**3 / best


def _timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _a2a_worker(rank: int, world: int, port: int, sizes: list[int], repeats: int, queue,
                op: str = "all_to_all") -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    out = []
    for size in sizes:
        send = torch.ones(size // 4 // world * world)
        recv = torch.empty_like(send)
        times = []
        for _ in range(repeats + 1):
            dist.barrier()
            start = time.process_time()  # CPU time, as the miniatures are timed (waiting for a core left out)
            if op == "all_reduce":
                dist.all_reduce(send)
            else:
                dist.all_to_all_single(recv, send)
            times.append(time.process_time() - start)
        out.append(float(np.min(times[1:])))
    if rank == 0:
        queue.put(out)
    dist.destroy_process_group()


def all_to_all_figures(world: int, small: int = 64 * 1024, large: int = 16 * 1024 * 1024,
                       op: str = "all_to_all") -> tuple[float, float]:
    """(latency s, bandwidth bytes/s) of gloo all-to-all (or ``op="all_reduce"``: the buffer's bytes / time,
    the reduction included) among ``world`` local processes."""
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    queue = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(_a2a_worker, args=(world, port, [small, large], 5, queue, op), nprocs=world, join=True,
                       start_method="spawn")
    t_small, t_large = queue.get()
    bandwidth = (large - small) / max(t_large - t_small, 1e-9)
    return max(t_small - small / bandwidth, 1e-6), bandwidth


def cpu_cluster(world: int) -> ClusterSpec:
    """A ``ClusterSpec`` of ``world`` ranks on this machine, with the measured figures."""
    latency, link = all_to_all_figures(world)
    base = get_gpu("h100-sxm5-80gb")
    flops = matmul_flops()
    gpu = dataclasses.replace(
        base, name="this-cpu", display_name="this machine's CPU (measured)", vendor="cpu",
        peak_flops=tuple((dtype, flops) for dtype, _ in base.peak_flops),
        hbm_bandwidth_bytes_per_s=memory_bandwidth(), intra_node_bandwidth_bytes_per_s=link,
        intra_node_latency_s=latency, gpus_per_node=world, nvlink_domain_size=world,
        inter_node_bandwidth_bytes_per_s=link, inter_node_latency_s=latency, sources=())
    return ClusterSpec(gpu=gpu, num_gpus=world, gpus_per_node=world)


def _call_worker(rank: int, fn, args: tuple, queue) -> None:
    queue.put((rank, fn(*args)))


def in_processes(fn, world: int, *args) -> list:
    """``fn(*args)`` run in ``world`` processes at once, one result per process (rank order): a measurement
    taken while the other ranks load the caches and memory as the miniature's ranks do (they share this
    machine's last-level cache and memory bus; a rank's kernels measured alone ran up to ~2x faster here
    than beside a memory-streaming neighbour)."""
    import torch.multiprocessing as mp

    queue = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(_call_worker, args=(fn, args, queue), nprocs=world, join=True, start_method="spawn")
    return [result for _, result in sorted((queue.get() for _ in range(world)), key=lambda r: r[0])]


def _fastest(call, repeats: int) -> float:
    best = math.inf
    for _ in range(repeats):
        start = time.thread_time_ns()
        call()
        best = min(best, (time.thread_time_ns() - start) * 1e-9)
    return best


def _slope(seconds_of, sizes: tuple[int, int], repeats: int) -> tuple[float, float]:
    """(seconds per unit, seconds at zero) of ``seconds_of(size)``'s fastest times at two sizes."""
    small, large = (min(seconds_of(n) for _ in range(repeats)) for n in sizes)
    per_unit = max(large - small, 0.0) / (sizes[1] - sizes[0])
    return per_unit, max(small - per_unit * sizes[0], 0.0)


def cpu_host_costs(local: int = 1024, repeats: int = 30):
    """This CPU's ``costmodel.recsys.host.HostCosts``: the miniature's own packing operations timed on
    one thread (thread clock, fastest of ``repeats``), each at two sizes for a per-unit cost and a
    fixed cost (``_sharding_miniature._worker``'s ``step``: the row-wise bucketising mask, the copies of
    ids into and out of the buffers, the pooled slices, their concatenation and the stand-in gradient).
    Not fitted to any miniature's step time."""
    import torch

    from costmodel.recsys.host import HostCosts

    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)

    def bucketise(pooling: int) -> float:
        block = torch.randint(0, 10**5, (local, pooling), generator=gen)

        def run():
            hit = (block >= 1000) & (block < 51000)
            hit.sum(dim=1)
            block[hit] - 1000
        return _fastest(run, 1)

    def pack(count: int) -> float:
        pieces = [torch.zeros(count // 2, dtype=torch.long), torch.zeros(count - count // 2, dtype=torch.long)]
        return _fastest(lambda: torch.cat(pieces), 1)

    def pooled(dim: int) -> float:
        out = torch.zeros(2 * local, dim)
        return _fastest(lambda: (torch.cat([out[:local].reshape(-1), out[local:].reshape(-1)]),
                                 torch.randn(2 * local * dim, generator=gen)), 1)

    per_bucketised, fixed = _slope(bucketise, (4, 64), repeats)
    per_packed, _ = _slope(pack, (4096, 262144), repeats)
    per_pooled, _ = _slope(pooled, (8, 128), repeats)
    return HostCosts(per_shard_call_s=fixed, per_packed_id_s=per_packed,
                     per_bucketised_id_s=max(per_bucketised / local - per_packed, 0.0),
                     per_pooled_element_s=per_pooled / (2 * local))


def cpu_sort_costs(repeats: int = 20):
    """This CPU's ``costmodel.recsys.cpu_sort.SortCosts``: ``sort`` of random int64 ids on one thread (thread
    clock, fastest of ``repeats``), at 4096 and 16384 ids for the comparison sort (per ``n log2 n`` step)
    and at 65536 and 262144 for the radix sort (per id), each regime on its own side of ``RADIX_MIN_IDS``."""
    import torch

    from costmodel.recsys.cpu_sort import RADIX_MIN_IDS, SortCosts, compare_steps

    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)

    def sort(n: int) -> float:
        ids = torch.randint(0, 10**6, (n,), generator=gen)
        return _fastest(lambda: ids.sort(), 1)

    small, large = 4096, 16384
    assert large < RADIX_MIN_IDS <= 65536
    t_small, t_large = (min(sort(n) for _ in range(repeats)) for n in (small, large))
    per_step = max(t_large - t_small, 0.0) / (compare_steps(large) - compare_steps(small))
    per_radix, _ = _slope(sort, (65536, 262144), repeats)
    return SortCosts(per_compare_step_s=per_step, per_radix_id_s=per_radix)


def cpu_dense_kernel_costs(world: int, repeats: int = 20, concurrent: bool = True):
    """This CPU's ``costmodel.recsys.dense_kernel.DenseKernelCosts``: the primitives of a data-parallel
    table's step (:func:`dense_kernel_primitives`; with ``concurrent``, timed in ``world`` processes at
    once, :func:`in_processes`, each cost the mean over them) and gloo's all-reduce on ``world`` processes
    (process CPU time, the miniatures' clock). Not fitted to any miniature's step."""
    from costmodel.recsys.cpu_sort import SortCosts

    runs = in_processes(dense_kernel_primitives, world, repeats) if concurrent else [dense_kernel_primitives(repeats)]
    mean = {key: float(np.mean([r[key] for r in runs])) for key in runs[0]}
    latency, bandwidth = all_to_all_figures(world, op="all_reduce")
    sort = SortCosts(per_compare_step_s=mean.pop("per_compare_step_s"), per_radix_id_s=mean.pop("per_radix_id_s"))
    from costmodel.recsys.dense_kernel import DenseKernelCosts

    return DenseKernelCosts(**mean, sort=sort, all_reduce_latency_s=latency, all_reduce_s_per_byte=1.0 / bandwidth)


def dense_kernel_primitives(repeats: int = 20) -> dict[str, float]:
    """The CPU unit costs of ``DenseKernelCosts`` (and the sort's), by field name, timed on one thread
    (thread clock, fastest of ``repeats``), each at two sizes: ``torch.zeros`` below and above the mmap
    threshold (per byte; per fresh page), the sort (:func:`cpu_sort_costs`), the dense ``EmbeddingBag``
    backward of a 1000-row table at dims 16 and 64 less its zero fill and sort (per lookup; per 64-B line
    scattered), ``weight.add_(grad)`` (per byte)."""
    import torch

    from costmodel.recsys.cpu_sort import sort_seconds
    from costmodel.recsys.dense_kernel import MMAP_THRESHOLD_MAX_BYTES

    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)

    def zeros(nbytes: int) -> float:
        return _fastest(lambda: torch.zeros(nbytes // 4), 1)

    def update(nbytes: int) -> float:
        weight, grad = torch.zeros(nbytes // 4), torch.ones(nbytes // 4)
        return _fastest(lambda: weight.add_(grad, alpha=-0.01), 1)

    per_byte, _ = _slope(zeros, (2**20, 16 * 2**20), repeats)
    big = (2 * MMAP_THRESHOLD_MAX_BYTES, 4 * MMAP_THRESHOLD_MAX_BYTES)
    per_big_byte, _ = _slope(zeros, big, max(3, repeats // 4))
    per_page = max(per_big_byte - per_byte, 0.0) * 4096
    sort = cpu_sort_costs(repeats)
    lookups, rows = 16384, 1000

    def backward(dim: int) -> float:
        module = torch.nn.EmbeddingBag(rows, dim, mode="sum")
        ids = torch.randint(0, rows, (lookups,), generator=gen)
        offsets = torch.arange(0, lookups, 8)
        grad = torch.randn(lookups // 8, dim, generator=gen)
        best = math.inf
        for _ in range(repeats):
            out = module(ids, offsets)
            start = time.thread_time_ns()
            out.backward(grad)
            best = min(best, (time.thread_time_ns() - start) * 1e-9)
            module.weight.grad = None
        return best - sort_seconds(lookups, sort) - rows * dim * 4 * per_byte

    # dim 16 is one 64-B line per gradient row, dim 64 four: the difference is three lines per lookup
    narrow, wide = backward(16) / lookups, backward(64) / lookups
    per_line = max(wide - narrow, 0.0) / 3
    return {"per_zeroed_byte_s": per_byte, "per_fresh_page_s": per_page, "per_lookup_s": max(narrow - per_line, 0.0),
            "per_scatter_line_s": per_line, "per_update_byte_s": _slope(update, (2**20, 16 * 2**20), repeats)[0],
            "per_compare_step_s": sort.per_compare_step_s, "per_radix_id_s": sort.per_radix_id_s}


LOOKUP_DESIGN = {"rows": (3000, 10**4, 3 * 10**4, 10**5, 3 * 10**5), "dims": (8, 16, 32, 64),
                 "poolings": (1, 4, 10, 16, 40)}
"""The lookup grid timed on this CPU for the miniatures (their tables: 10^3.5-10^5.5 rows, dim 16-64 split
column-wise down to 8, pooling 1-40), x the three distributions of ``costmodel.profiling.embedding``; pooling
10 (20480 ids at batch 2048) samples the comparison sort's range below ``cpu_sort.RADIX_MIN_IDS``."""


def _backward_seconds(point, rng: np.random.Generator, repeats: int = 5) -> float:
    """Fastest thread-clock seconds of the miniature's backward of one lookup: autograd's sparse gradient
    of ``EmbeddingBag(sparse=True)`` and the sparse SGD update (``_sharding_miniature.sparse_sgd_update``)."""
    import torch

    from benchmarks._sharding_miniature import sparse_sgd_update
    from costmodel.profiling.embedding import draw_ids

    module = torch.nn.EmbeddingBag(point.rows, point.dim, mode="sum", sparse=True)
    count = point.batch * point.pooling
    ids = torch.from_numpy(draw_ids(point.distribution, point.rows, count, rng))
    offsets = torch.arange(0, count, point.pooling, dtype=torch.int64)
    grad = torch.randn(point.batch, point.dim)
    best = math.inf
    for _ in range(repeats + 1):
        out = module(ids, offsets)
        start = time.thread_time_ns()
        out.backward(grad)
        sparse_sgd_update(module)
        best = min(best, (time.thread_time_ns() - start) * 1e-9)
    return best


@dataclass(frozen=True)
class LookupProfile:
    """This CPU's lookup profile (:func:`cpu_lookup_profile`): ``forward`` (``EmbeddingBagPredictor``),
    ``backward`` (``SparseBackwardPredictor``), ``caches``, ``held_out`` (the backward's held-out MAPE, %,
    of ``sparse_backward`` and of ``forward_counts``) and ``backward_forward_counts``, the previous
    backward model (an ``EmbeddingBagPredictor`` of the forward's counts fitted on the backwards), kept
    to compare."""

    forward: Any
    backward: Any
    caches: Any
    held_out: dict
    backward_forward_counts: Any


def lookup_timings(batch: int, rounds: int = 3, seed: int = 0) -> tuple[list, np.ndarray, np.ndarray]:
    """``(points, forward seconds, backward seconds)`` over :data:`LOOKUP_DESIGN` on this thread: each
    point's fastest forward of ``rounds`` shuffled rounds (``costmodel.profiling.embedding.time_points``)
    and its fastest backward + sparse SGD of ``rounds`` passes (one pass's noise here was ~30%:
    allocator page faults come and go, other processes share the L3)."""
    import torch

    from costmodel.profiling.embedding import grid, time_points

    points = grid(LOOKUP_DESIGN["rows"], LOOKUP_DESIGN["dims"], LOOKUP_DESIGN["poolings"], batch)
    measured = time_points(points, rounds=rounds, seed=seed)
    points = [p for p, _ in measured]  # the points reached (time_points has a deadline)
    torch.set_num_threads(1)
    rng = np.random.default_rng(seed)
    backward = np.min([[_backward_seconds(p, rng) for p in points] for _ in range(rounds)], axis=0)
    return points, np.array([m.min_s for _, m in measured]), backward


def cpu_lookup_profile(batch: int, rounds: int = 3, seed: int = 0, sort=None, world: int = 1) -> LookupProfile:
    """This CPU's lookup profile: an ``EmbeddingBagPredictor`` fitted on EmbeddingBag forwards, a
    ``SparseBackwardPredictor`` on the miniature's backward + sparse SGD, both timed here over
    :data:`LOOKUP_DESIGN` (``batch`` bags each, the fastest of ``rounds`` passes), the caches read from
    sysfs, and the backward's held-out MAPE (%) of the sort-aware predictor and of the forward-count one
    it replaces (fitted on a seeded half of the points, scored on the other half). With ``world`` > 1 the
    timings are taken in ``world`` processes at once (:func:`in_processes`, the mean over them), under
    the neighbours' load the miniature's ranks see.

    The forward is the fit ``parplan profile run --ops embedding_bag`` + ``lookup_model_from_profile`` give,
    on the miniatures' table sizes. The backward is measured too because the miniature's (autograd's
    sparse gradient: one gradient row per lookup, sorted and summed, then the update) is not the fused
    FBGEMM backward the cost model's traffic formula describes; its sort is priced with ``sort``
    (``costmodel.recsys.cpu_sort.SortCosts``, :func:`cpu_sort_costs` when None). Both miniature cost models
    and the search get them through ``plan_step_seconds(lookup_model=..., backward_model=..., caches=...)``.
    """
    import torch

    from costmodel.profiling.embedding import DISTRIBUTIONS, cpu_caches
    from costmodel.recsys.embedding import CPU_LINE_BYTES, EmbeddingBagPredictor
    from costmodel.recsys.lookup_fit import CPU_NOMINAL_BANDWIDTH, TimedLookup, columns
    from costmodel.recsys.sparse_backward import SparseBackwardPredictor

    runs = (in_processes(lookup_timings, world, batch, rounds, seed) if world > 1
            else [lookup_timings(batch, rounds, seed)])
    reached = min(len(points) for points, _, _ in runs)  # time_points has a deadline
    points = runs[0][0][:reached]
    forward = np.mean([f[:reached] for _, f, _ in runs], axis=0)
    backward = np.mean([b[:reached] for _, _, b in runs], axis=0)
    timed = [TimedLookup(DISTRIBUTIONS[p.distribution], p.rows, p.dim, p.pooling, p.batch, s)
             for p, s in zip(points, forward)]
    caches = cpu_caches()
    X = columns(timed, caches, aware=True)
    sort = sort if sort is not None else cpu_sort_costs()

    def predictor():
        return EmbeddingBagPredictor(hbm_bandwidth_bytes_per_s=CPU_NOMINAL_BANDWIDTH, sector=CPU_LINE_BYTES)

    half = np.random.default_rng(seed).permutation(len(points)) % 2 == 0  # a seeded half, not fitted to the split
    held_out = {}
    for name, model in (("sparse_backward", SparseBackwardPredictor(sort, caches.near_bytes)),
                        ("forward_counts", predictor())):
        fitted = model.fit(X[half], backward[half])
        held_out[name] = float(100 * np.mean(np.abs(fitted.predict(X[~half]) / backward[~half] - 1)))
    return LookupProfile(forward=predictor().fit(X, forward),
                         backward=SparseBackwardPredictor(sort, caches.near_bytes).fit(X, backward), caches=caches,
                         held_out=held_out, backward_forward_counts=predictor().fit(X, backward))
