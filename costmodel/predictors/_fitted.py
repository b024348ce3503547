"""All fitted predictors of one profile for one GPU, with range checks, held-out scores and a disk cache.

Fitting uses scikit-learn; predicting does not: each fitted estimator is
compiled to numpy arrays (``_compiled.py``), and those arrays, not pickles, are
what the user's private cache holds (``costmodel.predictors._cache``, data
only). Nothing is read from a profile directory but its tables and metadata;
a miss refits from the tables (a fraction of a second per family on a user
profile's few hundred rows).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from numpy.typing import ArrayLike

from costmodel.predictors import _cache
from costmodel.predictors._compiled import CompiledPredictor, compile_predictor
from costmodel.predictors._physics import check_op
from costmodel.predictors._range import RANGE_MARGIN
from costmodel.predictors._sampling import grid_outliers, light_sample
from costmodel.predictors._scoring import FamilyError, score_family
from costmodel.predictors._settings import REGRESSOR_SETTINGS
from costmodel.profiles.profile import COLLECTIVE_OPS, Profile
from costmodel.specs.errors import SpecError
from costmodel.specs.gpu import GPUSpec

if TYPE_CHECKING:
    from costmodel.predictors._base import OperatorPredictor

__all__ = ["CODE_VERSION", "FITTED_DIR", "RANGE_MARGIN", "FittedProfile", "device_gpu", "fit_profile",
           "fitted_profile", "forget_fitted", "store_fitted"]

# Bump when the stored arrays' layout changes. Edits to this package's code (features, regressors,
# exporters, sampling, scoring) change the cache key by themselves: it hashes their source.
CODE_VERSION: Final = "4"
# Where ``parplan profile fit`` writes its held-out report (data only), inside the profile's directory.
FITTED_DIR: Final = "fitted"
_GEMM_DTYPES: Final = {"bf16": ("gemm_bf16", 2.0), "fp16": ("gemm_fp16", 2.0), "fp8": ("gemm_fp8", 1.0)}
_ATTENTION_COLUMNS: Final = ("batch", "seq_len", "num_heads", "num_kv_heads", "head_dim")
_ATTENTION_TABLES: Final = ("attention_fwd", "attention_bwd")
_COLLECTIVE_COLUMNS: Final = ("num_gpus", "message_bytes")
_SEED: Final = 0
# Cache keys of fitted profiles start with this (the data-only store holds other kinds of entries too).
_KEY_PREFIX: Final = "fitted"
_MEMO: dict[str, FittedProfile] = {}
# The modules whose source enters the cache key: every module of this package.
_SOURCE_DIR: Path = Path(__file__).parent


@dataclass(frozen=True)
class _Family:
    """Where a predictor family's rows live in the profile, and how to build its estimator."""

    table: str
    columns: tuple[str, ...]
    where: tuple[tuple[str, Any], ...]  # (column, value) pairs selecting its rows, e.g. (("op", "all_reduce"),)
    kind: str  # gemm, attention, memory or collective (``_features.FAMILIES``)
    params: dict[str, Any]  # the estimator's constructor arguments, every one of them (the cache key holds them)

    def estimator(self) -> OperatorPredictor:
        """A fresh, unfitted estimator of this family (imports scikit-learn)."""
        from costmodel.predictors._attention import AttentionPredictor
        from costmodel.predictors._collective import CollectivePredictor
        from costmodel.predictors._gemm import GemmPredictor
        from costmodel.predictors._memory import MemoryPredictor

        classes = {"gemm": GemmPredictor, "attention": AttentionPredictor, "memory": MemoryPredictor,
                   "collective": CollectivePredictor}
        return classes[self.kind](**self.params)

    def rows(self, profile: Profile) -> np.ndarray:
        table = profile.tables[self.table]
        keep = np.ones(table["latency_s"].size, dtype=bool)
        for column, value in self.where:
            keep &= table[column] == value
        return np.flatnonzero(keep)


class FittedProfile:
    """All fitted predictors of one profile for one GPU.

    Build it with :func:`fitted_profile` (cached) or :func:`fit_profile`.
    ``gpu`` is the device whose figures the predictors' features use: the
    run's GPU, with the profile's own measured physics in place of its
    catalog figures where the profile carries them (see :func:`device_gpu`).
    Every ``predict_*`` method takes array-likes that broadcast together and
    returns ``(seconds, in_range)``, two arrays of the broadcast shape.
    ``in_range`` is False where a query lies outside the sampled range of the
    family's table (beyond ``[min / 1.25, max * 1.25]`` in a shape column, a
    token count ``batch x seq`` outside the attention table's, or a group size
    the collective table lacks); ``seconds`` is NaN there, so that the caller
    must choose (and label) a fall-back instead of trusting an extrapolation.

    A family whose fit misses its held-out rows by more than the bare roofline
    does (``scores``) is not used: it is left out of ``families`` and its
    ``predict_*`` calls raise KeyError, so that the timer takes its labelled
    fall-back; ``notes`` says so. A profile whose metadata sets
    ``use_worse_fits: true`` uses every fit.
    """

    def __init__(self, profile: Profile, gpu: GPUSpec, predictors: dict[str, CompiledPredictor],
                 train_rows: dict[str, np.ndarray], fit_seconds: dict[str, float],
                 dropped_rows: dict[str, np.ndarray] | None = None,
                 scores: dict[str, FamilyError] | None = None,
                 estimators: dict[str, OperatorPredictor] | None = None) -> None:
        self.profile = profile
        self.gpu = gpu = device_gpu(profile, gpu)
        self._layout = _family_layout(profile, gpu)
        self._predictors = dict(predictors)
        self._estimators = dict(estimators or {})
        self._train_rows = dict(train_rows)
        self._dropped_rows = dict(dropped_rows or {})
        self.fit_seconds = dict(fit_seconds)
        self.scores = dict(scores or {})
        self.unused = () if profile.use_worse_fits else tuple(
            family for family in sorted(self._predictors)
            if family in self.scores and self.scores[family].worse_than_roofline)
        self._ranges = {family: self._range_of(family) for family in self._predictors}
        self._group_sizes = {family: np.unique(self.shapes(family)[0][:, 0])
                             for family in self._predictors if self._layout[family].table == "nccl"}

    @property
    def families(self) -> tuple[str, ...]:
        """Families whose fitted predictor is used, e.g. ``gemm_bf16``, ``nccl_all_reduce``, ``memory_norm_fwd``."""
        return tuple(family for family in sorted(self._predictors) if family not in self.unused)

    @property
    def fitted_families(self) -> tuple[str, ...]:
        """Every family with a fitted predictor, those in ``unused`` included."""
        return tuple(sorted(self._predictors))

    @property
    def notes(self) -> tuple[str, ...]:
        """One label per fit not used, for a prediction's warnings."""
        return tuple(
            f"profile {self.profile.name!r}: the {family} fit misses its held-out rows by "
            f"{100 * (self.scores[family].mape or 0.0):.1f}% (mean), more than the bare roofline's "
            f"{100 * (self.scores[family].roofline_mape or 0.0):.1f}%: not used, its operators take the analytic "
            f"fall-back (use_worse_fits: true in metadata.yaml uses it)" for family in self.unused)

    def predictor(self, family: str) -> CompiledPredictor:
        """The fitted predictor of ``family`` (used or not), in the numpy form every prediction goes through."""
        return self._predictors[self._known(family)]

    def estimator(self, family: str) -> OperatorPredictor:
        """The fitted scikit-learn estimator of ``family``, for re-fitting studies (``clone``, ``set_params``).

        Raises
        ------
        KeyError
            If this profile was loaded from the cache, which keeps only the compiled
            form; :func:`fit_profile` fits afresh.
        """
        family = self._known(family)
        if family not in self._estimators:
            raise KeyError(f"profile {self.profile.name!r}: the {family} estimator was not fitted in this process "
                           f"(the cache keeps the compiled predictor only); fit_profile() refits it")
        return self._estimators[family]

    def table(self, family: str) -> str:
        """Name of the profile table ``family`` was fitted on (``nccl_*`` -> ``nccl``)."""
        return self._layout[self._known(family)].table

    def family_rows(self, family: str) -> np.ndarray:
        """Indices of ``family``'s rows in its profile table."""
        return self._layout[self._known(family)].rows(self.profile)

    def split(self, family: str) -> tuple[np.ndarray, np.ndarray]:
        """Training rows and held-out rows of ``family`` (indices into its profile table).

        Sampled rows dropped as outliers before fitting belong to neither.
        """
        train = self._train_rows[self._known(family)]
        return train, _held_out(self.family_rows(family), train, self._dropped_rows.get(family))

    def shapes(self, family: str, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(X, latency_s)`` of ``family``'s table rows (all of the family's rows by default)."""
        spec = self._layout[self._known(family)]
        table = self.profile.tables[spec.table]
        rows = self.family_rows(family) if rows is None else rows
        X = np.column_stack([table[name][rows] for name in spec.columns]).astype(np.float64)
        return X, table["latency_s"][rows]

    def sampled_range(self, family: str) -> dict[str, tuple[float, float]]:
        """Per shape column, ``(min, max)`` over the family's table."""
        return dict(self._ranges[self._known(family)])

    def predict(self, family: str, X: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """``(seconds, in_range)`` for rows of shape columns ``X`` (the family's column order)."""
        self._require(family)
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        inside = self.in_range(family, X)
        seconds = np.full(X.shape[0], np.nan)
        if inside.any():
            seconds[inside] = self._predictors[family].predict(X[inside])
        return seconds, inside

    def in_range(self, family: str, X: ArrayLike) -> np.ndarray:
        """Whether each row of ``X`` lies within the sampled range of ``family``'s table."""
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        spec = self._layout[self._known(family)]
        ranges = self._ranges[family]
        inside = np.all(np.isfinite(X), axis=1)
        for index, name in enumerate(spec.columns):
            low, high = ranges[name]
            inside &= (X[:, index] >= low / RANGE_MARGIN) & (X[:, index] <= high * RANGE_MARGIN)
        if spec.table in _ATTENTION_TABLES:
            low, high = ranges["tokens"]
            tokens = X[:, 0] * X[:, 1]
            inside &= (tokens >= low / RANGE_MARGIN) & (tokens <= high * RANGE_MARGIN)
        if family in self._group_sizes:
            inside &= np.isin(X[:, 0], self._group_sizes[family])
        return inside

    def predict_gemm(self, m: ArrayLike, n: ArrayLike, k: ArrayLike,
                     dtype: str) -> tuple[np.ndarray, np.ndarray]:
        """GEMM ``Y[m, n] = X[m, k] @ W[n, k]^T`` in ``dtype`` (bf16, fp16, fp8).

        Raises
        ------
        KeyError
            If the profile has no GEMM table for ``dtype``.
        """
        family = _GEMM_DTYPES.get(dtype, (f"gemm_{dtype}", 0.0))[0]
        return self._broadcast_predict(family, m, n, k)

    def predict_attention_fwd(self, batch: ArrayLike, seq: ArrayLike, heads: ArrayLike, kv_heads: ArrayLike,
                              head_dim: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """Causal self-attention forward (bf16, no cached prefix)."""
        return self._broadcast_predict("attention_fwd", batch, seq, heads, kv_heads, head_dim)

    def predict_attention_bwd(self, batch: ArrayLike, seq: ArrayLike, heads: ArrayLike, kv_heads: ArrayLike,
                              head_dim: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """Causal self-attention backward kernel (profiles from ``parplan profile`` only).

        Raises
        ------
        KeyError
            If the profile has no attention_bwd table.
        """
        return self._broadcast_predict("attention_bwd", batch, seq, heads, kv_heads, head_dim)

    def predict_memory(self, kind: str, phase: str, elements: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """A memory-bound kernel of ``kind`` (norm, activation, ...) in ``phase`` (fwd, bwd, step).

        Raises
        ------
        KeyError
            If the profile's memory table has no rows of that kind and phase.
        """
        return self._broadcast_predict(f"memory_{kind}_{phase}", elements)

    def predict_collective(self, op: str, num_gpus: ArrayLike,
                           message_bytes: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """Intra-node NCCL collective; ``message_bytes`` in nccl-tests convention (see CollectivePredictor).

        Raises
        ------
        ValueError
            If ``op`` is not a known collective.
        KeyError
            If the profile has no table for ``op``.
        """
        family = f"nccl_{check_op(op)}"
        return self._broadcast_predict(family, num_gpus, message_bytes)

    def _broadcast_predict(self, family: str, *columns: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        self._require(family)
        arrays = np.broadcast_arrays(*(np.asarray(column, dtype=np.float64) for column in columns))
        shape = arrays[0].shape
        seconds, inside = self.predict(family, np.column_stack([a.ravel() for a in arrays]))
        return seconds.reshape(shape), inside.reshape(shape)

    def _known(self, family: str) -> str:
        """``family`` if it has a fitted predictor (used or not), else KeyError."""
        if family not in self._predictors:
            raise KeyError(f"profile {self.profile.name!r} has no fitted {family} predictor "
                           f"(fitted: {', '.join(self.fitted_families)})")
        return family

    def _require(self, family: str) -> str:
        """``family`` if its predictor is used, else KeyError."""
        if family in self.unused:
            raise KeyError(f"profile {self.profile.name!r}: the {family} fit is worse than the roofline on its "
                           f"held-out rows and not used (used: {', '.join(self.families)})")
        if family not in self.families:
            raise KeyError(f"profile {self.profile.name!r} has no fitted {family} predictor "
                           f"(used: {', '.join(self.families)})")
        return family

    def _range_of(self, family: str) -> dict[str, tuple[float, float]]:
        X, _ = self.shapes(family)
        spec = self._layout[family]
        out = {name: (float(X[:, i].min()), float(X[:, i].max())) for i, name in enumerate(spec.columns)}
        if spec.table in _ATTENTION_TABLES:
            tokens = X[:, 0] * X[:, 1]
            out["tokens"] = (float(tokens.min()), float(tokens.max()))
        return out


def device_gpu(profile: Profile, gpu: GPUSpec | None) -> GPUSpec:
    """The device figures ``profile``'s predictors use: ``gpu`` with the profile's measured physics on top.

    A profile from ``parplan profile run`` carries the peak FLOP/s, memory
    bandwidth, compute units and link figures of the device it was measured
    on (``Profile.physics``); its predictors are fitted against those, so that
    they mean the same whichever run's GPU they are used for. Built-in
    profiles carry none and use ``gpu``'s catalog figures.

    Parameters
    ----------
    gpu : GPUSpec or None
        The run's GPU; None to describe the device by the profile's physics alone.

    Raises
    ------
    SpecError
        If ``gpu`` is None and the profile lacks a figure its tables need.
    """
    physics = profile.physics
    if gpu is None:
        missing = [key for key in _needed_physics(profile) if key not in physics]
        if missing:
            raise SpecError("gpu", None, f"a catalog GPU name: profile {profile.name!r} carries no measured "
                                         f"{', '.join(missing)}")
        # Figures no fitted family uses (capacity, node shape, network) get neutral placeholders.
        gpu = GPUSpec(name=profile.device, display_name=profile.name, vendor="measured", peak_flops=(),
                      hbm_capacity_bytes=0.0, hbm_bandwidth_bytes_per_s=1.0, num_sms=1,
                      intra_node_bandwidth_bytes_per_s=1.0, intra_node_latency_s=0.0, gpus_per_node=1,
                      nvlink_domain_size=1, inter_node_bandwidth_bytes_per_s=1.0, inter_node_latency_s=0.0)
    if not physics:
        return gpu
    changes: dict[str, Any] = {key: value for key, value in physics.items() if key != "peak_flops"}
    if "peak_flops" in physics:
        changes["peak_flops"] = tuple(physics["peak_flops"].items())
    return replace(gpu, name=profile.device, **changes)


def _needed_physics(profile: Profile) -> list[str]:
    needed: list[str] = []
    if any(family.startswith("gemm") or family in _ATTENTION_TABLES for family in profile.tables):
        needed += ["peak_flops", "num_sms"]
    if any(family != "nccl" for family in profile.tables):
        needed.append("hbm_bandwidth_bytes_per_s")
    if "nccl" in profile.tables:
        needed += ["intra_node_bandwidth_bytes_per_s", "intra_node_latency_s"]
    return needed


def fit_profile(profile: Profile, gpu: GPUSpec | None) -> FittedProfile:
    """Fit every family's predictor on its light sample and score it on the rows held out (no cache)."""
    gpu = device_gpu(profile, gpu)
    predictors, estimators, train_rows, dropped_rows, fit_seconds, scores = {}, {}, {}, {}, {}, {}
    for family, spec in _family_layout(profile, gpu).items():
        table = profile.tables[spec.table]
        rows = spec.rows(profile)
        if rows.size == 0:
            continue
        X = np.column_stack([table[name][rows] for name in spec.columns]).astype(np.float64)
        recipe = profile.fit_sampling
        train = light_sample(X, recipe)
        latency = table["latency_s"][rows]
        outlier = grid_outliers(X[train], latency[train], float(recipe["outlier_factor"]))
        dropped_rows[family] = rows[train[outlier]]
        train = train[~outlier]
        start = time.perf_counter()
        estimators[family] = spec.estimator().fit(X[train], latency[train])
        fit_seconds[family] = time.perf_counter() - start
        predictors[family] = compile_predictor(estimators[family])
        train_rows[family] = rows[train]
        test = np.searchsorted(rows, _held_out(rows, train_rows[family], dropped_rows[family]))
        scores[family] = score_family(family, predictors[family], X[test], latency[test], int(train.size))
    return FittedProfile(profile, gpu, predictors, train_rows, fit_seconds, dropped_rows, scores, estimators)


def _held_out(rows: np.ndarray, train: np.ndarray, dropped: np.ndarray | None) -> np.ndarray:
    """The family's ``rows`` neither trained on nor dropped as outliers (sorted table indices)."""
    sampled = train if dropped is None else np.union1d(train, dropped)
    return np.setdiff1d(rows, sampled)


def fitted_profile(profile: Profile, gpu: GPUSpec | None) -> FittedProfile:
    """The fitted predictors of ``profile`` on ``gpu``: from memory, the user's private cache, or fitted.

    A fresh fit is stored in the private cache, as compiled arrays (data
    only); a cache hit neither unpickles anything nor imports scikit-learn.
    Nothing is read from the profile's own directory but its tables and
    metadata. The cache key is the profile's content hash, every estimator's
    constructor arguments (the device figures its features use and the
    regressor settings included), the source of this package's modules,
    ``CODE_VERSION`` and the installed scikit-learn version (a refit with
    another version could differ).
    """
    gpu = device_gpu(profile, gpu)
    key = cache_key(profile, gpu)
    if key in _MEMO:
        return _MEMO[key]
    stored = _cache.load_arrays(key)
    fitted = None if stored is None else _from_arrays(profile, gpu, *stored)
    if fitted is None:
        fitted = fit_profile(profile, gpu)
        _cache.store_arrays(key, *_to_arrays(fitted))
    _MEMO[key] = fitted
    return fitted


def store_fitted(fitted: FittedProfile) -> Path | None:
    """Keep ``fitted`` for later runs: in memory and in the user's private cache.

    Returns
    -------
    Path or None
        The cache file written; None when the cache directory is not private
        (then later processes refit).
    """
    key = cache_key(fitted.profile, fitted.gpu)
    _MEMO[key] = fitted
    return _cache.store_arrays(key, *_to_arrays(fitted))


def _to_arrays(fitted: FittedProfile) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """``fitted`` as arrays named ``<family>.<field>`` and JSON metadata, for the data-only cache."""
    arrays: dict[str, np.ndarray] = {}
    families: dict[str, Any] = {}
    for family, predictor in fitted._predictors.items():
        own, meta = predictor.to_arrays()
        arrays.update({f"{family}.{name}": value for name, value in own.items()})
        arrays[f"{family}.train_rows"] = fitted._train_rows[family]
        if family in fitted._dropped_rows:
            arrays[f"{family}.dropped_rows"] = fitted._dropped_rows[family]
        score = fitted.scores.get(family)
        families[family] = {"predictor": meta, "fit_seconds": fitted.fit_seconds[family],
                            "score": None if score is None else score.to_dict()}
    return arrays, {"code": CODE_VERSION, "families": families}


def _from_arrays(profile: Profile, gpu: GPUSpec, arrays: dict[str, np.ndarray],
                 meta: dict[str, Any]) -> FittedProfile | None:
    """The profile :func:`_to_arrays` stored; None when the data is not what this version writes (refit)."""
    try:
        if meta["code"] != CODE_VERSION:
            return None
        predictors, train_rows, dropped_rows, fit_seconds, scores = {}, {}, {}, {}, {}
        for family, entry in meta["families"].items():
            own = {name.removeprefix(f"{family}."): value for name, value in arrays.items()
                   if name.startswith(f"{family}.")}
            predictors[family] = CompiledPredictor.from_arrays(own, entry["predictor"])
            train_rows[family] = own["train_rows"]
            if "dropped_rows" in own:
                dropped_rows[family] = own["dropped_rows"]
            fit_seconds[family] = float(entry["fit_seconds"])
            if entry["score"] is not None:
                scores[family] = FamilyError(**entry["score"])
        return FittedProfile(profile, gpu, predictors, train_rows, fit_seconds, dropped_rows, scores)
    except (KeyError, ValueError, TypeError, IndexError):
        return None


def forget_fitted() -> None:
    """Drop the in-process memo (the disk cache stays)."""
    _MEMO.clear()


def cache_key(profile: Profile, gpu: GPUSpec | None) -> str:
    """File-name-safe cache key of ``profile`` fitted for ``gpu``.

    Only the figures the estimators use enter the key, so that a profile
    carrying all its own physics has one key whatever the run's GPU. The
    source of this package's modules enters it too, so that an edited feature,
    regressor or exporter misses the cache instead of serving an older fit.
    """
    layout = _family_layout(profile, device_gpu(profile, gpu))
    estimators = {family: {"kind": spec.kind, **spec.params} for family, spec in layout.items()}
    blob = json.dumps({"profile": profile.content_hash, "code": CODE_VERSION, "estimators": estimators,
                       "source": _source_digest(_SOURCE_DIR),
                       "sklearn": importlib.metadata.version("scikit-learn")}, sort_keys=True, default=str)
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", profile.device)[:40]
    return f"{_KEY_PREFIX}-{slug}-{hashlib.sha256(blob.encode()).hexdigest()[:32]}"


@functools.lru_cache(maxsize=4)
def _source_digest(directory: Path) -> str:
    """SHA-256 over the names and text of the ``.py`` modules in ``directory`` (read once per process).

    A module that cannot be read gives a digest of this process alone, so
    that nothing cached by another process is trusted.
    """
    digest = hashlib.sha256()
    try:
        for path in sorted(directory.glob("*.py")):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    except OSError:
        return os.urandom(16).hex()
    return digest.hexdigest()


def _family_layout(profile: Profile, gpu: GPUSpec) -> dict[str, _Family]:
    """Families this profile and GPU can fit, with unfitted estimators (every constructor argument given)."""
    bandwidth, sms = gpu.hbm_bandwidth_bytes_per_s, gpu.num_sms
    out: dict[str, _Family] = {}
    for dtype, (table, element_bytes) in _GEMM_DTYPES.items():
        if table in profile.tables and gpu.supports(dtype):
            out[table] = _Family(table, ("m", "n", "k"), (), "gemm", {
                "peak_flops": gpu.peak(dtype), "hbm_bandwidth_bytes_per_s": bandwidth, "num_sms": sms,
                "bytes_per_element": element_bytes, **REGRESSOR_SETTINGS["gemm"], "random_state": _SEED})
    for table in _ATTENTION_TABLES:
        if table in profile.tables and gpu.supports("bf16"):
            out[table] = _Family(table, _ATTENTION_COLUMNS, (("causal", True),), "attention", {
                "peak_flops": gpu.peak("bf16"), "hbm_bandwidth_bytes_per_s": bandwidth, "num_sms": sms,
                **REGRESSOR_SETTINGS["attention"], "random_state": _SEED})
    if "memory" in profile.tables:
        memory = profile.tables["memory"]
        for kind, phase in sorted(set(zip(memory["kind"].tolist(), memory["phase"].tolist()))):
            rows = (memory["kind"] == kind) & (memory["phase"] == phase)
            # The measured kernel's own bytes per element (a bf16 norm 4, an fp32 AdamW step 28).
            per_element = float(np.median(memory["bytes"][rows] / np.maximum(memory["elements"][rows], 1)))
            out[f"memory_{kind}_{phase}"] = _Family(
                "memory", ("elements",), (("kind", kind), ("phase", phase)), "memory",
                {"bytes_per_element": max(per_element, 1e-3), "hbm_bandwidth_bytes_per_s": bandwidth,
                 **REGRESSOR_SETTINGS["memory"], "random_state": _SEED})
    if "nccl" in profile.tables:
        present = set(profile.tables["nccl"]["op"].tolist())
        for op in COLLECTIVE_OPS:
            if op in present:
                out[f"nccl_{op}"] = _Family("nccl", _COLLECTIVE_COLUMNS, (("op", op),), "collective", {
                    "op": op, "link_bandwidth_bytes_per_s": gpu.intra_node_bandwidth_bytes_per_s,
                    "link_latency_s": gpu.intra_node_latency_s, **REGRESSOR_SETTINGS["collective"],
                    "random_state": _SEED})
    return out

