"""``parplan replay --plot PNG``: the replayed timeline of the last iteration and each iteration's breakdown."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Final

from costmodel.replay.graph import Graph
from costmodel.replay.simulate import Replay
from costmodel.specs.errors import SpecError

__all__ = ["plot_replay"]

COLOURS: Final = {"gemm": "#1f77b4", "attention": "#9467bd", "conv": "#17becf", "elementwise": "#2ca02c",
                  "collective": "#d62728", "memcpy": "#ff7f0e", "memset": "#bcbd22", "runtime": "#7f7f7f",
                  "sync": "#8c564b", "wait": "#e377c2"}
BREAKDOWN: Final = (("compute", "#1f77b4"), ("exposed_communication", "#d62728"),
                    ("cpu_bound_idle", "#7f7f7f"), ("synchronisation", "#8c564b"))
MAX_LANES: Final = 24
PNG_MAGIC: Final = b"\x89PNG\r\n\x1a\n"


def _check_target(path: Path) -> None:
    if path.suffix.lower() != ".png":
        raise SpecError("--plot", str(path), "a path ending in .png")
    if path.exists() or path.is_symlink():  # only a regular PNG file (an earlier --plot's) is replaced
        if path.is_symlink() or not path.is_file() or path.open("rb").read(8) != PNG_MAGIC:
            raise SpecError("--plot", str(path), "a new file or an existing PNG to replace")
    if not path.parent.is_dir():
        raise SpecError("--plot", str(path), "a path in an existing directory")


def plot_replay(graph: Graph, replay: Replay, path: str | Path, title: str = "") -> Path:
    """Write the PNG: the last iteration's lanes (CPU threads, GPU streams) and the per-iteration breakdown."""
    target = Path(path)
    _check_target(target)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    step = graph.steps[-1]
    lo, hi = replay.start[step.begin], replay.start[step.end]
    lanes = [lane for lane in sorted(graph.lanes) if lane[1] == str(step.rank)][:MAX_LANES]
    fig, (timeline, breakdown) = plt.subplots(2, 1, figsize=(12, 3 + 0.35 * len(lanes)),
                                              gridspec_kw={"height_ratios": [max(len(lanes), 2), 3]})
    for row, lane in enumerate(lanes):
        spans: dict[str, list[tuple[float, float]]] = {}
        for index in graph.lanes[lane]:
            node = graph.nodes[index]
            a, b = max(replay.start[index], lo), min(replay.end[index], hi)
            if node.kind != "marker" and b > a:
                spans.setdefault(node.family, []).append((1e-3 * (a - lo), 1e-3 * (b - a)))
        for family, bars in spans.items():
            timeline.broken_barh(bars, (row - 0.4, 0.8), color=COLOURS.get(family, "#000000"), label=family)
    timeline.set_yticks(range(len(lanes)), [f"{lane[0]} {lane[3] if lane[0] == 'gpu' else lane[3][-6:]}"
                                             for lane in lanes])
    timeline.set_xlabel(f"ms from the start of {step.name} (rank {step.rank}, replayed)")
    handles = {h.get_label(): h for h in timeline.get_legend_handles_labels()[0]}
    timeline.legend(handles.values(), handles.keys(), loc="upper right", fontsize=7, ncol=5)
    timeline.set_title(title or "replay")
    rows = [it for it in replay.iterations if it.rank == step.rank]
    left = [0.0] * len(rows)
    for key, colour in BREAKDOWN:
        widths = [1e3 * it.breakdown_s[key] for it in rows]
        breakdown.barh(range(len(rows)), widths, left=left, color=colour, label=key.replace("_", " "))
        left = [a + b for a, b in zip(left, widths)]
    breakdown.scatter([1e3 * it.measured_s for it in rows], range(len(rows)), marker="|", s=200, color="black",
                      label="measured", zorder=3)
    breakdown.set_yticks(range(len(rows)), [it.name for it in rows])
    breakdown.set_xlabel("ms per iteration (GPU time breakdown)")
    breakdown.legend(loc="lower right", fontsize=7, ncol=5)
    fig.tight_layout()
    handle, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".png", dir=target.parent)
    os.close(handle)
    try:
        fig.savefig(name, dpi=110)
        os.chmod(name, 0o644)
        os.replace(name, target)
    finally:
        plt.close(fig)
        Path(name).unlink(missing_ok=True)
    return target
