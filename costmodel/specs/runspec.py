"""Run specs: a model, a cluster and a strategy (contract: docs/run_spec.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from costmodel.specs.assumed_defaults import AssumedDefault, filled, framework_defaults
from costmodel.specs.catalog import get_gpu, get_model
from costmodel.specs.errors import SpecError, reject_unknown_keys, require_int, require_number
from costmodel.specs.framework import DEFAULT_FRAMEWORK, Framework, get_framework, resolve_framework
from costmodel.specs.gpu import CLUSTER_KEYS, ClusterSpec, GiB, override_gpu
from costmodel.specs.model import ModelSpec, model_from_mapping
from costmodel.specs.recsys import DLRMRunSpec, dlrm_run_spec_from_mapping, is_dlrm_mapping
from costmodel.specs.strategy import STRATEGY_KEYS, Strategy
from costmodel.specs.userfile import read_user_file

RUN_KEYS = frozenset({"model", "seq_length", "cluster", "strategy", "framework"})
MAX_NUM_GPUS = 2**20
"""Largest ``cluster.num_gpus`` (1,048,576): above today's largest jobs (about 10^5 GPUs) with room to
spare; placement tables grow with the GPU count, so 10^12 GPUs must be refused, not allocated."""


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """One training job: what is trained, on what, and how it is split."""

    model: ModelSpec
    cluster: ClusterSpec
    strategy: Strategy
    seq_length: int
    framework: Framework = field(default_factory=lambda: get_framework(DEFAULT_FRAMEWORK))
    notes: tuple[str, ...] = field(default=(), compare=False)
    """What the spec's files state that the prediction does not model (e.g. an HF ``sliding_window``)."""
    defaults_assumed: tuple[AssumedDefault, ...] = field(default=(), compare=False)
    """Strategy knobs the spec left unset and the framework default that filled each."""

    def __post_init__(self) -> None:
        require_int("seq_length", self.seq_length)

    @property
    def tokens_per_step(self) -> int:
        return self.strategy.global_batch_size * self.seq_length

    def with_strategy(self, strategy: Strategy) -> RunSpec:
        return replace(self, strategy=strategy)


def resolve_model(value: Any, base_dir: Path | None = None) -> ModelSpec:
    """A catalog name, a model file, an inline mapping, or ``{hf_config: path, ...}`` (``model_source``)."""
    return _model_and_notes(value, base_dir)[0]


def _model_and_notes(value: Any, base_dir: Path | None,
                     seq_length: int | None = None) -> tuple[ModelSpec, tuple[str, ...]]:
    """The model and, for an HF config, the notes on the keys it does not model (``model_source``)."""
    from costmodel.specs.model_source import parse_model

    return parse_model(value, base_dir, seq_length=seq_length)


def resolve_cluster(value: Any) -> ClusterSpec:
    """The ``cluster:`` section: a catalog GPU, a GPU count and optional overrides."""
    if not isinstance(value, dict):
        raise SpecError("cluster", value, "a mapping with gpu and num_gpus")
    reject_unknown_keys("cluster", value, CLUSTER_KEYS)
    for key in ("gpu", "num_gpus"):
        if key not in value:
            raise SpecError(f"cluster.{key}", None, "given")
    if not isinstance(value["gpu"], str):
        raise SpecError("cluster.gpu", value["gpu"], "a catalog GPU name")
    gpu = get_gpu(value["gpu"])
    skip = {"gpu", "num_gpus", "gpus_per_node", "memory_reserve_GiB", "fragmentation_fraction"}
    overrides = {k: v for k, v in value.items() if k not in skip}
    if overrides:
        gpu = override_gpu(gpu, overrides)
    kwargs: dict[str, Any] = {
        "gpu": gpu,
        "num_gpus": require_int("cluster.num_gpus", value["num_gpus"], maximum=MAX_NUM_GPUS),
        "gpus_per_node": require_int("cluster.gpus_per_node", value.get("gpus_per_node", gpu.gpus_per_node),
                                     maximum=MAX_NUM_GPUS),
    }
    if "memory_reserve_GiB" in value:
        kwargs["memory_reserve_bytes"] = require_number(
            "cluster.memory_reserve_GiB", value["memory_reserve_GiB"], strict=False) * GiB
    if "fragmentation_fraction" in value:
        kwargs["fragmentation_fraction"] = require_number(
            "cluster.fragmentation_fraction", value["fragmentation_fraction"], strict=False)
    return ClusterSpec(**kwargs)


def resolve_strategy(value: Any, num_gpus: int, defaults: Mapping[str, Any] | None = None) -> Strategy:
    """The ``strategy:`` section; ``dp`` is derived when absent, other absent knobs take ``defaults``."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise SpecError("strategy", value, "a mapping of parallelism settings")
    reject_unknown_keys("strategy", value, STRATEGY_KEYS)
    data = dict(value)
    if "global_batch_size" not in data:
        raise SpecError("strategy.global_batch_size", None, "given (sequences per optimizer step)")
    if "dp" not in data:
        degrees = [data.get(k, 1) for k in ("tp", "pp", "cp")]
        for key, degree in zip(("tp", "pp", "cp"), degrees):
            require_int(f"strategy.{key}", degree)
        data["dp"] = max(1, num_gpus // (degrees[0] * degrees[1] * degrees[2]))
    return Strategy(**{**(defaults or {}), **data})


def run_spec_from_mapping(data: Any, base_dir: Path | None = None) -> RunSpec:
    """Build a ``RunSpec`` from parsed YAML / JSON; relative paths resolve against ``base_dir``."""
    if not isinstance(data, dict):
        raise SpecError("run spec", type(data).__name__, "a mapping with model, cluster and strategy")
    if is_dlrm_mapping(data):
        raise SpecError("model.kind", "dlrm", "read with load_any_run_spec or costmodel.specs.recsys (a DLRM spec)")
    reject_unknown_keys("", data, RUN_KEYS)
    for key in ("model", "cluster"):
        if key not in data:
            raise SpecError(key, None, "given")
    given_seq = data.get("seq_length")
    model, notes = _model_and_notes(data["model"], base_dir, given_seq if isinstance(given_seq, int) else None)
    cluster = resolve_cluster(data["cluster"])
    framework = resolve_framework(data.get("framework"))
    given = data.get("strategy")
    assumed = framework_defaults(given if isinstance(given, dict) else (), framework, model)
    strategy = resolve_strategy(given, cluster.num_gpus, filled(assumed))
    seq = data.get("seq_length", model.seq_length)
    require_int("seq_length", seq)
    return RunSpec(model=model, cluster=cluster, strategy=strategy, seq_length=seq, framework=framework,
                   notes=notes, defaults_assumed=assumed)


read_structured_file = read_user_file  # the earlier name; every user file goes through userfile


def load_run_spec(path: str | Path) -> RunSpec:
    """Read a run spec from a YAML or JSON file."""
    return run_spec_from_mapping(read_user_file(path, field="run spec"), base_dir=Path(path).resolve().parent)


def load_any_run_spec(path: str | Path) -> RunSpec | DLRMRunSpec:
    """Read an LLM run spec or a DLRM one (``recsys:`` block or ``model: {kind: dlrm}``), the file read once."""
    data = read_user_file(path, field="run spec")
    if is_dlrm_mapping(data):
        return dlrm_run_spec_from_mapping(data)
    return run_spec_from_mapping(data, base_dir=Path(path).resolve().parent)
