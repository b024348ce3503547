"""ATen's CPU sort of int64 ids, which every CPU embedding backward runs (the dense kernel's and the
sparse gradient's ``coalesce``): a comparison sort below ``radix_min_ids``, a radix sort from there on.

``at::sort`` of a 1-D integer tensor takes FBGEMM's radix sort when it has at least
``at::internal::GRAIN_SIZE`` = 32768 elements (PyTorch aten/src/ATen/native/cpu/SortingKernel.cpp,
``can_use_radix_sort``; the constant in ATen/TensorIterator.h), else a comparison sort. On this project's
2-core Xeon the per-id cost falls from ~70 ns at 20 000 ids to ~40 ns at 32 768
(``benchmarks/_sharding_hardware.cpu_sort_costs``), so a backward's time is not monotone in its lookups
there, and no count linear in the lookups prices it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

RADIX_MIN_IDS: Final = 32768  # at::internal::GRAIN_SIZE (ATen/TensorIterator.h)


@dataclass(frozen=True)
class SortCosts:
    """Seconds per step of sorting ``n`` int64 ids (with their permutation): ``per_compare_step_s`` per
    ``n log2 n`` step of the comparison sort, ``per_radix_id_s`` per id of the radix sort (0: not modelled)."""

    per_compare_step_s: float = 0.0
    per_radix_id_s: float = 0.0
    radix_min_ids: int = RADIX_MIN_IDS


def compare_steps(ids: float) -> float:
    """``n log2 n`` of a comparison sort of ``n`` ids (0 below two)."""
    return ids * math.log2(ids) if ids >= 2 else 0.0


def sort_seconds(ids: float, costs: SortCosts) -> float:
    """Seconds of ``at::sort`` of ``ids`` int64 ids on a CPU (module docstring)."""
    if ids >= costs.radix_min_ids:
        return ids * costs.per_radix_id_s
    return compare_steps(ids) * costs.per_compare_step_s


__all__ = ["RADIX_MIN_IDS", "SortCosts", "compare_steps", "sort_seconds"]
