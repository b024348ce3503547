"""PNG plots of a study (matplotlib, Agg backend: no display needed).

- ``throughput.png``: tokens/s per GPU vs GPU count, one line per model (and
  batch/sequence when a study varies them), one panel per GPU kind; a study of
  more GPU kinds than models gets a panel per model and a line per GPU kind;
- ``strategy_map.png``: which tp/pp/dp (cp, ep) wins for each model and count,
  coloured by the GPUs one model replica spans (tp x pp x cp), split the same way;
- ``breakdown.png``: the best strategy's step time split into compute,
  communication, bubble and optimizer, as shares of the step, with the step
  time written at the end of each bar;
- ``pareto.png``: step time vs peak memory fronts, for problems searched with
  the ``pareto`` objective.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")  # before pyplot: headless machines and CI have no display

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from studies.result import BREAKDOWN_KEYS, ProblemResult  # noqa: E402
from studies.spec import StudySpec  # noqa: E402

DPI = 120
BREAKDOWN_LABELS = {"compute_s": "compute", "tp_comm_s": "TP comm", "cp_comm_s": "CP comm",
                    "ep_comm_s": "EP all-to-all", "pp_comm_s": "PP send/recv", "pp_bubble_s": "pipeline bubble",
                    "dp_comm_exposed_s": "DP comm (exposed)", "optimizer_s": "optimizer", "other_s": "other"}
_FAILED_TEXT = {"infeasible": "no fit", "invalid": "invalid", "error": "error", "pending": "pending"}


def _series_label(row: dict[str, Any], spec: StudySpec) -> str:
    label = row["model"]
    if len(spec.batches) > 1:
        label += f", batch {row['global_batch_size']}"
    if len(spec.seq_lengths) > 1:
        label += f", seq {row['seq_length']}"
    return label


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def _count_axis(ax: Any, counts: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{int(v)}"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_xlabel("GPUs")


def _split(spec: StudySpec, rows: list[dict[str, Any]]) -> tuple[str, list[str], list[str]]:
    """Panel and line (or map row) keys: panels per GPU kind and lines per model, or the reverse when a study
    compares more GPU kinds than it has models (then the kinds share a panel and compare at a glance)."""
    models = list(dict.fromkeys(_series_label(r, spec) for r in rows))
    if len(spec.gpus) > len(models):
        return "model", models, list(spec.gpus)
    return "gpu", list(spec.gpus), models


def _keys(row: dict[str, Any], spec: StudySpec, by: str) -> tuple[str, str]:
    """(panel, line) of ``row`` for the split ``by``."""
    model = _series_label(row, spec)
    return (row["gpu"], model) if by == "gpu" else (model, row["gpu"])


def _grid(panels: int, columns: int, width: float, height: float, **kwargs: Any) -> tuple[Figure, list[Any]]:
    cols = min(columns, panels)
    nrows = math.ceil(panels / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(width * cols, height * nrows), squeeze=False,
                             layout="constrained", **kwargs)
    flat = list(axes.flat)
    for ax in flat[panels:]:
        ax.set_visible(False)
    return fig, flat[:panels]


def plot_throughput(spec: StudySpec, rows: list[dict[str, Any]], path: Path) -> Path:
    """Tokens/s per GPU against GPU count: a line per model and a panel per GPU kind (or the reverse)."""
    by, panels, lines = _split(spec, rows)
    fig, axes = _grid(len(panels), 2, 6.4, 4.4, sharey=True)
    legend_title = "model" if by == "gpu" else "GPU"
    for ax, panel in zip(axes, panels):
        series: dict[str, list[tuple[int, float]]] = {line: [] for line in lines}
        for r in rows:
            key_panel, key_line = _keys(r, spec, by)
            if key_panel == panel and r["status"] == "ok":
                series[key_line].append((r["num_gpus"], r["tokens_per_s_per_gpu"]))
        for label, points in series.items():
            if points:
                points.sort()
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
        _count_axis(ax, list(spec.gpu_counts))
        ax.set_title(panel)
        ax.set_ylabel("throughput per GPU (tokens/s)")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.grid(True, which="major", alpha=0.3)
        if any(series.values()):
            ax.legend(fontsize=8, title=legend_title, title_fontsize=8)
        else:
            ax.text(0.5, 0.5, "no feasible problem", transform=ax.transAxes, ha="center", va="center")
    axes[0].set_ylim(bottom=0)  # after every panel is drawn: the shared top then fits them all
    fig.suptitle(f"{spec.name}: best-strategy throughput per GPU (missing points: nothing fits)")
    return _save(fig, path)


def _cell_text(row: dict[str, Any]) -> str:
    if row["status"] != "ok":
        return _FAILED_TEXT.get(row["status"], row["status"])
    text = f"tp{row['tp']} pp{row['pp']}\ndp{row['dp']}"
    extras = [f"{k}{row[k]}" for k in ("cp", "ep") if row[k] and row[k] > 1]
    return text + (" " + " ".join(extras) if extras else "")


def plot_strategy_map(spec: StudySpec, rows: list[dict[str, Any]], path: Path) -> Path:
    """Grid of winners: a row per model (or GPU kind), a column per GPU count, panels stacked."""
    by, panels, lines = _split(spec, rows)
    counts = list(spec.gpu_counts)
    width = max(6.0, 1.25 * len(counts) + 2.8)
    fig, axes = _grid(len(panels), 1, width, max(2.2, 0.62 * len(lines) + 1.3))
    norm = LogNorm(vmin=1, vmax=max([2] + [r["tp"] * r["pp"] * r["cp"] for r in rows if r["status"] == "ok"]))
    cmap = plt.get_cmap("viridis").with_extremes(bad="#dddddd")
    mappable = None
    for ax, panel in zip(axes, panels):
        grid = [[math.nan] * len(counts) for _ in lines]
        for r in rows:
            key_panel, key_line = _keys(r, spec, by)
            if key_panel != panel:
                continue
            i, j = lines.index(key_line), counts.index(r["num_gpus"])
            if r["status"] == "ok":
                grid[i][j] = r["tp"] * r["pp"] * r["cp"]
            light = r["status"] != "ok" or norm(grid[i][j]) > 0.6
            ax.text(j, i, _cell_text(r), ha="center", va="center", fontsize=8,
                    color="black" if light else "white")
        mappable = ax.imshow(np.ma.masked_invalid(np.array(grid, dtype=float)), cmap=cmap, norm=norm,
                             aspect="auto")
        ax.set_xticks(range(len(counts)), [str(c) for c in counts])
        ax.set_yticks(range(len(lines)), lines)
        ax.set_xlabel("GPUs")
        ax.set_title(panel)
    if mappable is not None:
        bar = fig.colorbar(mappable, ax=axes, fraction=0.04, pad=0.02)
        top = int(norm.vmax or 1)
        bar.set_ticks([2**k for k in range(int(math.log2(top)) + 1)] if top > 1 else [1])
        bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        bar.ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        bar.set_label("GPUs per model replica\n(tp x pp x cp)")
    fig.suptitle(f"{spec.name}: best strategy per GPU count (grey: no strategy)")
    return _save(fig, path)


def plot_breakdown(spec: StudySpec, rows: list[dict[str, Any]], path: Path) -> Path:
    """Horizontal 100 % stacked bars of the winners' step-time parts; step time annotated."""
    ok = [r for r in rows if r["status"] == "ok"]
    parts = [k for k in BREAKDOWN_KEYS if any((r[k] or 0) > 0 for r in ok)] or ["compute_s"]
    labels = [f"{r['model']} · {r['gpu']} x {r['num_gpus']}" for r in ok]
    fig, ax = plt.subplots(figsize=(11.0, max(2.8, 0.32 * len(ok) + 1.4)), layout="constrained")
    colors = plt.get_cmap("tab10")
    left = [0.0] * len(ok)
    for index, part in enumerate(parts):
        shares = [100.0 * (r[part] or 0.0) / r["step_time_s"] for r in ok]
        ax.barh(range(len(ok)), shares, left=left, color=colors(index % 10), label=BREAKDOWN_LABELS.get(part, part))
        left = [a + b for a, b in zip(left, shares)]
    for i, r in enumerate(ok):
        ax.text(101, i, f"{r['step_time_s']:.3g} s", va="center", fontsize=7.5)
    ax.set_yticks(range(len(ok)), labels, fontsize=8)
    ax.set_ylim(len(ok) - 0.5, -0.5)  # first problem on top, no empty margin
    ax.set_xlim(0, 112)
    ax.set_xticks(range(0, 101, 20))
    ax.set_xlabel("share of the step time (%); step time in seconds at the right")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False, title="step-time part",
              title_fontsize=8)
    if not ok:
        ax.text(50, 0, "no feasible problem", ha="center", va="center")
    ax.set_title(f"{spec.name}: where the best strategy's step time goes")
    return _save(fig, path)


def plot_pareto(spec: StudySpec, results: dict[str, ProblemResult], path: Path) -> Path | None:
    """Step time vs peak memory fronts: a panel per model and GPU kind, a line per GPU count.

    ``None`` when no problem has a front (only the ``pareto`` objective computes one).
    """
    fronts = [r for r in results.values() if r.ok and r.pareto]
    if not fronts:
        return None
    panels: dict[tuple[str, str], list[ProblemResult]] = defaultdict(list)
    for r in fronts:
        panels[(r.model, r.gpu)].append(r)
    order = sorted(panels, key=lambda k: ([m.name for m in spec.models].index(k[0])
                                          if k[0] in [m.name for m in spec.models] else 0, k[1]))
    columns = min(3, len(order))
    rows = math.ceil(len(order) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.6 * columns, 3.8 * rows), squeeze=False,
                             layout="constrained")
    counts = sorted({r.num_gpus for r in fronts})
    cmap = plt.get_cmap("viridis")
    for ax, key in zip(axes.flat, order):
        for r in sorted(panels[key], key=lambda item: item.num_gpus):
            points = sorted((p["peak_memory_gib"], p["step_time_s"]) for p in r.pareto)
            shade = counts.index(r.num_gpus) / max(1, len(counts) - 1)
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3.5,
                    drawstyle="steps-post", color=cmap(0.9 * shade), label=f"{r.num_gpus}")
        ax.set_yscale("log")
        ax.set_title(f"{key[0]} · {key[1]}", fontsize=10)
        ax.set_xlabel("peak memory per GPU (GiB)")
        ax.set_ylabel("step time (s, log scale)")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(title="GPUs", fontsize=8, title_fontsize=8)
    for ax in list(axes.flat)[len(order):]:
        ax.set_visible(False)
    fig.suptitle(f"{spec.name}: Pareto fronts, strategies no other beats on both step time and memory")
    return _save(fig, path)


def write_plots(spec: StudySpec, rows: list[dict[str, Any]], results: dict[str, ProblemResult],
                folder: Path) -> list[Path]:
    """Every plot that has data, as PNG files in ``folder``."""
    written = [plot_throughput(spec, rows, folder / "throughput.png"),
               plot_strategy_map(spec, rows, folder / "strategy_map.png"),
               plot_breakdown(spec, rows, folder / "breakdown.png")]
    pareto = plot_pareto(spec, results, folder / "pareto.png")
    if pareto is not None:
        written.append(pareto)
    else:
        (folder / "pareto.png").unlink(missing_ok=True)  # a stale front from an earlier run would mislead
    return written
