"""The files of a study's output folder, side by side.

::

    DIR/.parplan-study    the marker: the study's name and the result files parplan wrote (see studies.folder)
    DIR/study.yaml        the resolved study (every model inline, every list expanded; loadable again)
    DIR/versions.json     Python, platform and the versions of every library the numbers depend on
    DIR/run.json          storage (password hidden), jobs, start/end, problems by status
    DIR/results/ID.json   one finished problem per file (written as each finishes)
    DIR/study.db          the default storage (SQLite): results, claims, Optuna trials

Every write goes through :class:`~studies.folder.StudyFolder`: only into a
folder parplan made or marked, never through a symlink, atomically. Only files
parplan wrote are ever deleted (the marker lists them).
"""

from __future__ import annotations

import json
import platform
import sys
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from costmodel.specs.errors import SpecError
from studies.folder import StudyFolder
from studies.problems import Problem, expand
from studies.result import ProblemResult
from studies.spec import StudySpec, load_study

STUDY_FILE = "study.yaml"
VERSIONS_FILE = "versions.json"
RUN_FILE = "run.json"
RESULTS_DIR = "results"
PACKAGES = ("parplan", "optuna", "numpy", "scipy", "scikit-learn", "joblib", "threadpoolctl", "pyyaml",
            "sqlalchemy", "aiconfigurator-core", "matplotlib", "psycopg", "psycopg-binary")


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


def write_study(folder: StudyFolder, spec: StudySpec) -> None:
    """``study.yaml`` (resolved) and ``versions.json``."""
    source = "" if spec.source is None else f" from {spec.source}"
    header = (f"# Resolved study{source}: every model inline, every list expanded, every default filled.\n"
              f"# `parplan study run` on this file searches the same problems.\n")
    folder.write_text(STUDY_FILE, header + yaml.safe_dump(spec.to_dict(), sort_keys=False))
    folder.write_text(VERSIONS_FILE, json.dumps(versions(), indent=2) + "\n")


def write_run(folder: StudyFolder, info: dict[str, Any]) -> None:
    """Append this run's record to ``run.json`` (``{"runs": [...]}``: a resumed study keeps its history)."""
    runs = _runs(folder)
    folder.write_text(RUN_FILE, json.dumps({"runs": [*runs, info]}, indent=2, default=str) + "\n")


def read_runs(out_dir: str | Path) -> list[dict[str, Any]]:
    """Records of the runs into ``out_dir``, oldest first (empty when none or unreadable)."""
    return _runs(StudyFolder.existing(out_dir))


def _runs(folder: StudyFolder) -> list[dict[str, Any]]:
    try:
        data = json.loads(folder.read_text(RUN_FILE) or "{}")
    except ValueError:
        return []  # a history only: a damaged one is started afresh rather than stopping the study
    runs = data.get("runs") if isinstance(data, dict) else None
    return [r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []


def result_file(problem_id: str) -> str:
    """``results/ID.json``, relative to the output folder."""
    return f"{RESULTS_DIR}/{problem_id}.json"


def write_result(folder: StudyFolder, result: ProblemResult) -> None:
    folder.write_text(result_file(result.problem), json.dumps(result.to_dict(), indent=2, sort_keys=True) + "\n")


def export_results(folder: StudyFolder, problems: Iterable[Problem], results: dict[str, ProblemResult]) -> int:
    """Write every stored result of ``problems``; drop the result files parplan wrote that are no longer current.

    A file of a problem that left the study, or whose inputs changed and has no
    result yet, would otherwise show up in the report. Only files the marker
    lists (parplan wrote them) are deleted; anything else in ``results/`` stays.
    """
    keep = []
    for p in problems:
        r = results.get(p.key)
        if r is not None:
            write_result(folder, r)
            keep.append(r.problem)
    for stale in sorted(folder.written_results() - set(keep)):
        folder.remove(result_file(stale))
    folder.write_marker(keep)
    return len(keep)


def read_study(out_dir: str | Path) -> StudySpec:
    """The resolved study of an output folder.

    Raises
    ------
    SpecError
        If the folder is not a study output folder (no marker) or its ``study.yaml`` is missing or a symlink.
    """
    folder = StudyFolder.existing(out_dir)
    if folder.read_text(STUDY_FILE) is None:  # also refuses a symlinked or special study.yaml
        raise SpecError("out", str(folder.path), f"a study output folder (with {STUDY_FILE}, from "
                                                 f"`parplan study run`)")
    return load_study(folder.path / STUDY_FILE)


def read_results(out_dir: str | Path, problems: Iterable[Problem] | None = None) -> dict[str, ProblemResult]:
    """The result files of ``problems`` (default: the folder's study) by problem id; missing ones left out.

    Only ``results/ID.json`` of the study's problems are read: other files a user
    keeps in ``results/`` are not parplan's and are never parsed.

    Raises
    ------
    SpecError
        If a result file is not a result parplan wrote (damaged or edited): ``parplan study run`` rewrites it
        from the storage.
    """
    folder = StudyFolder.existing(out_dir)
    if problems is None:
        problems = expand(read_study(out_dir), check_profile=False)
    out = {}
    for p in problems:
        name = result_file(p.id)
        text = folder.read_text(name)
        if text is None:
            continue
        try:
            r = ProblemResult.from_dict(json.loads(text))
            if r.problem != p.id:
                raise ValueError(f"the file holds problem {r.problem!r}")
        except (ValueError, TypeError, AttributeError) as exc:
            # The file is named in the field: a long folder path in the value would be cut to 80 characters.
            raise SpecError(name, f"{type(exc).__name__}: {exc}", "a result file written by parplan (rerun "
                                                                 "`parplan study run` to rewrite it)") from None
        out[p.id] = r
    return out
