"""Study files: a YAML recipe parsed strictly into a frozen :class:`StudySpec`.

A study is data only (read by :mod:`costmodel.specs.userfile`: a bounded safe
YAML loader without aliases or duplicate keys): the models, GPU kinds, GPU counts,
batches and sequence lengths to cross, and how to search each problem. Every
mapping rejects unknown keys with a one-line :class:`SpecError` that names the
field, the value and what is allowed. Relative paths (``hf_config``,
``search.profile``, ``outputs.dir``) resolve against the study file's folder.

Example::

    name: dense-scaling
    models: [llama3.1-8b, llama3.1-70b, {hf_config: configs/my-model.json}]
    gpus: [h100-sxm5-80gb]
    gpu_counts: {min: 64, max: 1024, factor: 2}
    batch: {tokens_per_step: 4194304}
    seq_length: 8192
    search: {sampler: tpe, trials: 200, seed: 0}
    outputs: {dir: ../../study-out}

:meth:`StudySpec.to_dict` gives the *resolved* study (every model inline, every
list expanded, every default filled); :func:`study_from_mapping` reads it back
into an equal spec, which is how a run's ``study.yaml`` stays reproducible.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from costmodel.specs.catalog import get_gpu, model_catalog
from costmodel.specs.errors import (
    MAX_INT,
    SpecError,
    reject_unknown_keys,
    require_bool,
    require_choice,
    require_int,
    require_number,
)
from costmodel.specs.model import ModelSpec
from costmodel.specs.model_source import parse_model
from costmodel.specs.runspec import MAX_NUM_GPUS
from costmodel.specs.userfile import read_user_file
from search.choices import OBJECTIVES, SAMPLERS  # light: a study file is checked before the search loads
from search.space import BOUND_NAMES, KNOBS, MAX_MEMORY_MARGIN, SearchBounds, parse_knob_value

# Llama 3 trained 405B with an initial batch of 4M tokens (Dubey et al. 2024, arXiv:2407.21783, section 3.4.1).
DEFAULT_TOKENS_PER_STEP = 4 * 1024**2
STUDY_KEYS = frozenset({"name", "description", "models", "gpus", "gpu_counts", "gpus_per_node", "batch",
                        "seq_length", "search", "outputs"})
SEARCH_KEYS = frozenset({"sampler", "objective", "trials", "seed", "fix", "allow", "profile", "memory_margin",
                         *BOUND_NAMES})
OUTPUT_KEYS = frozenset({"dir", "top_k"})
BATCH_KEYS = frozenset({"global_batch_size", "tokens_per_step"})
RANGE_KEYS = frozenset({"min", "max", "factor", "step"})
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True, kw_only=True)
class SearchSettings(SearchBounds):
    """How every problem of a study is searched (the ``search:`` section).

    Parameters
    ----------
    sampler : {"auto", "tpe", "nsga2", "exhaustive"}
        Default ``tpe`` (``nsga2`` for the ``pareto`` objective); ``auto`` sweeps a problem whose space is small
        enough and runs TPE / NSGA-II on the others (``search.run.resolve_sampler``).
    objective : {"time", "pareto"}
        Fastest step, or the step-time vs peak-memory front.
    trials : int, optional
        Trials per problem; ``None`` is the sampler's default.
    seed : int
        Sampler seed, the same for every problem (so any worker reproduces any problem).
    fixed, allowed : tuple of pairs
        Knobs held at one value / restricted to values (as ``parplan search --fix/--allow``).
    profile : str, optional
        Absolute path of a user profile directory instead of each GPU's built-in one.
    memory_margin : float, optional
        Fraction of usable memory a pick must leave free (``SearchProblem.memory_margin``);
        ``None`` takes ``parplan search``'s default (``constraints.oom.default_memory_margin()``: a pick at
        the margin OOMs at most one time in five) and keeps the problems' stored keys.
    max_tp, max_pp, max_cp, max_ep, max_vpp, max_micro_batch_size : int, optional
        Bounds of the space (:class:`search.space.SearchBounds`).
    """

    sampler: str = "tpe"
    objective: str = "time"
    trials: int | None = None
    seed: int = 0
    fixed: tuple[tuple[str, Any], ...] = ()
    allowed: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    profile: str | None = None
    memory_margin: float | None = None

    def __post_init__(self) -> None:
        require_choice("search.sampler", self.sampler, SAMPLERS)
        if self.memory_margin is not None:
            require_number("search.memory_margin", self.memory_margin, strict=False, maximum=MAX_MEMORY_MARGIN)
        require_choice("search.objective", self.objective, OBJECTIVES)
        if self.trials is not None:
            require_int("search.trials", self.trials)
        require_int("search.seed", self.seed, minimum=0)
        self.check_bounds("search.")
        if self.sampler not in ("exhaustive", "auto") and (self.sampler == "nsga2") != (self.objective == "pareto"):
            raise SpecError("search.sampler", self.sampler,
                            "nsga2, exhaustive or auto for objective pareto, tpe, exhaustive or auto for objective "
                            "time")

    def to_dict(self) -> dict[str, Any]:
        return {"sampler": self.sampler, "objective": self.objective, "trials": self.trials, "seed": self.seed,
                "fix": dict(self.fixed), "allow": {k: list(v) for k, v in self.allowed},
                "profile": self.profile, **self.bounds,
                # only when set, so that the stored keys of studies without it do not change
                **({} if self.memory_margin is None else {"memory_margin": self.memory_margin})}


@dataclass(frozen=True, kw_only=True)
class BatchSize:
    """One global batch: a fixed number of sequences, or a number of tokens per step."""

    global_batch_size: int | None = None
    tokens_per_step: int | None = None

    def __post_init__(self) -> None:
        if (self.global_batch_size is None) == (self.tokens_per_step is None):
            raise SpecError("batch", self.to_dict(), "exactly one of global_batch_size or tokens_per_step")
        for name in ("global_batch_size", "tokens_per_step"):
            if getattr(self, name) is not None:
                require_int(f"batch.{name}", getattr(self, name))

    def sequences(self, seq_length: int) -> int:
        """Sequences per step at ``seq_length`` (tokens per step rounded to the nearest, at least one)."""
        if self.global_batch_size is not None:
            return self.global_batch_size
        assert self.tokens_per_step is not None
        return max(1, round(self.tokens_per_step / seq_length))

    def to_dict(self) -> dict[str, int]:
        return {k: v for k, v in (("global_batch_size", self.global_batch_size),
                                  ("tokens_per_step", self.tokens_per_step)) if v is not None}


@dataclass(frozen=True, kw_only=True)
class StudySpec:
    """A whole study: the sets to cross and the search settings.

    Parameters
    ----------
    name : str
        Letters, digits, ``.``, ``_`` and ``-``; names the stored problems.
    models : tuple of ModelSpec
        In the order given (catalog patterns expand by parameter count).
    gpus : tuple of str
        Catalog GPU names.
    gpu_counts : tuple of int
        Ascending, distinct.
    batches : tuple of BatchSize
    seq_lengths : tuple of int or None
        ``None`` means each model's own sequence length.
    search : SearchSettings
    out_dir : Path, optional
        Output folder (absolute) when the study names one.
    top_k : int
        Strategies kept per problem besides the best.
    source : Path, optional
        The study file it was read from.
    """

    name: str
    description: str = ""
    models: tuple[ModelSpec, ...]
    gpus: tuple[str, ...]
    gpu_counts: tuple[int, ...]
    gpus_per_node: int | None = None
    batches: tuple[BatchSize, ...] = (BatchSize(tokens_per_step=DEFAULT_TOKENS_PER_STEP),)
    seq_lengths: tuple[int | None, ...] = (None,)
    search: SearchSettings = field(default_factory=SearchSettings)
    out_dir: Path | None = None
    top_k: int = 5
    source: Path | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise SpecError("name", self.name, "1-64 letters, digits, '.', '_' or '-' (starting with a letter "
                                               "or digit)")
        for attr in ("models", "gpus", "gpu_counts", "batches", "seq_lengths"):
            if not getattr(self, attr):
                raise SpecError(attr, getattr(self, attr), "a non-empty list")
        names = [m.name for m in self.models]
        for n in names:
            if names.count(n) > 1:
                raise SpecError("models", n, "distinct model names (each names its problems)")
        if len({tuple(b.to_dict()) for b in self.batches}) > 1:
            raise SpecError("batch", [b.to_dict() for b in self.batches],
                            "batches of one kind (all global_batch_size or all tokens_per_step)")
        for gpu in self.gpus:
            get_gpu(gpu)
        if self.gpus_per_node is not None:
            require_int("gpus_per_node", self.gpus_per_node, maximum=MAX_NUM_GPUS)
        require_int("outputs.top_k", self.top_k)

    def to_dict(self) -> dict[str, Any]:
        """The resolved study: loadable by :func:`study_from_mapping` into an equal spec."""
        return {
            "name": self.name,
            "description": self.description,
            "models": [_model_dict(m) for m in self.models],
            "gpus": list(self.gpus),
            "gpu_counts": list(self.gpu_counts),
            "gpus_per_node": self.gpus_per_node,
            "batch": _batch_dict(self.batches),
            "seq_length": list(self.seq_lengths),
            "search": self.search.to_dict(),
            "outputs": {"dir": None if self.out_dir is None else str(self.out_dir), "top_k": self.top_k},
        }


def _batch_dict(batches: tuple[BatchSize, ...]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for b in batches:
        for key, value in b.to_dict().items():
            out.setdefault(key, []).append(value)
    return out


def _model_dict(model: ModelSpec) -> dict[str, Any]:
    # Drop the bookkeeping fields that carry no architecture (they are compare=False on ModelSpec).
    skip = {"source", "published_params", "published_params_source"}
    return {k: v for k, v in model.to_dict().items() if k not in skip}


# -- parsing ----------------------------------------------------------------------------------
def load_study(path: str | Path) -> StudySpec:
    """Read and validate a study file (YAML or JSON).

    Raises
    ------
    SpecError
        On the first invalid field, with its name, the value and what is allowed.
    """
    p = Path(path).resolve()
    data = read_user_file(p, field="study")
    return study_from_mapping(data, base_dir=p.parent, source=p)


def study_from_mapping(data: Any, base_dir: Path | None = None, source: Path | None = None) -> StudySpec:
    """Build a :class:`StudySpec` from parsed YAML; relative paths resolve against ``base_dir``."""
    if not isinstance(data, dict):
        raise SpecError("study", type(data).__name__, "a mapping with name, models, gpus and gpu_counts")
    reject_unknown_keys("", data, STUDY_KEYS)
    for key in ("name", "models", "gpus", "gpu_counts"):
        if data.get(key) is None:
            raise SpecError(key, None, "given")
    base = base_dir or Path.cwd()
    outputs = _mapping("outputs", data.get("outputs"), OUTPUT_KEYS)
    out_dir = outputs.get("dir")
    if out_dir is not None and not isinstance(out_dir, str):
        raise SpecError("outputs.dir", out_dir, "a path")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise SpecError("description", description, "a string")
    return StudySpec(
        name=data["name"],
        description=description.strip(),
        models=_models(data["models"], base),
        gpus=tuple(_gpu_name(i, g) for i, g in enumerate(_as_list("gpus", data["gpus"]))),
        gpu_counts=_gpu_counts(data["gpu_counts"]),
        gpus_per_node=data.get("gpus_per_node"),
        batches=_batches(data.get("batch")),
        seq_lengths=_seq_lengths(data.get("seq_length")),
        search=_search(data.get("search"), base),
        out_dir=None if out_dir is None else _resolve(base, out_dir),
        top_k=outputs.get("top_k", 5),
        source=source,
    )


def _mapping(section: str, value: Any, keys: frozenset[str]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SpecError(section, value, "a mapping of " + ", ".join(sorted(keys)))
    reject_unknown_keys(section, value, keys)
    return value


def _as_list(section: str, value: Any) -> list[Any]:
    out = value if isinstance(value, list) else [value]
    if not out:
        raise SpecError(section, value, "a value or a non-empty list")
    return out


def _resolve(base: Path, path: str) -> Path:
    p = Path(path).expanduser()
    return (p if p.is_absolute() else base / p).resolve()


def _gpu_name(index: int, value: Any) -> str:
    if not isinstance(value, str):
        raise SpecError(f"gpus[{index}]", value, "a catalog GPU name (see `parplan catalog gpus`)")
    get_gpu(value)
    return value


def _models(value: Any, base: Path) -> tuple[ModelSpec, ...]:
    out: list[ModelSpec] = []
    for i, item in enumerate(_as_list("models", value)):
        section = f"models[{i}]"
        if isinstance(item, str) and any(c in item for c in "*?["):
            matched = [m for name, m in model_catalog().items() if fnmatch.fnmatchcase(name, item)]
            if not matched:
                raise SpecError(section, item, "a pattern matching at least one catalog model")
            out.extend(sorted(matched, key=lambda m: (m.num_params, m.name)))
        else:  # one model parser for run specs, studies and `parplan search --model`
            out.append(parse_model(item, base, section=section)[0])
    return tuple(out)


def _int_list(section: str, value: Any, maximum: int = MAX_INT) -> list[int]:
    return [require_int(f"{section}[{i}]" if isinstance(value, list) else section, v, maximum=maximum)
            for i, v in enumerate(_as_list(section, value))]


def _gpu_counts(value: Any) -> tuple[int, ...]:
    """A count, a list of counts, or ``{min, max, factor}`` / ``{min, max, step}`` (inclusive)."""
    if not isinstance(value, dict):
        counts = _int_list("gpu_counts", value, maximum=MAX_NUM_GPUS)
    else:
        reject_unknown_keys("gpu_counts", value, RANGE_KEYS)
        for key in ("min", "max"):
            if key not in value:
                raise SpecError(f"gpu_counts.{key}", None, "given in a range")
        low = require_int("gpu_counts.min", value["min"], maximum=MAX_NUM_GPUS)
        high = require_int("gpu_counts.max", value["max"], maximum=MAX_NUM_GPUS)
        if high < low:
            raise SpecError("gpu_counts.max", high, f"an integer >= gpu_counts.min={low}")
        if "factor" in value and "step" in value:
            raise SpecError("gpu_counts", value, "a range with factor or step, not both")
        counts = []
        if "step" in value:
            counts = list(range(low, high + 1, require_int("gpu_counts.step", value["step"])))
        else:
            factor = require_int("gpu_counts.factor", value.get("factor", 2), minimum=2)
            n = low
            while n <= high:
                counts.append(n)
                n *= factor
    return tuple(sorted(set(counts)))


def _batches(value: Any) -> tuple[BatchSize, ...]:
    if value is None:
        return (BatchSize(tokens_per_step=DEFAULT_TOKENS_PER_STEP),)
    if not isinstance(value, dict):
        raise SpecError("batch", value, "a mapping with global_batch_size or tokens_per_step (a value or a list)")
    reject_unknown_keys("batch", value, BATCH_KEYS)
    if len(value) != 1:
        raise SpecError("batch", value, "exactly one of global_batch_size or tokens_per_step")
    key, raw = next(iter(value.items()))
    return tuple(BatchSize(**{key: n}) for n in _int_list(f"batch.{key}", raw))


def _seq_lengths(value: Any) -> tuple[int | None, ...]:
    if value is None:
        return (None,)
    out: list[int | None] = []
    for i, v in enumerate(_as_list("seq_length", value)):
        out.append(None if v is None else require_int(f"seq_length[{i}]" if isinstance(value, list)
                                                      else "seq_length", v))
    return tuple(dict.fromkeys(out))


def _search(value: Any, base: Path) -> SearchSettings:
    data = _mapping("search", value, SEARCH_KEYS)
    objective = data.get("objective", "time")
    sampler = data.get("sampler", "nsga2" if objective == "pareto" else "tpe")
    profile = data.get("profile")
    if profile is not None:
        if not isinstance(profile, str):
            raise SpecError("search.profile", profile, "a path to a profile directory")
        profile = str(_resolve(base, profile))
    kwargs: dict[str, Any] = {name: data[name] for name in BOUND_NAMES if name in data}
    return SearchSettings(sampler=sampler, objective=objective, trials=data.get("trials"),
                          seed=data.get("seed", 0), fixed=_knob_values("search.fix", data.get("fix"), single=True),
                          allowed=_knob_values("search.allow", data.get("allow"), single=False),
                          profile=profile, memory_margin=data.get("memory_margin"), **kwargs)


def _knob_values(section: str, value: Any, single: bool) -> tuple[tuple[str, Any], ...]:
    """``fix: {tp: 8}`` or ``allow: {recompute: [none, selective]}``, typed like the CLI's values."""
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise SpecError(section, value, "a mapping of knob to value" + ("" if single else "s"))
    out: list[tuple[str, Any]] = []
    for knob, raw in value.items():
        if knob not in KNOBS:
            raise SpecError(f"{section}.{knob}", knob, "a knob (" + ", ".join(KNOBS) + ")")
        if single:
            out.append((knob, _knob_value(f"{section}.{knob}", knob, raw)))
        else:
            items = raw if isinstance(raw, list) else [raw]
            if not items:
                raise SpecError(f"{section}.{knob}", raw, "at least one value")
            out.append((knob, tuple(_knob_value(f"{section}.{knob}", knob, v) for v in items)))
    return tuple(sorted(out))


def _knob_value(section: str, knob: str, raw: Any) -> Any:
    if isinstance(raw, (dict, list, float)) or raw is None:  # 8.0 too: integer knobs take integers only
        raise SpecError(section, raw, f"a single value of {knob} (an integer, true/false or a name)")
    try:
        value = parse_knob_value(knob, str(raw).lower() if isinstance(raw, bool) else str(raw))
    except SpecError as exc:  # name the study field, not the bare knob
        raise SpecError(section, raw, exc.allowed) from None
    if isinstance(raw, bool):
        require_bool(section, value)
    if isinstance(value, int) and not isinstance(value, bool):  # a degree >= 1; zero_stage may be 0
        require_int(section, value, minimum=0 if knob == "zero_stage" else 1)
    return value
