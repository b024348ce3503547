"""Every pipeline layout round-trips: spec -> rules -> memory -> export -> each framework's own parser -> layout."""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from constraints import rule_violations
from constraints.memory import peak_stage_memory
from costmodel.specs import Strategy, get_model
from costmodel.specs.errors import SpecError
from costmodel.specs.layout import layout_of, parse_layout
from search.exporters import EXPORTERS
from search.exporters._nemo import layout_keys
from search.exporters._torchtitan import model_parts
from tests.search.conftest import small_problem
from tests.search.test_exporters import megatron_parser

# Megatron-LM's own layout strings (@d98e8a6) with a model of the layers they hold: the DeepSeek-V3 layout
# of docs/user-guide/features/pipeline_parallel_layout.md and the flex-layout functional tests
# (tests/functional_tests/test_cases/mixtral/deepseekv3_proxy_flex_*, moe/gpt3_*_pp2_*).
V3 = get_model("deepseek-v3-mtp")
CASES: dict[str, tuple[Any, Strategy]] = {
    "deepseek-v3-pp16-vpp2": (replace(V3, num_layers=61), Strategy(
        tp=1, pp=16, dp=4, ep=4, micro_batch_size=1, global_batch_size=64, pipeline_layout="Et*3|(tt|)*29,m|L")),
    "proxy-pp4": (replace(V3, num_layers=14), Strategy(
        tp=1, pp=4, dp=16, ep=16, micro_batch_size=1, global_batch_size=64, pipeline_layout="Et*2|(tt|)*5t|tmL")),
    "proxy-pp2": (replace(V3, num_layers=14), Strategy(
        tp=2, pp=2, dp=16, ep=16, micro_batch_size=1, global_batch_size=64, pipeline_layout="Et*7|t*7mL")),
    "gpt-pp2-no-mtp": (replace(V3, num_layers=15, mtp_num_layers=0), Strategy(
        tp=2, pp=2, dp=16, ep=4, micro_batch_size=1, global_batch_size=64, pipeline_layout="Et*3|(tt|)*6L")),
    "first-last-interleaved": (get_model("llama3.1-8b"), Strategy(
        tp=2, pp=4, dp=8, vpp=2, micro_batch_size=1, global_batch_size=64, first_stage_layers=6,
        last_stage_layers=6)),
    "accounted": (replace(get_model("llama3.1-8b"), num_layers=30), Strategy(
        tp=2, pp=2, dp=16, vpp=2, micro_batch_size=1, global_batch_size=64, account_for_embedding=True,
        account_for_loss=True)),
}
EXPORTS = ("megatron", "slurm", "nemo", "torchtitan")


def _megatron_layout(argv: list[str], model: Any) -> Strategy:
    parser = megatron_parser()
    parser.add_argument("--pipeline-model-parallel-layout")
    parser.add_argument("--num-virtual-stages-per-pipeline-rank", type=int)
    parser.add_argument("--account-for-embedding-in-pipeline-split", action="store_true")
    parser.add_argument("--account-for-loss-in-pipeline-split", action="store_true")
    a, _ = parser.parse_known_args(argv)
    pp = a.pipeline_model_parallel_size
    if a.num_virtual_stages_per_pipeline_rank:
        vpp = a.num_virtual_stages_per_pipeline_rank
    elif a.num_layers_per_virtual_pipeline_stage:  # arguments.py counts the accounted embedding/loss as layers
        units = model.num_layers + a.account_for_embedding_in_pipeline_split + a.account_for_loss_in_pipeline_split
        vpp = units // (pp * a.num_layers_per_virtual_pipeline_stage)
    else:
        vpp = 1
    return Strategy(pp=pp, vpp=vpp, pipeline_layout=a.pipeline_model_parallel_layout,
                    first_stage_layers=a.decoder_first_pipeline_num_layers,
                    last_stage_layers=a.decoder_last_pipeline_num_layers,
                    account_for_embedding=a.account_for_embedding_in_pipeline_split,
                    account_for_loss=a.account_for_loss_in_pipeline_split)


def read_back(name: str, text: str, model: Any, strategy: Strategy) -> tuple[str, ...]:
    """The layout's chunks as the framework reads the export."""
    if name == "megatron":
        lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
        return layout_of(model, _megatron_layout(shlex.split(" ".join(lines)), model)).chunks
    if name == "slurm":
        block = text.split("MEGATRON_ARGS=(\n", 1)[1].split("\n)\n", 1)[0]
        return layout_of(model, _megatron_layout(shlex.split(block), model)).chunks
    if name == "nemo":
        m = yaml.safe_load(text)["model"] if text.startswith("#") else yaml.safe_load(text)
        back = Strategy(pp=m["pipeline_model_parallel_size"], vpp=m["virtual_pipeline_model_parallel_size"] or 1,
                        pipeline_layout=m.get("pipeline_model_parallel_layout"),
                        first_stage_layers=m.get("num_layers_in_first_pipeline_stage"),
                        last_stage_layers=m.get("num_layers_in_last_pipeline_stage"),
                        account_for_embedding=m.get("account_for_embedding_in_pipeline_split", False),
                        account_for_loss=m.get("account_for_loss_in_pipeline_split", False))
        return layout_of(model, back).chunks
    flag = "--parallelism.module-fqns-per-model-part "
    parts = [p.split(",") for p in text.split(flag, 1)[1].splitlines()[0].split()]
    # torchtitan has no MTP module: compare what it can say (embedding, layers by index, norm + output)
    return tuple(("E" if "tok_embeddings" in part else "") + "t" * sum(n.startswith("layers.") for n in part)
                 + ("L" if "output" in part else "") for part in parts)


@pytest.mark.parametrize("name", EXPORTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_layout_round_trips_through_every_export(case: str, name: str, tmp_path: Path) -> None:
    model, strategy = CASES[case]
    problem = small_problem(64, model=model)
    run = problem.run(strategy)
    assert not [v for v in rule_violations(run) if "layout" in v or "num_layers" in v or "stage" in v]
    layout = layout_of(model, strategy)
    assert peak_stage_memory(run).total_bytes > 0
    if name == "torchtitan":
        strategy = replace(strategy, zero_stage=0)  # torchtitan has no ZeRO-1
    try:
        back = read_back(name, EXPORTERS[name].write(strategy, problem, tmp_path).read_text(), model, strategy)
    except SpecError as exc:  # a model copy no recipe builds: its layout as the export would write it
        assert exc.field == f"{name} export: model"
        back = (read_back(name, yaml.safe_dump({"pipeline_model_parallel_size": strategy.pp,
                                                "virtual_pipeline_model_parallel_size": strategy.vpp
                                                if strategy.vpp > 1 else None, **layout_keys(strategy, problem)}),
                          model, strategy) if name == "nemo" else
                tuple(("E" if "tok_embeddings" in part else "") + "t" * sum(n.startswith("layers.") for n in part)
                      + ("L" if "output" in part else "") for part in model_parts(layout_of(model, strategy))))
    expected = layout.chunks if name != "torchtitan" else tuple(c.replace("m", "") for c in layout.chunks)
    assert back == expected


def test_a_layout_string_is_exported_as_given() -> None:
    model, strategy = CASES["deepseek-v3-pp16-vpp2"]
    text = EXPORTERS["megatron"].render(strategy, small_problem(64, model=model))
    assert "--pipeline-model-parallel-layout Et*3|(tt|)*29,m|L" in text
    assert "--num-layers-per-virtual-pipeline-stage" not in text  # arguments.py refuses both
    assert parse_layout(strategy.pipeline_layout) == layout_of(model, strategy).chunks
