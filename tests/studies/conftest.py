"""Small studies on GPUs without a built-in profile (analytic timing: no predictor fitting, seconds per study)."""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from studies.runner import RunSummary, run_study
from studies.spec import StudySpec, load_study

TINY: dict[str, Any] = {
    "name": "tiny",
    "models": ["gpt3-350m", "gpt3-1.3b"],
    "gpus": ["h100-pcie-80gb"],
    "gpu_counts": [8, 16],
    "batch": {"global_batch_size": 64},
    "seq_length": 2048,
    "search": {"sampler": "tpe", "trials": 40, "seed": 3},
}
"""Four problems, a second or two each."""

FAILING: dict[str, Any] = {
    "name": "failing",
    "models": ["gpt3-350m", "llama3.1-70b"],
    "gpus": ["a100-sxm4-40gb"],
    "gpu_counts": [8, 12],
    "batch": {"global_batch_size": 64},
    "seq_length": 2048,
    "search": {"trials": 20},
}
"""gpt3-350m on 8 fits; llama3.1-70b on 8 x 40 GB does not; 12 GPUs is not a whole number of 8-GPU nodes."""

POSTGRES_ENV = "PARPLAN_TEST_POSTGRES_URL"
REQUIRE_ENV = "PARPLAN_REQUIRE_POSTGRES"
"""Set to 1 where a server must be there (CI starts one): a missing server then fails instead of skipping."""


def _no_server(reason: str) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} (and {REQUIRE_ENV}=1)")
    pytest.skip(reason)


class Terminal(io.StringIO):
    """A text stream that says it is a terminal (progress is drawn only on one)."""

    def isatty(self) -> bool:
        return True


def write_study(folder: Path, data: dict[str, Any], name: str = "study.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture
def tiny_file(tmp_path: Path) -> Path:
    return write_study(tmp_path, TINY)


@pytest.fixture(scope="session")
def tiny_reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[StudySpec, RunSummary]:
    """The tiny study run once, uninterrupted, in this process: what every other run must equal."""
    folder = tmp_path_factory.mktemp("tiny-reference")
    spec = load_study(write_study(folder, TINY))
    with open(os.devnull, "w") as quiet:
        return spec, run_study(spec, folder / "out", n_jobs=1, stream=quiet)


def comparable(results: Any) -> dict[str, dict[str, Any]]:
    """Results by problem id, without when/where they ran."""
    return {r.problem: r.comparable() for r in results}


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A private schema in the PostgreSQL database of ``PARPLAN_TEST_POSTGRES_URL``; skips without a server."""
    base = os.environ.get(POSTGRES_ENV, "")
    if not base:
        _no_server(f"no PostgreSQL server: set {POSTGRES_ENV}=postgresql://user:password@localhost:5432/db "
                   f"(.ci/run starts one)")
    import sqlalchemy as sa

    try:
        engine = sa.create_engine(base)
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except Exception as exc:  # noqa: BLE001 - any failure to connect means: no server to test against
        _no_server(f"PostgreSQL at {POSTGRES_ENV} is not reachable: {type(exc).__name__}: "
                   f"{str(exc).splitlines()[0] if str(exc) else ''}")
    schema = f"parplan_test_{uuid.uuid4().hex[:10]}"
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    separator = "&" if "?" in base else "?"
    try:
        yield f"{base}{separator}options=-csearch_path%3D{schema}"
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        engine.dispose()
