"""Held-out accuracy of the fitted operator predictors against the roofline baseline.

For every built-in profile (aiconfigurator-core 0.12.0) whose device is in the GPU catalog,
each family's predictor is fitted on its light sample (``costmodel.predictors._sampling``:
10% of a large table, a staggered lattice of a small one) and scored on the rest of the
table. The baseline on the same rows is the roofline: ``max(FLOPs / peak, bytes / HBM
bandwidth)`` for GEMM and attention, ``ring steps x link latency + bus factor x bytes / link
bandwidth`` (nccl-tests bus factors, catalog NVLink figures) for collectives.

Errors are absolute relative errors ``|predicted / measured - 1|``: ``mape`` is their mean,
``p90`` their 90th percentile. ``mape_ge_1gflop`` (GEMM families) is the MAPE over held-out
GEMMs of at least 1 GFLOP.

The built-in bf16 GEMM table is the per-shape median of the backends that time the same F.linear
call (``costmodel.profiles.aiconfigurator_adapter``: vLLM, SGLang and TensorRT-LLM, each scaled to
the primary backend's level), so its held-out rows carry less measurement noise than one backend's.
For comparison, ``gemm_bf16`` also reports ``mape_vs_primary`` and ``mape_ge_1gflop_vs_primary``:
the same predictions on the same held-out shapes scored against the primary backend's own
single measurements (``primary`` names it; outliers excluded by the same rule on that table).

Outliers. The tables hold one noisy measurement per shape. A held-out row is excluded from
every method's score when its latency differs by more than 2x from the local estimate of its
grid neighbours: over every pair of opposite neighbours (one grid step either way along any
combination of shape axes) the geometric mean of the pair's latencies, and the median of those
over the pairs. Rows without an opposite pair are kept. ``n_excluded`` counts them. (The fit
applies the same rule to its own training sample, see ``costmodel.predictors._sampling``.)

Usage: ``python benchmarks/predictors.py [--json] [--devices NAME ...]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Final

import numpy as np

from costmodel.predictors import FittedProfile, fit_profile, grid_outliers
from costmodel.profiles import aiconfigurator_adapter, builtin_profile
from costmodel.specs.catalog import gpu_catalog

OUTLIER_FACTOR: Final = 2.0
GIGAFLOP: Final = 1e9
# Issue 3 targets (MAPE): the acceptance devices and families.
TARGETS: Final = {"gemm_bf16": 0.05, "gemm_bf16@1gflop": 0.03, "attention_fwd": 0.08, "nccl": 0.08}


def score_family(fitted: FittedProfile, family: str) -> dict[str, Any]:
    """Held-out scores of one family's predictor and of the roofline."""
    train, test = fitted.split(family)
    X_all, latency_all = fitted.shapes(family)
    outlier = grid_outliers(X_all, latency_all, OUTLIER_FACTOR)
    flagged = fitted.family_rows(family)[outlier]
    kept = np.setdiff1d(test, flagged)
    X, latency = fitted.shapes(family, kept)
    predictor = fitted.predictor(family)
    error = np.abs(predictor.predict(X) / latency - 1.0)
    roofline_error = np.abs(predictor.roofline_s(X) / latency - 1.0)
    row: dict[str, Any] = {
        "n_train": int(train.size), "n_test": int(kept.size), "n_excluded": int(test.size - kept.size),
        "mape": float(error.mean()), "p90": float(np.quantile(error, 0.9)),
        "roofline_mape": float(roofline_error.mean()), "fit_s": round(fitted.fit_seconds[family], 3),
    }
    if family.startswith("gemm"):
        big = 2.0 * X[:, 0] * X[:, 1] * X[:, 2] >= GIGAFLOP
        row["mape_ge_1gflop"] = float(error[big].mean())
    if family == "gemm_bf16" and fitted.profile.metadata.get("gemm_bf16_merge"):
        row.update(_versus_primary(fitted, fitted.shapes(family, test)[0], predictor))
    return row


def _versus_primary(fitted: FittedProfile, X: np.ndarray, predictor: Any) -> dict[str, Any]:
    """Held-out bf16 GEMM errors against the primary backend's own (unmerged) measurements."""
    name, table = next(iter(aiconfigurator_adapter.backend_gemm_tables(fitted.profile.device).items()))
    shapes = np.column_stack([table["m"], table["n"], table["k"]]).astype(np.float64)
    flagged = grid_outliers(shapes, table["latency_s"], OUTLIER_FACTOR)
    index = {tuple(shape): i for i, shape in enumerate(shapes.tolist())}
    rows = np.array([index.get(tuple(shape), -1) for shape in X.tolist()])
    keep = rows >= 0
    keep[keep] &= ~flagged[rows[keep]]
    error = np.abs(predictor.predict(X[keep]) / table["latency_s"][rows[keep]] - 1.0)
    big = 2.0 * X[keep].prod(axis=1) >= GIGAFLOP
    return {"primary": name, "mape_vs_primary": float(error.mean()),
            "mape_ge_1gflop_vs_primary": float(error[big].mean())}


def run(devices: list[str]) -> tuple[dict[str, dict[str, dict[str, Any]]], list[str]]:
    """Scores per device and family, and notes on devices left out."""
    catalog = gpu_catalog()
    results: dict[str, dict[str, dict[str, Any]]] = {}
    notes = []
    for device in devices:
        if device not in catalog:
            notes.append(f"{device}: not in the GPU catalog (no peak/bandwidth figures for the physics features)")
            continue
        profile = builtin_profile(device)
        if profile is None:
            notes.append(f"{device}: {aiconfigurator_adapter.PACKAGE_NAME} ships no measurements for it")
            continue
        fitted = fit_profile(profile, catalog[device])
        results[device] = {family: score_family(fitted, family) for family in fitted.families}
    return results, notes


def _print_table(results: dict[str, dict[str, dict[str, Any]]], notes: list[str], seconds: float) -> None:
    header = (f"{'device':<16} {'family':<20} {'n_train':>7} {'n_test':>6} {'excl':>4} {'mape':>6} "
              f"{'p90':>6} {'roof':>6} {'>=1GF':>6} {'fit_s':>6}  {'vs primary: mape / >=1GF':>26}")
    print(header)
    print("-" * len(header))
    for device, families in results.items():
        for family, row in families.items():
            big = f"{row['mape_ge_1gflop']:6.1%}" if "mape_ge_1gflop" in row else f"{'':>6}"
            primary = (f"  {row['mape_vs_primary']:6.1%} / {row['mape_ge_1gflop_vs_primary']:5.1%} ({row['primary']})"
                       if "mape_vs_primary" in row else "")
            print(f"{device:<16} {family:<20} {row['n_train']:>7} {row['n_test']:>6} {row['n_excluded']:>4} "
                  f"{row['mape']:6.1%} {row['p90']:6.1%} {row['roofline_mape']:6.1%} {big} {row['fit_s']:6.2f}"
                  f"{primary}")
    print()
    print("mape/p90: fitted predictor, held-out rows; roof: roofline MAPE on the same rows; "
          f"excl: held-out rows excluded as outliers (>{OUTLIER_FACTOR:g}x off their grid neighbours); "
          "vs primary: the bf16 predictions scored against the primary backend's single measurements "
          "(the profile's table is the backends' merge)")
    for note in notes:
        print(f"skipped {note}")
    print(f"total {seconds:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    parser.add_argument("--devices", nargs="+", default=aiconfigurator_adapter.available_devices(),
                        help="GPU catalog names (default: every device with built-in data)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    results, notes = run(args.devices)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        _print_table(results, notes, time.perf_counter() - start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
