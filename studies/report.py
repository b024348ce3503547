"""``parplan study report DIR``: one table row per problem (CSV and JSON), a Markdown report and PNG plots.

Everything is read from the output folder (``study.yaml`` and ``results/``),
never from the database, so a folder copied off a cluster reports the same.
Problems without a result yet appear as ``pending``.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from costmodel.specs.errors import SpecError
from studies.folder import StudyFolder
from studies.outputs import VERSIONS_FILE, read_results, read_runs, read_study
from studies.problems import Problem, expand
from studies.result import BREAKDOWN_KEYS, ProblemResult
from studies.spec import StudySpec

REPORT_DIR = "report"
STRATEGY_KNOBS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size", "sequence_parallel", "recompute",
                  "zero_stage", "precision")
COLUMNS = ("problem", "model", "gpu", "num_gpus", "global_batch_size", "seq_length", "tokens_per_step", "status",
           "strategy", *STRATEGY_KNOBS, "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu",
           "peak_memory_gib", "usable_memory_gib", "gpu_hours_per_billion_tokens", *BREAKDOWN_KEYS,
           "trials", "distinct", "feasible", "profile", "reason")
"""Table columns; units: seconds (``*_s``), GiB, tokens/s; MFU as a fraction; GPU-hours per 1e9 tokens."""


def table_row(problem: Problem, result: ProblemResult | None) -> dict[str, Any]:
    """The flat row of one problem (``status == "pending"`` without a result)."""
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(problem.describe())
    if result is None:
        row["status"] = "pending"
        return row
    data = result.to_dict()
    for name in COLUMNS:
        if name in data and not isinstance(data[name], (dict, list)):
            row[name] = data[name]
    row["strategy"] = result.strategy_label or None
    for knob in STRATEGY_KNOBS:
        row[knob] = (result.strategy or {}).get(knob)
    for part in BREAKDOWN_KEYS:
        row[part] = result.breakdown.get(part)
    return row


def table(spec: StudySpec, results: dict[str, ProblemResult]) -> list[dict[str, Any]]:
    """One row per problem of ``spec``, in study order (results matched by problem id)."""
    return [table_row(p, results.get(p.id)) for p in expand(spec, check_profile=False)]


def to_csv(rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(COLUMNS), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buffer.getvalue()


def write_report(out_dir: Path) -> list[Path]:
    """Write ``DIR/report/`` and return the paths written.

    Raises
    ------
    SpecError
        If ``out_dir`` is not a study output folder, a file parplan reads there is a symlink, or a
        result file is damaged (``parplan study run`` rewrites it from the storage).
    """
    folder = StudyFolder.existing(out_dir)
    folder.require_subfolder(REPORT_DIR)  # before any work: a symlinked report/ is refused, not followed
    spec = read_study(folder.path)
    problems = expand(spec, check_profile=False)
    results = read_results(folder.path, problems)
    rows = table(spec, results)
    meta = _read_json(folder, VERSIONS_FILE)
    runs = read_runs(folder.path)
    written = [folder.write_text(f"{REPORT_DIR}/results.csv", to_csv(rows)),
               folder.write_text(f"{REPORT_DIR}/results.json",
                                 json.dumps({"study": spec.name, "description": spec.description,
                                             "columns": list(COLUMNS), "rows": rows, "versions": meta,
                                             "runs": runs}, indent=2) + "\n")]
    plots = _write_plots(folder, spec, rows, results)
    markdown = folder.write_text(f"{REPORT_DIR}/report.md", render_markdown(spec, rows, plots, meta, runs))
    return [*written, markdown, *plots]


def _write_plots(folder: StudyFolder, spec: StudySpec, rows: list[dict[str, Any]],
                 results: dict[str, ProblemResult]) -> list[Path]:
    """The PNGs, drawn in a private temporary folder and moved into ``report/`` like every other file.

    matplotlib opens its file by path; drawing into a folder only this process knows keeps it from
    following a link planted in ``report/``.
    """
    from studies.plots import write_plots

    with tempfile.TemporaryDirectory(prefix="parplan-plots-") as tmp:
        drawn = write_plots(spec, rows, results, Path(tmp))
        plots = [folder.write_bytes(f"{REPORT_DIR}/{p.name}", p.read_bytes()) for p in drawn]
    for name in sorted({f"{stem}.png" for stem in _PLOT_TITLES} - {p.name for p in plots}):
        folder.remove(f"{REPORT_DIR}/{name}")  # a stale plot (e.g. a Pareto front) from an earlier report misleads
    return plots


def _read_json(folder: StudyFolder, name: str) -> dict[str, Any]:
    try:
        return dict(json.loads(folder.read_text(name) or "{}"))
    except (ValueError, TypeError):
        return {}


def _num(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def render_markdown(spec: StudySpec, rows: list[dict[str, Any]], plots: list[Path], versions: dict[str, Any],
                    runs: list[dict[str, Any]]) -> str:
    """The report: what was searched, the table, failures with reasons, the plots."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    s = spec.search
    last = runs[-1] if runs else {}
    lines = [f"# Study `{spec.name}`", ""]
    if spec.description:
        lines += [spec.description, ""]
    lines += [
        f"- Problems: {len(rows)} ({', '.join(f'{n} {k}' for k, n in sorted(counts.items()))})",
        f"- Models: {', '.join(m.name for m in spec.models)}",
        f"- GPUs: {', '.join(spec.gpus)} x {', '.join(map(str, spec.gpu_counts))}",
        f"- Search: {s.sampler}, objective {s.objective}, {s.trials or 'default'} trials per problem, seed {s.seed}",
        f"- Runs: {len(runs)} (last finished {last.get('finished_at', '?')}, {last.get('n_jobs', '?')} jobs, "
        f"storage `{last.get('storage', '?')}`); wall time of all runs "
        f"{_num(sum(r.get('elapsed_s', 0.0) for r in runs), '.1f')} s",
        f"- parplan {versions.get('packages', {}).get('parplan', '?')}, optuna "
        f"{versions.get('packages', {}).get('optuna', '?')}, Python {versions.get('python', '?')} "
        f"(all versions: `versions.json`)",
        "",
        "## Best strategy per problem",
        "",
        "Step time in seconds per optimizer step; tokens/s per GPU; MFU = model FLOPs / peak FLOPs of the "
        "precision used; memory = predicted peak per GPU; GPU-h/Btok = GPU-hours to train on 1e9 tokens.",
        "",
        "| model | GPU | GPUs | batch x seq | best strategy | step s | tok/s/GPU | MFU | mem GiB | GPU-h/Btok |",
        "|---|---|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        best = r["strategy"] or f"*{r['status']}*"
        lines.append(f"| {r['model']} | {r['gpu']} | {r['num_gpus']} | {r['global_batch_size']} x {r['seq_length']} "
                     f"| {best} | {_num(r['step_time_s'], '.3f')} | {_num(r['tokens_per_s_per_gpu'], ',.0f')} "
                     f"| {_num(r['mfu'], '.3f')} | {_num(r['peak_memory_gib'], '.1f')} "
                     f"| {_num(r['gpu_hours_per_billion_tokens'], ',.1f')} |")
    failed = [r for r in rows if r["status"] not in ("ok", "pending")]
    if failed:
        lines += ["", "## Problems without a strategy", ""]
        lines += [f"- **{r['problem']}** ({r['status']}): {r['reason']}" for r in failed]
    notes = sorted({r["profile"] for r in rows if r.get("profile")})
    if notes:
        lines += ["", "Timing profiles used: " + "; ".join(notes) + "."]
    lines += ["", "## Plots", ""]
    for path in plots:
        lines += [f"### {_PLOT_TITLES.get(path.stem, path.stem)}", "", f"![{path.stem}]({path.name})", ""]
    return "\n".join(lines).rstrip() + "\n"


_PLOT_TITLES = {
    "throughput": "Throughput per GPU vs GPU count",
    "strategy_map": "Best-strategy map",
    "breakdown": "Step-time breakdown of the best strategies",
    "pareto": "Step time vs peak memory (Pareto fronts)",
}
