"""A framework's forbidden combinations are rule violations naming it; the search never picks them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from constraints import rule_violations
from constraints.memory import fp8_weight_copy_bytes, model_state_bytes
from costmodel.specs import Strategy
from costmodel.specs.framework import get_framework, resolve_framework
from benchmarks.search import CASES, Case
from search import run_search
from tests.search.conftest import small_problem


def _run(framework: str, **strategy: object):  # type: ignore[no-untyped-def]
    problem = replace(small_problem(64), framework=get_framework(framework))
    base = {"tp": 2, "pp": 2, "dp": 16, "micro_batch_size": 1, "global_batch_size": 64}
    return problem.run(Strategy(**{**base, **strategy}))  # type: ignore[arg-type]


@pytest.mark.parametrize(("framework", "strategy", "needle"), [
    ("megatron-core", {"zero_stage": 2}, "zero_stage=2 is not offered by Megatron-Core"),
    ("deepspeed", {"zero_stage": 3}, "zero_stage=3 with pp=2 is refused by DeepSpeed"),
    ("torchtitan", {"zero_stage": 1}, "zero_stage=1 is not offered by torchtitan"),
    ("torchtitan", {"zero_stage": 3, "precision": "fp16"}, "fp16 is not supported by torchtitan"),
    ("deepspeed", {"zero_stage": 1, "tp_comm_overlap": True}, "tp_comm_overlap is not implemented by DeepSpeed"),
    ("megatron-core", {"tp_comm_overlap": True, "sequence_parallel": False}, "needs sequence_parallel"),
])
def test_forbidden_combination_is_a_violation_naming_the_framework(framework: str, strategy: dict[str, object],
                                                                   needle: str) -> None:
    assert any(needle in v for v in rule_violations(_run(framework, **strategy)))


@pytest.mark.parametrize(("framework", "strategy"), [
    ("megatron-core", {"zero_stage": 1}), ("megatron-core", {"zero_stage": 3}),
    ("deepspeed", {"zero_stage": 2, "pp": 1, "dp": 32}), ("deepspeed", {"zero_stage": 1}),
    ("torchtitan", {"zero_stage": 3}),
])
def test_allowed_combination_breaks_no_framework_rule(framework: str, strategy: dict[str, object]) -> None:
    assert not [v for v in rule_violations(_run(framework, **strategy)) if "framework" in v]


BENCHMARK_PROBLEMS = [(case, fw) for case in CASES for fw in ("megatron-core", "deepspeed", "torchtitan")]


@pytest.mark.slow
@pytest.mark.parametrize(("case", "framework"), BENCHMARK_PROBLEMS,
                         ids=[f"{c.name}-{f}" for c, f in BENCHMARK_PROBLEMS])
def test_search_results_never_use_a_combination_their_framework_forbids(case: Case, framework: str) -> None:
    problem = replace(case.problem(), framework=get_framework(framework))
    result = run_search(problem, n_trials=20, seed=0)
    assert result.feasible
    for trial in result.feasible:
        assert not [v for v in rule_violations(problem.run(trial.strategy)) if "framework" in v]
        assert trial.strategy.zero_stage in problem.framework.zero_stages


def test_bf16_grad_reduce_halves_the_kept_gradients() -> None:
    fp32 = _run("megatron-core", zero_stage=1)
    bf16 = replace(fp32, framework=resolve_framework({"name": "megatron-core", "grad_reduce_dtype": "bf16"}))
    assert model_state_bytes(bf16, 0)[1] == pytest.approx(model_state_bytes(fp32, 0)[1] / 2)


def test_fsdp2_keeps_fp32_parameters_as_the_master_copy() -> None:
    core, titan = _run("megatron-core", zero_stage=3), _run("torchtitan", zero_stage=3)
    w_core, g_core, o_core, _ = model_state_bytes(core, 0)
    w_titan, g_titan, o_titan, _ = model_state_bytes(titan, 0)
    assert w_titan == pytest.approx(2 * w_core)  # fp32 vs 16-bit parameters
    assert o_titan == pytest.approx(o_core * 8 / 12)  # Adam m, v only
    assert w_titan + g_titan + o_titan == pytest.approx((w_core + g_core + o_core) * 16 / 18)


def test_te_fp8_weight_copies_per_recipe_and_gpu() -> None:
    core = get_framework("megatron-core")
    assert fp8_weight_copy_bytes(core, "h100-sxm5-80gb") == 2  # _data + _transpose on Hopper
    assert fp8_weight_copy_bytes(core, "b200") == 1  # one buffer for both usages on Blackwell
    assert fp8_weight_copy_bytes(replace(core, fp8_recipe="mxfp8"), "b200") == pytest.approx(2 + 2 / 32)
    assert fp8_weight_copy_bytes(get_framework("torchtitan"), "h100-sxm5-80gb") == 0


def test_fp8_param_gather_replaces_the_16bit_weights() -> None:
    bf16 = _run("megatron-core", zero_stage=1)
    fp8 = replace(bf16, strategy=replace(bf16.strategy, precision="fp8"))
    gathered = replace(fp8, framework=get_framework("nemo"))
    # Hopper: the FP8 parameter (data + transpose, 2 bytes) takes the 16-bit weight's place
    assert model_state_bytes(fp8, 0)[0] > model_state_bytes(gathered, 0)[0] == pytest.approx(
        model_state_bytes(bf16, 0)[0])
