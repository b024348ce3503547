"""The pipeline layout object: Megatron-Core's layout strings, first/last-stage counts and embedding/loss accounting."""

from __future__ import annotations

from dataclasses import replace

import pytest

from constraints import rule_violations
from costmodel.specs import ClusterSpec, RunSpec, Strategy, get_gpu, get_model
from costmodel.specs.errors import SpecError
from costmodel.specs.layout import format_layout, layout_of, parse_layout

# Layout strings published with Megatron-LM (github.com/NVIDIA/Megatron-LM @d98e8a6) and what its
# parse_str_to_list makes of them: docs/user-guide/features/pipeline_parallel_layout.md (DeepSeek-V3,
# PP16 VPP2), transformer_config.py docstring, tests/functional_tests/test_cases/*/model_config.yaml.
MEGATRON_LAYOUTS = {
    "Et*3|(tt|)*29,m|L": ("Ettt",) + ("tt",) * 29 + ("m", "L"),
    "E|(tt|)*2,(t|)*4,mL": ("E", "tt", "tt", "t", "t", "t", "t", "mL"),
    "Et*2|(tt|)*5t|tmL": ("Ett", "tt", "tt", "tt", "tt", "tt", "t", "tmL"),
    "Et*7|t*7mL": ("Ettttttt", "tttttttmL"),
    "E||t|L": ("E", "", "t", "L"),
}


@pytest.mark.parametrize("text", sorted(MEGATRON_LAYOUTS))
def test_megatron_layout_strings_parse_as_megatron_parses_them(text: str) -> None:
    chunks = parse_layout(text)
    assert chunks == MEGATRON_LAYOUTS[text]
    assert parse_layout(format_layout(chunks)) == chunks


@pytest.mark.parametrize("text", ["Ex|L", "E t|L", "Et*3*2|L", "(t|)|L", 7])
def test_a_string_megatron_refuses_is_a_one_line_spec_error(text: object) -> None:
    with pytest.raises(SpecError, match="strategy.pipeline_layout") as err:
        parse_layout(text)
    assert "\n" not in str(err.value)


def test_a_huge_repetition_is_refused_before_it_is_unrolled() -> None:
    with pytest.raises(SpecError, match="unrolling to at most"):
        parse_layout("E(t*99999|)*99999L")
    with pytest.raises(SpecError, match="at most 4096 characters"):
        parse_layout("Et*" + "9" * 5000 + "|L")


def test_deepseek_v3_layout_places_mtp_on_its_own_stage() -> None:
    strategy = Strategy(pp=16, pipeline_layout="Et*3|(tt|)*29,m|L", global_batch_size=64)
    assert strategy.vpp == 2  # Megatron-Core derives vpp from the layout's 32 stages
    layout = layout_of(get_model("deepseek-v3-mtp"), strategy)
    assert layout.problems == ()
    assert layout.stage_layers == (5,) + (4,) * 13 + (2, 2)
    assert layout.rank_key(14) == (2, 0, 1, 0) and layout.rank_key(15) == (2, 0, 0, 1)
    assert list(layout.chunk_layer_ids(16)) == [33, 34]  # virtual stage 1 of rank 0 follows all of virtual stage 0


def test_layout_string_refusals_name_the_fields() -> None:
    with pytest.raises(SpecError, match="strategy.pipeline_layout.*multiple of strategy.pp=4"):
        Strategy(pp=4, pipeline_layout="Et|t|tL", global_batch_size=8)
    with pytest.raises(SpecError, match="strategy.vpp.*strategy.pipeline_layout"):
        Strategy(pp=2, vpp=4, pipeline_layout="Et|t|t|tL", global_batch_size=8)
    with pytest.raises(SpecError, match="strategy.pipeline_layout.*first_stage_layers"):
        Strategy(pp=2, pipeline_layout="Et|tL", first_stage_layers=1, global_batch_size=8)
    with pytest.raises(SpecError, match="account_for_embedding.*first_stage_layers"):
        Strategy(pp=2, first_stage_layers=1, account_for_embedding=True, global_batch_size=8)
    with pytest.raises(SpecError, match="strategy.first_stage_layers.*strategy.vpp=2"):
        Strategy(pp=4, vpp=2, first_stage_layers=3, global_batch_size=8)


def test_model_level_refusals_are_rule_violations() -> None:
    model = get_model("llama3.1-8b")  # 32 layers, no MTP
    assert layout_of(model, Strategy(pp=2, pipeline_layout="Et*15|t*16L")).problems  # 31 layers
    assert layout_of(model, Strategy(pp=2, pipeline_layout="t*16|Et*16L")).problems  # E not first
    assert layout_of(model, Strategy(pp=4, first_stage_layers=5, last_stage_layers=6)).problems  # 21 over 2
    assert not layout_of(model, Strategy(pp=4, first_stage_layers=6, last_stage_layers=6)).problems
    assert layout_of(model, Strategy(pp=4, account_for_embedding=True)).problems  # 33 over 4


def test_first_and_last_stage_counts_work_with_interleaving() -> None:
    # Megatron-Core accepts them when every rank's count divides by vpp (transformer_config.py):
    # 32 layers on pp 4, vpp 2: 6 + 2 x 10 + 6. The old rules refused any uneven split with vpp > 1.
    layout = layout_of(get_model("llama3.1-8b"), Strategy(pp=4, vpp=2, first_stage_layers=6, last_stage_layers=6))
    assert layout.problems == () and layout.stage_layers == (6, 10, 10, 6)
    assert [c.count("t") for c in layout.rank_chunks(1)] == [5, 5]


def _405b_megatron_recipe(**layout: object) -> RunSpec:
    """Llama 3.1 405B as Megatron-LM examples/llama/README.md (@d98e8a6, "FP8 Performance") runs it on 1024
    GPUs: TP 8, PP 8, CP 2, VP 8, MBS 1, GBS 512, seq 8192. 126 layers do not split over 8 x 8 chunks;
    NVIDIA's 405B recipes count the embedding and the loss as layers (NeMo llama31_405b perf configs,
    account_for_embedding/loss_in_pipeline_split), giving 2 per chunk, 1 in the first and the last."""
    strategy = Strategy(tp=8, pp=8, cp=2, dp=8, micro_batch_size=1, global_batch_size=512, recompute="none",
                        precision="fp8", **layout)  # type: ignore[arg-type]
    cluster = ClusterSpec(gpu=get_gpu("h100-sxm5-80gb"), num_gpus=1024, gpus_per_node=8)
    return RunSpec(model=get_model("llama3.1-405b"), cluster=cluster, strategy=strategy, seq_length=8192)


@pytest.mark.parametrize("layout", [{"vpp": 8, "account_for_embedding": True, "account_for_loss": True},
                                    {"pipeline_layout": "Et|(tt|)*62,tL"}])
def test_nvidia_405b_layout_predicts_without_a_rule_violation(layout: dict[str, object]) -> None:
    from costmodel.predict import predict_run
    from costmodel.timing import OperatorTimer

    run = _405b_megatron_recipe(**layout)
    assert run.strategy.vpp == 8
    assert rule_violations(run) == []  # (whether it fits is the memory model's call, not a rule's)
    lay = layout_of(run.model, run.strategy)
    assert lay.stage_layers == (15,) + (16,) * 6 + (15,)
    out = predict_run(run, None, timer=OperatorTimer(run.cluster.gpu, None))
    assert not any("layout" in v or "num_layers" in v for v in out["violations"])
    assert out["pipeline_layers"] == [15] + [16] * 6 + [15]
    assert out["step_time_s"] > 0


def test_both_405b_spellings_are_the_same_layout() -> None:
    accounted = _405b_megatron_recipe(vpp=8, account_for_embedding=True, account_for_loss=True)
    spelled = _405b_megatron_recipe(pipeline_layout="Et|(tt|)*62,tL")
    a, b = (layout_of(r.model, r.strategy) for r in (accounted, spelled))
    assert a.chunks == b.chunks
    assert replace(a, problems=(), account_for_embedding=False, account_for_loss=False) == replace(
        b, layout_string=None)
