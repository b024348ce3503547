"""DLRM-style recommendation models: embedding tables, dense MLPs and the run spec (contract: docs/run_spec.md).

A DLRM run spec has a ``recsys:`` block (or a ``model:`` mapping with ``kind: dlrm``) and the usual
``cluster:`` block. The sharding plan is not part of the model; it is the decision a planner makes
(``costmodel.recsys.plan``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from costmodel.specs.errors import (
    SpecError,
    choices_hint,
    reject_unknown_keys,
    require_choice,
    require_int,
    require_number,
)
from costmodel.specs.gpu import ClusterSpec
from costmodel.specs.userfile import RefusedInput, parse_yaml, read_user_file

DTYPE_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "int8": 1.0}
"""Bytes per embedding element. int8 rows also carry a per-row fp16 scale and bias (FBGEMM's fused
8-bit row-wise format, fbgemm_gpu ``SparseType.INT8``): :data:`INT8_ROW_OVERHEAD_BYTES`."""
INT8_ROW_OVERHEAD_BYTES = 4
"""fp16 scale + fp16 bias per int8 row (source: fbgemm_gpu split_table_batched_embeddings_ops, INT8 rows)."""
OPTIMIZERS = ("sgd", "rowwise_adagrad", "adam")
INTERACTIONS = ("dot", "dcnv2", "cat")
ACCESS_KINDS = ("uniform", "zipf", "reuse_histogram", "hotness")
MAX_TABLES = 100_000
"""Most tables in one spec: Meta's synthetic dlrm_datasets day files hold 856 tables; far above any real model."""
MAX_POOLING = 1_000_000.0

TABLE_KEYS = frozenset({"name", "rows", "dim", "dtype", "pooling_mean", "pooling_std", "pooling_max", "access",
                        "optimizer", "num_features", "count", "source"})
DLRM_KEYS = frozenset({"kind", "name", "tables", "bottom_mlp", "top_mlp", "interaction", "batch_size",
                       "dcn_num_layers", "dcn_low_rank_dim", "dense_dtype", "source", "base"})
ACCESS_KEYS = frozenset({"zipf", "reuse_histogram", "hot_rows_fraction", "hot_access_fraction", "profile"})
SHARE_TOLERANCE = 0.01
"""How far a reuse histogram's shares may sum from 1 (rounded published figures); they are rescaled."""
DLRM_RUN_KEYS = frozenset({"recsys", "model", "cluster", "plan"})


@dataclass(frozen=True, kw_only=True)
class AccessDistribution:
    """How the lookups of one table spread over its rows (the input to the unique-rows estimate).

    ``kind`` is one of
    - ``uniform``: every row equally likely;
    - ``zipf``: row ``i`` (1-based, by popularity) drawn with probability proportional to
      ``i ** -zipf_exponent``;
    - ``reuse_histogram``: ``(reuse_factor, share)`` pairs, ``share`` of a batch's lookups going to rows
      looked up ``reuse_factor`` times in that batch (the reuse-factor histogram of arXiv 2404.12674 /
      Lin et al. 2022); unique rows per batch = lookups x sum(share / reuse_factor);
    - ``hotness``: ``hot_access_fraction`` of lookups go uniformly to the hottest ``hot_rows_fraction`` of the
      rows, the rest uniformly to the others (a two-level summary of measured hotness).
    """

    kind: str = "uniform"
    zipf_exponent: float = 0.0
    reuse_histogram: tuple[tuple[float, float], ...] = ()
    hot_rows_fraction: float = 0.0
    hot_access_fraction: float = 0.0

    def __post_init__(self) -> None:
        require_choice("access.kind", self.kind, ACCESS_KINDS)
        if self.kind == "zipf":
            require_number("access.zipf", self.zipf_exponent, maximum=10.0)
        if self.kind == "reuse_histogram":
            if not self.reuse_histogram:
                raise SpecError("access.reuse_histogram", self.reuse_histogram, "a non-empty list")
            total = sum(share for _, share in self.reuse_histogram)
            if abs(total - 1.0) > SHARE_TOLERANCE:
                raise SpecError("access.reuse_histogram", self.reuse_histogram,
                                f"shares that sum to 1 (within {SHARE_TOLERANCE:g})")
            # published shares are rounded (dlrm_datasets: 3 decimals, summing to 1.002): rescale to 1
            object.__setattr__(self, "reuse_histogram",
                               tuple((reuse, share / total) for reuse, share in self.reuse_histogram))
        if self.kind == "hotness":
            require_number("access.hot_rows_fraction", self.hot_rows_fraction, maximum=1.0)
            require_number("access.hot_access_fraction", self.hot_access_fraction, strict=False, maximum=1.0)


UNIFORM = AccessDistribution()


@dataclass(frozen=True, kw_only=True)
class EmbeddingTable:
    """One embedding table looked up as a pooled bag (``torch.nn.EmbeddingBag``, sum or mean).

    ``pooling_mean`` is the mean number of ids per sample (the pooling factor or "hotness" of the
    TorchRec / MLPerf configs), ``pooling_std`` its spread over samples and ``pooling_max`` its largest
    value (None: unbounded); ``num_features`` the features that share the table (each adds a bag per sample).
    """

    name: str
    rows: int
    dim: int
    dtype: str = "fp32"
    pooling_mean: float = 1.0
    pooling_std: float = 0.0
    pooling_max: int | None = None
    access: AccessDistribution = UNIFORM
    optimizer: str = "rowwise_adagrad"
    num_features: int = 1
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        section = f"tables.{self.name}"
        require_int(f"{section}.rows", self.rows)
        require_int(f"{section}.dim", self.dim, maximum=65536)
        require_choice(f"{section}.dtype", self.dtype, tuple(DTYPE_BYTES))
        require_number(f"{section}.pooling_mean", self.pooling_mean, maximum=MAX_POOLING)
        require_number(f"{section}.pooling_std", self.pooling_std, strict=False, maximum=MAX_POOLING)
        if self.pooling_max is not None:
            require_int(f"{section}.pooling_max", self.pooling_max, maximum=int(MAX_POOLING))
            if self.pooling_max < self.pooling_mean:
                raise SpecError(f"{section}.pooling_max", self.pooling_max,
                                f"at least pooling_mean={self.pooling_mean:g}")
        require_choice(f"{section}.optimizer", self.optimizer, OPTIMIZERS)
        require_int(f"{section}.num_features", self.num_features, maximum=1024)

    @property
    def row_bytes(self) -> float:
        """Bytes of one stored row."""
        extra = INT8_ROW_OVERHEAD_BYTES if self.dtype == "int8" else 0
        return self.dim * DTYPE_BYTES[self.dtype] + extra

    @property
    def weight_bytes(self) -> float:
        return self.rows * self.row_bytes

    @property
    def lookups_per_sample(self) -> float:
        """Ids looked up per sample over all the table's features."""
        return self.pooling_mean * self.num_features


@dataclass(frozen=True, kw_only=True)
class DLRMSpec:
    """A DLRM (arXiv 1906.00091): embedding bags + bottom MLP -> feature interaction -> top MLP.

    ``bottom_mlp`` lists the layer widths including the dense-feature input first (DLRM's
    ``--arch-mlp-bot 13-512-256-128``); its last width must equal each table's ``dim`` for ``dot``
    interaction. ``top_mlp`` lists output widths (``--arch-mlp-top 1024-1024-512-256-1``); its input
    is the interaction's output. ``dcnv2`` is the DCN-v2 cross network (arXiv 2008.13535) of
    ``dcn_num_layers`` low-rank layers of rank ``dcn_low_rank_dim`` (MLPerf DLRM-DCNv2: 3 and 512).
    ``batch_size`` is the global batch per optimizer step (samples over all ranks).
    """

    name: str
    tables: tuple[EmbeddingTable, ...]
    bottom_mlp: tuple[int, ...]
    top_mlp: tuple[int, ...]
    interaction: str = "dot"
    batch_size: int = 65536
    dcn_num_layers: int = 3
    dcn_low_rank_dim: int = 512
    dense_dtype: str = "fp32"
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.tables:
            raise SpecError("recsys.tables", self.tables, "at least one table")
        names = [t.name for t in self.tables]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise SpecError("recsys.tables.name", dup, "unique over the tables")
        for key, widths, least in (("bottom_mlp", self.bottom_mlp, 2), ("top_mlp", self.top_mlp, 1)):
            if len(widths) < least:
                raise SpecError(f"recsys.{key}", widths, f"a list of at least {least} layer widths")
            for width in widths:
                require_int(f"recsys.{key}", width, maximum=1 << 20)
        require_choice("recsys.interaction", self.interaction, INTERACTIONS)
        require_int("recsys.batch_size", self.batch_size)
        require_int("recsys.dcn_num_layers", self.dcn_num_layers, minimum=0, maximum=64)
        require_int("recsys.dcn_low_rank_dim", self.dcn_low_rank_dim, maximum=1 << 20)
        require_choice("recsys.dense_dtype", self.dense_dtype, ("fp32", "fp16", "bf16"))
        if self.interaction == "dot":
            for table in self.tables:
                if table.dim != self.bottom_mlp[-1]:
                    raise SpecError(f"tables.{table.name}.dim", table.dim,
                                    f"equal to the last bottom_mlp width {self.bottom_mlp[-1]} (dot interaction)")

    @property
    def num_sparse_features(self) -> int:
        return sum(t.num_features for t in self.tables)

    @property
    def interaction_width(self) -> int:
        """Width of the interaction output (the top MLP's input)."""
        bottom = self.bottom_mlp[-1]
        if self.interaction == "dot":  # pairwise dots of F+1 vectors (strict lower triangle) + the dense vector
            n = self.num_sparse_features + 1
            return n * (n - 1) // 2 + bottom
        pooled = sum(t.dim * t.num_features for t in self.tables)
        return bottom + pooled  # cat, and dcnv2 (the cross network keeps its input width)

    @property
    def embedding_bytes(self) -> float:
        return sum(t.weight_bytes for t in self.tables)


@dataclass(frozen=True, kw_only=True)
class DLRMRunSpec:
    """One DLRM training job: the model and the cluster (the plan is chosen or given apart)."""

    model: DLRMSpec
    cluster: ClusterSpec
    plan: Any = field(default=None, compare=False)
    """The ``plan:`` block as given (parsed by ``costmodel.recsys.plan``), or None."""


def access_from_value(value: Any, section: str) -> AccessDistribution:
    """``uniform``, ``{zipf: s}``, ``{reuse_histogram: [[r, share], ...]}``, ``{profile: name}`` or
    ``{hot_rows_fraction, hot_access_fraction}``."""
    if value is None or value == "uniform":
        return UNIFORM
    if not isinstance(value, dict):
        raise SpecError(section, value, "uniform, {zipf: s}, {reuse_histogram: [[r, share], ...]} or "
                                        "{hot_rows_fraction: f, hot_access_fraction: g}")
    reject_unknown_keys(section, value, ACCESS_KEYS)
    if "profile" in value:
        return access_profile(value["profile"], f"{section}.profile")
    if "zipf" in value:
        return AccessDistribution(kind="zipf", zipf_exponent=require_number(f"{section}.zipf", value["zipf"],
                                                                            maximum=10.0))
    if "reuse_histogram" in value:
        pairs = value["reuse_histogram"]
        if not isinstance(pairs, list) or not pairs or len(pairs) > 4096:
            raise SpecError(f"{section}.reuse_histogram", pairs, "a list of 1 to 4096 [reuse_factor, share] pairs")
        out = []
        for pair in pairs:
            if not isinstance(pair, list) or len(pair) != 2:
                raise SpecError(f"{section}.reuse_histogram", pair, "a [reuse_factor, share] pair")
            out.append((require_number(f"{section}.reuse_histogram.reuse_factor", pair[0], minimum=1.0,
                                       strict=False),
                        require_number(f"{section}.reuse_histogram.share", pair[1], strict=False, maximum=1.0)))
        return AccessDistribution(kind="reuse_histogram", reuse_histogram=tuple(out))
    for key in ("hot_rows_fraction", "hot_access_fraction"):
        if key not in value:
            raise SpecError(f"{section}.{key}", None, "given (or zipf, or reuse_histogram)")
    return AccessDistribution(kind="hotness", hot_rows_fraction=value["hot_rows_fraction"],
                              hot_access_fraction=value["hot_access_fraction"])


def tables_from_value(value: Any, section: str = "recsys.tables") -> tuple[EmbeddingTable, ...]:
    """Tables from a list of mappings; ``count: n`` repeats one entry as ``name_0`` ... ``name_{n-1}``."""
    if not isinstance(value, list) or not value:
        raise SpecError(section, value, "a non-empty list of table mappings")
    out: list[EmbeddingTable] = []
    for index, entry in enumerate(value):
        where = f"{section}[{index}]"
        if not isinstance(entry, dict):
            raise SpecError(where, entry, "a mapping with name, rows and dim")
        reject_unknown_keys(where, entry, TABLE_KEYS)
        for key in ("rows", "dim"):
            if key not in entry:
                raise SpecError(f"{where}.{key}", None, "given")
        data = {k: v for k, v in entry.items() if k not in ("access", "count", "name")}
        name = entry.get("name", f"t{index}")
        if not isinstance(name, str) or not name or len(name) > 200:
            raise SpecError(f"{where}.name", name, "a non-empty string of at most 200 characters")
        count = require_int(f"{where}.count", entry.get("count", 1), maximum=MAX_TABLES)
        if len(out) + count > MAX_TABLES:
            raise SpecError(f"{where}.count", count, f"at most {MAX_TABLES} tables in all")
        access = access_from_value(entry.get("access"), f"{where}.access")
        names = [name] if count == 1 else [f"{name}_{i}" for i in range(count)]
        try:
            out.extend(EmbeddingTable(name=n, access=access, **data) for n in names)
        except TypeError as exc:  # pragma: no cover - keys are checked above
            raise SpecError(where, entry, f"valid table fields ({exc})") from None
    return tuple(out)


def _widths(value: Any, field_name: str) -> tuple[int, ...]:
    if isinstance(value, str):  # DLRM's own "13-512-256-128" notation
        try:
            value = [int(part) for part in value.split("-")]
        except ValueError:
            raise SpecError(field_name, value, "a list of layer widths or a 'w1-w2-...' string") from None
    if not isinstance(value, list) or len(value) > 256:
        raise SpecError(field_name, value, "a list of at most 256 layer widths or a 'w1-w2-...' string")
    return tuple(require_int(field_name, w, maximum=1 << 20) for w in value)


def dlrm_from_mapping(value: Any, section: str = "recsys") -> DLRMSpec:
    """A ``DLRMSpec`` from a mapping, or a catalog name; ``base: <catalog name>`` starts from a catalog entry."""
    if isinstance(value, str):
        return get_dlrm(value)
    if not isinstance(value, dict):
        raise SpecError(section, value, "a catalog DLRM name or a mapping with tables, bottom_mlp and top_mlp")
    reject_unknown_keys(section, value, DLRM_KEYS)
    if "kind" in value:
        require_choice(f"{section}.kind", value["kind"], ("dlrm",))
    base: dict[str, Any] = {}
    if "base" in value:
        if not isinstance(value["base"], str):
            raise SpecError(f"{section}.base", value["base"], "a catalog DLRM name")
        get_dlrm(value["base"])  # named error for an unknown base
        base = dict(_raw_catalog()[value["base"]])
    data = {**base, **{k: v for k, v in value.items() if k not in ("kind", "base")}}
    for key in ("tables", "bottom_mlp", "top_mlp"):
        if key not in data:
            raise SpecError(f"{section}.{key}", None, "given")
    kwargs = {k: v for k, v in data.items() if k not in ("tables", "bottom_mlp", "top_mlp", "name")}
    name = data.get("name", "dlrm")
    if not isinstance(name, str):
        raise SpecError(f"{section}.name", name, "a string")
    return DLRMSpec(name=name, tables=tables_from_value(data["tables"], f"{section}.tables"),
                    bottom_mlp=_widths(data["bottom_mlp"], f"{section}.bottom_mlp"),
                    top_mlp=_widths(data["top_mlp"], f"{section}.top_mlp"), **kwargs)


def is_dlrm_mapping(data: Any) -> bool:
    """Whether a parsed run spec is a DLRM one (``recsys:`` block, or ``model: {kind: dlrm}``)."""
    if not isinstance(data, dict):
        return False
    model = data.get("model")
    return "recsys" in data or (isinstance(model, dict) and model.get("kind") == "dlrm")


def dlrm_run_spec_from_mapping(data: Any) -> DLRMRunSpec:
    """A ``DLRMRunSpec`` from a parsed run spec (``recsys:`` or ``model: {kind: dlrm, ...}``, and ``cluster:``)."""
    from costmodel.specs.runspec import resolve_cluster

    if not isinstance(data, dict):
        raise SpecError("run spec", type(data).__name__, "a mapping with recsys and cluster")
    reject_unknown_keys("", data, DLRM_RUN_KEYS)
    if "recsys" in data and "model" in data:
        raise SpecError("model", data["model"], "absent when a recsys block is given (one model per spec)")
    if "cluster" not in data:
        raise SpecError("cluster", None, "given")
    key = "recsys" if "recsys" in data else "model"
    model = dlrm_from_mapping(data[key], section=key)
    cluster = resolve_cluster(data["cluster"])
    return DLRMRunSpec(model=model, cluster=cluster, plan=data.get("plan"))


def load_dlrm_run_spec(path: str | Path) -> DLRMRunSpec:
    """Read a DLRM run spec from a YAML or JSON file (bounded reader: ``costmodel.specs.userfile``)."""
    return dlrm_run_spec_from_mapping(read_user_file(path, field="run spec"))


def _catalog_files() -> list[tuple[str, Any]]:
    """``(file name, parsed YAML)`` of each shipped ``costmodel/catalog/recsys/*.yaml``."""
    folder = resources.files("costmodel.catalog").joinpath("recsys")
    out = []
    for item in sorted(folder.iterdir(), key=lambda p: p.name):
        if item.name.endswith(".yaml"):
            try:
                out.append((item.name, parse_yaml(item.read_text(encoding="utf-8"), allow_aliases=True) or {}))
            except RefusedInput as exc:  # pragma: no cover - shipped file
                raise RuntimeError(f"catalog recsys/{item.name}: {exc}") from None
    return out


@lru_cache(maxsize=1)
def access_profiles() -> dict[str, AccessDistribution]:
    """The shipped access profiles (``access_profiles.yaml``: published reuse-factor histograms) by name."""
    data = dict(_catalog_files()).get("access_profiles.yaml", {})
    return {name: access_from_value({"reuse_histogram": entry["reuse_histogram"]}, f"access_profiles/{name}")
            for name, entry in data.items()}


def access_profile(name: Any, section: str = "access.profile") -> AccessDistribution:
    """Shipped access profile ``name``; the error lists the known names."""
    profiles = access_profiles()
    if not isinstance(name, str) or name not in profiles:
        raise SpecError(section, name, "a shipped access profile (" + ", ".join(sorted(profiles)) + ")")
    return profiles[name]


@lru_cache(maxsize=1)
def _raw_catalog() -> dict[str, dict[str, Any]]:
    """Every ``costmodel/catalog/recsys/*.yaml`` entry by name (shipped data, read once)."""
    out: dict[str, dict[str, Any]] = {}
    for filename, data in _catalog_files():
        if filename == "access_profiles.yaml":
            continue
        for name, entry in data.items():
            if name in out:  # pragma: no cover - shipped file
                raise RuntimeError(f"catalog recsys/{filename}: {name} defined twice")
            out[name] = entry
    return out


@lru_cache(maxsize=1)
def dlrm_catalog() -> dict[str, DLRMSpec]:
    """Every catalog DLRM by name."""
    return {name: dlrm_from_mapping({"name": name, **entry}, section=f"recsys/{name}")
            for name, entry in _raw_catalog().items()}


def get_dlrm(name: str) -> DLRMSpec:
    """Catalog DLRM ``name``; the error lists the known names."""
    catalog = _raw_catalog()
    if name not in catalog:
        raise SpecError("recsys", name, "a catalog DLRM (" + choices_hint(str(name), sorted(catalog)) + ")")
    return dlrm_from_mapping({"name": name, **catalog[name]}, section=f"recsys/{name}")


__all__ = ["ACCESS_KINDS", "DTYPE_BYTES", "INTERACTIONS", "OPTIMIZERS", "AccessDistribution", "DLRMRunSpec",
           "DLRMSpec", "EmbeddingTable", "access_profile", "access_profiles", "dlrm_catalog", "dlrm_from_mapping",
           "dlrm_run_spec_from_mapping", "get_dlrm", "is_dlrm_mapping", "load_dlrm_run_spec", "tables_from_value"]
