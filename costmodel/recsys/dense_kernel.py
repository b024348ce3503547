"""The dense-kernel (data-parallel) table's backward and update on a CPU, from measured unit costs.

A data-parallel table is replicated on every rank and trained with a dense gradient (TorchRec's
``DataParallel`` sharding: ``BatchedDenseEmbeddingBag`` over FBGEMM's
``DenseTableBatchedEmbeddingBagsCodegen``, "table-batched version of nn.EmbeddingBag(sparse=False)",
wrapped in DDP; torchrec 1.8.0 ``distributed/batched_embedding_kernel.py`` and ``model_parallel.py``).
On a CPU its backward is ATen's ``_embedding_bag_dense_backward_cpu`` (aten/src/ATen/native/EmbeddingBag.cpp):

1. ``at::zeros({rows, dim})``: a zero-filled gradient of the whole table; above the allocator's mmap
   threshold every step maps fresh pages, each faulted in (zeroed by the kernel) and unmapped at the free;
2. ``indices.sort()`` of the rank's lookups (``costmodel.recsys.cpu_sort``);
3. per lookup, an ``axpy`` of its bag's gradient row into the table's gradient row;

then DDP all-reduces the whole gradient (gloo on a CPU: its CPU time, the reduction included) and the
optimizer steps every row (``weight.add_(grad)``). Most of it does not depend on which rows the batch
touches, which is why a sparse-kernel lookup model (``costmodel.recsys.embedding``) cannot price it.
``DenseKernelCosts`` holds the unit costs, measured on the machine
(``benchmarks/_sharding_hardware.cpu_dense_kernel_costs``); :func:`dense_backward_seconds` counts them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final

from costmodel.recsys.cpu_sort import SortCosts, sort_seconds

GRAD_BYTES: Final = 4  # fp32 dense gradient
PAGE_BYTES: Final = 4096  # x86-64 base page (THP "madvise" here: PyTorch's CPU allocator does not ask for huge pages)
MMAP_THRESHOLD_MAX_BYTES: Final = 32 * 2**20
"""glibc malloc serves a request above its dynamic mmap threshold with a fresh ``mmap``; the threshold grows
to at most 4*1024*1024*sizeof(long) = 32 MiB on 64-bit (mallopt(3), ``M_MMAP_THRESHOLD``), so a gradient
larger than this is newly mapped (and page-faulted) every step, a smaller one reuses the heap."""
LINE_BYTES: Final = 64  # x86 cache line


@dataclass(frozen=True)
class DenseKernelCosts:
    """Seconds per unit of a dense-kernel table's step on a CPU (all 0: not modelled).

    ``per_zeroed_byte_s``: the gradient's zero fill; ``per_fresh_page_s``: a page of a gradient above
    ``mmap_threshold_bytes`` faulted in and unmapped; ``sort``: the sort of the lookups;
    ``per_lookup_s``: a lookup's share of the backward's loop (counts, ``offset2bag`` gather);
    ``per_scatter_line_s``: a 64-B line of one lookup's gradient row added into the table's gradient;
    ``per_update_byte_s``: a byte of the table stepped (``weight.add_(grad)``); ``all_reduce_latency_s``
    and ``all_reduce_s_per_byte``: the gradient's all-reduce over the ranks (measured at one world size).
    """

    per_zeroed_byte_s: float = 0.0
    per_fresh_page_s: float = 0.0
    sort: SortCosts = field(default_factory=SortCosts)
    per_lookup_s: float = 0.0
    per_scatter_line_s: float = 0.0
    per_update_byte_s: float = 0.0
    all_reduce_latency_s: float = 0.0
    all_reduce_s_per_byte: float = 0.0
    mmap_threshold_bytes: float = MMAP_THRESHOLD_MAX_BYTES

    def all_reduce_seconds(self, message_bytes: float) -> float:
        """The all-reduce of ``message_bytes`` (0 bytes: none)."""
        return self.all_reduce_latency_s + message_bytes * self.all_reduce_s_per_byte if message_bytes > 0 else 0.0


def dense_backward_seconds(rows: int, dim: int, lookups: float, costs: DenseKernelCosts) -> float:
    """One rank's backward and update of a dense-kernel table of ``rows x dim`` fp32 that received
    ``lookups`` ids (module docstring steps 1-3 and the update; the all-reduce is apart)."""
    grad_bytes = rows * dim * GRAD_BYTES
    fresh_pages = math.ceil(grad_bytes / PAGE_BYTES) if grad_bytes > costs.mmap_threshold_bytes else 0
    lines = math.ceil(dim * GRAD_BYTES / LINE_BYTES)
    return (grad_bytes * (costs.per_zeroed_byte_s + costs.per_update_byte_s) + fresh_pages * costs.per_fresh_page_s
            + sort_seconds(lookups, costs.sort) + lookups * (costs.per_lookup_s + lines * costs.per_scatter_line_s))


__all__ = ["MMAP_THRESHOLD_MAX_BYTES", "DenseKernelCosts", "dense_backward_seconds"]
