"""``parplan search``: the JSON contract, exit code 3 with an explanation, exports, budgets, storage."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from parplan import cli_search


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="parplan")
    cli_search.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["search", *argv])
    return int(args.func(args))


SMALL = ["--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--global-batch-size", "64", "--seq-length", "4096",
         "--trials", "30"]


def test_json_follows_the_contract(analytic_search_timer, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    assert run([*SMALL, "--gpus", "16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"problem", "best", "top", "trials", "feasible", "elapsed_s"} <= set(out)
    assert out["trials"] == 30 and 0 < out["feasible"] <= 30
    assert out["problem"]["model"] == "llama3.1-8b" and out["problem"]["num_gpus"] == 16
    prediction = out["best"]["prediction"]
    assert prediction["fits"] is True
    assert {"step_time_s", "tokens_per_s_per_gpu", "mfu", "peak_memory_gib", "memory", "breakdown",
            "violations"} <= set(prediction)
    assert prediction["step_time_s"] == pytest.approx(out["top"][0]["step_time_s"])
    assert out["best"]["strategy"] == out["top"][0]["strategy"]


def test_nothing_feasible_exits_3_with_an_explanation(capsys: pytest.CaptureFixture[str]) -> None:
    code = run(["--model", "llama3.1-405b", "--gpu", "a100-sxm4-40gb", "--gpus", "8", "--global-batch-size", "64",
                "--trials", "20"])
    assert code == 3
    text = capsys.readouterr().out
    assert "No strategy fits llama3.1-405b on 8 x a100-sxm4-40gb" in text
    assert "GiB short" in text and "Fewest a100-sxm4-40gb GPUs that fit:" in text


def test_human_table_and_exports(analytic_search_timer, tmp_path: Path,  # type: ignore[no-untyped-def]
                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert run([*SMALL, "--gpus", "16", "--fix", "zero_stage=0", "--allow", "precision=bf16",
                "--export", "megatron,slurm", "--export", "torchtitan", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "tok/s/GPU" in text and "why not" in text and "30 trials" in text
    assert {p.name for p in tmp_path.iterdir()} == {"megatron_args.txt", "train.sbatch", "torchtitan_args.txt"}
    assert "z0 bf16" in text


def test_max_gpus_lists_each_count_and_the_deadline_choice(analytic_search_timer,  # type: ignore[no-untyped-def]
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    code = run([*SMALL, "--max-gpus", "32", "--tokens", "1e11", "--deadline-days", "30", "--price-per-gpu-hour",
                "2.5", "--json"])
    out = json.loads(capsys.readouterr().out)
    plan = out["plan"]
    assert [c["num_gpus"] for c in plan["counts"]] == [1, 2, 4, 8, 16, 32]
    feasible = [c for c in plan["counts"] if c["feasible"]]
    assert feasible and all(c["days"] > 0 and c["cost"] > 0 for c in feasible)
    meeting = [c for c in feasible if c["meets_deadline"]]
    if meeting:
        assert code == 0
        cheapest = min(meeting, key=lambda c: (c["gpu_hours_per_million_tokens"], c["num_gpus"]))
        assert plan["cheapest_within_deadline"] == cheapest["num_gpus"] == out["best"]["num_gpus"]
    else:
        assert code == 3 and plan["cheapest_within_deadline"] is None


def test_study_name_stores_and_resumes(analytic_search_timer, tmp_path: Path, monkeypatch,  # type: ignore[no-untyped-def]
                                       capsys: pytest.CaptureFixture[str]) -> None:
    import optuna

    monkeypatch.chdir(tmp_path)
    assert run([*SMALL, "--gpus", "16", "--study-name", "s1", "--trials", "8", "--json"]) == 0
    assert run([*SMALL, "--gpus", "16", "--study-name", "s1", "--trials", "12", "--json"]) == 0
    capsys.readouterr()
    study = optuna.load_study(study_name="s1", storage=f"sqlite:///{tmp_path / 's1.db'}")
    assert len(study.trials) == 12


def test_bad_knob_is_a_spec_error() -> None:
    from costmodel.specs.errors import SpecError

    with pytest.raises(SpecError, match="knob"):
        run([*SMALL, "--gpus", "16", "--fix", "tensor=8"])
