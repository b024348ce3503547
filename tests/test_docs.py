"""The README and every command's --help point only at files inside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from parplan.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
# A path that leaves the repository: ``../x``, or the team folder ``shared/`` beside it.
OUTSIDE = re.compile(r"(?<![\w/])(\.\./|shared/)")


def _help_texts() -> list[tuple[str, str]]:
    parser = build_parser()
    texts = [("parplan", parser.format_help())]
    for action in parser._subparsers._group_actions if parser._subparsers else []:
        for name, sub in getattr(action, "choices", {}).items():
            texts.append((f"parplan {name}", sub.format_help()))
            for inner in sub._subparsers._group_actions if sub._subparsers else []:
                for inner_name, leaf in getattr(inner, "choices", {}).items():
                    texts.append((f"parplan {name} {inner_name}", leaf.format_help()))
    return texts


def test_readme_points_only_inside_the_repository():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert not OUTSIDE.findall(text)
    for link in re.findall(r"\]\(([^)#]+)\)", text):
        if "://" not in link:
            assert (ROOT / link).exists(), link


@pytest.mark.parametrize(("command", "text"), _help_texts(), ids=lambda v: v if v.startswith("parplan") else "")
def test_help_points_only_inside_the_repository(command, text):
    assert not OUTSIDE.findall(text), command


def test_contract_lives_in_the_repository():
    contract = (ROOT / "docs" / "run_spec.md").read_text(encoding="utf-8")
    for field in ("model:", "cluster:", "strategy:", "step_time_s", "violations"):
        assert field in contract
