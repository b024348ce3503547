"""``parplan profile fit``: fit a profile directory's predictors, score them on held-out rows, report beside it."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from threadpoolctl import threadpool_limits

from costmodel.profiles.profile import load_profile
from costmodel.specs.gpu import GPUSpec

if TYPE_CHECKING:
    from costmodel.predictors import FamilyError, FittedProfile

__all__ = ["REPORT_FILE", "FitReport", "fit_directory"]

REPORT_FILE = "report.yaml"


@dataclass(frozen=True)
class FitReport:
    """The fitted profile, its per-family errors, the report written and the private cache file.

    ``unused`` lists the families whose fit is worse than the roofline on its
    held-out rows: predictions do not use them (unless the profile's metadata
    sets ``use_worse_fits: true``). ``stored`` is ``DIR/fitted/report.yaml``
    (data only); ``cached`` the fit's data-only ``.npz`` (compiled arrays) in
    the user's private cache, or None when that directory is not private.
    """

    fitted: FittedProfile
    errors: tuple[FamilyError, ...]
    stored: Path
    cached: Path | None

    @property
    def unused(self) -> tuple[str, ...]:
        """Families fitted but not used by predictions (worse than the roofline)."""
        return self.fitted.unused


def fit_directory(path: str | Path, gpu: GPUSpec | None = None) -> FitReport:
    """Fit every family of the profile in ``path``; write ``fitted/report.yaml``; cache the fit privately.

    Nothing but the report is written into the profile directory: a profile
    folder may be shared, so the fit (compiled arrays, data only) goes only to
    the user's private cache (``costmodel.predictors._cache``), which is never
    read from a folder another user could write.

    Parameters
    ----------
    path : str or Path
        A profile directory.
    gpu : GPUSpec, optional
        Device figures for a profile that carries none (an imported trace);
        a measured profile's own physics take precedence.

    Raises
    ------
    SpecError
        If the directory is not a valid profile, or neither it nor ``gpu``
        gives the device figures its tables need.
    """
    profile = load_profile(path)
    from costmodel.predictors import FITTED_DIR, fit_profile, store_fitted  # scikit-learn: only for a valid profile

    # One thread: gradient boosting on a few hundred rows gains nothing from a pool, and on a
    # busy machine an OpenMP pool makes each call wait for cores (seconds instead of milliseconds).
    with threadpool_limits(limits=1):
        fitted = fit_profile(profile, gpu)
    errors = tuple(fitted.scores[family] for family in fitted.fitted_families)
    cached = store_fitted(fitted)
    report = {"profile": profile.name, "content_hash": profile.content_hash, "device_figures": fitted.gpu.to_dict(),
              "families": {e.family: {**{k: v for k, v in e.to_dict().items() if k != "family"},
                                      "used": e.family in fitted.families} for e in errors}}
    stored = Path(path) / FITTED_DIR / REPORT_FILE
    _write_atomically(stored, yaml.safe_dump(report, sort_keys=False))
    return FitReport(fitted, errors, stored, cached)


def _write_atomically(target: Path, text: str) -> None:
    target.parent.mkdir(exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    temporary = Path(name)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        temporary.chmod(0o644)  # mkstemp makes it private; a report is ordinary data
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
