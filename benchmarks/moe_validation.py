"""MoE rows of the public validation set: MAPE per token dispatcher, expert placement and routing.

Issue 13 asks for the MoE error "printed per dispatcher and placement". Placement is whether a
stage's expert (``tp_ep``) group stays inside one NVLink domain or crosses the network;
routing is ``strategy.moe_routing`` (``costmodel.llm.moe.routing``).

Usage: ``python benchmarks/moe_validation.py [--json]`` (not run in CI).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from costmodel.llm import moe  # noqa: E402
from costmodel.specs.runspec import run_spec_from_mapping  # noqa: E402
from studies.validate import load_validation_set, validate, with_row_framework  # noqa: E402

PUBLIC = Path(__file__).resolve().parents[1] / "studies" / "validation" / "public.yaml"


def moe_rows(path: Path = PUBLIC) -> list[dict[str, Any]]:
    """Each predicted MoE row: id, signed error, dispatcher, placement and routing."""
    entries = [e for e in load_validation_set(path) if e.get("family") == "moe"]
    predicted = {r["id"]: r for r in validate(entries, path.resolve().parent)["runs"]}
    out = []
    for entry in entries:
        row = predicted[entry["id"]]
        if row["error"] is None:
            continue
        run = run_spec_from_mapping(with_row_framework(entry), path.resolve().parent)
        crosses = moe.expert_group("tp_ep", run).crosses_nodes
        out.append({"id": entry["id"], "error": row["error"], "dispatcher": moe.dispatcher(run),
                    "placement": "across domains" if crosses else "one domain",
                    "routing": moe.routing(run.strategy)})
    return out


def grouped(rows: list[dict[str, Any]], key: str) -> dict[str, dict[str, float]]:
    """Runs and MAPE per value of ``key``."""
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(r[key], []).append(abs(r["error"]))
    return {k: {"n": len(v), "mape": statistics.fmean(v)} for k, v in sorted(by.items())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    rows = moe_rows()
    report = {"runs": rows, "n": len(rows), "mape": statistics.fmean(abs(r["error"]) for r in rows),
              **{f"by_{k}": grouped(rows, k) for k in ("dispatcher", "placement", "routing")}}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for r in rows:
        print(f"{r['id']:48s} {100 * r['error']:+7.1f}%  {r['dispatcher']:9s} {r['placement']:15s} {r['routing']}")
    print(f"MoE MAPE {100 * report['mape']:.1f}% over {report['n']} runs")
    for key in ("dispatcher", "placement", "routing"):
        for value, g in report[f"by_{key}"].items():
            print(f"  {key:10s} {value:15s} runs {g['n']:2d}  MAPE {100 * g['mape']:5.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
