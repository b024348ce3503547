"""CPU miniatures of sharded embedding training: real ``torch.distributed`` (gloo) all-to-alls and EmbeddingBags.

``measure_plans`` starts ``world`` gloo processes on this machine and times one training step of the
embedding part for each plan, round-robin over the plans so that load drift on a shared machine hits
them alike. Each plan's step is the critical path of CPU time (``critical_cpu_seconds``): on a shared
2-core machine the wall clock mostly measures waiting for a core; the fastest wall-clock step is kept
too. A step does what TorchRec's sharded EmbeddingBagCollection does (torchrec/distributed:
``KJTAllToAll`` input distribution, local ``EmbeddingBag`` lookups, ``PooledEmbeddingsAllToAll``
output distribution, and the reverse all-to-all of the gradients in the backward):

1. input distribution: the splits, the lengths, then the ids (three all-to-alls, as ``KJTAllToAll``), to
   the ranks that hold each table's shards (row-wise: only the ids of that rank's rows, so the exchange
   carries what TorchRec's bucketised one carries);
2. lookups: ``torch.nn.EmbeddingBag(mode="sum", sparse=True)`` over the global batch's ids per shard;
3. output distribution: each source rank's slice of the pooled output back to it (row-wise partial
   sums arrive one per shard: the bytes a reduce-scatter moves, the add left out);
4. backward: the gradient (a fixed random projection, the stand-in for the dense part) all-to-all'd
   back, ``backward`` through the lookups and a sparse SGD update; data-parallel tables look up the
   local batch and all-reduce their dense gradient.

Every round (warm-up and timed) looks up a fresh global batch, as every training step does: a batch
repeated each step let a lookup find the rows it touched the step before in cache, a reuse neither
training nor the fresh-batch lookup profile the model is fitted on has (``costmodel/profiling/embedding.py``).
The batches are drawn before the timing loop (``draw_rounds``), so drawing ids is never timed. All plans of
a round look up that round's batch: each plan has its own tables, so it cannot find another plan's rows
in cache, and the plans are compared on the same ids.

The dense MLPs are left out: they are the same for every plan and would only add a constant.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MiniTable:
    """A table of a miniature: ``pooling`` ids per bag (fixed), ids drawn uniform or Zipf(``zipf``)."""

    name: str
    rows: int
    dim: int
    pooling: int
    zipf: float = 0.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _hashed_zipf(table: MiniTable, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray] | None:
    """A Zipf table's rank probabilities and the permutation that hashes ranks onto rows (popularity unrelated
    to the row number); drawn once per table, so the same rows stay hot from batch to batch. ``None``: uniform."""
    if table.zipf <= 0:
        return None
    p = np.arange(1, table.rows + 1, dtype=float) ** -table.zipf
    return p / p.sum(), rng.permutation(table.rows)


def _draw(table: MiniTable, count: int, rng: np.random.Generator,
          zipf: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    if zipf is None:
        return rng.integers(0, table.rows, size=count)
    p, rows_of_rank = zipf
    return rows_of_rank[rng.choice(table.rows, size=count, p=p)]


def draw_rounds(tables: list[MiniTable], batch: int, rounds: int, seed: int,
                mine: slice) -> list[dict[str, np.ndarray]]:
    """Per round, a fresh global batch of ``batch`` bags per table (``[batch, pooling]`` ids), of which the
    ``mine`` bags are kept (a rank's local batch).

    Every rank draws the same stream from ``seed``, so the ranks' slices are of one global batch. Only the
    local slices are kept: ``rounds`` x local batch x the tables' pooling x 8 bytes (22 MB per rank at 14
    rounds of 1024 bags of 5 tables at pooling 39).
    """
    rng = np.random.default_rng(seed)
    zipf = {t.name: _hashed_zipf(t, rng) for t in tables}
    return [{t.name: _draw(t, batch * t.pooling, rng, zipf[t.name]).reshape(batch, t.pooling)[mine].copy()
             for t in tables} for _ in range(rounds)]


def _shards(table: MiniTable, kind: str, ranks: tuple[int, ...], world: int) -> list[tuple[int, int, int, int]]:
    """(rank, first row, rows, cols) per shard, TorchRec's geometry."""
    if kind == "table_wise":
        return [(ranks[0], 0, table.rows, table.dim)]
    if kind == "column_wise":
        return [(r, 0, table.rows, table.dim // len(ranks)) for r in ranks]
    block = -(-table.rows // len(ranks))
    return [(r, i * block, max(0, min(block, table.rows - i * block)), table.dim) for i, r in enumerate(ranks)]


def sparse_sgd_update(module) -> None:
    """SGD on an ``EmbeddingBag(sparse=True)``'s gradient: the touched rows only (coalesced first)."""
    if module.weight.grad is not None:
        module.weight.data.add_(module.weight.grad.coalesce(), alpha=-0.01)
        module.weight.grad = None


def _worker(rank: int, world: int, port: int, tables: list[MiniTable], plans: list[dict], batch: int,
            steps: int, warmup: int, seed: int, queue) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    local = batch // world
    mine = slice(rank * local, (rank + 1) * local)
    rounds = [{name: torch.from_numpy(x) for name, x in ids.items()}
              for ids in draw_rounds(tables, batch, warmup + steps, seed, mine)]
    grad_rng = torch.Generator().manual_seed(seed + 1)
    torch.manual_seed(seed + 2 + rank)

    def build(plan: dict):
        modules, dp = {}, {}
        for t in tables:
            kind, ranks = plan[t.name]
            if kind == "data_parallel":
                dp[t.name] = torch.nn.EmbeddingBag(t.rows, t.dim, mode="sum")
                continue
            for index, (r, first, rows, cols) in enumerate(_shards(t, kind, ranks, world)):
                if r == rank:
                    modules[(t.name, index)] = (torch.nn.EmbeddingBag(max(rows, 1), cols, mode="sum", sparse=True),
                                                first, rows)
        return modules, dp

    def step(plan: dict, modules: dict, dp: dict, ids: dict, marks: list[float]) -> None:
        # ids: this round's local batch per table, [local, pooling]
        marks.append(time.process_time())
        # 1. input distribution: per destination, for each of its shards in a fixed order, lengths then ids
        send_len: list[list[torch.Tensor]] = [[] for _ in range(world)]
        send_ids: list[list[torch.Tensor]] = [[] for _ in range(world)]
        order = []  # (table, shard index, dest, first, rows, cols)
        for t in tables:
            kind, ranks = plan[t.name]
            if kind == "data_parallel":
                continue
            block = ids[t.name]
            for index, (r, first, rows, cols) in enumerate(_shards(t, kind, ranks, world)):
                if kind in ("row_wise", "table_row_wise"):
                    hit = (block >= first) & (block < first + rows)
                    send_len[r].append(hit.sum(dim=1))
                    send_ids[r].append(block[hit] - first)
                else:
                    send_len[r].append(torch.full((local,), t.pooling, dtype=torch.long))
                    send_ids[r].append(block.reshape(-1))
                order.append((t.name, index, r, cols, kind))
        # TorchRec's KJTAllToAll: one all-to-all of the splits (lengths and ids per destination), then one
        # per tensor (torchrec/distributed/dist_data.py)
        len_in = [int(sum(x.numel() for x in send_len[d])) for d in range(world)]
        id_in = [int(sum(x.numel() for x in send_ids[d])) for d in range(world)]
        splits = torch.tensor([len_in, id_in]).T.reshape(-1)
        recv_splits = torch.empty(2 * world, dtype=torch.long)
        dist.all_to_all_single(recv_splits, splits)
        len_out_sizes = recv_splits[0::2].tolist()
        id_out_sizes = recv_splits[1::2].tolist()
        len_buf = torch.cat([torch.cat(x) if x else torch.empty(0, dtype=torch.long) for x in send_len])
        recv_len = torch.empty(sum(len_out_sizes), dtype=torch.long)
        dist.all_to_all_single(recv_len, len_buf, output_split_sizes=len_out_sizes, input_split_sizes=len_in)
        recv_ids = torch.empty(sum(id_out_sizes), dtype=torch.long)
        dist.all_to_all_single(recv_ids, torch.cat([torch.cat(x) if x else torch.empty(0, dtype=torch.long)
                                                    for x in send_ids]),
                               output_split_sizes=id_out_sizes, input_split_sizes=id_in)
        marks.append(time.process_time())
        # 2. lookups: my shards, in the senders' order; each source sent [my shards...] for its local batch
        my_shards = [(name, index, cols, kind) for (name, index, r, cols, kind) in order if r == rank]
        lens_by_src = torch.split(recv_len, len_out_sizes)
        ids_by_src = torch.split(recv_ids, id_out_sizes)
        per_shard_lens: dict = {}
        per_shard_ids: dict = {}
        for src in range(world):
            lens = torch.split(lens_by_src[src], [local] * len(my_shards)) if my_shards else []
            offs = 0
            for (name, index, cols, kind), length in zip(my_shards, lens):
                n = int(length.sum())
                per_shard_lens.setdefault((name, index), []).append(length)
                per_shard_ids.setdefault((name, index), []).append(ids_by_src[src][offs:offs + n])
                offs += n
        outputs = {}
        for (name, index, cols, kind) in my_shards:
            module = modules[(name, index)][0]
            lengths = torch.cat(per_shard_lens[(name, index)])
            offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
            outputs[(name, index)] = module(torch.cat(per_shard_ids[(name, index)]), offsets)
        marks.append(time.process_time())
        # 3. output distribution: source s gets rows [s*local, (s+1)*local) of each of my outputs
        send_out = [torch.cat([outputs[(n, i)][s * local:(s + 1) * local].reshape(-1) for (n, i, _, _) in my_shards])
                    if my_shards else torch.empty(0) for s in range(world)]
        out_in = [x.numel() for x in send_out]
        want = [sum(local * cols for (_, _, r, cols, _) in order if r == d) for d in range(world)]
        recv_out = torch.empty(sum(want))
        dist.all_to_all_single(recv_out, torch.cat(send_out).detach(), output_split_sizes=want,
                               input_split_sizes=out_in)
        # 4. backward: the dense part's gradient comes back along the same path, reversed
        grad = torch.randn(recv_out.numel(), generator=grad_rng)
        marks.append(time.process_time())
        grad_back = torch.empty(sum(out_in))
        dist.all_to_all_single(grad_back, grad, output_split_sizes=out_in, input_split_sizes=want)
        marks.append(time.process_time())
        pieces = torch.split(grad_back, out_in)
        grads = {key: torch.empty_like(out) for key, out in outputs.items()}
        for s in range(world):
            offs = 0
            for (n, i, cols, _) in my_shards:
                size = local * cols
                grads[(n, i)][s * local:(s + 1) * local] = pieces[s][offs:offs + size].reshape(local, cols)
                offs += size
        if outputs:
            torch.autograd.backward(list(outputs.values()), [grads[k] for k in outputs])
        for module, _, _ in modules.values():
            sparse_sgd_update(module)
        marks.append(time.process_time())
        for name, module in dp.items():
            table = next(t for t in tables if t.name == name)
            flat = ids[name]
            out = module(flat.reshape(-1), torch.arange(0, local * table.pooling, table.pooling))
            out.backward(torch.randn(out.shape, generator=grad_rng))
            dist.all_reduce(module.weight.grad)
            module.weight.data.add_(module.weight.grad, alpha=-0.01)
            module.weight.grad = None
        marks.append(time.process_time())

    built = [build(plan) for plan in plans]
    wall: list[list[float]] = [[] for _ in plans]
    phases: list[list[np.ndarray]] = [[] for _ in plans]
    for iteration in range(warmup + steps):
        for index, plan in enumerate(plans):
            marks: list[float] = []
            dist.barrier()
            start = time.perf_counter()
            step(plan, *built[index], rounds[iteration], marks)
            dist.barrier()
            if iteration >= warmup:
                wall[index].append(time.perf_counter() - start)
                phases[index].append(np.diff(marks))
    queue.put((rank, [float(np.min(t)) for t in wall], np.array(phases)))
    dist.destroy_process_group()


@dataclass(frozen=True)
class Measured:
    """Each plan's step: ``cpu_s``, the critical path of CPU time (per step, the sum over the phases of the
    busiest rank's CPU seconds in it; the fastest step), ``wall_s``, the fastest wall-clock step, and
    ``phase_s``, per plan the busiest rank's CPU seconds in each of :data:`PHASES`, each phase's fastest step."""

    cpu_s: list[float]
    wall_s: list[float]
    phase_s: list[list[float]]
    noise_pct: float = 0.0
    """The noise floor: mean |difference| (%) between the plans' steps over the first and the second half of
    the rounds."""


PHASES = ("input_dist", "lookup_fwd", "output_dist", "grad_dist", "lookup_bwd", "data_parallel")
"""The phases a miniature step is timed in (``step``'s marks): input all-to-alls (with the bucketising),
lookups (with the split of the received ids per shard), pooled-output all-to-all (with the stand-in
gradient's draw), gradient all-to-all, backward + sparse SGD, data-parallel tables."""


def critical_phase_seconds(phases: np.ndarray) -> np.ndarray:
    """``[plan, phase]``: the busiest rank's CPU seconds in each phase, the fastest step of each phase."""
    return phases.max(axis=0).min(axis=-2)


def critical_cpu_seconds(phases: np.ndarray) -> np.ndarray:
    """Per plan, the fastest step's sum over phases of the busiest rank's CPU seconds.

    ``phases[rank, plan, step, phase]``: a collective ends when its last rank has done its part, so each
    phase of a step lasts as long as its busiest rank works in it; on a machine with a core per rank and
    no other load that is the step's wall time. Process CPU time (the gloo threads included) does not
    count the time a rank waits for a core, which on a shared 2-core machine is most of the wall time.
    """
    return phases.max(axis=0).sum(axis=-1).min(axis=-1)


def measure_plans(tables: list[MiniTable], plans: list[dict], world: int, batch: int, steps: int = 12,
                  warmup: int = 2, seed: int = 0) -> Measured:
    """Each plan's (``{table: (sharding_type, ranks)}``) measured step on ``world`` gloo ranks, over ``steps``
    interleaved rounds."""
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    mp.start_processes(_worker, args=(world, _free_port(), tables, plans, batch, steps, warmup, seed, queue),
                       nprocs=world, join=True, start_method="spawn")
    reports = sorted((queue.get() for _ in range(world)), key=lambda r: r[0])
    phases = np.stack([r[2] for r in reports])
    half = phases.shape[2] // 2
    first, second = critical_cpu_seconds(phases[:, :, :half]), critical_cpu_seconds(phases[:, :, half:])
    return Measured(cpu_s=[float(x) for x in critical_cpu_seconds(phases)], wall_s=reports[0][1],
                    phase_s=critical_phase_seconds(phases).tolist(),
                    noise_pct=float(100 * np.mean(np.abs(first - second) / second)))
