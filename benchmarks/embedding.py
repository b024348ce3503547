"""Held-out accuracy of the distribution-aware lookup model against a distribution-blind one, on CPU.

Times ``torch.nn.functional.embedding_bag`` (fp32, sum pooling, batch 1024 bags, one thread) over the grid
3 distributions (uniform, Zipf 1.05, Zipf 1.2) x rows 10^4-10^7 x dim 32-256 x pooling 1-100; cells whose
table exceeds ``--max-table-gib`` are left out (the machine is shared). Fits ``EmbeddingBagPredictor`` on
a random 10% of the cells (``--fraction``) and prints the MAPE on the other 90% for

- **aware**: columns from each cell's own distribution (unique rows, cache and TLB misses: Che's
  approximation over the CPU's L2, L3 and TLB reach, ``costmodel.recsys.access``);
- **blind**: the same model and split with every cell's columns computed as if it were uniform.

Each split is repeated over ``--seeds`` seeds; the mean and the worst are printed. The timings are each
cell's fastest of ``--rounds`` shuffled passes, on the thread's CPU clock (module docstring of
``costmodel.profiling.embedding``); ``repeat_mape`` is how far a second, independent timing of the grid is from
the first (the noise floor no model can beat), printed with ``--repeat``.

Usage: ``python benchmarks/embedding.py [--small] [--json] [--repeat]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from costmodel.profiling.embedding import DISTRIBUTIONS, cpu_caches, grid, time_points
from costmodel.recsys.lookup_fit import TimedLookup, held_out_errors, mape

FULL = {"rows": (10**4, 3 * 10**4, 10**5, 3 * 10**5, 10**6, 3 * 10**6, 10**7), "dims": (32, 64, 128, 256),
        "poolings": (1, 2, 4, 8, 16, 32, 64, 100), "batch": 1024}
SMALL = {"rows": (10**4, 10**5, 10**6), "dims": (32, 64), "poolings": (1, 4, 16, 64), "batch": 256}
"""The CI version (a few seconds on 2 cores): rows up to 10^6."""


def measure_grid(config: dict[str, Any], rounds: int, seed: int, max_table_bytes: float) -> list[TimedLookup]:
    """Time every cell of ``config``'s grid; one ``TimedLookup`` per cell (its fastest round)."""
    points = grid(config["rows"], config["dims"], config["poolings"], config["batch"],
                  max_table_bytes=max_table_bytes)
    return [TimedLookup(DISTRIBUTIONS[p.distribution], p.rows, p.dim, p.pooling, p.batch, m.min_s)
            for p, m in time_points(points, rounds=rounds, seed=seed)]


def evaluate(timed: list[TimedLookup], fraction: float, seeds: int) -> dict[str, Any]:
    """Held-out MAPE of both models over ``seeds`` random splits."""
    caches = cpu_caches()
    results = [held_out_errors(timed, caches, fraction=fraction, seed=seed) for seed in range(seeds)]
    aware = np.array([r.aware_mape for r in results])
    blind = np.array([r.blind_mape for r in results])
    return {"cells": len(timed), "train": results[0].train, "test": results[0].test, "fraction": fraction,
            "aware_mape": float(aware.mean()), "aware_mape_worst": float(aware.max()),
            "blind_mape": float(blind.mean()), "blind_mape_worst": float(blind.max()),
            "aware_better_in": int(np.sum(aware < blind)), "splits": seeds,
            "caches": {"l2_bytes": caches.near_bytes, "l3_bytes": caches.far_bytes,
                       "tlb_reach_bytes": caches.tlb_reach_bytes}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="the CI grid (rows up to 10^6)")
    parser.add_argument("--fraction", type=float, default=0.1, help="share of the grid fitted on (<= 0.1)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-table-gib", type=float, default=1.25)
    parser.add_argument("--repeat", action="store_true", help="time the grid twice and print the noise floor")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not 0 < args.fraction <= 0.1:
        print(f"The 'fraction' parameter must be in (0, 0.1]. Got {args.fraction} instead.", file=sys.stderr)
        return 2
    config = SMALL if args.small else FULL
    start = time.monotonic()
    timed = measure_grid(config, args.rounds, 0, args.max_table_gib * 2**30)
    report = evaluate(timed, args.fraction, args.seeds)
    if args.repeat:
        again = {(t.access, t.rows, t.dim, t.pooling): t.seconds
                 for t in measure_grid(config, args.rounds, 1, args.max_table_gib * 2**30)}
        first = np.array([t.seconds for t in timed if (t.access, t.rows, t.dim, t.pooling) in again])
        second = np.array([again[(t.access, t.rows, t.dim, t.pooling)] for t in timed
                           if (t.access, t.rows, t.dim, t.pooling) in again])
        report["repeat_mape"] = mape(first, second)
    report["wall_s"] = time.monotonic() - start
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"embedding_bag on CPU: {report['cells']} cells, fitted on {report['train']} "
          f"({100 * args.fraction:.0f}%), scored on {report['test']}, {report['splits']} splits")
    print(f"  distribution-aware  held-out MAPE {report['aware_mape']:5.1f}%  (worst split "
          f"{report['aware_mape_worst']:.1f}%)")
    print(f"  distribution-blind  held-out MAPE {report['blind_mape']:5.1f}%  (worst split "
          f"{report['blind_mape_worst']:.1f}%)")
    print(f"  aware better in {report['aware_better_in']} of {report['splits']} splits")
    if "repeat_mape" in report:
        print(f"  noise floor: a second timing of the grid differs by {report['repeat_mape']:.1f}% (MAPE)")
    print(f"  {report['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
