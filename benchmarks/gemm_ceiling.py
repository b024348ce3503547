"""How accurate can a bf16 GEMM predictor get on the built-in tables? A learning curve and the tables' noise.

Issue 3 asks for a held-out MAPE of at most 3% on GEMMs of at least 1 GFLOP, training on at
most 10% of a table. This benchmark puts the figure ``benchmarks/predictors.py`` reports for
A100 and H100 beside two references measured on the same tables:

- **Learning curve.** The same predictor class and sampling design (``light_sample``, the maximin
  core plus a random fill) at 10%, 30% and 90% of the table, each scored on the rest; and at 10%
  and 90% a larger model (500 boosting rounds, 63 leaves), to show whether capacity or data
  limits the fit. Held-out rows more than 2x off their grid neighbours are excluded, as in
  ``benchmarks/predictors.py``.
- **Measurement noise.** The built-in table is the per-shape median of the backends that timed
  the same ``F.linear`` call (``costmodel.profiles.aiconfigurator_adapter``). For shapes of at
  least 1 GFLOP that every backend timed, ``backend_vs_merged`` is the mean ``|backend / merged
  - 1|`` of each backend's own measurement (divided by its level offset): what a second
  measurement of the same shape differs by. A predictor scored on single measurements cannot do
  much better than that; the merged value itself carries part of it.

Usage: ``python benchmarks/gemm_ceiling.py [--json] [--devices NAME ...]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Final

import numpy as np
from sklearn.base import clone

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from costmodel.predictors import FittedProfile, fit_profile, grid_outliers  # noqa: E402
from costmodel.predictors._sampling import light_sample  # noqa: E402
from costmodel.profiles import aiconfigurator_adapter, builtin_profile  # noqa: E402
from costmodel.specs.catalog import gpu_catalog  # noqa: E402

FAMILY: Final = "gemm_bf16"
GIGAFLOP: Final = 1e9
OUTLIER_FACTOR: Final = 2.0
FRACTIONS: Final = (0.10, 0.30, 0.90)
LARGER_MODEL: Final = {"max_iter": 500, "learning_rate": 0.1, "max_leaf_nodes": 63}
DEVICES: Final = ("a100-sxm4-80gb", "h100-sxm5-80gb")


def learning_curve(fitted: FittedProfile) -> list[dict[str, Any]]:
    """Held-out MAPE (all shapes and >= 1 GFLOP) at each training fraction."""
    X, latency = fitted.shapes(FAMILY)
    outlier = grid_outliers(X, latency, OUTLIER_FACTOR)
    base = fitted.estimator(FAMILY)  # the scikit-learn estimator, to clone and refit
    recipe = dict(fitted.profile.fit_sampling)
    rows = []
    for fraction in FRACTIONS:
        sampled = light_sample(X, {**recipe, "fraction": fraction, "max_rows": X.shape[0]})
        train = sampled[~grid_outliers(X[sampled], latency[sampled], float(recipe["outlier_factor"]))]
        test = np.setdiff1d(np.arange(X.shape[0]), sampled)
        test = test[~outlier[test]]
        variants = [("default", {})] + ([("larger", LARGER_MODEL)] if fraction != FRACTIONS[1] else [])
        for name, params in variants:
            start = time.perf_counter()
            predictor = clone(base).set_params(**params).fit(X[train], latency[train])
            seconds = time.perf_counter() - start
            error = np.abs(predictor.predict(X[test]) / latency[test] - 1.0)
            big = 2.0 * X[test].prod(axis=1) >= GIGAFLOP
            rows.append({"fraction": fraction, "model": name, "n_train": int(train.size), "n_test": int(test.size),
                         "mape": float(error.mean()), "mape_ge_1gflop": float(error[big].mean()),
                         "fit_s": round(seconds, 2)})
    return rows


def backend_noise(fitted: FittedProfile) -> dict[str, Any]:
    """Mean |backend / merged - 1| per backend over shapes >= 1 GFLOP that every backend timed."""
    note = fitted.profile.metadata.get("gemm_bf16_merge")
    if not note:
        return {}
    X, merged = fitted.shapes(FAMILY)
    position = {tuple(shape): i for i, shape in enumerate(X.astype(np.int64).tolist())}
    tables = aiconfigurator_adapter.backend_gemm_tables(fitted.profile.device)
    per_backend = {}
    for name, table in tables.items():
        values = np.full(merged.size, np.nan)
        shapes = np.column_stack([table["m"], table["n"], table["k"]]).tolist()
        index = np.array([position.get(tuple(shape), -1) for shape in shapes])
        hit = index >= 0
        values[index[hit]] = table["latency_s"][hit] / note["offsets"].get(name, 1.0)
        per_backend[name] = values
    stacked = np.column_stack(list(per_backend.values()))
    every = np.all(np.isfinite(stacked), axis=1) & (2.0 * X.prod(axis=1) >= GIGAFLOP)
    return {"n_shapes": int(every.sum()),
            "backend_vs_merged": {name: float(np.mean(np.abs(values[every] / merged[every] - 1.0)))
                                  for name, values in per_backend.items()}}


def run(devices: list[str]) -> dict[str, Any]:
    catalog = gpu_catalog()
    results = {}
    for device in devices:
        profile = builtin_profile(device)
        if profile is None or device not in catalog:
            continue
        fitted = fit_profile(profile, catalog[device])
        results[device] = {"learning_curve": learning_curve(fitted), "noise": backend_noise(fitted)}
    return results


def _print(results: dict[str, Any]) -> None:
    print(f"{'device':<16} {'train':>6} {'model':<8} {'n_train':>7} {'n_test':>6} {'mape':>6} {'>=1GF':>6} {'fit_s':>6}")
    for device, result in results.items():
        for row in result["learning_curve"]:
            print(f"{device:<16} {row['fraction']:6.0%} {row['model']:<8} {row['n_train']:>7} {row['n_test']:>6} "
                  f"{row['mape']:6.1%} {row['mape_ge_1gflop']:6.1%} {row['fit_s']:6.2f}")
        noise = result["noise"]
        if noise:
            spread = ", ".join(f"{name} {value:.1%}" for name, value in noise["backend_vs_merged"].items())
            print(f"{device:<16} single measurement vs merged table, {noise['n_shapes']} shapes >= 1 GFLOP: {spread}")
    print("\nmape: held-out rows (the complement of the training sample, grid outliers excluded); "
          ">=1GF: held-out GEMMs of at least 1 GFLOP")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    parser.add_argument("--devices", nargs="+", default=list(DEVICES), help="GPU catalog names")
    args = parser.parse_args(argv)
    results = run(args.devices)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        _print(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
