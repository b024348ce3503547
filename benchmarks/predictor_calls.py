"""Per-call time of ``FittedProfile.predict_gemm``: scikit-learn estimators vs their compiled numpy form.

One process, one fit of the built-in profile: the same ``FittedProfile`` code
(range checks, broadcasting) runs once over the compiled predictors (what parplan
uses) and once over the fitted scikit-learn estimators they were compiled from,
on the same shapes (in-range GEMMs drawn from the profile's table). Each figure is
the best of ``--repeat`` rounds of ``--number`` calls, in microseconds; the
ratio is what to read on a busy machine. scikit-learn's histogram boosting
predicts on an OpenMP pool: it is timed at its default and at one thread.
Before timing, both forms are checked to give the same seconds bit for bit.

Usage::

    python benchmarks/predictor_calls.py [--device h100-sxm5-80gb] [--rows 1 200] [--number 50] [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import timeit
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from costmodel.predictors import FittedProfile, fit_profile
from costmodel.profiles import builtin_profile
from costmodel.specs.catalog import get_gpu

FAMILY = "gemm_bf16"


def _with_estimators(fitted: FittedProfile) -> FittedProfile:
    """The same profile predicting through the scikit-learn estimators (duck-typed ``predict``)."""
    estimators = {family: fitted.estimator(family) for family in fitted.fitted_families}
    train = {family: fitted.split(family)[0] for family in fitted.fitted_families}
    return FittedProfile(fitted.profile, fitted.gpu, estimators, train, fitted.fit_seconds,  # type: ignore[arg-type]
                         scores=fitted.scores)


def _best_us(call: Any, number: int, repeat: int) -> float:
    call()  # warm
    return min(timeit.repeat(call, number=number, repeat=repeat)) / number * 1e6


def run(device: str, rows: list[int], number: int, repeat: int) -> dict[str, Any]:
    """Microseconds per ``predict_gemm`` call for each batch size, per form."""
    profile = builtin_profile(device)
    if profile is None:
        raise SystemExit(f"--device: {device!r} has no built-in profile")
    with threadpool_limits(limits=1):
        compiled = fit_profile(profile, get_gpu(device))
    reference = _with_estimators(compiled)
    X, _ = compiled.shapes(FAMILY)
    rng = np.random.default_rng(0)
    out: dict[str, Any] = {"device": device, "family": FAMILY, "rows": {}}
    for count in rows:
        m, n, k = X[rng.choice(X.shape[0], count, replace=False)].T
        ours, theirs = compiled.predict_gemm(m, n, k, "bf16")[0], reference.predict_gemm(m, n, k, "bf16")[0]
        if not np.array_equal(ours, theirs):
            raise SystemExit(f"{count} rows: compiled and scikit-learn predictions differ")
        timings = {"compiled_us": _best_us(lambda: compiled.predict_gemm(m, n, k, "bf16"), number, repeat),
                   "sklearn_us": _best_us(lambda: reference.predict_gemm(m, n, k, "bf16"), number, repeat)}
        with threadpool_limits(limits=1):
            timings["sklearn_1_thread_us"] = _best_us(lambda: reference.predict_gemm(m, n, k, "bf16"), number, repeat)
        out["rows"][count] = timings
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="h100-sxm5-80gb", help="a GPU with a built-in profile")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 200], help="GEMM shapes per call")
    parser.add_argument("--number", type=int, default=50, help="calls per round")
    parser.add_argument("--repeat", type=int, default=5, help="rounds (the best is printed)")
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    args = parser.parse_args(argv)
    for name in ("rows", "number", "repeat"):
        values = getattr(args, name)
        if min(values if isinstance(values, list) else [values]) < 1:
            parser.error(f"--{name}: {values} is not allowed: whole numbers >= 1")
    result = run(args.device, args.rows, args.number, args.repeat)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['device']} {result['family']}: FittedProfile.predict_gemm, us per call (best of {args.repeat})")
    print(f"{'rows':>5} {'compiled':>10} {'sklearn':>10} {'sklearn 1t':>10} {'speed-up':>9} {'vs 1t':>7}")
    for count, t in result["rows"].items():
        print(f"{count:>5} {t['compiled_us']:>10.0f} {t['sklearn_us']:>10.0f} {t['sklearn_1_thread_us']:>10.0f} "
              f"{t['sklearn_us'] / t['compiled_us']:>8.1f}x {t['sklearn_1_thread_us'] / t['compiled_us']:>6.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
