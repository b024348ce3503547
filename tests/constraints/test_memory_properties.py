"""Monotonicity properties of the memory model (hypothesis)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from constraints.memory import model_state_bytes, peak_stage_memory, stage_memory
from costmodel.specs import ClusterSpec, RunSpec, Strategy, get_gpu, get_model

MODELS = ["llama3.1-8b", "llama3.1-70b", "gpt3-175b", "mixtral-8x7b", "megatron-22b"]
POW2 = st.sampled_from([1, 2, 4, 8])


def _run(model: str, tp: int, pp: int, dp: int, zero: int, recompute: str = "none", sp: bool = False,
         mbs: int = 1, seq: int = 2048) -> RunSpec:
    strategy = Strategy(tp=tp, pp=pp, dp=dp, micro_batch_size=mbs, global_batch_size=64 * dp * mbs,
                        zero_stage=zero, recompute=recompute, sequence_parallel=sp and tp > 1)
    cluster = ClusterSpec(gpu=get_gpu("h100-sxm5-80gb"), num_gpus=tp * pp * dp, gpus_per_node=8)
    return RunSpec(model=get_model(model), cluster=cluster, strategy=strategy, seq_length=seq)


def _states(run: RunSpec) -> float:
    return max(sum(model_state_bytes(run, st_)[:3]) for st_ in (0, run.strategy.pp - 1))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(MODELS), POW2, POW2, POW2, st.sampled_from([0, 1, 2, 3]))
def test_states_never_grow_with_tp_pp_or_zero(model: str, tp: int, pp: int, dp: int, zero: int) -> None:
    base = _states(_run(model, tp, pp, dp, zero))
    assert _states(_run(model, tp * 2, pp, dp, zero)) <= base * (1 + 1e-12)
    assert _states(_run(model, tp, pp * 2, dp, zero)) <= base * (1 + 1e-12)
    if zero < 3:
        assert _states(_run(model, tp, pp, dp, zero + 1)) <= base * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(MODELS), POW2, POW2, st.booleans(), st.sampled_from([1, 2, 4]),
       st.sampled_from([1024, 2048, 8192]))
def test_activations_never_grow_with_stronger_recompute(model: str, tp: int, pp: int, sp: bool, mbs: int,
                                                          seq: int) -> None:
    acts = [stage_memory(_run(model, tp, pp, 2, 1, rc, sp, mbs, seq), 0).activations_bytes
            for rc in ("none", "selective", "full")]
    assert acts[0] >= acts[1] >= acts[2]


def test_unfused_attention_stores_scores_that_selective_recompute_drops() -> None:
    run = _run("gpt3-175b", 8, 8, 1, 0)
    unfused = replace(run, strategy=replace(run.strategy, flash_attention=False))
    selective = replace(unfused, strategy=replace(unfused.strategy, recompute="selective"))
    a_unfused = stage_memory(unfused, 0).activations_bytes
    assert a_unfused > 1.5 * stage_memory(selective, 0).activations_bytes
    assert a_unfused > stage_memory(run, 0).activations_bytes


def test_zero_shards_optimizer_over_dp() -> None:
    z0 = peak_stage_memory(_run("llama3.1-8b", 1, 1, 8, 0))
    z1 = peak_stage_memory(_run("llama3.1-8b", 1, 1, 8, 1))
    assert z1.optimizer_bytes == z0.optimizer_bytes / 8
    assert z1.weights_bytes == z0.weights_bytes
