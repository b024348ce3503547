"""A search problem and its legal strategy space.

A *problem* fixes what the user cannot change (model, GPU kind, GPU count, global
batch, sequence length) and bounds what the search may change. The *space* lists
every legal value of every knob: divisibility rules generate the values instead of
filtering them afterwards, so that no trial is spent on an impossible degree.

Knobs come in two kinds. *Layout* knobs depend on one another through
divisibility (``tp``, ``cp``, ``pp``, the derived ``dp``, ``micro_batch_size``,
``vpp``, ``ep``, ``sequence_parallel``, the expert-TP ``etp``); the space enumerates their legal
combinations once (a few hundred to a few thousand tuples). *Setting* knobs are
independent of the layout (``recompute``, ``zero_stage``, ``precision``, for MoE models on a
Megatron-Core framework the token dispatcher and the MoE overlap switches, and the launch
switches of ``Strategy`` when the user allows more than one value); the space is the product of
the layouts and the settings. Pairs the rules forbid (an overlap under the allgather dispatcher,
1F1B all-to-all overlap under full recompute or without interleaving) stay in the product and are
refused by ``constraints.rules`` before any time is predicted.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import Any

from costmodel.specs.errors import SpecError, require_int, require_number
from costmodel.specs.framework import DEFAULT_FRAMEWORK, Framework, get_framework
from costmodel.specs.gpu import ClusterSpec, GPUSpec
from costmodel.specs.model import ModelSpec
from costmodel.specs.runspec import RunSpec
from costmodel.specs.layout import pipeline_splits
from costmodel.specs.strategy import CUDA_GRAPH_SCOPES, MOE_DISPATCHERS, PRECISIONS, RECOMPUTE, ZERO_STAGES, Strategy

MOE_KNOBS: tuple[str, ...] = ("moe_token_dispatcher", "moe_shared_expert_overlap", "moe_a2a_overlap")
"""MoE knobs searched for MoE models on a Megatron-Core framework (else the framework's default);
layout knobs, since which are legal depends on ep, pp and vpp (``constraints.rules``)."""
EXCHANGE_KNOBS: tuple[str, ...] = ("cp_comm_type", "hsdp_shard_size")
"""How CP exchanges K/V and how many data-parallel ranks one ZeRO shard spans (HSDP): layout knobs,
since which are legal depends on tp, cp, dp and the framework."""
SPLIT_KNOB = "pipeline_split"
"""How the layers split over the pipeline ranks (``costmodel.specs.layout.SPLITS``): Megatron-Core's
first/last-stage counts or embedding/loss accounting where the layers do not split evenly, so that
such pp and vpp are offered rather than pruned. A layout knob standing for the ``Strategy`` fields
``first_stage_layers``/``last_stage_layers`` or ``account_for_embedding``/``account_for_loss``."""
LAYOUT_KNOBS: tuple[str, ...] = ("tp", "pp", "cp", "dp", "micro_batch_size", "vpp", "ep", "sequence_parallel",
                                 "etp") + MOE_KNOBS + EXCHANGE_KNOBS + (SPLIT_KNOB,)
"""Layout knobs in the order a sampler picks them (``dp`` is derived, never sampled; ``etp`` is the
expert-TP size, ``tp`` where the strategy leaves it unset; an unset MoE knob is the framework's default)."""
SEARCHED_SETTINGS: tuple[str, ...] = ("recompute", "zero_stage", "precision")
SWITCHES: tuple[str, ...] = ("flash_attention", "allow_tp_across_nodes", "tp_comm_overlap",
                             "overlap_grad_reduce", "overlap_param_gather")
"""Launch switches: fixed at the ``Strategy`` defaults unless the user fixes or allows them."""
KNOBS: tuple[str, ...] = tuple(k for k in LAYOUT_KNOBS if k != SPLIT_KNOB) + SEARCHED_SETTINGS + SWITCHES
"""Knobs that are ``Strategy`` fields (``SPLIT_KNOB`` stands for several, so it is fixed or allowed
through ``FIXABLE`` only)."""
PROBLEM_FACTS: tuple[str, ...] = ("moe_routing", "moe_load_imbalance", "pipeline_schedule")
"""Facts of the workload or the framework, never searched: a fixed value holds for every strategy (a
benchmark's forced-balanced gate, DualPipe where the job pipelines; ``pipeline_schedule`` applies to
strategies with pp > 1 and its rules prune those it cannot run), unset they are the ``Strategy`` default."""
OPT_IN_SETTINGS: tuple[str, ...] = ("cuda_graphs",)
"""Settings searched only when the user allows values (``--allow cuda_graphs=none,layers``), and then only
those the framework runs (``Framework.cuda_graph_scopes``); unasked they stay at the ``Strategy`` default."""
FIXABLE: tuple[str, ...] = KNOBS + (SPLIT_KNOB,) + PROBLEM_FACTS + OPT_IN_SETTINGS
_INT_KNOBS = frozenset({"tp", "pp", "cp", "dp", "ep", "etp", "vpp", "micro_batch_size", "zero_stage",
                        "hsdp_shard_size"})
_BOOL_KNOBS = frozenset({"sequence_parallel", "moe_shared_expert_overlap", "moe_a2a_overlap", *SWITCHES})
# Exporters of frameworks built on Megatron-Core, which runs every dispatcher and parallel folding:
# TransformerConfig moe_token_dispatcher_type in allgather/alltoall/flex and moe_flex_dispatcher_backend
# deepep/hybridep, expert_tensor_parallel_size (github.com/NVIDIA/Megatron-LM @d98e8a64
# megatron/core/transformer/transformer_config.py, model_parallel_config.py). Other frameworks run one
# dispatcher (their file's default) and expert TP = TP.
_MEGATRON_CORE_EXPORTERS = frozenset({"megatron", "nemo"})
_DEFAULTS = {f.name: f.default for f in fields(Strategy)}

MAX_MEMORY_MARGIN = 0.9
"""Largest ``memory_margin`` (a fraction; 1 would leave no budget at all)."""

Layout = tuple[int, int, int, int, int, int, int, bool, int, str, bool, bool, str, int, str]
"""(tp, pp, cp, dp, micro_batch_size, vpp, ep, sequence_parallel, etp, moe_token_dispatcher,
moe_shared_expert_overlap, moe_a2a_overlap, cp_comm_type, hsdp_shard_size, pipeline_split), in
``LAYOUT_KNOBS`` order."""


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n`` in ascending order."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def parse_knob_value(knob: str, text: str) -> Any:
    """Parse one command-line value of ``knob`` (``"8"``, ``"true"``, ``"selective"``).

    Raises
    ------
    SpecError
        If ``knob`` is unknown or ``text`` is not a value of its type.
    """
    if knob not in FIXABLE:
        raise SpecError("knob", knob, "one of " + ", ".join(FIXABLE))
    text = text.strip()
    if knob in _BOOL_KNOBS:
        lowered = text.lower()
        if lowered not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
            raise SpecError(knob, text, "true or false")
        return lowered in ("true", "1", "yes", "on")
    if knob in _INT_KNOBS:
        try:
            return int(text)
        except ValueError:
            raise SpecError(knob, text, "an integer") from None
    if knob == "moe_load_imbalance" and text != "balanced":
        try:
            return float(text)
        except ValueError:
            raise SpecError(knob, text, "balanced or a max/mean expert-load factor") from None
    return text


def _freeze(mapping: Mapping[str, Any] | Sequence[tuple[str, Any]] | None) -> tuple[tuple[str, Any], ...]:
    items = mapping.items() if isinstance(mapping, Mapping) else (mapping or ())
    return tuple(sorted((str(k), v) for k, v in items))


@dataclass(frozen=True, kw_only=True)
class SearchBounds:
    """Upper bounds of the searched degrees (shared by ``SearchProblem`` and a study's settings).

    ``None`` means only the divisibility rules bound the knob. ``max_cp``,
    ``max_vpp`` and ``max_micro_batch_size`` default to 16, 8 and 8 to keep
    exhaustive sweeps tractable (each bound cuts the space multiplicatively).
    """

    max_tp: int | None = None
    max_pp: int | None = None
    max_cp: int | None = 16
    max_ep: int | None = None
    max_vpp: int | None = 8
    max_micro_batch_size: int | None = 8

    @property
    def bounds(self) -> dict[str, int | None]:
        """The bounds by name (``max_tp`` ... ``max_micro_batch_size``)."""
        return {name: getattr(self, name) for name in BOUND_NAMES}

    def check_bounds(self, prefix: str = "") -> None:
        """Raise ``SpecError`` for a bound that is neither ``None`` nor an integer."""
        for name in BOUND_NAMES:
            if getattr(self, name) is not None:
                require_int(prefix + name, getattr(self, name))


BOUND_NAMES: tuple[str, ...] = tuple(f.name for f in fields(SearchBounds))


@dataclass(frozen=True, kw_only=True)
class SearchProblem(SearchBounds):
    """What to search: a model on ``num_gpus`` GPUs of one kind, and the bounds of the search.

    Parameters
    ----------
    model, gpu : ModelSpec, GPUSpec
        What is trained and on what.
    num_gpus : int
        GPUs of the job (whole nodes above one node).
    global_batch_size : int
        Sequences per optimizer step.
    seq_length : int
        Tokens per sequence.
    gpus_per_node : int, optional
        Defaults to the GPU catalog's node size.
    fixed : mapping of knob to value
        Knobs held at one value (``--fix tp=8``); any ``KNOBS`` name, ``dp`` included.
    allowed : mapping of knob to values
        Knobs restricted to a set of values (``--allow recompute=none,selective``).
    framework : Framework, optional
        The framework the job launches under (default Megatron-Core); its forbidden
        combinations are rule violations.
    memory_margin : float
        Fraction of usable memory a strategy must leave free to count as feasible
        (``constraints.check``); 0 here, ``constraints.oom.default_memory_margin()`` on the CLI.
    max_tp, max_pp, max_cp, max_ep, max_vpp, max_micro_batch_size : int, optional
        Upper bounds (:class:`SearchBounds`); raise them (``--max-cp`` ...) for
        long sequences or small models.
    """

    model: ModelSpec
    gpu: GPUSpec
    num_gpus: int
    global_batch_size: int
    seq_length: int
    gpus_per_node: int | None = None
    fixed: tuple[tuple[str, Any], ...] = ()
    allowed: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    framework: Framework = field(default_factory=lambda: get_framework(DEFAULT_FRAMEWORK))
    memory_margin: float = 0.0

    def __post_init__(self) -> None:
        for name in ("num_gpus", "global_batch_size", "seq_length"):
            require_int(name, getattr(self, name))
        require_number("memory_margin", self.memory_margin, strict=False, maximum=MAX_MEMORY_MARGIN)
        object.__setattr__(self, "fixed", _freeze(self.fixed))
        object.__setattr__(self, "allowed", tuple((k, tuple(v)) for k, v in _freeze(self.allowed)))
        for knob, _ in self.fixed:
            if knob not in FIXABLE:
                raise SpecError("fix", knob, "a knob (" + ", ".join(FIXABLE) + ")")
        for knob, values in self.allowed:
            if knob not in FIXABLE:
                raise SpecError("allow", knob, "a knob (" + ", ".join(FIXABLE) + ")")
            if not values:
                raise SpecError(f"allow.{knob}", values, "at least one value")
        self.check_bounds()
        self.cluster  # noqa: B018 - validates the GPU count (whole nodes) early

    @cached_property
    def cluster(self) -> ClusterSpec:
        return ClusterSpec(gpu=self.gpu, num_gpus=self.num_gpus,
                           gpus_per_node=self.gpus_per_node or self.gpu.gpus_per_node)

    def run(self, strategy: Strategy) -> RunSpec:
        """The run spec of ``strategy`` on this problem."""
        return RunSpec(model=self.model, cluster=self.cluster, strategy=strategy, seq_length=self.seq_length,
                       framework=self.framework)

    def with_gpus(self, num_gpus: int) -> SearchProblem:
        """The same problem on ``num_gpus`` GPUs."""
        return replace(self, num_gpus=num_gpus)

    def restriction(self, knob: str) -> frozenset[Any] | None:
        """Values ``knob`` may take by ``fixed`` / ``allowed``, or ``None`` when unrestricted."""
        out: frozenset[Any] | None = None
        for name, value in self.fixed:
            if name == knob:
                out = frozenset({value})
        for name, values in self.allowed:
            if name == knob:
                out = frozenset(values) if out is None else out & frozenset(values)
        return out

    def describe(self) -> dict[str, Any]:
        """The ``problem`` object of the search JSON."""
        return {
            "model": self.model.name, "gpu": self.gpu.name, "num_gpus": self.num_gpus,
            "gpus_per_node": self.cluster.gpus_per_node, "global_batch_size": self.global_batch_size,
            "seq_length": self.seq_length, "fixed": dict(self.fixed),
            "allowed": {k: list(v) for k, v in self.allowed}, "memory_margin": self.memory_margin,
            "bounds": {name: getattr(self, name) for name in ("max_tp", "max_pp", "max_cp", "max_ep",
                                                                "max_vpp", "max_micro_batch_size")},
        }


# -- legal values of each layout knob, given the knobs before it -------------------------------
def _bounded(values: list[int], bound: int | None) -> list[int]:
    return [v for v in values if bound is None or v <= bound]


def legal_tp(problem: SearchProblem, allow_across_nodes: bool = False) -> list[int]:
    """TP degrees that split heads, KV heads and FFN evenly and keep each group inside one NVLink domain."""
    m, n = problem.model, problem.num_gpus
    domain = problem.gpu.nvlink_domain_size
    out = []
    for t in divisors(n):
        if m.num_attention_heads % t or m.ffn_hidden_size % t:  # type: ignore[operator]
            continue
        if m.is_moe and m.moe_ffn_hidden_size % t:  # type: ignore[operator]
            continue
        kv = m.num_query_groups
        if kv % t and t % kv:  # type: ignore[operator]
            continue
        if not allow_across_nodes and (t > domain or domain % t):
            continue
        out.append(t)
    return _bounded(out, problem.max_tp)


def legal_cp(problem: SearchProblem, tp: int) -> list[int]:
    """CP degrees: the sequence splits into 2*cp load-balanced chunks, and tp*cp divides the GPUs."""
    rest = problem.num_gpus // tp
    out = [c for c in divisors(rest) if c == 1 or problem.seq_length % (2 * c) == 0
           and problem.framework.supports_context_parallel]
    return _bounded(out, problem.max_cp)


def legal_pp(problem: SearchProblem, tp: int, cp: int) -> list[int]:
    """PP degrees that divide the remaining GPUs and split the layers in some way (``legal_splits``)."""
    rest = problem.num_gpus // (tp * cp)
    layers, top = problem.model.num_layers, problem.max_vpp or problem.model.num_layers
    out = [p for p in divisors(rest)
           if any(legal_splits(problem, p, v) for v in range(1, min(top, max(layers // p, 1)) + 1))]
    return _bounded(out, problem.max_pp)


def legal_splits(problem: SearchProblem, pp: int, vpp: int) -> list[str]:
    """The ``SPLIT_KNOB`` values Megatron-Core builds for these degrees (``layout.pipeline_splits``)."""
    m = problem.model
    return _keep(problem, SPLIT_KNOB, list(pipeline_splits(m.num_layers, m.mtp_num_layers, pp, vpp)))


def legal_micro_batch(problem: SearchProblem, dp: int) -> list[int]:
    """Micro-batch sizes that divide each replica's share of the global batch."""
    if problem.global_batch_size % dp:
        return []
    return _bounded(divisors(problem.global_batch_size // dp), problem.max_micro_batch_size)


def legal_vpp(problem: SearchProblem, pp: int, num_microbatches: int) -> list[int]:
    """Virtual stages per rank: interleaving needs pp > 1, even chunks and micro-batches divisible by pp."""
    layers = problem.model.num_layers
    if pp == 1 or num_microbatches % pp:
        return [1]
    if layers % pp == 0:
        return _bounded(divisors(layers // pp), problem.max_vpp)
    # uneven: the interleaving degrees some first/last-stage or accounted split allows
    return _bounded([v for v in range(1, layers // pp + 1) if v == 1 or legal_splits(problem, pp, v)],
                    problem.max_vpp)


def _folds(problem: SearchProblem) -> bool:
    """Whether the framework folds expert groups over tp*cp*dp (``etp`` other than ``tp``)."""
    return problem.model.is_moe and problem.framework.exporter in _MEGATRON_CORE_EXPORTERS


def legal_ep(problem: SearchProblem, dp: int, cp: int, tp: int = 1) -> list[int]:
    """EP degrees: divide the experts and the ranks they are carved from (1 for dense models).

    Those ranks are dp*cp with expert TP = TP; with parallel folding, tp*cp*dp (etp = 1 then).
    """
    m = problem.model
    if not m.is_moe:
        return [1]
    ranks = tp * dp * cp if _folds(problem) else dp * cp
    return _bounded([e for e in divisors(m.num_experts) if ranks % e == 0], problem.max_ep)


def legal_etp(problem: SearchProblem, tp: int, cp: int, dp: int, ep: int) -> list[int]:
    """Expert-TP sizes: ``tp`` (Megatron's default) where ep divides dp*cp; with folding also ``1``
    (every expert whole, the ranks TP frees spent on EP) where etp*ep divides tp*cp*dp.

    The sizes between (divisors of ``tp``) are offered when the user allows etp values
    (``--allow etp=1,2``): each multiplies the MoE space, which already carries the dispatcher
    and overlap knobs.
    """
    ranks = tp * cp * dp
    out = [tp] if (dp * cp) % ep == 0 else []
    if _folds(problem):
        ffn = problem.model.moe_ffn_hidden_size
        smaller = divisors(tp)[:-1] if problem.restriction("etp") is not None else [1][:tp > 1]
        out += [e for e in smaller if ffn % e == 0 and ranks % (e * ep) == 0]  # type: ignore[operator]
    return sorted(out)


def legal_sequence_parallel(problem: SearchProblem, tp: int, cp: int) -> list[bool]:
    """Sequence parallelism needs tp > 1 and a per-rank sequence divisible by tp."""
    if tp > 1 and (problem.seq_length // cp) % tp == 0 and problem.framework.supports_sequence_parallel:
        return [True, False]
    return [False]


def _keep(problem: SearchProblem, knob: str, values: Sequence[Any]) -> list[Any]:
    allowed = problem.restriction(knob)
    return [v for v in values if allowed is None or v in allowed]


_FRAMEWORK_FEATURES = {"flash_attention": "supports_flash_attention",
                       "overlap_grad_reduce": "supports_grad_reduce_overlap",
                       # DeepSpeed gathers inside the optimizer step (costmodel.llm.dp_buckets)
                       "overlap_param_gather": "supports_param_gather_overlap",
                       "tp_comm_overlap": "supports_tp_comm_overlap"}
"""Switches that need a feature the framework may lack (``Framework.supports_*``): off where it does."""


def _switch_values(problem: SearchProblem, knob: str) -> list[Any]:
    allowed = problem.restriction(knob)
    feature = _FRAMEWORK_FEATURES.get(knob)
    if feature is not None and not getattr(problem.framework, feature):
        return [False]  # a strategy the framework cannot run is no candidate (its rule would reject it)
    return [_DEFAULTS[knob]] if allowed is None else sorted(allowed, key=repr)


def legal_moe_knobs(problem: SearchProblem, pp: int, vpp: int, ep: int, etp: int,
                    stage_ranks: int) -> list[tuple[str, bool, bool]]:
    """(dispatcher, shared-expert overlap, 1F1B all-to-all overlap) triples the rules allow.

    Megatron-Core frameworks offer every dispatcher (the framework's default first) and both
    overlaps where ``constraints.rules.moe_overlap_supported`` allows them: not under allgather,
    never both, all-to-all overlap with ep > 1 and interleaving when pp > 1 (its refusal under
    full recompute is a setting conflict, :func:`setting_conflicts`). Elsewhere the defaults only.
    Choices that time alike are offered once: with ep = etp = 1 nothing is dispatched (the default
    only), and HybridEP is DeepEP while a stage's ranks fit one scale-up domain (``costmodel.llm.moe``).
    """
    fw = problem.framework
    default = (fw.moe_token_dispatcher, fw.moe_shared_expert_overlap, fw.moe_a2a_overlap)
    if not _folds(problem) or ep * etp == 1:
        names = _keep(problem, "moe_token_dispatcher", [default[0]])
        return [(d, default[1], default[2]) for d in names]
    from costmodel.comm.placement import scale_up_domain_size  # here: costmodel.comm imports numpy (start-up)

    names = [default[0]] + [d for d in MOE_DISPATCHERS if d != default[0]]
    if stage_ranks <= scale_up_domain_size(problem.cluster):
        names = [d for d in names if d != "hybridep" or d == default[0]]
    out = []
    for name in _keep(problem, "moe_token_dispatcher", names):
        for shared in _keep(problem, "moe_shared_expert_overlap", [False, True]):
            for a2a in _keep(problem, "moe_a2a_overlap", [False, True]):
                overlap = shared or a2a
                if overlap and (name == "allgather" or (shared and a2a)):
                    continue
                if shared and not problem.model.num_shared_experts:
                    continue  # nothing to overlap
                if a2a and (ep == 1 or (pp > 1 and vpp == 1)):
                    continue
                out.append((name, shared, a2a))
    return out


def setting_conflicts(layout: Mapping[str, Any], knob: str, value: Any, framework: Framework | None = None) -> bool:
    """Whether setting ``knob=value`` is refused with ``layout`` (all-to-all overlap under full recompute;
    an HSDP shard group without ZeRO sharding; with ``framework``, a ZeRO stage it does not run with
    pipeline parallelism or does not shard hybrid, ``constraints.rules.framework_runs_*``)."""
    if knob == "zero_stage":
        hsdp = bool(layout.get("hsdp_shard_size"))
        if hsdp and (value == 0 or (framework is not None and value not in framework.hsdp_zero_stages)):
            return True
        if framework is not None and layout.get("pp", 1) > 1 and value not in framework.zero_stages_with_pp:
            return True
    return knob == "recompute" and value == "full" and bool(layout.get("moe_a2a_overlap"))


def legal_cp_comm_types(problem: SearchProblem, tp: int, cp: int) -> list[str]:
    """CP exchanges the framework runs (``Framework.cp_comm_types``), the Ulysses ``a2a`` only where
    ``constraints.rules.ulysses_divides_heads`` allows it; ``p2p`` (unused) when cp = 1."""
    if cp == 1:
        return ["p2p"]
    m = problem.model
    heads = (m.num_attention_heads, m.num_query_groups)
    heads_split = all(h % (tp * cp) == 0 for h in heads)  # type: ignore[operator]
    return _keep(problem, "cp_comm_type", [t for t in problem.framework.cp_comm_types if t != "a2a" or heads_split])


def legal_hsdp_shard_sizes(problem: SearchProblem, tp: int, cp: int, dp: int) -> list[int]:
    """HSDP shard groups: 0 (shard over all dp*cp ranks) and, where the framework shards hybrid, shard
    groups of cp times a divisor of dp (``constraints.rules.hsdp_shard_fits``) that cover whole scale-up
    domains, so the gathers stay on NVLink while the replicas span the network (torchtitan's and
    Megatron-FSDP's use). Any legal size when the user restricts the knob."""
    fw = problem.framework
    restricted = problem.restriction("hsdp_shard_size") is not None
    # unasked, only FSDP's hybrid form (ZeRO-3, the common practice) is offered, to keep the default space
    # small; partial ZeRO-1 instances (Megatron) on request (--allow hsdp_shard_size=...)
    stages = set(fw.hsdp_zero_stages) if restricted else set(fw.hsdp_zero_stages) & {3}
    if not stages & set(_keep(problem, "zero_stage", list(fw.zero_stages))):
        return _keep(problem, "hsdp_shard_size", [0])
    from costmodel.comm.placement import scale_up_domain_size  # here: costmodel.comm imports numpy (start-up)

    domain = scale_up_domain_size(problem.cluster)
    sizes = [cp * d for d in divisors(dp) if d < dp and cp * d >= 2
             and (restricted or (cp * d * tp) % domain == 0)]
    return _keep(problem, "hsdp_shard_size", [0, *sizes])


def _setting_values(problem: SearchProblem) -> dict[str, list[Any]]:
    precisions = ["bf16"] + (["fp8"] if problem.gpu.supports("fp8") and problem.framework.supports_fp8 else [])
    allowed_precision = problem.restriction("precision")
    if allowed_precision is not None:  # fp16 only on request
        precisions = [p for p in PRECISIONS if p in allowed_precision and problem.gpu.supports(p)]
    values: dict[str, list[Any]] = {
        "recompute": _keep(problem, "recompute", [r for r in RECOMPUTE if r in problem.framework.recompute_modes]),
        "zero_stage": _keep(problem, "zero_stage", [z for z in ZERO_STAGES if z in problem.framework.zero_stages]),
        "precision": precisions,
    }
    for knob in SWITCHES:
        values[knob] = _switch_values(problem, knob)
    graphs = problem.restriction("cuda_graphs")
    if graphs is not None:  # CUDA graphs: memory (constraints.cuda_graphs) and launch time are both modelled
        runs = ("none", *problem.framework.cuda_graph_scopes)
        values["cuda_graphs"] = [g for g in CUDA_GRAPH_SCOPES if g in graphs and g in runs]
        if not values["cuda_graphs"]:
            raise SpecError("cuda_graphs", ",".join(sorted(map(str, graphs))),
                            f"among the scopes framework {problem.framework.name} captures ({', '.join(runs)})")
    return values


def _iter_layouts(problem: SearchProblem, allow_across_nodes: bool) -> Iterator[Layout]:
    """Every legal layout: the degree and MoE knobs, then the CP exchange and the HSDP shard group."""
    # the same few (tp, cp, dp) and (pp, vpp) recur across thousands of degree layouts
    rest: dict[tuple[int, ...], list[tuple[Any, Any, str]]] = {}
    for lay in _degree_layouts(problem, allow_across_nodes):
        tp, pp, cp, dp, vpp = lay[0], lay[1], lay[2], lay[3], lay[5]
        tails = rest.get((tp, pp, cp, dp, vpp))
        if tails is None:
            tails = rest[(tp, pp, cp, dp, vpp)] = [
                (exchange, shard, split) for exchange in legal_cp_comm_types(problem, tp, cp)
                for shard in legal_hsdp_shard_sizes(problem, tp, cp, dp) for split in legal_splits(problem, pp, vpp)]
        for tail in tails:
            yield (*lay, *tail)


def _degree_layouts(problem: SearchProblem, allow_across_nodes: bool) -> Iterator[tuple[Any, ...]]:
    n = problem.num_gpus
    for tp in _keep(problem, "tp", legal_tp(problem, allow_across_nodes)):
        for cp in _keep(problem, "cp", legal_cp(problem, tp)):
            for pp in _keep(problem, "pp", legal_pp(problem, tp, cp)):
                dp = n // (tp * cp * pp)
                if not _keep(problem, "dp", [dp]):
                    continue
                for mbs in _keep(problem, "micro_batch_size", legal_micro_batch(problem, dp)):
                    m = problem.global_batch_size // (mbs * dp)
                    for vpp in _keep(problem, "vpp", legal_vpp(problem, pp, m)):
                        for ep in _keep(problem, "ep", legal_ep(problem, dp, cp, tp)):
                            for sp in _keep(problem, "sequence_parallel", legal_sequence_parallel(problem, tp, cp)):
                                for etp in _keep(problem, "etp", legal_etp(problem, tp, cp, dp, ep)):
                                    for moe in legal_moe_knobs(problem, pp, vpp, ep, etp, tp * cp * dp):
                                        yield (tp, pp, cp, dp, mbs, vpp, ep, sp, etp, *moe)


@dataclass(frozen=True)
class StrategySpace:
    """Every legal strategy of a problem: layouts times settings.

    Build it with :func:`build_space`. ``choices`` lists, per knob, every value
    it takes anywhere in the space (fixed lists that samplers can declare once).
    """

    problem: SearchProblem
    layouts: tuple[Layout, ...]
    settings: tuple[tuple[str, tuple[Any, ...]], ...]
    choices: dict[str, tuple[Any, ...]] = field(compare=False)

    @property
    def size(self) -> int:
        """Number of legal strategies."""
        return self.size_at_most(None)

    def size_at_most(self, limit: int | None) -> int:
        """Number of legal strategies, counted only until it exceeds ``limit`` (then some number above it)."""
        total, fw = 0, self.problem.framework
        for layout in self.layouts:
            picked = dict(zip(LAYOUT_KNOBS, layout))
            total += math.prod(sum(not setting_conflicts(picked, k, v, fw) for v in values)
                               for k, values in self.settings)
            if limit is not None and total > limit:
                break
        return total

    def strategy(self, values: Mapping[str, Any]) -> Strategy:
        """The strategy with knob ``values`` (the problem's global batch added; ``etp == tp`` left unset)."""
        return Strategy(global_batch_size=self.problem.global_batch_size, **self._fields(values))

    def _fields(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """``Strategy`` fields of knob ``values``, but the global batch. Only layout knobs and problem facts
        are rewritten here (etp, the MoE knobs, the split), so a layout's fields hold for all its settings."""
        values = dict(values)
        if "etp" in values and values["etp"] == values.get("tp", 1):
            values["etp"] = None
        for knob in MOE_KNOBS:  # the framework's default stays unset, as a user writes it
            if knob in values and values[knob] == getattr(self.problem.framework, knob):
                values[knob] = None
        for knob, value in self.problem.fixed:
            if knob in PROBLEM_FACTS and (knob != "pipeline_schedule" or values.get("pp", 1) > 1):
                values[knob] = value
        split = values.pop(SPLIT_KNOB, "even")
        if split != "even":
            m = self.problem.model
            fields_of = pipeline_splits(m.num_layers, m.mtp_num_layers, values.get("pp", 1), values.get("vpp", 1))
            values.update(fields_of.get(split, {}))
        return values

    def strategy_of(self, layout: Layout, setting: Sequence[Any]) -> Strategy:
        values = dict(zip(LAYOUT_KNOBS, layout))
        values.update(zip((k for k, _ in self.settings), setting))
        return self.strategy(values)

    def strategy_maker(self) -> Callable[[Layout, Sequence[Any]], Strategy]:
        """``strategy_of`` for many (layout, setting) pairs in any order: each layout's fields are rewritten
        once and kept (``_fields`` rewrites layout knobs and problem facts only)."""
        fields_of: dict[Layout, dict[str, Any]] = {}

        def make(layout: Layout, setting: Sequence[Any]) -> Strategy:
            fields = fields_of.get(layout)
            if fields is None:
                fields = fields_of[layout] = self._fields(dict(zip(LAYOUT_KNOBS, layout)))
            return self._with_setting(fields, setting)
        return make

    def __iter__(self) -> Iterator[Strategy]:
        """Every legal strategy, layouts outermost (so that consecutive ones share operator shapes)."""
        for layout, settings in self._legal_by_layout():
            fields = self._fields(dict(zip(LAYOUT_KNOBS, layout)))  # once per layout, which comes once
            for setting in settings:
                yield self._with_setting(fields, setting)

    def _with_setting(self, fields: Mapping[str, Any], setting: Sequence[Any]) -> Strategy:
        """The strategy of a layout's ``_fields`` and a setting (values in ``settings`` order)."""
        return Strategy(global_batch_size=self.problem.global_batch_size, **fields,
                        **dict(zip(self._setting_names, setting)))

    @cached_property
    def _setting_names(self) -> tuple[str, ...]:
        names = tuple(k for k, _ in self.settings)
        # _fields rewrites these, so a layout's fields hold for all its settings only while none is a setting
        rewritten = {"etp", SPLIT_KNOB, *MOE_KNOBS, *PROBLEM_FACTS}
        if rewritten & set(names):
            raise AssertionError(f"setting knobs {sorted(rewritten & set(names))} are rewritten per strategy")
        return names

    def rows(self, pairs: Iterable[tuple[Layout, Sequence[Any]]]) -> SpaceRows:
        """(layout, setting) pairs of this space as a table's rows (``SpaceRows``): no strategy built yet."""
        return SpaceRows(self, pairs)

    def legal_settings(self) -> Iterator[tuple[Layout, tuple[Any, ...]]]:
        """(layout, setting values in ``settings`` order) of every legal strategy, in ``__iter__``'s order."""
        for layout, settings in self._legal_by_layout():
            for setting in settings:
                yield layout, setting

    def _legal_by_layout(self) -> Iterator[tuple[Layout, Iterator[tuple[Any, ...]]]]:
        """Each layout and its legal settings. A conflict is one knob's value against the layout, so the
        product of each knob's values that do not conflict is the full product, filtered, in its order."""
        fw = self.problem.framework
        for layout in self.layouts:
            picked = dict(zip(LAYOUT_KNOBS, layout))
            yield layout, itertools.product(*([v for v in values if not setting_conflicts(picked, k, v, fw)]
                                              for k, values in self.settings))

    @cached_property
    def _layout_set(self) -> frozenset[Layout]:
        return frozenset(self.layouts)

    def contains(self, strategy: Strategy) -> bool:
        """Whether ``strategy`` is one of the space's legal strategies."""
        fw = self.problem.framework
        layout = tuple(knob_value(strategy, k, fw) for k in LAYOUT_KNOBS)
        if layout not in self._layout_set or strategy.global_batch_size != self.problem.global_batch_size:
            return False
        picked = dict(zip(LAYOUT_KNOBS, layout))
        return all(getattr(strategy, k) in values and not setting_conflicts(picked, k, getattr(strategy, k), fw)
                   for k, values in self.settings)

    def neighbours(self, strategy: Strategy) -> list[Strategy]:
        """Legal strategies one move from ``strategy``: one knob changed (dp re-derived), or two
        parallel degrees traded by a factor of two at constant dp (tp/pp, tp/cp, pp/cp)."""
        moves: list[Strategy | None] = []
        current = self.knobs_of(strategy)
        for knob, values in self.choices.items():
            if knob == SPLIT_KNOB:  # not a Strategy field: rebuilt from the space's knobs
                moves += [self._with_split(current, v) for v in values if v != current[knob]]
            elif knob != "dp":
                moves += [change_knob(strategy, knob, v, self.problem.num_gpus) for v in values
                          if v != getattr(strategy, knob)]
        for up, down in itertools.permutations(("tp", "pp", "cp"), 2):
            if getattr(strategy, down) % 2 == 0:
                moves.append(change_knob(strategy, up, getattr(strategy, up) * 2, self.problem.num_gpus,
                                         **{down: getattr(strategy, down) // 2}))
        legal = (s for s in moves if s is not None and s != strategy and self.contains(s))
        return list(dict.fromkeys(legal))

    def _with_split(self, knobs: Mapping[str, Any], split: str) -> Strategy | None:
        try:
            return self.strategy({**knobs, SPLIT_KNOB: split})
        except SpecError:
            return None

    def knobs_of(self, strategy: Strategy) -> dict[str, Any]:
        """The searched knobs of ``strategy`` (layout and settings; switches only when they vary)."""
        out = {k: knob_value(strategy, k, self.problem.framework) for k in LAYOUT_KNOBS}
        out.update({k: getattr(strategy, k) for k, _ in self.settings})
        return out


class SpaceRows(Sequence[Strategy]):
    """Strategies of a space's (layout, setting) pairs, as the rows of a ``StrategyTable`` (its ``ColumnRows``).

    A field's column comes from the pairs without building their strategies: a setting knob's value is the
    setting's, any other field's is the same for every setting of a layout, and is read from one strategy per
    layout (its first row's). That holds because ``_with_setting`` builds every row as
    ``Strategy(global_batch_size, **layout fields, **setting)``, ``Strategy.__post_init__`` rewrites only
    layout knobs (``sequence_parallel``, ``vpp``) from layout knobs, and no setting knob is one that ``_fields``
    rewrites (``StrategySpace._setting_names``). ``rows[i]`` builds row ``i``'s strategy (kept).
    """

    def __init__(self, space: StrategySpace, pairs: Iterable[tuple[Layout, Sequence[Any]]]) -> None:
        self._pairs = list(pairs)
        self._make = space.strategy_maker()
        self._names = space._setting_names
        position: dict[Layout, int] = {}  # each layout's position among the rows' distinct layouts
        self._layout_rows: list[int] = []  # each distinct layout's first row
        self._row_layouts: list[int] = []  # each row's layout position
        for row, (layout, _) in enumerate(self._pairs):
            at = position.get(layout)
            if at is None:
                at = position[layout] = len(self._layout_rows)
                self._layout_rows.append(row)
            self._row_layouts.append(at)
        self._built: dict[int, Strategy] = {}

    def __len__(self) -> int:
        return len(self._pairs)

    def __getitem__(self, row: int) -> Strategy:  # type: ignore[override] - rows are read one at a time
        if row < 0:
            row += len(self)
        hit = self._built.get(row)
        if hit is None:
            hit = self._built[row] = self._make(*self._pairs[row])
        return hit

    def column(self, name: str) -> tuple[list[Any], Any]:
        """(values, index) of field ``name``: per row for a setting knob, else per layout with each row's index."""
        if name in self._names:
            at = self._names.index(name)
            return [setting[at] for _, setting in self._pairs], None
        strategies, index = self._per_layout
        return [getattr(strategy, name) for strategy in strategies], index

    @cached_property
    def _per_layout(self) -> tuple[list[Strategy], Any]:
        """(the strategy of each distinct layout's first row, each row's layout position as a numpy array)."""
        import numpy as np

        return [self[row] for row in self._layout_rows], np.asarray(self._row_layouts, dtype=np.int64)


def knob_value(strategy: Strategy, knob: str, framework: Framework) -> Any:
    """``strategy``'s value of ``knob`` as the space lists it: unset ``etp`` is ``tp``, an unset MoE
    knob is the framework's default."""
    if knob == "etp":
        return strategy.expert_tensor_parallel_size
    if knob == SPLIT_KNOB:
        return pipeline_split_of(strategy)
    value = getattr(strategy, knob)
    return getattr(framework, knob) if knob in MOE_KNOBS and value is None else value


def pipeline_split_of(strategy: Strategy) -> str:
    """The ``SPLIT_KNOB`` value of ``strategy`` (``layout`` for an explicit layout string, which the space
    does not generate)."""
    if strategy.pipeline_layout is not None:
        return "layout"
    if strategy.account_for_embedding or strategy.account_for_loss:
        return "accounted"
    return "ends" if strategy.first_stage_layers is not None or strategy.last_stage_layers is not None else "even"


def build_space(problem: SearchProblem) -> StrategySpace:
    """Enumerate the legal layouts of ``problem`` and its setting values.

    Raises
    ------
    SpecError
        If fixes, restrictions and bounds leave no legal strategy (the message
        says which knob emptied the space).
    """
    settings = _setting_values(problem)
    across = settings["allow_tp_across_nodes"]
    layouts = tuple(dict.fromkeys(lay for a in across for lay in _iter_layouts(problem, a)))
    for knob, values in settings.items():
        if not values:
            raise SpecError(knob, dict(problem.allowed).get(knob, dict(problem.fixed).get(knob)),
                            "a legal value for this problem")
    if not layouts:
        raise SpecError("fix/allow", dict(problem.fixed) | {k: list(v) for k, v in problem.allowed},
                        _empty_layout_hint(problem))
    choices: dict[str, tuple[Any, ...]] = {}
    for index, knob in enumerate(LAYOUT_KNOBS):
        choices[knob] = tuple(sorted({lay[index] for lay in layouts}))
    for knob, values in settings.items():
        choices[knob] = tuple(values)
    return StrategySpace(problem=problem, layouts=layouts,
                         settings=tuple((k, tuple(v)) for k, v in settings.items()), choices=choices)


def _empty_layout_hint(problem: SearchProblem) -> str:
    """Which layout knob has no legal value once fixes and restrictions apply."""
    unrestricted = SearchProblem(model=problem.model, gpu=problem.gpu, num_gpus=problem.num_gpus,
                                 global_batch_size=problem.global_batch_size, seq_length=problem.seq_length,
                                 gpus_per_node=problem.gpus_per_node)
    legal = list(_iter_layouts(unrestricted, False))
    for index, knob in enumerate(LAYOUT_KNOBS):
        allowed = problem.restriction(knob)
        values = sorted({lay[index] for lay in legal})
        if allowed is not None and not allowed & set(values):
            return f"legal for {knob} on this problem ({', '.join(map(str, values))})"
    return (f"a combination with at least one legal layout for {problem.model.name} on {problem.num_gpus} GPUs "
            f"and global_batch_size={problem.global_batch_size}")


def change_knob(strategy: Strategy, knob: str, value: Any, num_gpus: int, **more: Any) -> Strategy | None:
    """``strategy`` with ``knob`` (and ``more``) changed and dp re-derived; ``None`` if degrees do not divide.

    Sequence parallelism is switched off when tp drops to 1 (it needs tp > 1).
    """
    if knob == SPLIT_KNOB:  # not a Strategy field: StrategySpace.neighbours rebuilds it from the model
        return None
    values = {knob: value, **more}
    tp, pp, cp = (values.get(k, getattr(strategy, k)) for k in ("tp", "pp", "cp"))
    if num_gpus % (tp * pp * cp):
        return None
    if tp == 1:
        values["sequence_parallel"] = False
    try:
        return replace(strategy, dp=num_gpus // (tp * pp * cp), **values)
    except SpecError:
        return None


# -- conditional choice: what a sampler may pick for one knob given the knobs picked before -----
def layouts_matching(layouts: Sequence[Layout], picked: Mapping[str, Any]) -> list[Layout]:
    """Layouts that agree with the layout knobs already ``picked``."""
    idx = [(LAYOUT_KNOBS.index(k), v) for k, v in picked.items() if k in LAYOUT_KNOBS]
    return [lay for lay in layouts if all(lay[i] == v for i, v in idx)]


def nearest(value: Any, legal: Sequence[Any]) -> Any:
    """``value`` if legal, else the legal value nearest on a log scale (ties go to the smaller).

    Non-numeric knobs fall back to the first legal value.
    """
    if value in legal:
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        return legal[0]
    if value < 1 or min(legal) < 1:  # e.g. zero_stage: no log scale
        return min(legal, key=lambda v: (abs(v - value), v))
    return min(legal, key=lambda v: (abs(math.log2(v) - math.log2(value)), v))
