"""One builder of a :class:`search.space.SearchProblem` from parsed pieces, with every default in one place.

``parplan search`` (flags), ``parplan.search`` (a mapping or a run) and studies (a study file) parse
their own input and hand the pieces to :func:`build_problem`; what a piece left out becomes is
decided only here:

- model, GPU, GPU count, node size, batch, sequence length and framework: the run's when a run is
  given (the node size and sequence length only where the GPU and model are the run's too);
- global batch: :data:`DEFAULT_BATCH_TOKENS` tokens, in whole sequences;
- sequence length: the model's;
- framework: ``costmodel.specs.framework.DEFAULT_FRAMEWORK``;
- memory margin: ``constraints.oom.default_memory_margin()``;
- bounds: ``search.space.SearchBounds``' defaults.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from costmodel.specs.errors import SpecError

if TYPE_CHECKING:  # imported on use: parplan.api re-exports DEFAULT_BATCH_TOKENS and must import cheaply
    from costmodel.specs.framework import Framework
    from costmodel.specs.gpu import GPUSpec
    from costmodel.specs.model import ModelSpec
    from costmodel.specs.runspec import RunSpec
    from search.space import SearchProblem

DEFAULT_BATCH_TOKENS = 4 * 1024**2
"""Tokens per step of a search whose problem states no batch: Llama 3 trained 405B with an initial
batch of 4M tokens (Dubey et al. 2024, arXiv:2407.21783, section 3.4.1)."""

KnobPairs = Mapping[str, Any] | Sequence[tuple[str, Any]]


def default_global_batch_size(seq_length: int) -> int:
    """Sequences per step for :data:`DEFAULT_BATCH_TOKENS` tokens at ``seq_length`` (at least one)."""
    return max(1, round(DEFAULT_BATCH_TOKENS / seq_length))


def build_problem(*, run: RunSpec | None = None, model: ModelSpec | None = None, gpu: GPUSpec | None = None,
                  num_gpus: int | None = None, global_batch_size: int | None = None, seq_length: int | None = None,
                  gpus_per_node: int | None = None, framework: Framework | None = None, fixed: KnobPairs = (),
                  allowed: KnobPairs = (), bounds: Mapping[str, int | None] | None = None,
                  memory_margin: float | None = None, section: str = "") -> SearchProblem:
    """The search problem of the given pieces; ``None`` (or left out) takes the default above.

    Parameters
    ----------
    run : RunSpec, optional
        The run searched from: it supplies every piece not given.
    fixed, allowed : mapping or pairs
        ``{knob: value}`` and ``{knob: values}``, values already typed; a single allowed value that
        is not a list or tuple counts as a list of one.
    bounds : mapping, optional
        ``max_tp`` ... ``max_micro_batch_size`` (``search.space.BOUND_NAMES``).
    section : str
        Prefix of the field names in errors (``"problem."`` for the Python API).

    Raises
    ------
    SpecError
        A piece that is missing with no run to take it from, or a knob that is not one of
        ``search.space.FIXABLE``.
    """
    from constraints.oom import default_memory_margin
    from search.space import SearchProblem

    if run is None:
        for name, value in (("model", model), ("gpu", gpu), ("num_gpus", num_gpus)):
            if value is None:
                raise SpecError(section + name, None, "given (or a run to search from)")
    else:
        if seq_length is None and model is None:
            seq_length = run.seq_length
        if gpus_per_node is None and gpu is None:
            gpus_per_node = run.cluster.gpus_per_node
        model = run.model if model is None else model
        gpu = run.cluster.gpu if gpu is None else gpu
        num_gpus = run.cluster.num_gpus if num_gpus is None else num_gpus
        global_batch_size = run.strategy.global_batch_size if global_batch_size is None else global_batch_size
        framework = run.framework if framework is None else framework
    assert model is not None and gpu is not None and num_gpus is not None
    seq = model.seq_length if seq_length is None else seq_length
    extra = {} if framework is None else {"framework": framework}
    return SearchProblem(
        model=model, gpu=gpu, num_gpus=num_gpus, seq_length=seq,
        global_batch_size=default_global_batch_size(seq) if global_batch_size is None else global_batch_size,
        gpus_per_node=gpus_per_node, fixed=_knobs(fixed, section + "fix"),
        allowed=tuple((k, _values(v)) for k, v in _knobs(allowed, section + "allow")), **dict(bounds or {}),
        memory_margin=default_memory_margin() if memory_margin is None else memory_margin, **extra)


def _knobs(pairs: KnobPairs, field: str) -> tuple[tuple[str, Any], ...]:
    from search.space import FIXABLE

    items = tuple(pairs.items() if isinstance(pairs, Mapping) else pairs)
    for knob, _ in items:
        if knob not in FIXABLE:
            raise SpecError(field, knob, "one of " + ", ".join(FIXABLE))
    return items


def _values(values: Any) -> tuple[Any, ...]:
    return tuple(values) if isinstance(values, (list, tuple, set, frozenset)) else (values,)
