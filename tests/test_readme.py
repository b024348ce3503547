"""The README's set-up commands stay true: CI runs exactly its test command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    return re.findall(r"```bash\n(.+?)\n```", (ROOT / "README.md").read_text())


def test_readme_starts_with_two_setup_commands() -> None:
    commands = _readme_commands()
    assert "parplan " in commands[0] and "pip install" in commands[0]
    assert "pytest" in commands[1] and "[test" in commands[1]


def test_ci_runs_the_readme_test_command() -> None:
    assert _readme_commands()[1] in (ROOT / ".ci" / "run").read_text().splitlines()


def test_readme_main_command_uses_a_shipped_file() -> None:
    for token in _readme_commands()[0].split():
        if token.endswith(".yaml"):
            assert (ROOT / token).is_file(), token
