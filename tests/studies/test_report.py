"""Reports: CSV and JSON tables with one row per problem, Markdown, and PNG plots that are real images."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import matplotlib.image
import pytest

from costmodel.specs.errors import SpecError
from studies.problems import expand
from studies.report import COLUMNS, write_report
from studies.runner import RunSummary, run_study
from studies.spec import StudySpec, load_study
from tests.studies.conftest import FAILING, TINY, write_study

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _assert_png(path: Path, min_width: int = 400) -> None:
    assert path.read_bytes()[:8] == PNG_MAGIC
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[1] >= min_width and pixels.shape[0] >= 150
    assert pixels.std() > 0.01  # not a blank canvas


@pytest.fixture
def reported(tmp_path: Path, tiny_reference: tuple[StudySpec, RunSummary]) -> tuple[StudySpec, Path, list[Path]]:
    spec, summary = tiny_reference
    out = tmp_path / "out"
    shutil.copytree(summary.out_dir, out)
    return spec, out, write_report(out)


def test_report_writes_tables_markdown_and_plots(reported: tuple[StudySpec, Path, list[Path]]) -> None:
    spec, out, written = reported
    folder = out / "report"
    names = {p.name for p in written}
    assert {"results.csv", "results.json", "report.md", "throughput.png", "strategy_map.png",
            "breakdown.png"} <= names
    assert all(p.parent == folder and p.is_file() for p in written)
    for name in ("throughput.png", "strategy_map.png", "breakdown.png"):
        _assert_png(folder / name)
    assert "pareto.png" not in names  # a time-objective study has no fronts


def test_tables_have_one_row_per_problem(reported: tuple[StudySpec, Path, list[Path]]) -> None:
    spec, out, _ = reported
    rows = list(csv.DictReader(io.StringIO((out / "report" / "results.csv").read_text())))
    assert [r["problem"] for r in rows] == [p.id for p in expand(spec)]
    assert list(rows[0]) == list(COLUMNS)
    assert all(r["status"] == "ok" and float(r["step_time_s"]) > 0 and float(r["mfu"]) > 0 for r in rows)
    assert all(float(r["gpu_hours_per_billion_tokens"]) > 0 and r["tp"] for r in rows)
    data = json.loads((out / "report" / "results.json").read_text())
    assert len(data["rows"]) == len(rows) and data["study"] == "tiny"
    assert data["rows"][0]["step_time_s"] == pytest.approx(float(rows[0]["step_time_s"]))


def test_markdown_links_every_plot_and_lists_every_problem(reported: tuple[StudySpec, Path, list[Path]]) -> None:
    spec, out, written = reported
    text = (out / "report" / "report.md").read_text()
    for plot in (p for p in written if p.suffix == ".png"):
        assert f"]({plot.name})" in text
    assert text.count("| gpt3-") == len(expand(spec))


def test_failures_and_pending_problems_are_reported(tmp_path: Path) -> None:
    spec = load_study(write_study(tmp_path, FAILING))
    out = tmp_path / "out"
    run_study(spec, out, n_jobs=1, stream=io.StringIO())
    (out / "results" / "gpt3-350m_a100-sxm4-40gb_12g_b64_s2048.json").unlink()  # as if still running
    written = write_report(out)
    rows = json.loads((out / "report" / "results.json").read_text())["rows"]
    assert sorted(r["status"] for r in rows) == ["infeasible", "invalid", "ok", "pending"]
    text = (out / "report" / "report.md").read_text()
    assert "## Problems without a strategy" in text and "No strategy fits llama3.1-70b" in text
    for path in written:
        if path.suffix == ".png":
            _assert_png(path)


def test_pareto_study_plots_its_fronts(tmp_path: Path) -> None:
    data = {**TINY, "name": "fronts", "models": ["gpt3-350m"], "gpu_counts": [8],
            "search": {"objective": "pareto", "trials": 40}}
    out = tmp_path / "out"
    run_study(load_study(write_study(tmp_path, data)), out, n_jobs=1, stream=io.StringIO())
    written = write_report(out)
    assert out / "report" / "pareto.png" in written
    _assert_png(out / "report" / "pareto.png")


def test_report_of_a_folder_that_is_not_a_study(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="study output folder"):
        write_report(tmp_path)
