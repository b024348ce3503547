"""Measured check on training kernels: predicted vs measured forward and backward times on A100.

Shapes and times: Zhang et al. 2025 (arXiv 2509.22832), estimate-train-time repository,
``Perlmutter/operator/NVIDIAA100-SXM4-80GB_<op>_fp16.csv`` (A100-SXM4-80GB, fp16,
Megatron-style kernels, 10 timed iterations per shape). The folder lives in the
team's shared data (``../shared/data/estimate-train-time`` beside the repository);
the benchmark skips cleanly without it. Nothing here is needed at run time.

Shape conventions (from the seed repository's operator definitions): M = b*l tokens;
linear1 = QKV (K=dim, N=3*dim/mp), linear2 = attention output (K=dim/mp, N=dim),
linear3 = MLP up (K=dim, N=4*dim/mp), linear4 = MLP down (K=4*dim/mp, N=dim),
linear_final = LM head (K=dim, N=ceil(50257/(128*mp))*128); flash_atten is
non-causal with h/mp heads of dim/h; norms act on b*l*dim elements.
The norm fits in ``costmodel/analytic.py`` were made on these same layernorm rows
(in-sample); GEMMs and attention are predicted from the aiconfigurator-core A100 tables.

Usage: python benchmarks/training_kernels.py [--json] [--data DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from costmodel.decompose import _elementwise  # noqa: E402
from costmodel.ops import Op, gemm  # noqa: E402
from costmodel.predict import timer_for  # noqa: E402
from costmodel.specs import get_gpu  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "estimate-train-time" / "Perlmutter" / "operator"
PREFIX = "NVIDIAA100-SXM4-80GB_"


def _rows(path: Path) -> list[dict[str, float]]:
    with path.open() as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _gemm_ops(op: str, r: dict[str, float]) -> tuple[list[Op], list[Op]]:
    mp, b, l, dim = int(r.get("mp", 1)), int(r["b"]), int(r["l"]), int(r["dim"])
    m = b * l
    k, n = {
        "linear1": (dim, 3 * dim // mp),
        "linear2": (dim // mp, dim),
        "linear3": (dim, 4 * dim // mp),
        "linear4": (4 * dim // mp, dim),
        "linear_final": (dim, math.ceil(50257 / (128 * mp)) * 128),
    }[op]
    fwd = [gemm(f"{op}.fwd", "fwd", m, n, k, "fp16")]
    bwd = [gemm(f"{op}.dgrad", "bwd", m, k, n, "fp16"), gemm(f"{op}.wgrad", "bwd", n, k, m, "fp16")]
    return fwd, bwd


def _attention_ops(r: dict[str, float]) -> tuple[list[Op], list[Op]]:
    mp, b, h, l, dim = (int(r[c]) for c in ("mp", "b", "h", "l", "dim"))
    heads, hd = max(1, h // mp), dim // h
    shape = (b, l, heads, heads, hd, 0)  # non-causal
    flops = 4.0 * b * l * l * heads * hd
    moved = 2.0 * b * l * heads * hd * 4
    return ([Op("attention.fwd", "attention_fwd", "fwd", shape, flops, moved, "bf16")],
            [Op("attention.bwd", "attention_bwd", "bwd", shape, 2 * flops, 2 * moved, "bf16")])


def _norm_ops(name: str, r: dict[str, float]) -> tuple[list[Op], list[Op]]:
    n = r["b"] * r["l"] * r["dim"]
    fwd, bwd = _elementwise(name, n, 1, 1, 2, 1)
    return [fwd], [bwd]


OPERATORS = {
    **{op: (lambda r, op=op: _gemm_ops(op, r)) for op in ("linear1", "linear2", "linear3", "linear4", "linear_final")},
    "flash_atten": _attention_ops,
    "layernorm": lambda r: _norm_ops("input_norm", r),
    "RMSlayernorm": lambda r: _norm_ops("input_norm", r),
}


def run(data: Path) -> dict[str, dict[str, float]]:
    timer = timer_for(get_gpu("a100-sxm4-80gb"))
    results: dict[str, dict[str, float]] = {}
    for op, build in OPERATORS.items():
        path = data / f"{PREFIX}{op}_fp16.csv"
        if not path.is_file():
            continue
        rows = _rows(path)
        pf, pb, mf, mb, fallbacks, profiled = [], [], [], [], 0, []
        for r in rows:
            fwd, bwd = build(r)
            tf, tb = timer.time_ops(fwd), timer.time_ops(bwd)
            used_fallback = any(s == "roofline" for s in tf.sources + tb.sources)
            fallbacks += used_fallback
            profiled.append(not used_fallback)
            pf.append(tf.total())
            pb.append(tb.total())
            mf.append(r["F_dur(us)"] * 1e-6)
            mb.append(r["B_dur(us)"] * 1e-6)
        sf = np.array(pf) / np.array(mf) - 1
        sb = np.array(pb) / np.array(mb) - 1
        ef, eb, inside = np.abs(sf), np.abs(sb), np.array(profiled)
        results[op] = {"n": len(rows), "fwd_mape": float(ef.mean()), "bwd_mape": float(eb.mean()),
                       "fwd_p90": float(np.quantile(ef, 0.9)), "bwd_p90": float(np.quantile(eb, 0.9)),
                       "fwd_median_signed": float(np.median(sf)), "bwd_median_signed": float(np.median(sb)),
                       "rows_with_fallback": fallbacks,
                       "fwd_mape_profiled_rows": float(ef[inside].mean()) if inside.any() else None,
                       "bwd_mape_profiled_rows": float(eb[inside].mean()) if inside.any() else None}
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    if not args.data.is_dir():
        print(f"skipped: {args.data} not found (the seed paper's measurements live in the team's shared data)")
        return 0
    results = run(args.data)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    def pct(x: float | None) -> str:
        return "    -" if x is None else f"{100 * x:5.1f}%"

    print(f"{'operator':14s} {'n':>5s} {'fwd MAPE':>9s} {'fwd p90':>8s} {'fwd bias':>8s} {'bwd MAPE':>9s} "
          f"{'bwd p90':>8s} {'bwd bias':>8s} {'fallback rows':>13s} {'MAPE on profiled rows (f/b)':>28s}")
    for op, r in results.items():
        print(f"{op:14s} {r['n']:5d} {pct(r['fwd_mape']):>9s} {pct(r['fwd_p90']):>8s} "
              f"{pct(r['fwd_median_signed']):>8s} {pct(r['bwd_mape']):>9s} {pct(r['bwd_p90']):>8s} "
              f"{pct(r['bwd_median_signed']):>8s} {r['rows_with_fallback']:13d} "
              f"{pct(r['fwd_mape_profiled_rows']):>13s} / {pct(r['bwd_mape_profiled_rows'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
