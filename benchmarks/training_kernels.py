"""Measured check on training kernels: predicted vs measured forward and backward times.

Shapes and times: Zhang et al. 2025 (arXiv 2509.22832), estimate-train-time repository,
``<system>/operator/<GPU>_<op>_fp16.csv`` (fp16, Megatron-style kernels, 10 timed iterations
per shape; each time is the span from the first to the last kernel of the profiled op). The
folder lives in the team's shared data (``../shared/data/estimate-train-time`` beside the
repository); the benchmark skips cleanly without it. Nothing here is needed at run time.

Systems (``--system``):

- ``perlmutter`` (default): A100-SXM4-80GB, predicted with the ``a100-sxm4-80gb`` catalog entry
  and its built-in profile -- the acceptance check of issue 3.
- ``vista``: GH200 (device name "NVIDIA GH200 120GB"; its GPU is the 96 GB HBM3 part). No
  built-in profile exists for GH200, so GEMM and attention are predicted with the
  ``h100-sxm5-80gb`` profile (same Hopper GH100 die and 132 SMs; predictors fitted with the H100
  catalog figures), and the analytic parts (norms, roofline fall-backs) with the ``gh200-96gb``
  catalog figures. This is the out-of-sample check of figures derived from the A100 rows (the
  backward GEMM factor, the FlashAttention-2 head-dim efficiencies in ``costmodel/analytic.py``).
  The GH200 profile is the H100's, so a level offset is expected (GH200 runs its GEMMs at a higher
  power limit); the H100 attention table is FlashAttention-3 while the measured kernel is
  FlashAttention-2, so Vista attention levels are not comparable; the Vista flash_atten backward
  spans miss the main kernel (see the analysis note), so its backward is not scored.

Shape conventions (from the seed repository's operator definitions): M = b*l tokens;
linear1 = QKV (K=dim, N=3*dim/mp, with bias: its backward adds the bias-gradient reduction over
M x N), linear2 = attention output (K=dim/mp, N=dim), linear3 = MLP up (K=dim, N=4*dim/mp),
linear4 = MLP down (K=4*dim/mp, N=dim), linear_final = LM head (K=dim, N=ceil(50257/(128*mp))*128);
flash_atten is non-causal with h/mp heads of dim/h; norms act on b*l*dim elements.

In-sample vs out-of-sample. On perlmutter these are in-sample: the norm fits, the attention
backward/forward ratio (by sequence length and head dim), the attention fall-back fraction of peak,
the backward GEMM factor, the FlashAttention-2 head-dim efficiencies and the batch x heads factor
of the A100 attention table (``FA2_PARALLELISM_PAIRS``, one parameter) of ``costmodel/analytic.py``
were derived from these A100 rows. Out of sample: the GEMM and attention tables (aiconfigurator-core), the non-causal factor
(FlashAttention-2 README) and, on vista, every derived figure.

Usage: python benchmarks/training_kernels.py [--json] [--system perlmutter|vista] [--data DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from costmodel.llm.decompose import _elementwise  # noqa: E402
from costmodel.ops import Op, gemm, memory_op  # noqa: E402
from costmodel.predict import timer_for  # noqa: E402
from costmodel.specs import get_gpu  # noqa: E402
from costmodel.timing import OperatorTimer  # noqa: E402

DATA_ROOT = ROOT.parent / "shared" / "data" / "estimate-train-time"
# Large GEMMs (forward FLOPs) for the column that leaves out launch gaps inside the backward span.
LARGE_GEMM_FLOPS = 300e9


@dataclass(frozen=True)
class System:
    folder: str
    prefix: str
    gpu: str
    profile_gpu: str  # the catalog GPU whose built-in profile times GEMMs and attention
    score_attention_bwd: bool


SYSTEMS = {
    "perlmutter": System("Perlmutter", "NVIDIAA100-SXM4-80GB_", "a100-sxm4-80gb", "a100-sxm4-80gb", True),
    "vista": System("Vista", "NVIDIAGH200120GB_", "gh200-96gb", "h100-sxm5-80gb", False),
}

Row = dict[str, float]
Build = Callable[[Row], tuple[list[Op], list[Op]]]


def _rows(path: Path) -> list[Row]:
    with path.open() as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _gemm_shape(op: str, r: Row) -> tuple[int, int, int]:
    mp, b, l, dim = int(r.get("mp", 1)), int(r["b"]), int(r["l"]), int(r["dim"])
    k, n = {
        "linear1": (dim, 3 * dim // mp),
        "linear2": (dim // mp, dim),
        "linear3": (dim, 4 * dim // mp),
        "linear4": (4 * dim // mp, dim),
        "linear_final": (dim, math.ceil(50257 / (128 * mp)) * 128),
    }[op]
    return b * l, n, k


def _gemm_ops(op: str, r: Row) -> tuple[list[Op], list[Op]]:
    m, n, k = _gemm_shape(op, r)
    fwd = [gemm(f"{op}.fwd", "fwd", m, n, k, "fp16")]
    bwd = [gemm(f"{op}.dgrad", "bwd", m, k, n, "fp16"), gemm(f"{op}.wgrad", "bwd", n, k, m, "fp16")]
    if op == "linear1":  # nn.Linear with bias: AddmmBackward0 also sums dY over the M tokens
        bwd.append(memory_op(f"{op}_bias_grad.bwd", "bwd", m * n, 2.0 * (m * n + n)))
    return fwd, bwd


def _attention_ops(r: Row) -> tuple[list[Op], list[Op]]:
    mp, b, h, l, dim = (int(r[c]) for c in ("mp", "b", "h", "l", "dim"))
    heads, hd = max(1, h // mp), dim // h
    shape = (b, l, heads, heads, hd, 0)  # non-causal
    flops = 4.0 * b * l * l * heads * hd
    moved = 2.0 * b * l * heads * hd * 4
    return ([Op("attention.fwd", "attention_fwd", "fwd", shape, flops, moved, "bf16")],
            [Op("attention.bwd", "attention_bwd", "bwd", shape, 2 * flops, 2 * moved, "bf16")])


def _norm_ops(name: str, r: Row) -> tuple[list[Op], list[Op]]:
    n = r["b"] * r["l"] * r["dim"]
    fwd, bwd = _elementwise(name, n, 1, 1, 2, 1)
    return [fwd], [bwd]


OPERATORS: dict[str, Build] = {
    **{op: partial(_gemm_ops, op) for op in ("linear1", "linear2", "linear3", "linear4", "linear_final")},
    "flash_atten": _attention_ops,
    "layernorm": partial(_norm_ops, "input_norm"),
    "RMSlayernorm": partial(_norm_ops, "input_norm"),
}


def make_timer(system: System) -> OperatorTimer:
    """The timer of ``system``: its own built-in profile, or (vista) the H100 profile on GH200 figures."""
    gpu = get_gpu(system.gpu)
    if system.profile_gpu == system.gpu:
        return timer_for(gpu)
    borrowed = timer_for(get_gpu(system.profile_gpu))
    return OperatorTimer(gpu, borrowed.predictors)


def _time(timer: OperatorTimer, per_row: list[list[Op]]) -> tuple[np.ndarray, np.ndarray]:
    """Summed seconds per row and whether any of the row's ops fell back to the roofline (one batch)."""
    flat = [op for ops in per_row for op in ops]
    owner = np.repeat(np.arange(len(per_row)), [len(ops) for ops in per_row])
    timed = timer.time_ops(flat)
    seconds = np.zeros(len(per_row))
    np.add.at(seconds, owner, timed.seconds * np.array([op.count for op in flat]))
    fallback = np.zeros(len(per_row), dtype=bool)
    np.logical_or.at(fallback, owner, np.array([source == "roofline" for source in timed.sources]))
    return seconds, fallback


def _scores(predicted: np.ndarray, measured: np.ndarray, mask: np.ndarray | None = None) -> dict[str, float | None]:
    if mask is not None:
        predicted, measured = predicted[mask], measured[mask]
    if predicted.size == 0:
        return {"mape": None, "p90": None, "median_signed": None}
    signed = predicted / measured - 1.0
    error = np.abs(signed)
    return {"mape": float(error.mean()), "p90": float(np.quantile(error, 0.9)),
            "median_signed": float(np.median(signed))}


def run(data: Path, system: System) -> dict[str, dict[str, float | int | None]]:
    timer = make_timer(system)
    results: dict[str, dict[str, float | int | None]] = {}
    for op, build in OPERATORS.items():
        path = data / f"{system.prefix}{op}_fp16.csv"
        if not path.is_file():
            continue
        rows = _rows(path)
        built = [build(r) for r in rows]
        pf, ff = _time(timer, [fwd for fwd, _ in built])
        pb, fb = _time(timer, [bwd for _, bwd in built])
        mf = np.array([r["F_dur(us)"] for r in rows]) * 1e-6
        mb = np.array([r["B_dur(us)"] for r in rows]) * 1e-6
        fallback = ff | fb
        fwd, bwd = _scores(pf, mf), _scores(pb, mb)
        result: dict[str, float | int | None] = {
            "n": len(rows), "fwd_mape": fwd["mape"], "fwd_p90": fwd["p90"], "fwd_median_signed": fwd["median_signed"],
            "rows_with_fallback": int(fallback.sum()),
            "fwd_mape_profiled_rows": _scores(pf, mf, ~fallback)["mape"],
        }
        if op != "flash_atten" or system.score_attention_bwd:
            result.update({"bwd_mape": bwd["mape"], "bwd_p90": bwd["p90"], "bwd_median_signed": bwd["median_signed"],
                           "bwd_mape_profiled_rows": _scores(pb, mb, ~fallback)["mape"]})
        if op.startswith("linear"):
            large = np.array([2.0 * math.prod(_gemm_shape(op, r)) >= LARGE_GEMM_FLOPS for r in rows])
            result["n_large"] = int(large.sum())
            result["fwd_mape_large"] = _scores(pf, mf, large)["mape"]
            result["bwd_mape_large"] = _scores(pb, mb, large)["mape"]
            result["bwd_median_signed_large"] = _scores(pb, mb, large)["median_signed"]
        results[op] = result
    return results


def _print(results: dict[str, dict[str, float | int | None]], system: System) -> None:
    def pct(x: float | int | None) -> str:
        return "    -" if x is None else f"{100 * x:5.1f}%"

    print(f"{system.folder}: {system.gpu}, tables of the {system.profile_gpu} profile")
    print(f"{'operator':14s} {'n':>5s} {'fwd MAPE':>9s} {'fwd p90':>8s} {'fwd bias':>8s} {'bwd MAPE':>9s} "
          f"{'bwd p90':>8s} {'bwd bias':>8s} {'fallback':>8s} {'profiled f/b':>15s} {'>=300GF f/b (bias b)':>24s}")
    for op, r in results.items():
        large = (f"{pct(r['fwd_mape_large'])} /{pct(r['bwd_mape_large'])} ({pct(r['bwd_median_signed_large'])})"
                 if "fwd_mape_large" in r else "")
        print(f"{op:14s} {r['n']:5d} {pct(r['fwd_mape']):>9s} {pct(r['fwd_p90']):>8s} "
              f"{pct(r['fwd_median_signed']):>8s} {pct(r.get('bwd_mape')):>9s} {pct(r.get('bwd_p90')):>8s} "
              f"{pct(r.get('bwd_median_signed')):>8s} {r['rows_with_fallback']:8d} "
              f"{pct(r['fwd_mape_profiled_rows']):>7s} /{pct(r.get('bwd_mape_profiled_rows'))} {large:>24s}")
    print("bias: median signed error (predicted/measured - 1); >=300GF: GEMMs of >= 300 GFLOP forward")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--system", choices=sorted(SYSTEMS), default="perlmutter")
    parser.add_argument("--data", type=Path, default=None, help="the system's operator folder")
    args = parser.parse_args(argv)
    system = SYSTEMS[args.system]
    data = args.data if args.data is not None else DATA_ROOT / system.folder / "operator"
    if not data.is_dir():
        print(f"skipped: {data} not found (the seed paper's measurements live in the team's shared data)")
        return 0
    results = run(data, system)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        _print(results, system)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
