"""Optuna storage for searches: any storage URL, SQLite by default when only a name is given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna

from costmodel.specs.errors import SpecError


def study_directions(directions: tuple[str, ...]) -> list[optuna.study.StudyDirection]:
    """Optuna directions from ``("minimize", ...)``."""
    return [optuna.study.StudyDirection[d.upper()] for d in directions]


def storage_url(storage: str | None, study_name: str | None) -> str | None:
    """The storage URL to use: ``storage`` as given, or ``sqlite:///<study_name>.db`` in the working directory."""
    if storage:
        return storage
    if study_name:
        return f"sqlite:///{Path(f'{study_name}.db').resolve()}"
    return None


def open_study(storage: str | None, study_name: str | None, directions: tuple[str, ...],
               sampler: Any) -> Any:
    """Create the study, or load it when it exists (re-running resumes); ``None`` without storage or name.

    Raises
    ------
    SpecError
        If a stored study with this name was created with other directions
        (a time search resumed as a Pareto search, or the reverse).
    """
    url = storage_url(storage, study_name)
    if url is None:
        return None
    if study_name is None:
        raise SpecError("study-name", None, "given with --storage")
    study = optuna.create_study(storage=url, study_name=study_name, directions=study_directions(directions),
                                sampler=sampler, load_if_exists=True)
    stored = tuple(d.name.lower() for d in study.directions)
    if stored != directions:
        raise SpecError("study-name", study_name,
                        f"a study with {len(directions)} objective(s) (it was stored with {len(stored)})")
    return study
