"""The public Python API: predict, search and study, on mappings, paths or spec objects.

Each function takes what a user has at hand (a mapping shaped like the files of
``docs/run_spec.md``, a path to such a file, or the spec object) and returns a
small typed result; ``.to_dict()`` gives the contract JSON the CLI prints.

>>> import parplan
>>> p = parplan.predict({"model": "llama3.1-8b", "seq_length": 4096,
...                      "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 8},
...                      "strategy": {"tp": 2, "pp": 1, "dp": 4, "micro_batch_size": 1,
...                                   "global_batch_size": 64, "recompute": "selective"}})
>>> p.fits, p.framework
(True, 'megatron-core')
>>> 0 < p.step_time_s < 60 and 0 < p.mfu < 1
True
>>> p.to_dict()["peak_memory_gib"] == p.peak_memory_gib
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from costmodel.specs import RunSpec, gpu_catalog, load_run_spec, model_catalog
from costmodel.specs.errors import SpecError
from costmodel.specs.runspec import run_spec_from_mapping
from search.problem import DEFAULT_BATCH_TOKENS as DEFAULT_BATCH_TOKENS  # re-exported: a search's default batch

RunLike = RunSpec | Mapping[str, Any] | str | Path
"""A run: a spec object, a mapping of run-spec fields, or a path to a run-spec file."""

PROBLEM_KEYS = ("model", "gpu", "num_gpus", "global_batch_size", "seq_length", "gpus_per_node",
                "framework", "fix", "allow", "memory_margin")


def as_run(run: RunLike) -> RunSpec:
    """The :class:`RunSpec` that ``run`` names (see :data:`RunLike`).

    Raises
    ------
    SpecError
        If ``run`` is none of those, or the spec is invalid (one line naming the field).
    """
    if isinstance(run, RunSpec):
        return run
    if isinstance(run, Mapping):
        return run_spec_from_mapping(dict(run))
    if isinstance(run, (str, Path)):
        return load_run_spec(run)
    raise SpecError("run", type(run).__name__, "a RunSpec, a mapping of run-spec fields or a path to a run spec")


@dataclass(frozen=True)
class Prediction:
    """The prediction of one run: the headline figures as attributes, the rest in :meth:`to_dict`.

    Units: seconds, GiB, tokens/s; ``mfu`` is a fraction of the GPU's peak for the precision.
    ``step_time_s`` is ``None`` where the strategy breaks a rule (``violations`` says which).
    """

    fits: bool
    step_time_s: float | None
    peak_memory_gib: float
    usable_memory_gib: float
    oom_probability: float | None
    mfu: float | None
    tokens_per_s: float | None
    framework: str
    violations: tuple[str, ...]
    warnings: tuple[str, ...]
    data: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Prediction:
        return cls(fits=bool(data["fits"]), step_time_s=data.get("step_time_s"),
                   peak_memory_gib=data["peak_memory_gib"], usable_memory_gib=data["usable_memory_gib"],
                   oom_probability=data.get("oom_probability"), mfu=data.get("mfu"),
                   tokens_per_s=data.get("tokens_per_s"), framework=data["framework"],
                   violations=tuple(data.get("violations", ())), warnings=tuple(data.get("warnings", ())),
                   data=data)

    def to_dict(self) -> dict[str, Any]:
        """The ``parplan predict --json`` object (contract version 1)."""
        return dict(self.data)


def predict(run: RunLike, profile_dir: str | Path | None = None) -> Prediction:
    """Predict one run's step time and per-GPU memory.

    Parameters
    ----------
    run : RunSpec, mapping or path
        See :data:`RunLike`.
    profile_dir : path, optional
        A profile folder (``parplan profile``) instead of the GPU's built-in profile.
    """
    spec = as_run(run)
    from costmodel.predict import predict_run  # the cost model only when a run is predicted (start-up)

    return Prediction.from_dict({**predict_run(spec, profile_dir), "framework": spec.framework.name})


def predict_file(path: str | Path, profile_dir: str | Path | None = None) -> dict[str, Any]:
    """Load a run spec file and predict it: the contract JSON object."""
    return predict(path, profile_dir).to_dict()


def validate_file(path: str | Path, profile_dir: str | Path | None = None) -> dict[str, Any]:
    """Predict a validation set (see ``studies.validate``)."""
    from studies.validate import validate_file as _validate_file

    return _validate_file(path, profile_dir)


# -- search -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SearchOutcome:
    """What :func:`search` found.

    ``best`` is the fastest feasible strategy's prediction (``None`` when nothing fits),
    ``best_strategy`` its knobs; ``baseline`` the prediction of the run searched from, if any.
    """

    best: Prediction | None
    best_strategy: Mapping[str, Any] | None
    trials: int
    feasible: int
    elapsed_s: float
    baseline: Prediction | None = None
    result: Any = field(default=None, repr=False, compare=False)
    """The :class:`search.SearchResult` (every evaluation, the Pareto front, why-not lines)."""

    @property
    def speedup_over_baseline(self) -> float | None:
        """Baseline step time over the best one (``None`` without a feasible pair)."""
        if self.best is None or self.baseline is None or not self.best.step_time_s or not self.baseline.step_time_s:
            return None
        return self.baseline.step_time_s / self.best.step_time_s

    def to_dict(self, top: int = 5) -> dict[str, Any]:
        """The ``parplan search --json`` object."""
        out = self.result.to_json(top)
        if self.baseline is not None:
            out["baseline"] = self.baseline.to_dict()
        return out


def _problem_mapping(problem: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(problem) - set(PROBLEM_KEYS))
    if unknown:
        raise SpecError(f"problem.{unknown[0]}", problem[unknown[0]], "one of " + ", ".join(PROBLEM_KEYS))
    for key in ("model", "gpu", "num_gpus"):
        if key not in problem:
            raise SpecError(f"problem.{key}", None, "given")
    return dict(problem)


def search_problem(problem: Mapping[str, Any] | RunLike, memory_margin: float | None = None) -> tuple[Any, RunSpec | None]:
    """The :class:`search.SearchProblem` that ``problem`` describes, and the run it came from (if any).

    ``problem`` is a run (:data:`RunLike`: its model, cluster, batch and framework are searched),
    or a mapping with the keys of :data:`PROBLEM_KEYS`: ``model`` (catalog name, model file or
    mapping), ``gpu``, ``num_gpus``, and optionally ``global_batch_size`` (default: 4 Mi tokens),
    ``seq_length``, ``gpus_per_node``, ``framework``, ``fix`` ({knob: value}), ``allow``
    ({knob: [values]}) and ``memory_margin`` (the mapping's wins over the argument). The defaults
    are ``search.problem.build_problem``'s.
    """
    from costmodel.specs.catalog import get_gpu
    from costmodel.specs.framework import get_framework
    from costmodel.specs.model_source import parse_model
    from search.problem import build_problem

    if isinstance(problem, Mapping) and "cluster" not in problem:
        data = _problem_mapping(problem)
        seq = data.get("seq_length")
        model = parse_model(data["model"], section="problem.model", seq_length=seq)[0]
        framework = get_framework(data["framework"]) if "framework" in data else None
        return build_problem(model=model, gpu=get_gpu(data["gpu"]), num_gpus=data["num_gpus"],
                             global_batch_size=data.get("global_batch_size"), seq_length=seq,
                             gpus_per_node=data.get("gpus_per_node"), framework=framework,
                             fixed=dict(data.get("fix", {})), allowed=dict(data.get("allow", {})),
                             memory_margin=data.get("memory_margin", memory_margin), section="problem."), None
    run = as_run(problem)
    return build_problem(run=run, memory_margin=memory_margin), run


def search(problem: Mapping[str, Any] | RunLike, *, trials: int | None = None, sampler: str = "tpe",
           seed: int = 0, profile_dir: str | Path | None = None, memory_margin: float | None = None,
           storage: str | None = None, study_name: str | None = None) -> SearchOutcome:
    """Search the fastest strategy of ``problem`` (see :func:`search_problem`).

    >>> import parplan
    >>> out = parplan.search({"model": "llama3.1-8b", "gpu": "h100-sxm5-80gb", "num_gpus": 8,
    ...                       "global_batch_size": 64, "seq_length": 4096}, trials=40)
    >>> out.best.fits and out.best.step_time_s > 0 and out.trials == 40
    True
    >>> sorted(out.to_dict())[:3]
    ['best', 'elapsed_s', 'feasible']

    A run searched from gets a baseline and a speed-up:

    >>> run = {"model": "llama3.1-8b", "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 8},
    ...        "strategy": {"tp": 8, "pp": 1, "dp": 1, "micro_batch_size": 1, "global_batch_size": 64}}
    >>> parplan.search(run, trials=40).speedup_over_baseline > 1.0
    True
    """
    from search.run import run_search

    spec, run = search_problem(problem, memory_margin)
    with _one_blas_thread():
        result = run_search(spec, sampler=sampler, n_trials=trials, seed=seed, profile_dir=profile_dir,
                            storage=storage, study_name=study_name, starts=() if run is None else (run.strategy,))
        best = result.best
        prediction = None if best is None else Prediction.from_dict(
            {**result.to_json(0)["best"]["prediction"], "framework": spec.framework.name})
        baseline = None if run is None else predict(run, profile_dir)
    return SearchOutcome(best=prediction, best_strategy=None if best is None else best.strategy.to_dict(),
                         trials=result.trials, feasible=len(result.feasible), elapsed_s=result.elapsed_s,
                         baseline=baseline, result=result)


def _one_blas_thread() -> Any:
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1)  # thousands of tiny predictor calls: one thread is fastest


# -- studies ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StudyOutcome:
    """What :func:`study` left: one result per problem (study order) and where the folder is."""

    out_dir: Path
    results: tuple[Any, ...]
    searched: int
    elapsed_s: float

    @property
    def counts(self) -> dict[str, int]:
        """Problems per status (``ok``, ``infeasible``, ...)."""
        from collections import Counter

        return dict(Counter(r.status for r in self.results))

    def to_dict(self) -> dict[str, Any]:
        return {"out_dir": str(self.out_dir), "searched": self.searched, "elapsed_s": self.elapsed_s,
                "counts": self.counts, "results": [r.to_dict() for r in self.results]}


def study(spec: Mapping[str, Any] | str | Path | Any, out_dir: str | Path, *, n_jobs: int = 1,
          storage: str | None = None, backend: str = "loky", scheduler: str | None = None) -> StudyOutcome:
    """Run a study (``docs/run_spec.md``, "Studies"): a mapping, a study file or a ``StudySpec``.

    The output folder is created (or resumed when an earlier run of the same study made it).
    ``backend="dask"`` with a ``scheduler`` address runs the problems on that dask cluster
    (``studies/backends.py``).
    """
    from studies.runner import run_study
    from studies.spec import StudySpec, load_study, study_from_mapping

    if isinstance(spec, Mapping):
        spec = study_from_mapping(dict(spec))
    elif isinstance(spec, (str, Path)):
        spec = load_study(spec)
    elif not isinstance(spec, StudySpec):
        raise SpecError("study", type(spec).__name__, "a StudySpec, a mapping of study fields or a path to a study")
    summary = run_study(spec, out_dir, storage=storage, n_jobs=n_jobs, backend=backend, scheduler=scheduler)
    return StudyOutcome(out_dir=summary.out_dir, results=summary.results, searched=summary.searched,
                        elapsed_s=summary.elapsed_s)


# -- catalogs -----------------------------------------------------------------------------------
def list_models() -> list[dict[str, Any]]:
    """Catalog models with their computed parameter counts."""
    rows = []
    for name, m in model_catalog().items():
        rows.append({
            "name": name,
            "num_params": m.num_params,
            "num_active_params": m.num_active_params,
            "published_params": m.published_params,
            "num_layers": m.num_layers,
            "hidden_size": m.hidden_size,
            "num_attention_heads": m.num_attention_heads,
            "num_query_groups": m.num_query_groups,
            "ffn_hidden_size": m.ffn_hidden_size,
            "vocab_size": m.vocab_size,
            "seq_length": m.seq_length,
            "num_experts": m.num_experts,
            "source": m.source,
        })
    return rows


def list_gpus() -> list[dict[str, Any]]:
    """Catalog GPUs in catalog units, with their sources."""
    return [gpu.to_dict() for gpu in gpu_catalog().values()]
