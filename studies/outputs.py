"""The files of a study's output folder, side by side.

::

    DIR/study.yaml        the resolved study (every model inline, every list expanded; loadable again)
    DIR/versions.json     Python, platform and the versions of every library the numbers depend on
    DIR/run.json          storage (password hidden), jobs, start/end, problems by status
    DIR/results/ID.json   one finished problem per file (written as each finishes)
    DIR/study.db          the default storage (SQLite): results, claims, Optuna trials

Files are written to a temporary name and renamed, so a run killed mid-write
never leaves a truncated file.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from studies.problems import Problem
from studies.result import ProblemResult
from studies.spec import StudySpec, load_study

STUDY_FILE = "study.yaml"
VERSIONS_FILE = "versions.json"
RUN_FILE = "run.json"
RESULTS_DIR = "results"
_UMASK = os.umask(0)
os.umask(_UMASK)
PACKAGES = ("parplan", "optuna", "numpy", "scipy", "scikit-learn", "joblib", "threadpoolctl", "pyyaml",
            "sqlalchemy", "aiconfigurator-core", "matplotlib", "psycopg", "psycopg-binary")


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600 files; outputs are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def versions() -> dict[str, Any]:
    """Interpreter, platform and installed versions of the libraries in ``PACKAGES`` (absent ones left out)."""
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {"python": sys.version.split()[0], "implementation": platform.python_implementation(),
            "platform": platform.platform(), "machine": platform.machine(), "packages": found}


def write_study(out_dir: Path, spec: StudySpec) -> None:
    """``study.yaml`` (resolved) and ``versions.json``."""
    source = "" if spec.source is None else f" from {spec.source}"
    header = (f"# Resolved study{source}: every model inline, every list expanded, every default filled.\n"
              f"# `parplan study run` on this file searches the same problems.\n")
    write_atomic(out_dir / STUDY_FILE, header + yaml.safe_dump(spec.to_dict(), sort_keys=False))
    write_atomic(out_dir / VERSIONS_FILE, json.dumps(versions(), indent=2) + "\n")


def write_run(out_dir: Path, info: dict[str, Any]) -> None:
    """Append this run's record to ``run.json`` (``{"runs": [...]}``: a resumed study keeps its history)."""
    runs = read_runs(out_dir)
    write_atomic(out_dir / RUN_FILE, json.dumps({"runs": [*runs, info]}, indent=2, default=str) + "\n")


def read_runs(out_dir: Path) -> list[dict[str, Any]]:
    """Records of the runs into ``out_dir``, oldest first (empty when none or unreadable)."""
    try:
        data = json.loads((out_dir / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    runs = data.get("runs") if isinstance(data, dict) else None
    return [r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []


def result_path(out_dir: Path, result: ProblemResult) -> Path:
    return out_dir / RESULTS_DIR / f"{result.problem}.json"


def write_result(out_dir: Path, result: ProblemResult) -> None:
    write_atomic(result_path(out_dir, result), json.dumps(result.to_dict(), indent=2, sort_keys=True) + "\n")


def export_results(out_dir: Path, problems: Iterable[Problem], results: dict[str, ProblemResult]) -> int:
    """Write every stored result of ``problems`` and drop result files of problems not in the study.

    ``results/`` belongs to parplan: a file there whose problem left the study
    (or whose inputs changed) would otherwise show up in the report.
    """
    folder = out_dir / RESULTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    keep = set()
    for p in problems:
        r = results.get(p.key)
        if r is not None:
            write_result(out_dir, r)
            keep.add(f"{r.problem}.json")
    for path in folder.glob("*.json"):
        if path.name not in keep:
            path.unlink()
    return len(keep)


def read_study(out_dir: Path) -> StudySpec:
    """The resolved study of an output folder."""
    return load_study(out_dir / STUDY_FILE)


def read_results(out_dir: Path) -> dict[str, ProblemResult]:
    """Result files of an output folder by problem id."""
    out = {}
    for path in sorted((out_dir / RESULTS_DIR).glob("*.json")):
        r = ProblemResult.from_dict(json.loads(path.read_text(encoding="utf-8")))
        out[r.problem] = r
    return out
