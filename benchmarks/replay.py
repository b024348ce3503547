"""Replay accuracy on real Kineto traces: measured vs replayed time of every ProfilerStep.

Reads ``../shared/data/kineto-traces`` (real A100 / V100 / MI250 traces from
facebookresearch/HolisticTraceAnalysis, MIT; see that folder's README) or the
folder given. Two replays per trace:

- ``recorded``: CPU gaps and launch latencies as recorded (the replay of issue 16 and Lumos);
- ``typical-latency``: every launch at the rank's median launch latency, a stricter check of the
  dependency structure (stream order, waits, syncs) alone.

Prints the error of each iteration, the MAPE of each mode over all of them, and each trace's
unplaced and weakly placed (stream order only) GPU time. Targets: MAPE <= 3 %, unplaced <= 1 %.

    python benchmarks/replay.py [FOLDER] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from costmodel.replay.edit import typical_launch_latency  # noqa: E402
from costmodel.replay.graph import build_graph  # noqa: E402
from costmodel.replay.parse import read_trace  # noqa: E402
from costmodel.replay.simulate import simulate  # noqa: E402

DEFAULT = ROOT.parent / "shared" / "data" / "kineto-traces"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default=str(DEFAULT))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    files = sorted(Path(args.folder).glob("*.json*"))
    if not files:
        print(f"no traces in {args.folder}", file=sys.stderr)
        return 1
    rows, traces = [], []
    for path in files:
        began = time.perf_counter()
        graph = build_graph([read_trace(path)])
        if not graph.steps:
            continue
        recorded, typical = simulate(graph).iterations, simulate(typical_launch_latency(graph)).iterations
        total = graph.gpu_us + graph.unplaced_gpu_us
        traces.append({"trace": path.name, "iterations": len(recorded), "seconds": time.perf_counter() - began,
                       "unplaced_gpu": graph.unplaced_gpu_fraction(),
                       "weakly_placed_gpu": graph.weakly_placed_gpu_us / total if total else 0.0,
                       "unplaced": dict(graph.unplaced.most_common(5))})
        for a, b in zip(recorded, typical):
            rows.append({"trace": path.name, "iteration": a.name, "measured_s": a.measured_s,
                         "replayed_s": a.replayed_s, "error": a.error, "typical_latency_error": b.error})
    mape = {mode: sum(abs(r[key]) for r in rows) / len(rows)
            for mode, key in (("recorded", "error"), ("typical-latency", "typical_latency_error"))}
    if args.json:
        print(json.dumps({"iterations": rows, "traces": traces, "mape": mape}, indent=1))
        return 0
    print(f"{'trace':44} {'iteration':18} {'measured ms':>11} {'replayed ms':>11} {'error':>7} {'typ-lat':>7}")
    for r in rows:
        print(f"{r['trace'][:44]:44} {r['iteration']:18} {1e3 * r['measured_s']:11.2f} {1e3 * r['replayed_s']:11.2f} "
              f"{100 * r['error']:6.2f}% {100 * r['typical_latency_error']:6.2f}%")
    print()
    for t in traces:
        print(f"{t['trace'][:44]:44} unplaced GPU {100 * t['unplaced_gpu']:.2f}%  weakly placed "
              f"{100 * t['weakly_placed_gpu']:.2f}%  ({t['seconds']:.1f} s)  {t['unplaced'] or ''}")
    print(f"\nMAPE over {len(rows)} iterations: recorded {100 * mape['recorded']:.2f}% (target <= 3%), "
          f"typical launch latency {100 * mape['typical-latency']:.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
