"""Model-state and activation terms that follow the framework: Automodel's bf16 states, FSDP resharding,
DeepSeek-V3's recomputation, FP8 activation cache and DualPipe copies, MTP layers."""

from __future__ import annotations

import pytest

from constraints.memory import (deepseek_v3_saved_activation_bytes_per_layer, model_state_bytes, params_on_gpu,
                                stage_memory, state_bytes_per_param, zero3_gather_layers)
from costmodel.specs.framework import get_framework, resolve_framework
from costmodel.specs.runspec import run_spec_from_mapping

QWEN = {"model": "qwen3-30b-a3b", "seq_length": 4096, "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 8},
        "strategy": {"tp": 1, "pp": 1, "dp": 8, "ep": 8, "micro_batch_size": 1, "global_batch_size": 64,
                     "zero_stage": 3, "recompute": "full"}}
DSV3 = {"model": "deepseek-v3-mtp", "seq_length": 4096, "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 2048},
        "strategy": {"tp": 1, "pp": 16, "dp": 128, "ep": 64, "micro_batch_size": 1, "global_batch_size": 15360,
                     "precision": "fp8", "recompute": "selective", "zero_stage": 1}}
# DeepSeek-V3 as its report trains it (the public.yaml row's framework mapping, sources there)
HAI_V3 = {"name": "hai-llm", "adam_moments_dtype": "bf16", "fp8_activation_cache": True,
          "selective_recompute": "deepseek-v3"}


def _run(base: dict, framework: object, **strategy: object):  # type: ignore[no-untyped-def]
    return run_spec_from_mapping({**base, "framework": framework, "strategy": {**base["strategy"], **strategy}})


@pytest.mark.parametrize(("name", "expected"), [
    ("megatron-core", (2, 12)),  # bf16 weights + fp32 master, m, v (Megatron dist_optimizer.md: 18 with fp32 grads)
    ("torchtitan", (4, 8)),  # FSDP2: the fp32 parameters are the master
    ("automodel", (2, 4)),  # bf16 parameters stepped in place, bf16 moments
    (HAI_V3, (2, 8)),  # fp32 master, bf16 moments (DeepSeek-V3 3.3.4)
], ids=["megatron-core", "torchtitan", "automodel", "deepseek-v3"])
def test_state_bytes_follow_master_and_moment_dtypes(name: object, expected: tuple[int, int]) -> None:
    assert state_bytes_per_param(resolve_framework(name)) == expected


def test_automodel_states_are_half_of_torchtitan_for_the_same_fsdp2_run() -> None:
    titan = model_state_bytes(_run(QWEN, "torchtitan"), 0)
    auto = model_state_bytes(_run(QWEN, "automodel"), 0)
    assert sum(auto[:3]) == pytest.approx(sum(titan[:3]) / 2)


def test_reshard_after_forward_never_keeps_the_whole_stage_gathered() -> None:
    never = _run(QWEN, "automodel")
    always = _run(QWEN, {"name": "automodel", "fsdp_reshard_after_forward": "always"})
    assert zero3_gather_layers(never, 0) == never.model.num_layers
    assert zero3_gather_layers(always, 0) == 1 + always.framework.fsdp_prefetch_layers
    assert stage_memory(never, 0).other_bytes > stage_memory(always, 0).other_bytes


def test_torchtitan_keeps_its_not_pp_rule() -> None:
    assert zero3_gather_layers(_run(QWEN, "torchtitan"), 0) == 2
    pp = run_spec_from_mapping({**QWEN, "framework": "torchtitan", "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 16},
                                "strategy": {**QWEN["strategy"], "pp": 2}})
    assert zero3_gather_layers(pp, 0) == 24


def test_dualpipe_doubles_the_weights_only() -> None:
    """arXiv 2412.19437 Sec. 3.2.1 / the DualPipe README: two copies of the parameters (not of their states)."""
    one = _run(DSV3, HAI_V3)
    two = _run(DSV3, HAI_V3, pipeline_schedule="dualpipe")
    (w1, g1, o1, _), (w2, g2, o2, _) = model_state_bytes(one, 3), model_state_bytes(two, 3)
    assert (w2, g2, o2) == pytest.approx((2 * w1, g1, o1))


def test_parameter_copies_follow_the_schedule_not_a_framework_field() -> None:
    from costmodel.specs.errors import SpecError
    assert _run(DSV3, HAI_V3).strategy.pipeline_parameter_copies == 1
    assert _run(DSV3, HAI_V3, pipeline_schedule="dualpipe").strategy.pipeline_parameter_copies == 2
    with pytest.raises(SpecError) as err:
        resolve_framework({"name": "hai-llm", "pipeline_parameter_copies": 2})
    assert err.value.field.startswith("framework")


def test_deepseek_recompute_keeps_less_than_megatron_selective_and_fp8_halves_the_linear_inputs() -> None:
    run = _run(DSV3, HAI_V3)
    model, s = run.model, run.strategy
    bf16 = deepseek_v3_saved_activation_bytes_per_layer(model, s, 4096, moe=True)
    fp8 = deepseek_v3_saved_activation_bytes_per_layer(model, s, 4096, moe=True, fp8_cache=True)
    megatron = stage_memory(_run(DSV3, "megatron-core"), 3).activations_bytes
    assert fp8 < bf16
    assert stage_memory(run, 3).activations_bytes < megatron / 2
    # hand count, FP8 cache, one 4096-token micro-batch of a DeepSeek-V3 MoE layer (h 7168, 128 heads x 128 v,
    # latents 1536 + 512 + 64, top-8 of 256 experts of 2048 plus one shared):
    tokens, h = 4096, 7168
    expected = (2 * 2 * tokens * h + 2 * tokens * (1536 + 512 + 64) + 1.5 * tokens * 128 * 128 + 4 * 128 * tokens
                + 9 * tokens * (h + 2 * 2048) + 4 * tokens * 256)
    assert fp8 == pytest.approx(expected)


def test_mtp_layer_adds_parameters_activations_and_a_second_logits_buffer() -> None:
    with_mtp = _run(DSV3, "megatron-core")
    without = run_spec_from_mapping({**DSV3, "model": "deepseek-v3"})
    last = with_mtp.strategy.pp - 1
    assert sum(params_on_gpu(with_mtp, last)) > sum(params_on_gpu(without, last))
    m_with, m_without = stage_memory(with_mtp, last), stage_memory(without, last)
    assert m_with.activations_bytes > m_without.activations_bytes
    assert m_with.other_bytes > m_without.other_bytes
    assert sum(params_on_gpu(with_mtp, 0)) == sum(params_on_gpu(without, 0))


@pytest.mark.parametrize(("field", "value"), [("master_weights_dtype", "fp16"), ("adam_moments_dtype", "int8"),
                                              ("fsdp_reshard_after_forward", "sometimes"),
                                              ("pipeline_schedules", ["zb-v"])])
def test_bad_framework_memory_knob_names_the_field(field: str, value: object) -> None:
    from costmodel.specs.errors import SpecError
    with pytest.raises(SpecError) as err:
        resolve_framework({"name": "automodel", field: value})
    assert err.value.field == f"framework.{field}"

