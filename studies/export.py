"""A study's stored trials as ordinary Optuna studies, one per problem, in a database the user names.

The study database keeps trials as Optuna journals in its own table (see
:mod:`studies.trials`), which optuna-dashboard and the ``optuna`` CLI do not
read. ``parplan study export DIR --storage URL`` copies every problem's journal
into ``URL`` with ``optuna.copy_study``: an RDB storage (``sqlite:///x.db``,
``postgresql://...``) that both open. Study names are the problem keys
(``<study>/<id>/<fingerprint>``); user attributes carry the problem, and
infeasible trials keep their constraint (``constraints`` system attribute), so
the dashboard shows them as infeasible.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.exceptions import DuplicatedStudyError
from optuna.storages import JournalStorage

from costmodel.specs.errors import SpecError
from search.storage import check_storage_url
from studies.outputs import read_runs, read_study
from studies.problems import expand
from studies.store import StudyStore, default_url, redact
from studies.trials import SQLJournal


@dataclass(frozen=True)
class ExportSummary:
    """What an export wrote: the study names copied, the problems without stored trials, where."""

    storage: str
    exported: tuple[str, ...]
    without_trials: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {"storage": redact(self.storage), "exported": list(self.exported),
                "without_trials": list(self.without_trials)}


def source_url(out_dir: str | Path) -> str:
    """The database the folder's last run used (``run.json``), else its default ``study.db``."""
    runs = read_runs(out_dir)
    return str(runs[-1]["storage"]) if runs and runs[-1].get("storage") else default_url(out_dir)


def export_study(out_dir: str | Path, storage: str, *, source: str | None = None) -> ExportSummary:
    """Copy every problem of the study in ``out_dir`` that has stored trials into ``storage``.

    Raises
    ------
    SpecError
        If ``out_dir`` is no study output folder, ``storage`` is no database URL, is the
        study's own database, or already holds a study of the same name.
    """
    spec = read_study(out_dir)
    check_storage_url(storage)
    source = source or source_url(out_dir)
    if _same_database(source, storage):
        raise SpecError("--storage", redact(storage), "another database than the study's own (its trials are "
                                                      "kept there in parplan's journal table)")
    store = StudyStore(source)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    exported, missing = [], []
    try:
        journals = {}
        for problem in expand(spec, check_profile=False):
            journal = JournalStorage(SQLJournal(store.engine, problem.key))
            if journal.get_all_studies():
                journals[problem.key] = journal
            else:
                missing.append(problem.key)
        taken = sorted(set(journals) & _study_names(storage))
        if taken:  # checked before anything is written: an export is whole or not at all
            raise SpecError("--storage", redact(storage), f"a database without a study named {taken[0]!r} "
                                                          "(export into a new file, or delete that study)")
        for key, journal in journals.items():
            try:
                optuna.copy_study(from_study_name=key, from_storage=journal, to_storage=storage, to_study_name=key)
            except DuplicatedStudyError:  # another process wrote it since the check
                raise SpecError("--storage", redact(storage), f"a database without a study named {key!r}") from None
            exported.append(key)
    finally:
        store.close()
    return ExportSummary(storage=storage, exported=tuple(exported), without_trials=tuple(missing))


def _study_names(storage: str) -> set[str]:
    url = check_storage_url(storage)
    if url.get_backend_name() == "sqlite" and not Path(url.database or "").exists():
        return set()  # a new file: nothing to collide with, and no empty database left behind on an error
    return set(optuna.get_all_study_names(storage))


def _same_database(a: str, b: str) -> bool:
    ua, ub = check_storage_url(a), check_storage_url(b)
    if ua.get_backend_name() == ub.get_backend_name() == "sqlite":
        return Path(ua.database or "").resolve() == Path(ub.database or "").resolve()
    return ua.render_as_string(hide_password=False) == ub.render_as_string(hide_password=False)
