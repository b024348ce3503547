"""``parplan profile fit``: fit a profile directory's predictors, score them on held-out rows, store them beside it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from threadpoolctl import threadpool_limits

from costmodel.predictors import FITTED_DIR, FittedProfile, fit_profile, store_fitted
from costmodel.profiles.profile import load_profile
from costmodel.specs.gpu import GPUSpec

__all__ = ["FamilyError", "FitReport", "fit_directory"]


@dataclass(frozen=True)
class FamilyError:
    """Held-out accuracy of one family's predictor.

    ``mape`` is the mean of ``|predicted / measured - 1|`` over the held-out
    rows, ``p90`` its 90th percentile; ``roofline_mape`` the same for the bare
    roofline (the baseline the fit must beat). None when nothing was held out.
    """

    family: str
    n_train: int
    n_test: int
    mape: float | None
    p90: float | None
    roofline_mape: float | None


@dataclass(frozen=True)
class FitReport:
    """The fitted profile, its per-family errors and where it was stored."""

    fitted: FittedProfile
    errors: tuple[FamilyError, ...]
    stored: Path


def fit_directory(path: str | Path, gpu: GPUSpec | None = None) -> FitReport:
    """Fit every family of the profile in ``path``; write ``fitted/`` (predictors and ``report.yaml``).

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
    # One thread: gradient boosting on a few hundred rows gains nothing from a pool, and on a
    # busy machine an OpenMP pool makes each call wait for cores (seconds instead of milliseconds).
    with threadpool_limits(limits=1):
        fitted = fit_profile(profile, gpu)
        errors = tuple(_score(fitted, family) for family in fitted.families)
    stored = store_fitted(fitted)
    report = {"profile": profile.name, "content_hash": profile.content_hash, "device_figures": fitted.gpu.to_dict(),
              "families": {e.family: {"n_train": e.n_train, "n_test": e.n_test, "mape": e.mape, "p90": e.p90,
                                      "roofline_mape": e.roofline_mape} for e in errors}}
    (Path(path) / FITTED_DIR / "report.yaml").write_text(yaml.safe_dump(report, sort_keys=False), encoding="utf-8")
    return FitReport(fitted, errors, stored)


def _score(fitted: FittedProfile, family: str) -> FamilyError:
    train, test = fitted.split(family)
    if test.size == 0:
        return FamilyError(family, int(train.size), 0, None, None, None)
    X, latency = fitted.shapes(family, test)
    predictor = fitted.predictor(family)
    error = np.abs(predictor.predict(X) / latency - 1.0)
    roofline = np.abs(predictor.roofline_s(X) / latency - 1.0)
    return FamilyError(family, int(train.size), int(test.size), float(error.mean()), float(np.quantile(error, 0.9)),
                       float(roofline.mean()))
