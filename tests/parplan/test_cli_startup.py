"""Start-up: `parplan --help` and flag errors import neither the cost model nor numpy, scikit-learn or Optuna."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from parplan import cli

HEAVY = ("numpy", "sklearn", "optuna", "sqlalchemy", "matplotlib", "torch", "pandas", "distributed", "parplan.api",
         "search", "studies.spec", "studies.runner", "studies.store", "costmodel.specs")
"""``costmodel.specs`` (YAML catalogs, ~0.1 s) is allowed where a command's flags use its error type."""
_PROBE = """
import json, sys
from parplan.cli import main
try:
    code = main({argv!r})
except SystemExit as exc:
    code = exc.code
print(json.dumps({{"code": code, "loaded": sorted(m for m in {heavy!r} if m in sys.modules)}}), file=sys.stderr)
"""


def _loaded_after(argv: list[str], heavy: tuple[str, ...] = HEAVY) -> tuple[int, list[str]]:
    """Exit code and the ``heavy`` modules imported by ``parplan ARGV`` in a fresh interpreter."""
    proc = subprocess.run([sys.executable, "-c", _PROBE.format(argv=argv, heavy=heavy)], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    return report["code"], report["loaded"]


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["predict", "--help"], ["catalog", "--help"],
                                  ["predict", "--model", "nope"], ["catalog", "cars"], ["validate"], []],
                         ids=" ".join)
def test_help_and_flag_errors_import_nothing_heavy(argv: list[str]) -> None:
    code, loaded = _loaded_after(argv)
    assert code in (0, 2)
    assert loaded == []


@pytest.mark.parametrize("argv", [["study", "run", "s.yaml", "--n-jobs", "0"], ["study", "--help"],
                                  ["replay", "--help"], ["profile", "fit"]], ids=" ".join)
def test_sub_command_flag_errors_import_at_most_the_specs(argv: list[str]) -> None:
    code, loaded = _loaded_after(argv)
    assert code in (0, 2)
    assert set(loaded) <= {"costmodel.specs"}


SEARCH_AND_STUDY_HEAVY = ("numpy", "sklearn", "optuna", "sqlalchemy", "matplotlib", "torch", "pandas", "scipy",
                          "distributed", "costmodel.predict", "search.run", "search.objective", "studies.runner")
"""What a search flag or a study file error must not import: it is checked before the search loads."""


@pytest.mark.parametrize("argv", [["search", "--model", "llama3.1-8b", "--trials", "0"],
                                  ["search", "--model", "llama3.1-8b", "--sampler", "nope"],
                                  ["study", "run", "{bad_study}"]], ids=" ".join)
def test_search_flag_and_study_file_errors_import_no_search(argv: list[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nmodels: [llama3.1-8b]\ngpus: [h100-sxm5-80gb]\ngpu_counts: [0]\n", encoding="utf-8")
    code, loaded = _loaded_after([a.replace("{bad_study}", str(bad)) for a in argv], SEARCH_AND_STUDY_HEAVY)
    assert code == 2
    assert loaded == []


PREDICT_NEVER = ("sklearn", "joblib", "pandas", "pyarrow", "optuna", "sqlalchemy", "matplotlib", "torch", "scipy",
                 "distributed", "costmodel.recsys", "search.run", "studies")
"""What ``parplan predict`` of an LLM run spec must not import once its caches are warm (the fitted
predictors load as plain arrays, the built-in profile's tables from the data-only cache)."""
_WATCH = """
import json, sys
never = {never!r}
from parplan.cli import main
code = main({argv!r})
print(json.dumps({{"code": code, "loaded": sorted(n for n in never if n in sys.modules)}}), file=sys.stderr)
"""


def test_predict_with_warm_caches_imports_no_search_dataframe_or_plotting_library() -> None:
    spec = str(Path(__file__).resolve().parents[2] / "studies" / "examples" / "llama3.1-8b-8xh100.yaml")
    probe = [sys.executable, "-c", _WATCH.format(never=PREDICT_NEVER, argv=["predict", spec])]
    for _ in range(2):  # the first run fills the profile and predictor caches
        proc = subprocess.run(probe, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    assert report["code"] == 0
    assert report["loaded"] == []


def test_import_parplan_leaves_the_api_unimported() -> None:
    code = "import sys, parplan; print(sorted(m for m in ('parplan.api', 'numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr[-500:]


def test_public_names_resolve_on_first_use() -> None:
    import parplan
    from parplan import api

    assert parplan.predict is api.predict and parplan.StudyOutcome is api.StudyOutcome
    assert set(parplan.__all__) <= set(dir(parplan))
    with pytest.raises(AttributeError):
        parplan.no_such_name  # noqa: B018


class _Recorder:
    """Sub-parsers stand-in that records the ``help`` each ``register`` passes."""

    def __init__(self) -> None:
        self.helps: dict[str, str] = {}

    def add_parser(self, name: str, **kwargs: object) -> argparse.ArgumentParser:
        self.helps[name] = str(kwargs.get("help"))
        return argparse.ArgumentParser(prog=name)


@pytest.mark.parametrize("module", ["cli_search", "cli_study", "cli_profile", "cli_replay"])
def test_top_level_help_line_is_the_one_register_gives(module: str) -> None:
    recorder = _Recorder()
    importlib.import_module(f"parplan.{module}").register(recorder)
    for name, summary in recorder.helps.items():
        assert cli.COMMANDS[name][0] == summary, name


def test_each_sub_command_parses_as_built_eagerly() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["search", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8",
                              "--trials", "5"])
    assert args.trials == 5 and callable(args.func)
    args = parser.parse_args(["study", "worker", "s.yaml", "--storage", "sqlite:///x.db"])
    assert args.study_command == "worker"


def test_built_builds_every_sub_command() -> None:
    parser = cli.built(cli.build_parser())
    choices = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert all(getattr(p, "_build", None) is None for p in choices.values())
    assert any(a.dest == "trials" for a in choices["search"]._actions)


def test_completion_script_names_a_sub_command_flag(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("shtab")
    assert cli.main(["completion", "bash"]) == 0
    assert "--global-batch-size" in capsys.readouterr().out
