"""Shared helpers of the profiling tests: a parser with ``profile`` registered, synthetic traces."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import pytest

from costmodel.specs.errors import SpecError


def run_cli(argv: Sequence[str]) -> int:
    """``parplan profile ...`` through ``cli_profile.register`` (as ``parplan.cli.main`` runs it)."""
    from parplan import cli, cli_profile

    parser = cli._Parser(prog="parplan")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=cli._Parser)
    cli_profile.register(sub)
    args = parser.parse_args(list(argv))
    try:
        return int(args.func(args))
    except SpecError as exc:
        sys.stderr.write(f"parplan: error: {exc}\n")
        return 2


@pytest.fixture
def cli() -> Any:
    return run_cli
