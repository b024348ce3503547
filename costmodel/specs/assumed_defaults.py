"""Strategy knobs a run spec leaves unset, and the framework default that fills each.

A run spec that omits ``zero_stage`` or ``tp_comm_overlap`` runs with what its framework
does when the launcher is not told (``costmodel/catalog/frameworks/<name>.yaml``, each value
with its source). ``predict`` lists every such assumption as ``defaults_assumed``, so a
reader sees which numbers rest on a default rather than on the spec.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from costmodel.specs.framework import Framework
from costmodel.specs.model import ModelSpec

PARPLAN = "parplan"
"""``source`` of a default the framework has no field for (``Strategy``'s own default)."""
_STRATEGY_ZERO_STAGE = 1  # Strategy.zero_stage's default
# Strategy switches that default on, each with the Framework field saying whether the feature exists.
_ABSENT_FEATURES = (("flash_attention", "supports_flash_attention"),
                    ("overlap_grad_reduce", "supports_grad_reduce_overlap"),
                    ("sequence_parallel", "supports_sequence_parallel"))
_ABSENT_KNOBS = tuple(knob for knob, _ in _ABSENT_FEATURES)


@dataclass(frozen=True)
class AssumedDefault:
    """One unset knob: its value and whose default it is (a framework name or ``parplan``)."""

    knob: str
    value: Any
    source: str
    field: str | None = None
    """The ``Framework`` field the value was read from (``None`` for a ``parplan`` default)."""

    def to_dict(self) -> dict[str, Any]:
        """The ``defaults_assumed`` row of ``predict --json``."""
        out = {"knob": self.knob, "value": self.value, "source": self.source}
        return out if self.field is None else {**out, "field": self.field}


def zero_stage_default(framework: Framework) -> AssumedDefault:
    """Optimizer sharding when ``zero_stage`` is unset.

    The distributed optimizer where the framework turns it on (NeMo, DeepSpeed); the
    framework's parameter sharding where it has no ZeRO-1 (torchtitan FSDP2, MaxText GSPMD).
    Megatron-Core's ``--use-distributed-optimizer`` is off unless given, but every Megatron
    recipe parplan has read sets it, so parplan keeps ZeRO-1 there and says so.
    """
    if framework.distributed_optimizer:
        return AssumedDefault("zero_stage", 1, framework.name, "distributed_optimizer")
    if _STRATEGY_ZERO_STAGE not in framework.zero_stages and 3 in framework.zero_stages:
        return AssumedDefault("zero_stage", 3, framework.name, "fsdp_implementation")
    if _STRATEGY_ZERO_STAGE not in framework.zero_stages:  # no sharding at all (Megatron-LM 2021-22)
        return AssumedDefault("zero_stage", min(framework.zero_stages), framework.name, "zero_stages")
    return AssumedDefault("zero_stage", _STRATEGY_ZERO_STAGE, PARPLAN)


def framework_defaults(given: Collection[str], framework: Framework, model: ModelSpec) -> tuple[AssumedDefault, ...]:
    """The defaults that fill the knobs absent from ``given`` (the keys of a ``strategy:`` section).

    MoE knobs are listed for MoE models only. The MoE ones stay ``None`` in the ``Strategy``
    (``costmodel.llm.moe`` reads the framework then); ``zero_stage`` and ``tp_comm_overlap``
    are filled in by :func:`filled`.
    """
    out = []
    if "zero_stage" not in given:
        out.append(zero_stage_default(framework))
    if "tp_comm_overlap" not in given:
        out.append(AssumedDefault("tp_comm_overlap", framework.tp_comm_overlap, framework.name, "tp_comm_overlap"))
    for knob, field in _ABSENT_FEATURES:  # off where the framework has no such feature (Strategy default: on)
        if knob not in given and not getattr(framework, field):
            out.append(AssumedDefault(knob, False, framework.name, field))
    if model.is_moe:
        for knob in ("moe_token_dispatcher", "moe_shared_expert_overlap", "moe_a2a_overlap"):
            if knob not in given:
                out.append(AssumedDefault(knob, getattr(framework, knob), framework.name, knob))
    return tuple(out)


def filled(assumed: tuple[AssumedDefault, ...]) -> dict[str, Any]:
    """The ``Strategy`` arguments the assumed defaults set (the MoE ones stay unset)."""
    return {d.knob: d.value for d in assumed if d.knob in ("zero_stage", "tp_comm_overlap", *_ABSENT_KNOBS)}
