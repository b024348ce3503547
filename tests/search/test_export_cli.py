"""``parplan search --export X``: the search runs X's framework over what X's launcher can run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from costmodel.specs import get_model
from costmodel.specs.errors import SpecError
from search.exporters import EXPORTERS, implied_framework, launcher_restrictions
from tests.search.test_cli_search import SMALL, run


def test_each_exporter_names_a_catalog_framework_that_exports_with_it() -> None:
    from costmodel.specs.framework import get_framework

    for name, exporter in EXPORTERS.items():
        fw = get_framework(exporter.framework)
        assert fw.exporter == ("megatron" if name == "slurm" else name)


def test_exports_of_one_framework_imply_it_and_mixed_ones_do_not() -> None:
    assert implied_framework(["megatron", "slurm"]) == "megatron-core"
    assert implied_framework(["torchtitan"]) == "torchtitan"
    assert implied_framework(["megatron", "deepspeed"]) is None
    assert dict(launcher_restrictions(["torchtitan"], get_model("llama3.1-8b")))["zero_stage"] == (0, 2, 3)
    assert dict(launcher_restrictions(["torchtitan"], get_model("llama3.1-405b")))["precision"] == ("fp8",)


def test_a_model_the_launcher_cannot_build_fails_before_the_search(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SpecError, match="mixtral-8x7b") as info:
        run(["--model", "mixtral-8x7b", "--gpu", "h100-sxm5-80gb", "--gpus", "16", "--trials", "5",
             "--export", "nemo", "--out", str(tmp_path)])
    assert info.value.field == "nemo export: model" and not any(tmp_path.iterdir())


def test_export_alone_searches_the_launchers_framework(analytic_search_timer, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert run([*SMALL, "--gpus", "16", "--json", "--export", "torchtitan", "--out", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert ["precision", ["bf16"]] in [[k, v] for k, v in out["problem"]["allowed"].items()]
    strategies = [row["strategy"] for row in out["top"]]
    assert strategies and all(s["zero_stage"] in (0, 2, 3) for s in strategies)
    assert all(s["cp"] == 1 or s["cp_comm_type"] == "all_gather" for s in strategies)
    assert (tmp_path / "torchtitan_args.txt").is_file()


def test_an_explicit_framework_wins_over_the_export(analytic_search_timer, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert run([*SMALL, "--gpus", "16", "--json", "--framework", "megatron-core", "--export", "deepspeed",
                "--fix", "zero_stage=1", "--out", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert all(row["strategy"]["hsdp_shard_size"] == 0 for row in out["top"])  # DeepSpeed has no HSDP


def _problem(argv: list[str]):  # type: ignore[no-untyped-def]
    import argparse

    from parplan import cli_search

    parser = argparse.ArgumentParser(prog="parplan")
    cli_search.register(parser.add_subparsers(dest="command", required=True))
    return cli_search.problem_from_args(parser.parse_args(["search", *argv]), 16, None)


@pytest.mark.parametrize(("exports", "framework"), [(["torchtitan"], "torchtitan"), (["deepspeed"], "deepspeed"),
                                                    (["megatron,slurm"], "megatron-core"),
                                                    (["nemo"], "megatron-bridge"),
                                                    (["megatron", "deepspeed"], "megatron-core")])
def test_the_search_problem_runs_the_exports_framework(exports: list[str], framework: str) -> None:
    argv = [*SMALL, "--gpus", "16"] + [a for name in exports for a in ("--export", name)]
    assert _problem(argv).framework.name == framework
    assert _problem([*argv, "--framework", "nemo"]).framework.name == "nemo"
