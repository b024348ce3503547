"""Speed of the cost model: time to time every operator of one strategy, cold and warm.

Prints, for a few strategies, the first (cold) and the memoised (warm) time of
``OperatorTimer.time_ops`` over all of a run's operators, and of a whole
``predict_step``. Usage: python benchmarks/timing.py [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from costmodel.llm.decompose import stage_ops  # noqa: E402
from costmodel.predict import timer_for  # noqa: E402
from costmodel.specs import run_spec_from_mapping  # noqa: E402
from costmodel.llm.step import predict_step  # noqa: E402

RUNS = {
    "llama3.1-70b tp8 pp4 vpp5 (64 H100)": ROOT / "studies" / "examples" / "llama3.1-70b-64xh100.yaml",
    "gpt3-175b tp8 pp8 (1024 A100)": ROOT / "studies" / "examples" / "gpt3-175b-1024xa100.yaml",
    "llama3.1-8b FSDP (8 H100)": ROOT / "studies" / "examples" / "llama3.1-8b-8xh100.yaml",
}


def _best_of(fn, repeats: int = 50) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> int:
    import yaml

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = {}
    for label, path in RUNS.items():
        run = run_spec_from_mapping(yaml.safe_load(path.read_text()))
        timer = timer_for(run.cluster.gpu)
        ops = [op for st in range(run.strategy.pp) for op in stage_ops(run, st)]
        t = time.perf_counter()
        timer.time_ops(ops)
        cold = time.perf_counter() - t
        warm = _best_of(lambda: timer.time_ops(ops))
        step = _best_of(lambda: predict_step(run, timer))
        out[label] = {"ops": len(ops), "time_ops_cold_ms": cold * 1e3, "time_ops_warm_ms": warm * 1e3,
                      "predict_step_warm_ms": step * 1e3}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{'run':40s} {'ops':>5s} {'cold ms':>9s} {'warm ms':>9s} {'step ms':>9s}")
    for label, r in out.items():
        print(f"{label:40s} {r['ops']:5d} {r['time_ops_cold_ms']:9.2f} {r['time_ops_warm_ms']:9.3f} "
              f"{r['predict_step_warm_ms']:9.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
