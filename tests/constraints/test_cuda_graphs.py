"""CUDA graphs as a knob (issue 14 item 1): memory by captured scope, launch time, rules, exports."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from constraints import rule_violations
from constraints.cuda_graphs import BYTES_BATCH_PER_TOKEN, static_input_bytes
from constraints.memory import inflight_chunks, layer_working_set_bytes, stage_memory
from costmodel.llm.overheads import layer_launch_exposed_s
from costmodel.specs import ClusterSpec, RunSpec, Strategy, get_gpu, get_model
from costmodel.specs.errors import SpecError
from costmodel.specs.framework import get_framework
from costmodel.timing import OperatorTimer
from search.exporters import EXPORTERS
from tests.regression.pins import load_pin_module
from tests.search.conftest import small_problem

ROOT = Path(__file__).resolve().parents[2]


def _run(model: str = "llama3.1-8b", tp: int = 2, pp: int = 4, dp: int = 2, gbs: int = 32, graphs: str = "none",
         framework: str = "megatron-core", seq: int = 4096, **strategy: object) -> RunSpec:
    s = Strategy(tp=tp, pp=pp, dp=dp, micro_batch_size=1, global_batch_size=gbs, recompute="selective",
                 cuda_graphs=graphs, **strategy)  # type: ignore[arg-type]
    g = get_gpu("h100-sxm5-80gb")
    cluster = ClusterSpec(gpu=g, num_gpus=tp * pp * dp, gpus_per_node=8)
    return RunSpec(model=get_model(model), cluster=cluster, strategy=s, seq_length=seq,
                   framework=get_framework(framework))


def _graphs(run: RunSpec, scope: str) -> RunSpec:
    return replace(run, strategy=replace(run.strategy, cuda_graphs=scope))


def _added(run: RunSpec, stage: int) -> float:
    return stage_memory(run, stage).total_bytes - stage_memory(_graphs(run, "none"), stage).total_bytes


def test_unknown_scope_is_a_one_line_spec_error() -> None:
    with pytest.raises(SpecError) as info:
        Strategy(cuda_graphs="attn")
    assert info.value.field == "strategy.cuda_graphs" and "\n" not in str(info.value)


def test_per_layer_graphs_add_one_static_input_per_chunk_in_flight_and_the_private_pool() -> None:
    run = _run(graphs="layers")
    s, h = run.strategy, run.model.hidden_size
    for stage in range(s.pp):
        copies = inflight_chunks(s, stage) * s.vpp
        assert static_input_bytes(run, copies) == pytest.approx(copies * 2 * 4096 * h / s.tp)  # SP shards it
        before = stage_memory(_graphs(run, "none"), stage).other_bytes
        pool = min(layer_working_set_bytes(run), before)
        assert _added(run, stage) == pytest.approx(static_input_bytes(run, copies) + pool)


def test_full_iteration_graphs_keep_every_micro_batch_of_data_on_the_data_stages() -> None:
    run = _run(graphs="full_iteration")
    batch = run.strategy.num_microbatches * 4096 * BYTES_BATCH_PER_TOKEN
    assert [_added(run, st_) for st_ in range(4)] == pytest.approx([batch, 0.0, 0.0, batch])


def test_llama70b_example_per_layer_graphs_cost_a_third_of_a_gib() -> None:
    """llama3.1-70b tp8 pp4 on 64 H100, mbs 1, gbs 128, seq 8192: the figure the report quotes."""
    run = _run("llama3.1-70b", tp=8, pp=4, dp=2, gbs=128, graphs="layers", seq=8192)
    static = 4 * 2 * 8192 * 8192 / 8  # 4 micro-batches in flight on stage 0, one [s/tp, b, h] bf16 copy each
    assert _added(run, 0) == pytest.approx(static + layer_working_set_bytes(run))
    assert 0.3 * 2**30 < _added(run, 0) < 0.4 * 2**30


@settings(max_examples=25, deadline=None)
@given(model=st.sampled_from(["llama3.1-8b", "megatron-22b"]), tp=st.sampled_from([1, 2, 4, 8]),
       pp=st.sampled_from([1, 2, 4]), vpp=st.sampled_from([1, 2]), micro=st.integers(1, 12))
def test_memory_grows_with_the_captured_scope_and_the_micro_batches_in_flight(
        model: str, tp: int, pp: int, vpp: int, micro: int) -> None:
    vpp = vpp if pp > 1 else 1
    run = _run(model, tp=tp, pp=pp, dp=1, gbs=micro, graphs="layers", vpp=vpp)
    more = _run(model, tp=tp, pp=pp, dp=1, gbs=micro + 1, graphs="layers", vpp=vpp)
    for stage in range(pp):
        assert _added(run, stage) >= 0.0 and _added(_graphs(run, "full_iteration"), stage) >= 0.0
        assert _added(_graphs(more, "full_iteration"), stage) >= _added(_graphs(run, "full_iteration"), stage)
        # per layer: as the chunks in flight (the interleaved warm-up depth is not monotone in the batch itself)
        if inflight_chunks(more.strategy, stage) >= inflight_chunks(run.strategy, stage):
            assert _added(more, stage) >= _added(run, stage) - 1e-6


def test_off_changes_nothing_on_a_public_row() -> None:
    pins = load_pin_module()
    pinned = {r["id"]: r["pred"] for r in json.loads((ROOT / "tests/regression/pinned_predictions.json").read_text())
              ["public"]}
    rid, run, _, _ = next(r for r in pins.public_runs() if r[1] is not None and r[1].model.name == "llama3.1-70b")
    assert run.strategy.cuda_graphs == "none"
    now = pins.pin_of(run)
    assert pins.pin_of(_graphs(run, "none")) == now
    memory = {k: v for k, v in pinned[rid].items() if k.startswith("memory.") or k == "peak_memory_gib"}
    assert memory and {k: now[k] for k in memory} == pytest.approx(memory, rel=1e-9)


@pytest.mark.parametrize("framework", ["torchtitan", "deepspeed", "automodel", "megatron-lm-2022"])
def test_a_framework_without_graphs_gets_a_rule_violation(framework: str) -> None:
    run = _run(pp=1, dp=8, graphs="layers", framework=framework, zero_stage=0)
    assert any("cuda_graphs=layers is not offered" in v for v in rule_violations(run))
    assert not any("cuda_graphs" in v for v in rule_violations(_graphs(run, "none")))


@pytest.mark.parametrize("framework", ["megatron-core", "nemo", "megatron-bridge"])
def test_megatron_frameworks_capture_both_scopes(framework: str) -> None:
    for scope in ("layers", "full_iteration"):
        assert not any("cuda_graphs" in v for v in rule_violations(_run(graphs=scope, framework=framework)))


def test_per_layer_graphs_refuse_full_recompute_and_dropless_moe() -> None:
    full = replace(_run(graphs="layers"), strategy=replace(_run(graphs="layers").strategy, recompute="full"))
    assert any("recompute=full" in v for v in rule_violations(full))
    assert not any("cuda_graphs" in v for v in rule_violations(_graphs(full, "full_iteration")))
    moe = _run("mixtral-8x7b", tp=2, pp=2, dp=4, ep=4, graphs="layers")
    assert any("drop-and-pad" in v for v in rule_violations(moe))
    padded = replace(moe, strategy=replace(moe.strategy, moe_capacity_factor=1.0))
    assert not any("cuda_graphs" in v for v in rule_violations(padded))
    assert any("drop-and-pad" in v for v in rule_violations(_graphs(padded, "full_iteration")))


def test_captured_layers_launch_once_per_pass() -> None:
    tiny = _run("gpt3-125m", tp=1, pp=1, dp=1, gbs=2, seq=128)  # launch-bound layers
    eager = layer_launch_exposed_s(tiny, OperatorTimer(tiny.cluster.gpu, None), 12, 0)
    graphed = layer_launch_exposed_s(_graphs(tiny, "layers"), OperatorTimer(tiny.cluster.gpu, None), 12, 0)
    assert eager > 0 and graphed < eager and graphed == 0.0


@pytest.mark.parametrize(("scope", "flags"), [("layers", ["--cuda-graph-impl transformer_engine"]),
                                             ("full_iteration", ["--cuda-graph-impl full_iteration",
                                                                 "--no-check-for-nan-in-loss-and-grad"])])
def test_megatron_and_nemo_exports_write_the_flag(scope: str, flags: list[str], tmp_path: Path) -> None:
    problem = small_problem(64)
    strategy = Strategy(tp=2, pp=4, dp=8, micro_batch_size=1, global_batch_size=64, cuda_graphs=scope)
    text = EXPORTERS["megatron"].write(strategy, problem, tmp_path / "m").read_text()
    assert all(flag in text for flag in flags)
    nemo = EXPORTERS["nemo"].write(strategy, problem, tmp_path / "n").read_text()
    assert f"cuda_graph_impl: {flags[0].split()[-1]}" in nemo
    plain = EXPORTERS["megatron"].write(replace(strategy, cuda_graphs="none"), problem, tmp_path / "p").read_text()
    assert "cuda-graph" not in plain


@pytest.mark.parametrize("name", ["torchtitan", "deepspeed"])
def test_exports_without_graphs_refuse_on_one_line_and_write_nothing(name: str, tmp_path: Path) -> None:
    problem = small_problem(64)
    strategy = Strategy(tp=2, pp=1, dp=32, micro_batch_size=1, global_batch_size=64, zero_stage=0,
                        cuda_graphs="layers")
    with pytest.raises(SpecError) as info:
        EXPORTERS[name].write(strategy, problem, tmp_path)
    assert info.value.field == f"{name} export: cuda_graphs" and "\n" not in str(info.value)
    assert not any(tmp_path.iterdir())
