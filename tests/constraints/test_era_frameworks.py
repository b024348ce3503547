"""Megatron-LM 2021-22 and NeMo 1 framework files: what their code cannot run is a violation; their
gradient reduce and optimizer bytes are the ones their sources state (sources in the framework files)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from constraints import check, rule_violations
from constraints.memory import model_state_bytes, stage_memory, state_bytes_per_param
from costmodel.llm.messages import grad_reduce_bytes
from costmodel.specs import ClusterSpec, RunSpec, Strategy, get_gpu, get_model
from costmodel.specs.errors import SpecError
from costmodel.specs.framework import Framework, get_framework, resolve_framework
from costmodel.specs.runspec import run_spec_from_mapping
from search import run_search
from tests.search.conftest import small_problem

# GPT-3 175B as Korthikanti et al. 2022 Table 3 runs it (tp 8, pp 8), on 64 A100s
GPT = {"name": "gpt-175b", "num_layers": 96, "hidden_size": 12288, "num_attention_heads": 96,
       "num_query_groups": 96, "ffn_hidden_size": 49152, "vocab_size": 51200, "seq_length": 2048,
       "activation": "gelu", "normalization": "layernorm", "position_embedding": "learned"}
ERA_STRATEGY = {"tp": 8, "pp": 8, "micro_batch_size": 1, "global_batch_size": 64, "precision": "fp16",
                "recompute": "full"}


def _spec(framework: Any, gpu: str = "a100-sxm4-80gb", **strategy: Any) -> dict[str, Any]:
    return {"model": GPT, "framework": framework, "cluster": {"gpu": gpu, "num_gpus": 64},
            "strategy": {**ERA_STRATEGY, **strategy}}


def _violations(framework: Any, gpu: str = "a100-sxm4-80gb", **strategy: Any) -> list[str]:
    return rule_violations(run_spec_from_mapping(_spec(framework, gpu, **strategy)))


def test_a_2021_run_spec_that_states_none_of_the_switches_runs_what_that_code_runs() -> None:
    run = run_spec_from_mapping(_spec("megatron-lm-2021"))
    s = run.strategy
    assert (s.flash_attention, s.overlap_grad_reduce, s.sequence_parallel, s.zero_stage) == (False, False, False, 0)
    assumed = {d.knob: d.field for d in run.defaults_assumed}
    assert assumed["flash_attention"] == "supports_flash_attention"
    assert assumed["zero_stage"] == "zero_stages"
    assert not rule_violations(run)


@pytest.mark.parametrize(("framework", "strategy", "needle"), [
    ("megatron-lm-2021", {"flash_attention": True}, "flash_attention is not implemented"),
    ("megatron-lm-2021", {"overlap_grad_reduce": True}, "overlap_grad_reduce is not implemented"),
    ("megatron-lm-2021", {"sequence_parallel": True}, "sequence_parallel is not implemented"),
    ("megatron-lm-2021", {"recompute": "selective"}, "recompute=selective is not offered"),
    ("megatron-lm-2021", {"zero_stage": 1}, "zero_stage=1 is not offered"),
    ("megatron-lm-2022", {"pp": 4, "cp": 2}, "cp=2 is not implemented"),
    ("megatron-lm-2022", {"tp_comm_overlap": True, "sequence_parallel": True}, "tp_comm_overlap is not implemented"),
    ("megatron-lm-2022", {"precision": "bf16"}, "needs precision=fp16, got bf16"),
    ("nemo1", {"precision": "fp16"}, "needs bf16 parameters, got precision=fp16"),
], ids=["flash", "grad-overlap", "sp-2021", "selective-2021", "zero1", "cp", "tp-overlap", "bf16-fp16-reduce",
        "fp16-remainder"])
def test_what_the_framework_cannot_run_is_a_violation_naming_it(framework: str, strategy: dict[str, Any],
                                                                needle: str) -> None:
    found = [v for v in _violations(framework, **strategy) if needle in v]
    assert len(found) == 1
    assert f"framework {framework}" in found[0]


def test_fp8_needs_transformer_engine_which_2022_megatron_lm_lacks() -> None:
    assert any("precision=fp8 is not supported" in v
               for v in _violations("megatron-lm-2022", gpu="h100-sxm5-80gb", precision="fp8"))
    assert not any("fp8" in v for v in _violations("nemo1", gpu="h100-sxm5-80gb", precision="fp8"))


def test_the_2022_code_adds_sequence_parallelism_and_selective_recompute_only() -> None:
    assert not _violations("megatron-lm-2022", sequence_parallel=True, recompute="selective")
    assert _violations("megatron-lm-2021", sequence_parallel=True, recompute="selective")


def test_fp16_runs_reduce_and_keep_fp16_gradients_half_the_fp32_bytes() -> None:
    era = run_spec_from_mapping(_spec("megatron-lm-2022", pp=2))
    fp32 = replace(era, framework=resolve_framework({"name": "megatron-lm-2022", "grad_reduce_dtype": "fp32",
                                                     "main_grad_dtype": "fp32"}))
    assert (grad_reduce_bytes(era), grad_reduce_bytes(fp32)) == (2, 4)
    assert model_state_bytes(era, 0)[1] == pytest.approx(model_state_bytes(fp32, 0)[1] / 2)
    # a bf16 run there reduces in fp32 (Megatron-LM arguments.py forces it): legal once the file says so
    assert not rule_violations(replace(fp32, strategy=replace(fp32.strategy, precision="bf16")))


def test_nemo1_optimizer_keeps_ten_bytes_per_parameter_instead_of_twelve() -> None:
    assert state_bytes_per_param(get_framework("nemo1")) == (2, 10)  # bf16 weight; int16 remainder + fp32 m, v
    nemo1 = run_spec_from_mapping(_spec("nemo1", gpu="h100-sxm5-80gb", precision="bf16", zero_stage=1))
    core = replace(nemo1, framework=get_framework("megatron-core"))
    w1, g1, o1, _ = model_state_bytes(nemo1, 0)
    w0, g0, o0, _ = model_state_bytes(core, 0)
    assert (w1, g1) == pytest.approx((w0, g0))
    assert o1 == pytest.approx(o0 * 10 / 12)


def test_a_remainder_master_needs_a_separate_master_copy() -> None:
    with pytest.raises(SpecError) as err:
        Framework(name="x", display_name="x", exporter="none", master_weights_dtype="bf16+int16-remainder",
                  separate_master_weights=False)
    assert err.value.field == "framework x.master_weights_dtype"


def test_recompute_modes_must_hold_none_and_known_modes() -> None:
    with pytest.raises(SpecError):
        resolve_framework({"name": "megatron-lm-2021", "recompute_modes": ["full"]})
    with pytest.raises(SpecError):
        resolve_framework({"name": "megatron-lm-2021", "recompute_modes": ["none", "offload"]})


def test_search_under_the_2021_framework_proposes_nothing_its_code_lacks() -> None:
    # search.space holds the launch switches at the Strategy defaults (flash on, overlap on) unless fixed
    problem = replace(small_problem(16, fixed={"flash_attention": False, "overlap_grad_reduce": False,
                                               "precision": "fp16"}),
                      gpu=small_problem().gpu, framework=get_framework("megatron-lm-2021"))
    result = run_search(problem, n_trials=30, seed=0)
    assert result.feasible
    for trial in result.feasible:
        s = trial.strategy
        assert (s.zero_stage, s.cp, s.sequence_parallel, s.flash_attention) == (0, 1, False, False)
        assert s.recompute in ("none", "full")
        assert not check(problem.run(s)).violations


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["llama3.1-8b", "megatron-22b", "mixtral-8x7b"]), st.sampled_from([1, 2, 4]),
       st.sampled_from([1, 2, 4]), st.sampled_from([0, 1]), st.sampled_from(["none", "full"]))
def test_remainder_master_and_fp16_gradients_never_raise_memory(model: str, tp: int, pp: int, zero: int,
                                                                recompute: str) -> None:
    s = Strategy(tp=tp, pp=pp, dp=2, micro_batch_size=1, global_batch_size=16, zero_stage=zero, recompute=recompute)
    cluster = ClusterSpec(gpu=get_gpu("h100-sxm5-80gb"), num_gpus=tp * pp * 2, gpus_per_node=8)
    fp32 = RunSpec(model=get_model(model), cluster=cluster, strategy=s, seq_length=4096,
                   framework=get_framework("megatron-core"))
    remainder = replace(fp32, framework=replace(fp32.framework, master_weights_dtype="bf16+int16-remainder"))
    fp16_grads = replace(fp32, framework=replace(fp32.framework, grad_reduce_dtype="fp16"))
    for low in (remainder, fp16_grads):
        for stage in range(pp):
            assert stage_memory(low, stage).total_bytes < stage_memory(fp32, stage).total_bytes


def test_a_search_under_2021_megatron_needs_no_flags_to_find_a_strategy() -> None:
    """The space holds every switch the framework lacks off (and offers no CP, SP, FP8 or selective recompute),
    so a plain search under the old code finds strategies instead of rejecting all of them."""
    from costmodel.specs.catalog import get_gpu, get_model
    from costmodel.specs.framework import get_framework
    from search.space import SearchProblem, build_space

    problem = SearchProblem(model=get_model("megatron-7.5b"), gpu=get_gpu("a100-sxm4-80gb"), num_gpus=16,
                            global_batch_size=64, seq_length=2048, framework=get_framework("megatron-lm-2021"))
    space = build_space(problem)
    assert space.choices["flash_attention"] == (False,) and space.choices["overlap_grad_reduce"] == (False,)
    assert space.choices["cp"] == (1,) and space.choices["sequence_parallel"] == (False,)
    assert "fp8" not in space.choices["precision"] and "selective" not in space.choices["recompute"]
