"""What-if accuracy on measured CPU miniatures: predict one configuration's step from another's trace.

Records torch-profiler traces of a small transformer training step on this machine's CPU
(``benchmarks/_replay_miniature.py``): 2 and 4 layers, 1, 2 and 4 gloo ranks (data parallel,
same sequences per rank), two batch sizes. From each configuration's rank-0 trace alone it
predicts every other configuration of the same batch size with the what-if edits
``layers=+N|-N`` and ``dp=Kx`` and compares with that configuration's measured trace.

Two step-time estimates, predicted and measured alike: ``wall``, the fastest profiled step; and
``fastest-ops``, every operator and gap at its fastest instance across the steps
(``costmodel.replay.edit.fastest_steps``). On a shared machine interference only adds time, and
on a loaded one every step is preempted somewhere, so the second is the closer to the
configuration's own time. A trace without a collective (1 rank) cannot predict more ranks
(there is no collective to re-time): those pairs are listed as skipped. Target: <= 10 % on
layer-count and DP-degree edits.

    python benchmarks/replay_miniatures.py [--out DIR | --from DIR] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _replay_miniature import Config, record_config  # noqa: E402

from costmodel.replay.edit import apply_what_if, fastest_steps, parse_what_if  # noqa: E402
from costmodel.replay.graph import build_graph  # noqa: E402
from costmodel.replay.parse import read_trace  # noqa: E402
from costmodel.replay.simulate import simulate  # noqa: E402

LAYERS, WORLDS, BATCHES = (2, 4), (1, 2, 4), (2, 8)


def edits_between(source: Config, target: Config) -> str | None:
    """The what-if that turns ``source`` into ``target`` (None: not predictable from ``source``'s trace)."""
    parts = []
    if target.layers != source.layers:
        parts.append(f"layers={target.layers - source.layers:+d}")
    if target.world != source.world:
        if source.world == 1:
            return None
        parts.append(f"dp={target.world / source.world:g}x")
    return ",".join(parts)


def kind_of(source: Config, target: Config) -> str:
    return "+".join(k for k, changed in (("layers", source.layers != target.layers),
                                         ("dp", source.world != target.world)) if changed)


def pairs(traces: dict[Config, Path]) -> tuple[list[dict[str, object]], list[str]]:
    """Every ordered pair of configurations of one batch size: predicted and measured step time."""
    graphs = {c: build_graph([read_trace(p)]) for c, p in traces.items()}
    fastest = {c: fastest_steps(g) for c, g in graphs.items()}
    measured = {c: min(it.measured_s for it in simulate(g).iterations) for c, g in graphs.items()}
    composite = {c: min(it.replayed_s for it in simulate(g).iterations) for c, g in fastest.items()}
    rows, skipped = [], []
    for source, target in itertools.permutations(traces, 2):
        if source.batch != target.batch:
            continue
        edit = edits_between(source, target)
        if edit is None:
            skipped.append(f"{source.name} -> {target.name}")
            continue
        pairs = parse_what_if(edit)
        predicted = min(it.replayed_s for it in simulate(apply_what_if(graphs[source], pairs)).iterations)
        fast = min(it.replayed_s for it in simulate(apply_what_if(fastest[source], pairs)).iterations)
        rows.append({"source": source.name, "target": target.name, "edit": edit, "kind": kind_of(source, target),
                     "predicted_s": predicted, "measured_s": measured[target],
                     "error": predicted / measured[target] - 1.0,
                     "fastest_ops_predicted_s": fast, "fastest_ops_measured_s": composite[target],
                     "fastest_ops_error": fast / composite[target] - 1.0})
    return rows, skipped


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="keep the traces here (default: a temporary folder)")
    parser.add_argument("--from", dest="source", default=None, metavar="DIR",
                        help="analyse the traces an earlier run kept in DIR (--out) instead of recording")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = Path(args.source or args.out or tempfile.mkdtemp(prefix="parplan-miniatures-"))
    began, traces = time.perf_counter(), {}
    for port, (layers, world, batch) in enumerate(itertools.product(LAYERS, WORLDS, BATCHES), start=29611):
        config = Config(layers, world, batch)
        if args.source is not None:
            traces[config] = Path(args.source) / config.name / "rank0.json"
            continue
        traces[config] = record_config(config, out / config.name, port)
        print(f"recorded {config.name} ({time.perf_counter() - began:.0f} s)", file=sys.stderr)
    rows, skipped = pairs(traces)
    kinds = ("layers", "dp", "layers+dp")
    by_kind = {k: [abs(float(r["error"])) for r in rows if r["kind"] == k] for k in kinds}
    mape = {k: sum(v) / len(v) for k, v in by_kind.items() if v}
    fast_kind = {k: [abs(float(r["fastest_ops_error"])) for r in rows if r["kind"] == k] for k in kinds}
    mape_fast = {k: sum(v) / len(v) for k, v in fast_kind.items() if v}
    if args.json:
        print(json.dumps({"pairs": rows, "skipped": skipped, "mape": mape, "mape_fastest_ops": mape_fast,
                          "traces": str(out)}, indent=1))
        return 0
    print(f"{'':48} {'wall (fastest step)':^32} {'fastest ops':^32}")
    print(f"{'source':14} {'target':14} {'edit':18} {'predicted ms':>12} {'measured ms':>11} {'error':>7} "
          f"{'predicted ms':>12} {'measured ms':>11} {'error':>7}")
    for r in rows:
        print(f"{r['source']:14} {r['target']:14} {r['edit']:18} {1e3 * float(r['predicted_s']):12.2f} "
              f"{1e3 * float(r['measured_s']):11.2f} {100 * float(r['error']):6.1f}% "
              f"{1e3 * float(r['fastest_ops_predicted_s']):12.2f} {1e3 * float(r['fastest_ops_measured_s']):11.2f} "
              f"{100 * float(r['fastest_ops_error']):6.1f}%")
    print(f"\nskipped (a 1-rank trace has no collective to re-time): {len(skipped)} pairs")
    for label, values, counts in (("wall", mape, by_kind), ("fastest ops", mape_fast, fast_kind)):
        print(f"MAPE {label}: " + ", ".join(f"{k} edits {100 * v:.1f}% ({len(counts[k])} pairs)"
                                            for k, v in values.items()) + " (target <= 10% on layer and DP edits)")
    print(f"traces in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
