"""``search.problem.build_problem``: one place for a search problem's defaults, used by CLI, API and studies."""

from __future__ import annotations

import argparse

import pytest

from constraints.oom import default_memory_margin
from costmodel.specs import get_gpu, get_model
from costmodel.specs.errors import SpecError
from costmodel.specs.framework import DEFAULT_FRAMEWORK, get_framework
from costmodel.specs.runspec import run_spec_from_mapping
from parplan import api, cli_search
from search.problem import DEFAULT_BATCH_TOKENS, build_problem, default_global_batch_size
from search.space import SearchBounds
from studies.problems import Problem
from studies.spec import SearchSettings

H100 = "h100-sxm5-80gb"
RUN = {"model": "llama3.1-8b", "seq_length": 4096, "framework": "torchtitan",
       "cluster": {"gpu": H100, "num_gpus": 16, "gpus_per_node": 4},
       "strategy": {"tp": 2, "pp": 1, "dp": 8, "micro_batch_size": 1, "global_batch_size": 96}}


def _cli_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="parplan")
    cli_search.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["search", *argv])


def test_defaults_of_a_bare_problem() -> None:
    model = get_model("llama3.1-8b")
    p = build_problem(model=model, gpu=get_gpu(H100), num_gpus=16)
    assert p.seq_length == model.seq_length
    assert p.global_batch_size == round(DEFAULT_BATCH_TOKENS / model.seq_length) == default_global_batch_size(
        model.seq_length)
    assert p.memory_margin == default_memory_margin() > 0
    assert p.framework.name == DEFAULT_FRAMEWORK
    assert p.bounds == SearchBounds().bounds and p.gpus_per_node is None and p.fixed == () and p.allowed == ()


def test_default_batch_is_at_least_one_sequence() -> None:
    assert default_global_batch_size(DEFAULT_BATCH_TOKENS * 4) == 1


def test_a_run_supplies_every_piece_not_given() -> None:
    run = run_spec_from_mapping(RUN)
    p = build_problem(run=run)
    assert (p.model, p.gpu, p.num_gpus, p.gpus_per_node) == (run.model, run.cluster.gpu, 16, 4)
    assert (p.global_batch_size, p.seq_length, p.framework.name) == (96, 4096, "torchtitan")
    other = build_problem(run=run, model=get_model("llama3.1-70b"), gpu=get_gpu("h200-sxm-141gb"),
                          framework=get_framework(DEFAULT_FRAMEWORK), global_batch_size=32)
    # a model (GPU) given beside the run brings its own sequence length (node size)
    assert other.seq_length == get_model("llama3.1-70b").seq_length and other.gpus_per_node is None
    assert other.global_batch_size == 32 and other.framework.name == DEFAULT_FRAMEWORK and other.num_gpus == 16


def test_missing_pieces_and_unknown_knobs_name_their_field() -> None:
    with pytest.raises(SpecError) as exc:
        build_problem(model=get_model("llama3.1-8b"), gpu=get_gpu(H100))
    assert exc.value.field == "num_gpus"
    with pytest.raises(SpecError) as exc:
        build_problem(model=get_model("llama3.1-8b"), gpu=get_gpu(H100), num_gpus=8, fixed={"tensor": 2},
                      section="problem.")
    assert exc.value.field == "problem.fix" and exc.value.value == "tensor"
    with pytest.raises(SpecError) as exc:
        build_problem(model=get_model("llama3.1-8b"), gpu=get_gpu(H100), num_gpus=8, allowed={"tensor": [2]})
    assert exc.value.field == "allow"


def test_one_allowed_value_is_a_list_of_one() -> None:
    p = build_problem(model=get_model("llama3.1-8b"), gpu=get_gpu(H100), num_gpus=8, allowed={"recompute": "full"})
    assert p.allowed == (("recompute", ("full",)),)


def test_cli_api_and_studies_build_the_same_problem() -> None:
    cli = cli_search.problem_from_args(_cli_args(["--model", "llama3.1-8b", "--gpu", H100, "--gpus", "16",
                                                  "--seq-length", "4096", "--fix", "tp=2",
                                                  "--allow", "recompute=none,full"]), 16)
    python, _ = api.search_problem({"model": "llama3.1-8b", "gpu": H100, "num_gpus": 16, "seq_length": 4096,
                                    "fix": {"tp": 2}, "allow": {"recompute": ["none", "full"]}})
    study = Problem(study="s", model=get_model("llama3.1-8b"), gpu=H100, num_gpus=16,
                    global_batch_size=default_global_batch_size(4096), seq_length=4096, gpus_per_node=None,
                    search=SearchSettings(fixed=(("tp", 2),), allowed=(("recompute", ("none", "full")),))
                    ).search_problem()
    assert cli.seq_length == python.seq_length == study.seq_length == 4096
    assert cli == python == study
    assert python.describe() == study.describe() and python.framework == study.framework


def test_cli_and_api_search_a_run_alike(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import yaml

    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(RUN))
    args = _cli_args([str(path)])
    run = cli_search.baseline_run(args)
    cli = cli_search.problem_from_args(args, 16, run)
    python, from_run = api.search_problem(str(path))
    assert from_run is not None and cli == python
    assert cli.framework.name == "torchtitan" and cli.gpus_per_node == 4 and cli.global_batch_size == 96
