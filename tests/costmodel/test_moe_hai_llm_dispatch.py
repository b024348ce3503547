"""HAI-LLM (DeepSeek) dispatches tokens as DeepEP does: once per destination device (the flex dispatcher),
so a search under it holds the DeepSeek-V3 report's recipe (flex, DualPipe)."""

from __future__ import annotations

from pathlib import Path

from costmodel.llm import moe
from costmodel.specs.framework import get_framework
from costmodel.specs.runspec import run_spec_from_mapping
from search import SearchProblem, build_space
from studies.validate import load_validation_set, with_row_framework

PUBLIC = Path(__file__).resolve().parents[2] / "studies" / "validation" / "public.yaml"


def test_hai_llm_dispatches_with_deepep_s_flex_dispatcher() -> None:
    assert get_framework("hai-llm").moe_token_dispatcher == "flex"


def test_deepseek_v2_row_moves_fewer_bytes_than_megatron_s_allgather() -> None:
    entry = next(e for e in load_validation_set(PUBLIC) if e["id"] == "deepseekv2-report-h800-1024gpu")
    run = run_spec_from_mapping(with_row_framework(entry), PUBLIC.parent)
    assert moe.dispatcher(run) == "flex"
    flex = sum(t.message_bytes for t in moe.flex_transfers(run))
    allgather = sum(t.message_bytes for t in moe.allgather_transfers(run))
    assert flex < allgather  # a token reaches ~4.5 of the 8 ranks (top-6 of 160), not all 8


def test_the_deepseek_v3_recipe_lies_in_the_space_a_search_under_hai_llm_explores() -> None:
    entry = next(e for e in load_validation_set(PUBLIC) if e["id"] == "deepseek-v3-report-h800-2048gpu")
    run = run_spec_from_mapping(with_row_framework(entry), PUBLIC.parent)
    s = run.strategy
    problem = SearchProblem(model=run.model, gpu=run.cluster.gpu, num_gpus=run.cluster.num_gpus,
                            global_batch_size=s.global_batch_size, seq_length=run.seq_length,
                            gpus_per_node=run.cluster.gpus_per_node, framework=run.framework,
                            fixed=(("precision", s.precision), ("moe_routing", "uniform"),
                                   ("pipeline_schedule", "dualpipe")))
    assert build_space(problem).contains(s)
