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


def _a2a_worker(rank: int, world: int, port: int, sizes: list[int], repeats: int, queue) -> None:
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
            dist.all_to_all_single(recv, send)
            times.append(time.process_time() - start)
        out.append(float(np.min(times[1:])))
    if rank == 0:
        queue.put(out)
    dist.destroy_process_group()


def all_to_all_figures(world: int, small: int = 64 * 1024, large: int = 16 * 1024 * 1024) -> tuple[float, float]:
    """(latency s, bandwidth bytes/s) of gloo all-to-all among ``world`` local processes."""
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    queue = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(_a2a_worker, args=(world, port, [small, large], 5, queue), nprocs=world, join=True,
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


LOOKUP_DESIGN = {"rows": (3000, 10**4, 3 * 10**4, 10**5, 3 * 10**5), "dims": (8, 16, 32, 64),
                 "poolings": (1, 4, 16, 40)}
"""The lookup grid timed on this CPU for the miniatures (their tables: 10^3.5-10^5.5 rows, dim 16-64 split
column-wise down to 8, pooling 1-40), x the three distributions of ``costmodel.profiling.embedding``."""


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


def cpu_lookup_profile(batch: int, rounds: int = 3, seed: int = 0):
    """This CPU's lookup profile: ``(forward, backward, caches)``, two ``EmbeddingBagPredictor``s fitted on
    EmbeddingBag forwards and on the miniature's backward + sparse SGD, timed here over
    :data:`LOOKUP_DESIGN` (``batch`` bags each), and the caches read from sysfs.

    The forward is the fit ``parplan profile run --ops embedding_bag`` + ``lookup_model_from_profile`` give,
    on the miniatures' table sizes. The backward is measured too because the miniature's (autograd's
    sparse gradient: one gradient row per lookup, sorted and summed, then the update) is not the fused
    FBGEMM backward the cost model's traffic formula describes. Both miniature cost models and the search
    get them through ``plan_step_seconds(lookup_model=..., backward_model=..., caches=...)``.
    """
    import torch

    from costmodel.profiling.embedding import DISTRIBUTIONS, cpu_caches, grid, time_points
    from costmodel.recsys.embedding import CPU_LINE_BYTES, EmbeddingBagPredictor
    from costmodel.recsys.lookup_fit import CPU_NOMINAL_BANDWIDTH, TimedLookup, columns

    points = grid(LOOKUP_DESIGN["rows"], LOOKUP_DESIGN["dims"], LOOKUP_DESIGN["poolings"], batch)
    timed = [TimedLookup(DISTRIBUTIONS[p.distribution], p.rows, p.dim, p.pooling, p.batch, m.min_s)
             for p, m in time_points(points, rounds=rounds, seed=seed)]
    caches = cpu_caches()
    X = columns(timed, caches, aware=True)
    torch.set_num_threads(1)
    rng = np.random.default_rng(seed)
    backward = np.array([_backward_seconds(p, rng) for p in points])

    def predictor():
        return EmbeddingBagPredictor(hbm_bandwidth_bytes_per_s=CPU_NOMINAL_BANDWIDTH, sector=CPU_LINE_BYTES)

    return predictor().fit(X, np.array([t.seconds for t in timed])), predictor().fit(X, backward), caches
