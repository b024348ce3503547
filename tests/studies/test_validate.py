"""`parplan validate`: per-run signed errors, MAPE, the constant-MFU baseline, unpredictable runs kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from parplan.cli import main
from studies.validate import load_validation_set, validate

PUBLIC = Path(__file__).resolve().parents[2] / "studies" / "validation" / "public.yaml"


def test_public_set_is_well_formed() -> None:
    entries = load_validation_set(PUBLIC)
    assert len(entries) >= 40
    assert all(e["source"] for e in entries)


def test_signed_errors_and_baseline(tmp_path: Path) -> None:
    entries = load_validation_set(PUBLIC)[:3]
    broken = {"id": "broken", "source": "test", "run": {"model": "no-such-model", "cluster": {"gpu": "b200",
              "num_gpus": 8}, "strategy": {"global_batch_size": 8}}, "measured": {"step_time_s": 1.0}}
    result = validate([*entries, broken])
    assert result["n"] == 3
    rows = {r["id"]: r for r in result["runs"]}
    assert rows["broken"]["error"] is None and "no-such-model" in rows["broken"]["reason"]
    for e in entries:
        r = rows[e["id"]]
        assert r["error"] == pytest.approx((r["predicted_step_time_s"] - r["measured_step_time_s"])
                                           / r["measured_step_time_s"])
    assert result["mape"] == pytest.approx(sum(abs(rows[e["id"]]["error"]) for e in entries) / 3)
    assert 0 < result["baseline"]["mfu"] < 1


def test_cli_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    subset = tmp_path / "set.yaml"
    subset.write_text(yaml.safe_dump(load_validation_set(PUBLIC)[:2]))
    assert main(["validate", str(subset), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 2 and len(out["runs"]) == 2


@pytest.mark.parametrize("content", ["- {id: a}\n", "{}\n", "- {id: a, run: {}, measured: {step_time_s: -1}}\n"])
def test_malformed_sets(tmp_path: Path, content: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    assert main(["validate", str(path)]) == 2
    assert "parplan: error:" in capsys.readouterr().err
