"""Compare the collective model (costmodel/comm) with measured NCCL performance.

Part A: the model's bus bandwidth against published nccl-tests figures (``nccl_published.yaml``
beside this file, each with its source). Part B: the model's collective times against the
multi-node all-reduce / all-gather / p2p timings measured on Perlmutter (A100, 4 GPUs per node)
and Vista (GH200, 1 GPU per node) by Zhang et al. 2025 (arXiv 2509.22832), read from
``../shared/data/estimate-train-time/*/nccl/`` when that folder exists; skipped otherwise.

Errors are model / measured - 1 (bus bandwidth in part A, time in part B; all_gather times in
part B add the list-form unpack copy the measured span contains); the target is
|error| <= 15% for messages >= 1 MiB. Rows marked excluded, in-sample or out of scope are
shown with their reason and not counted.

Usage: ``python benchmarks/collectives.py [--json] [--data DIR]``
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import yaml

from costmodel.comm import bus_bandwidth, collective_seconds, group_placement
from costmodel.comm.collectives import nccl_algorithm
from costmodel.specs import ClusterSpec, Strategy, get_gpu
from costmodel.specs.gpu import override_gpu

HERE: Final = Path(__file__).resolve().parent
PUBLISHED: Final = HERE / "nccl_published.yaml"
DEFAULT_DATA: Final = HERE.parent.parent / "shared" / "data" / "estimate-train-time"
TARGET: Final = 0.15
MIN_BYTES: Final = 2**20
FP16_BYTES: Final = 2
# Bands of the error breakdown (>= 1 MiB rows): message size in bytes [lo, hi), node count [lo, hi].
SIZE_BANDS: Final = (("1-16 MiB", 2**20, 2**24), ("16-256 MiB", 2**24, 2**28), ("256 MiB-4 GiB", 2**28, 2**32),
                     (">= 4 GiB", 2**32, float("inf")))
NODE_BANDS: Final = (("1", 1, 1), ("2", 2, 2), ("4-16", 4, 16), ("> 16", 17, 10**9))
_UNITS: Final = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}

# Part B machines: catalog GPU plus the node and network of each system (hardware_and_formulas.md 3a).
MACHINES: Final[dict[str, tuple[str, dict[str, Any]]]] = {
    # Perlmutter: 4 A100-SXM4 per node, NVLink3 mesh, 4 x Slingshot-11 200 Gb/s = 25 GB/s per GPU [NERSC-PM]
    "Perlmutter": ("a100-sxm4-80gb", {"gpus_per_node": 4, "nvlink_domain_size": 4,
                                      "inter_node_bandwidth_GBps": 25}),
    # Vista: 1 GH200 per node, NDR InfiniBand 400 Gb/s = 50 GB/s per GPU [CVW-VISTA]
    "Vista": ("gh200-96gb", {"gpus_per_node": 1, "nvlink_domain_size": 1, "inter_node_bandwidth_GBps": 50}),
}
COLLECTIVES: Final = {"allreduce": "all_reduce", "allreduce_large": "all_reduce",
                      "allgather_large": "all_gather", "p2p": "send_recv"}
_FILE: Final = re.compile(r"^(?P<gpu>.+?)_(?P<coll>allreduce_large|allreduce|allgather_large|p2p)_fp16_"
                          r"(?P<nodes>\d+)_(?P<gpn>\d+)\.csv$")


@dataclass(frozen=True)
class Verdict:
    """Why a row is not counted (``status`` other than ``ok``)."""

    status: str = "ok"
    reason: str = ""


def verdict_for(machine: str, coll: str, nodes: int, gpn: int) -> Verdict:
    """The exclusion, scope or in-sample verdict of one measured configuration (or ok)."""
    if machine == "Perlmutter" and nodes > 1:
        return Verdict("excluded", "implausible: ~1.2 GB/s busbw per GPU for every collective and size, 5-20x "
                                   "below one 25 GB/s Slingshot-11 NIC (likely NCCL on a fallback transport)")
    if machine == "Vista" and coll == "allgather_large" and nodes > 2:
        return Verdict("excluded", "broken: time collapses to a constant 0.12 ms above 400-800 MiB/rank "
                                   "(busbw > 1e4 GB/s) and spreads +-2x below")
    if machine == "Perlmutter" and gpn == 2:
        return Verdict("out-of-scope", "HGX-4 NVLink mesh: a GPU pair has 4 of 12 links (100 GB/s) [NCCLT-331]; "
                                       "the model's scale-up tier is a switch")
    if machine == "Vista" and coll == "p2p":
        return Verdict("in-sample", "fits calibration net_p2p_peer_bandwidth_GBps")
    return Verdict()


def parse_size(text: str | float) -> float:
    """Bytes of ``"16GiB"`` / ``"64MB"`` / a number."""
    if isinstance(text, (int, float)):
        return float(text)
    match = re.fullmatch(r"\s*([\d.]+)\s*([KMG]i?B|B)\s*", str(text))
    if not match:
        raise ValueError(f"The 'size' field must look like '16GiB' or '64MB'. Got {text!r} instead.")
    return float(match.group(1)) * _UNITS[match.group(2)]


def make_cluster(gpu_name: str, nodes: int, gpus_per_node: int, overrides: dict[str, Any] | None = None) -> ClusterSpec:
    gpu = get_gpu(gpu_name)
    changes = {k: v for k, v in (overrides or {}).items() if k != "gpus_per_node"}
    if changes:
        gpu = override_gpu(gpu, changes)
    return ClusterSpec(gpu=gpu, num_gpus=nodes * gpus_per_node, gpus_per_node=gpus_per_node)


def _placement(op: str, cluster: ClusterSpec):  # type: ignore[no-untyped-def]
    n = cluster.num_gpus
    kind, strategy = ("pp", Strategy(pp=n)) if op == "send_recv" else ("dp", Strategy(dp=n))
    return group_placement(kind, strategy, cluster)


def model_times(op: str, sizes: np.ndarray, cluster: ClusterSpec,
                algorithms: tuple[str, ...] | None = None, network: str = "ib") -> np.ndarray:
    """Model seconds of ``op`` over all GPUs of ``cluster`` (send_recv: first to last rank)."""
    return np.asarray(collective_seconds(op, sizes, _placement(op, cluster), cluster.gpu, algorithms=algorithms,
                                         network=network))


def model_algorithms(op: str, sizes: np.ndarray, cluster: ClusterSpec,
                     algorithms: tuple[str, ...] | None = None, network: str = "ib") -> list[str]:
    """The algorithm/protocol the model's NCCL tuner picks for each size (of ``algorithms``, as NCCL_ALGO)."""
    return nccl_algorithm(op, sizes, _placement(op, cluster), cluster.gpu, algorithms=algorithms, network=network)


def list_unpack_seconds(gathered_bytes: np.ndarray, cluster: ClusterSpec) -> np.ndarray:
    """Copy that torch's list-form ``dist.all_gather`` adds inside the timed span.

    c10d gathers into one flat buffer and copies it into the ``n`` output tensors (one read and
    one write of the gathered bytes); priced at the catalog HBM bandwidth, a lower bound.
    """
    return 2 * gathered_bytes / cluster.gpu.hbm_bandwidth_bytes_per_s


# ---------------------------------------------------------------------------------------------- part A
@dataclass(frozen=True)
class PublishedRow:
    name: str
    op: str
    gpus: int
    nodes: int
    size_bytes: float
    published_GBps: float
    published_range: tuple[float, float] | None
    model_GBps: float
    error: float
    in_range: bool | None
    counted: bool
    status: str
    source: str
    algorithm: str


def published_rows(path: Path = PUBLISHED, networks: bool = True) -> list[PublishedRow]:
    """Model vs published rows; ``networks=False`` prices every row's scale-out as InfiniBand (no plugin latency)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    rows = []
    for entry in data["comparisons"]:
        cluster = make_cluster(entry["gpu"], entry["nodes"], entry["gpus_per_node"], entry.get("overrides"))
        n, op = cluster.num_gpus, entry["op"]
        sizes = np.array([parse_size(p[0]) for p in entry["points"]])
        forced = tuple(entry["algorithms"]) if "algorithms" in entry else None  # the run's NCCL_ALGO
        network = entry.get("network", "ib") if networks else "ib"  # scale-out transport (NET_PLUGIN_LATENCY_US)
        model = bus_bandwidth(op, sizes, model_times(op, sizes, cluster, forced, network), n) / 1e9
        algorithms = model_algorithms(op, sizes, cluster, forced, network)
        status = ("excluded: " + entry["excluded"] if "excluded" in entry
                  else "in-sample: " + entry["calibrates"] if "calibrates" in entry else "ok")
        for (_, figure), size, got, algorithm in zip(entry["points"], sizes, model, algorithms, strict=True):
            span = tuple(figure) if isinstance(figure, list) else None
            ref = float(np.mean(span)) if span else float(figure)
            rows.append(PublishedRow(
                name=entry["name"], op=op, gpus=n, nodes=int(entry["nodes"]), size_bytes=float(size), published_GBps=ref,
                published_range=span, model_GBps=float(got), error=float(got / ref - 1),
                in_range=bool(span[0] <= got <= span[1]) if span else None,
                counted=bool(status == "ok" and size >= MIN_BYTES), status=status, source=entry["source"],
                algorithm=algorithm))
    return rows


# ---------------------------------------------------------------------------------------------- part B
@dataclass(frozen=True)
class MeasuredConfig:
    machine: str
    collective: str
    nodes: int
    gpus_per_node: int
    rows: int
    min_MiB: float
    max_MiB: float
    measured_busbw_GBps: float
    model_busbw_GBps: float
    mape: float
    median_error: float
    p90_abs_error: float
    status: str
    reason: str
    file: str
    errors: list[float] = field(default_factory=list, repr=False)


def _read_nccl_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with path.open(newline="", encoding="utf-8") as handle:
        table = [(float(r["shape"]), float(r["dur(us)"])) for r in csv.DictReader(handle)]
    arr = np.array(table, dtype=np.float64).reshape(-1, 2)
    return arr[:, 0], arr[:, 1] * 1e-6


def _measured_files(root: Path) -> Iterator[tuple[str, Path, re.Match[str]]]:
    for machine in MACHINES:
        for path in sorted((root / machine / "nccl").glob("*.csv")):
            match = _FILE.match(path.name)
            if match:  # the merged all-configuration files carry no _<nodes>_<gpn> suffix and are skipped
                yield machine, path, match


def measured_configs(root: Path) -> list[MeasuredConfig]:
    out = []
    for machine, path, match in _measured_files(root):
        coll, nodes, gpn = match["coll"], int(match["nodes"]), int(match["gpn"])
        op, n = COLLECTIVES[coll], nodes * gpn
        elements, seconds = _read_nccl_csv(path)
        per_rank = elements * FP16_BYTES
        # all_gather in these files: `shape` elements per rank, so the gathered (nccl-tests) size is n times it
        sizes = per_rank * n if op == "all_gather" else per_rank
        verdict = verdict_for(machine, coll, nodes, gpn)
        splits = [(np.ones_like(sizes, dtype=bool), verdict, "")]
        if machine == "Perlmutter" and coll == "allgather_large" and gpn == 4 and nodes == 1:
            small = per_rank <= 400 * 2**20
            splits = [(small, verdict, " <=400MiB/rank"),
                      (~small, Verdict("excluded", "degraded: list-form all_gather above 400 MiB/rank falls to "
                                                   "16-20 GB/s with stalls up to 750 ms (allocator)"), " >400MiB/rank")]
        gpu_name, overrides = MACHINES[machine]
        cluster = make_cluster(gpu_name, nodes, gpn, overrides)
        for mask, why, label in splits:
            keep = mask & (sizes >= MIN_BYTES)
            if not keep.any():
                continue
            model = model_times(op, sizes[keep], cluster)
            if op == "all_gather":
                model = model + list_unpack_seconds(sizes[keep], cluster)
            err = model / seconds[keep] - 1
            measured_bw = bus_bandwidth(op, sizes[keep], seconds[keep], n) / 1e9
            model_bw = bus_bandwidth(op, sizes[keep], model, n) / 1e9
            out.append(MeasuredConfig(
                machine=machine, collective=coll + label, nodes=nodes, gpus_per_node=gpn, rows=int(keep.sum()),
                min_MiB=float(sizes[keep].min() / 2**20), max_MiB=float(sizes[keep].max() / 2**20),
                measured_busbw_GBps=float(np.median(measured_bw)), model_busbw_GBps=float(np.median(model_bw)),
                mape=float(np.mean(np.abs(err))), median_error=float(np.median(err)),
                p90_abs_error=float(np.percentile(np.abs(err), 90)), status=why.status, reason=why.reason,
                file=f"{machine}/nccl/{path.name}", errors=[float(e) for e in err]))
    return out


# ---------------------------------------------------------------------------------------------- output
def _size_label(nbytes: float) -> str:
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("GB", 1e9), ("MB", 1e6), ("KiB", 2**10)):
        if nbytes >= factor and (nbytes / factor).is_integer():
            return f"{nbytes / factor:g} {unit}"
    return f"{nbytes:g} B"


class Footnotes:
    """Numbers long status reasons so that table rows stay one screen wide."""

    def __init__(self) -> None:
        self._notes: dict[str, int] = {}

    def mark(self, status: str) -> str:
        head, _, reason = status.partition(": ")
        if not reason:
            return status
        number = self._notes.setdefault(reason, len(self._notes) + 1)
        return f"{head} [{number}]"

    def print(self) -> None:
        for reason, number in self._notes.items():
            print(f"  [{number}] {reason}")


def print_published(rows: list[PublishedRow]) -> None:
    notes = Footnotes()
    print("A. Bus bandwidth vs published nccl-tests figures (GB/s; error = model / published - 1)")
    print(f"{'comparison':<60} {'op':<14} {'GPUs':>5} {'size':>9} {'published':>11} {'model':>7} "
          f"{'error':>7} {'NCCL choice':<12} status")
    for r in rows:
        pub = f"{r.published_range[0]:g}-{r.published_range[1]:g}" if r.published_range else f"{r.published_GBps:g}"
        mark = "" if r.in_range is None else (" in range" if r.in_range else " outside")
        status = r.status if r.size_bytes >= MIN_BYTES or r.status != "ok" else "ok (< 1 MiB, not counted)"
        print(f"{r.name[:60]:<60} {r.op:<14} {r.gpus:>5} {_size_label(r.size_bytes):>9} {pub:>11} "
              f"{r.model_GBps:>7.1f} {r.error:>+7.1%} {r.algorithm:<12} {notes.mark(status)}{mark}")
    notes.print()
    counted = [abs(r.error) for r in rows if r.counted]
    if counted:
        print(f"counted rows (ok, >= 1 MiB): {len(counted)}, MAPE {np.mean(counted):.1%}, "
              f"within 15%: {sum(e <= TARGET for e in counted)}/{len(counted)}")
        # The AWS EFA rows carry the latency AWS's plugin reports to NCCL's tuner (a tuning hint AWS chose
        # by empirical search, not a measured wire latency): show how much of the figure rests on it.
        plain = [abs(r.error) for r in published_rows(networks=False) if r.counted]
        print(f"  the same rows with no network plugin latency (InfiniBand's 0 everywhere): MAPE {np.mean(plain):.1%}, "
              f"within 15%: {sum(e <= TARGET for e in plain)}/{len(plain)}")
    print_summary(published_summary(rows))


def published_summary(rows: list[PublishedRow]) -> list[dict[str, Any]]:
    """MAPE of the rows counted as ok: every size, >= 1 MiB, and >= 1 MiB by tier and by op."""
    ok = [r for r in rows if r.status == "ok"]
    big = [r for r in ok if r.size_bytes >= MIN_BYTES]
    groups: list[tuple[str, list[PublishedRow]]] = [("all sizes", ok), (">= 1 MiB", big)]
    groups += [(f">= 1 MiB, {tier}", [r for r in big if (r.nodes > 1) == across])
               for tier, across in (("intra-node", False), ("cross-node", True))]
    groups += [(f">= 1 MiB, {op}", [r for r in big if r.op == op]) for op in sorted({r.op for r in big})]
    groups += [(f"size {label}", [r for r in big if lo <= r.size_bytes < hi]) for label, lo, hi in SIZE_BANDS]
    groups += [(f"nodes {label}", [r for r in big if lo <= r.nodes <= hi]) for label, lo, hi in NODE_BANDS]
    return [{"group": name, "rows": len(members),
             "mape": float(np.mean([abs(r.error) for r in members])) if members else None}
            for name, members in groups]


def print_summary(summary: list[dict[str, Any]]) -> None:
    print("MAPE of the ok rows:")
    for entry in summary:
        mape = "-" if entry["mape"] is None else f"{entry['mape']:.1%}"
        print(f"  {entry['group']:<28} {entry['rows']:>3} rows  {mape:>7}")


def print_measured(configs: list[MeasuredConfig] | None, reason: str) -> None:
    print("\nB. Collective time vs estimate-train-time NCCL timings (error = model / measured - 1, rows >= 1 MiB)")
    if configs is None:
        print(f"skipped: {reason}")
        return
    notes = Footnotes()
    print(f"{'machine':<11} {'collective':<30} {'nodes x gpn':>11} {'rows':>5} {'MiB':>12} {'busbw meas':>10} "
          f"{'model':>6} {'MAPE':>6} {'median':>7} {'p90|e|':>7}  status")
    for c in configs:
        shape = f"{c.nodes}x{c.gpus_per_node}"
        sizes = f"{c.min_MiB:.0f}-{c.max_MiB:.0f}"
        status = notes.mark(f"{c.status}: {c.reason}") if c.reason else \
            c.status + ("" if c.mape <= TARGET else " (above target)")
        print(f"{c.machine:<11} {c.collective:<30} {shape:>11} {c.rows:>5} {sizes:>12} {c.measured_busbw_GBps:>10.1f} "
              f"{c.model_busbw_GBps:>6.1f} {c.mape:>6.1%} {c.median_error:>+7.1%} {c.p90_abs_error:>7.1%}  {status}")
    notes.print()
    counted = [c for c in configs if c.status == "ok"]
    if counted:
        errors = np.abs(np.concatenate([c.errors for c in counted]))
        print(f"counted configurations: {len(counted)} ({errors.size} rows), MAPE {errors.mean():.1%}, "
              f"configurations with MAPE <= 15%: {sum(c.mape <= TARGET for c in counted)}/{len(counted)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print machine-readable errors")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="estimate-train-time data folder (default: ../shared/data/estimate-train-time)")
    args = parser.parse_args(argv)
    published = published_rows()
    configs: list[MeasuredConfig] | None = None
    reason = ""
    if all((args.data / m / "nccl").is_dir() for m in MACHINES):
        configs = measured_configs(args.data)
    else:
        reason = f"{args.data} not found (it ships with the project's shared folder, not with parplan)"
    if args.json:
        payload = {"target_abs_error": TARGET, "min_message_bytes": MIN_BYTES,
                   "published": [asdict(r) for r in published],
                   "published_summary": published_summary(published),
                   "measured": None if configs is None else
                   [{k: v for k, v in asdict(c).items() if k != "errors"} for c in configs],
                   "measured_skipped": reason or None}
        json.dump(payload, sys.stdout, indent=1)
        print()
    else:
        print_published(published)
        print_measured(configs, reason)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
