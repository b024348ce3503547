"""Monotonicity of per-GPU memory in the framework and MoE knobs of issue 14 (hypothesis).

Offloading more layers, resharding sooner, fewer parameter copies, narrower optimizer dtypes,
an FP8 activation cache and fewer dispatched rows never raise any stage's memory. (HSDP group
size: tests/constraints/test_hsdp.py; pipeline layouts: test_memory_layout_properties.py.)
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from constraints.memory import stage_memory
from costmodel.specs import ClusterSpec, RunSpec, Strategy, get_gpu, get_model
from costmodel.specs.framework import get_framework

DENSE = ["llama3.1-8b", "megatron-22b"]
MOE = ["mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3"]
POW2 = st.sampled_from([1, 2, 4])


def _run(model: str, tp: int, pp: int, dp: int, zero: int, recompute: str, framework: str = "megatron-core",
         ep: int = 1, precision: str = "bf16", **strategy: object) -> RunSpec:
    m = get_model(model)
    s = Strategy(tp=tp, pp=pp, dp=dp, ep=ep, micro_batch_size=1, global_batch_size=8 * dp, zero_stage=zero,
                 recompute=recompute, precision=precision, **strategy)  # type: ignore[arg-type]
    cluster = ClusterSpec(gpu=get_gpu("h100-sxm5-80gb"), num_gpus=tp * pp * dp, gpus_per_node=8)
    return RunSpec(model=m, cluster=cluster, strategy=s, seq_length=4096, framework=get_framework(framework))


def _with(run: RunSpec, **fields: object) -> RunSpec:
    return replace(run, framework=replace(run.framework, **fields))


def _totals(run: RunSpec) -> list[float]:
    return [stage_memory(run, st_).total_bytes for st_ in range(run.strategy.pp)]


def _never_above(low: RunSpec, high: RunSpec) -> bool:
    return all(a <= b * (1 + 1e-12) for a, b in zip(_totals(low), _totals(high), strict=True))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(DENSE + MOE), POW2, POW2, st.sampled_from(["none", "selective", "full"]),
       st.integers(0, 8), st.integers(0, 8))
def test_offloading_more_layers_never_raises_memory(model: str, tp: int, pp: int, recompute: str, a: int,
                                                    b: int) -> None:
    run = _run(model, tp, pp, 2, 1, recompute)
    fewer, more = sorted((a, b))
    assert _never_above(_with(run, cpu_offloading_num_layers=more), _with(run, cpu_offloading_num_layers=fewer))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(DENSE + MOE), POW2, st.sampled_from([2, 4, 8]), st.sampled_from(["none", "full"]))
def test_resharding_sooner_never_raises_memory(model: str, pp: int, dp: int, recompute: str) -> None:
    run = _run(model, 1, pp, dp, 3, recompute, framework="automodel")
    always, not_pp, never = (_with(run, fsdp_reshard_after_forward=k) for k in ("always", "not_pp", "never"))
    assert _never_above(always, not_pp) and _never_above(not_pp, never)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(DENSE + MOE), POW2, st.sampled_from([2, 4]), st.sampled_from([0, 1, 3]))
def test_dualpipe_parameter_copies_never_lower_memory(model: str, tp: int, pp: int, zero: int) -> None:
    run = _run(model, tp, pp, 2, zero, "selective", framework="hai-llm")
    assert _never_above(run, replace(run, strategy=replace(run.strategy, pipeline_schedule="dualpipe")))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(DENSE + MOE), POW2, POW2, st.sampled_from([0, 1, 3]),
       st.sampled_from(["megatron-core", "torchtitan", "deepspeed"]))
def test_bf16_master_weights_and_moments_never_raise_memory(model: str, tp: int, pp: int, zero: int,
                                                           framework: str) -> None:
    run = _run(model, tp, pp, 2, zero, "full", framework=framework)
    moments = _with(run, adam_moments_dtype="bf16")
    both = _with(moments, master_weights_dtype="bf16")
    assert _never_above(moments, run) and _never_above(both, moments)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["deepseek-v3", "deepseek-v3-mtp"]), st.sampled_from([4, 8, 16]))
def test_fp8_activation_cache_never_raises_memory(model: str, pp: int) -> None:
    run = _with(_run(model, 1, pp, 8, 1, "selective", ep=8, precision="fp8"), selective_recompute="deepseek-v3")
    assert _never_above(_with(run, fp8_activation_cache=True), run)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(MOE), POW2, st.floats(1.0, 4.0), st.floats(1.0, 4.0),
       st.sampled_from(["alltoall", "flex"]))
def test_more_dispatched_rows_never_lower_memory(model: str, pp: int, a: float, b: float, dispatcher: str) -> None:
    low, high = sorted((a, b))
    base = dict(ep=8, moe_token_dispatcher=dispatcher)
    for knob in ("moe_load_imbalance", "moe_capacity_factor"):
        assert _never_above(_run(model, 1, pp, 8, 1, "selective", **base, **{knob: low}),
                            _run(model, 1, pp, 8, 1, "selective", **base, **{knob: high}))
