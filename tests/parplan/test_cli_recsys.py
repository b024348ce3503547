"""`parplan predict` and `parplan search` with DLRM run specs (parplan/cli_recsys.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from parplan.cli import main

TABLES = [{"name": f"t{i}", "rows": 2000 * (i + 1), "dim": 64, "pooling_mean": 1.0 + 3 * i} for i in range(6)]
RUN: dict[str, Any] = {
    "recsys": {"name": "tiny", "tables": TABLES, "bottom_mlp": [13, 64], "top_mlp": [64, 1], "batch_size": 4096},
    "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 4},
}
PLAN = {"t0": {"sharding_type": "table_wise", "ranks": [0]}, "t1": {"sharding_type": "table_wise", "ranks": [1]},
        "t2": {"sharding_type": "row_wise", "ranks": [0, 1, 2, 3]},
        "t3": {"sharding_type": "column_wise", "ranks": [2, 3]},
        "t4": {"sharding_type": "data_parallel"}, "t5": {"sharding_type": "table_wise", "ranks": [3]}}


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_predict_prices_the_given_plan(tmp_path, capsys):
    assert main(["predict", str(_write(tmp_path, {**RUN, "plan": PLAN})), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "dlrm" and out["fits"] and out["num_gpus"] == 4 and len(out["ranks"]) == 4
    assert out["step_time_s"] == pytest.approx(max(r["perf_ms"] for r in out["ranks"]) / 1e3)
    assert out["ranks"][0]["shards"] == {"DP": 1, "RW": 1, "TW": 1}


def test_predict_text_shows_the_per_rank_table(tmp_path, capsys):
    assert main(["predict", str(_write(tmp_path, {**RUN, "plan": PLAN}))]) == 0
    text = capsys.readouterr().out
    assert "slowest rank" in text and "Perf (ms)" in text


def test_predict_without_a_plan_is_a_one_line_error(tmp_path, capsys):
    assert main(["predict", str(_write(tmp_path, RUN))]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'plan'" in err


def test_search_exports_torchrec_json(tmp_path, capsys):
    out_dir = tmp_path / "out"
    assert main(["search", str(_write(tmp_path, RUN)), "--json", "--trials", "4", "--export", "torchrec",
                 "--out", str(out_dir)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] and set(out["plan"]) == {t["name"] for t in TABLES}
    assert out["search"]["warm_starts_model"] == "parplan"  # a tiny problem: every plan priced by the model
    warm = [w["step_time_s"] for w in out["search"]["warm_starts"] if w["fits"]]
    assert out["step_time_s"] <= min(warm) * (1 + 1e-9)
    data = json.loads((out_dir / "torchrec_plan.json").read_text())
    assert data["world_size"] == 4 and set(data["plan"]) == set(out["plan"])


def test_search_refuses_llm_flags_with_a_dlrm_spec(tmp_path, capsys):
    assert main(["search", str(_write(tmp_path, RUN)), "--model", "llama3.1-8b"]) == 2
    assert "--model" in capsys.readouterr().err


def test_search_exits_3_when_no_plan_fits(tmp_path, capsys):
    huge = {**RUN, "recsys": {**RUN["recsys"], "tables": [{"name": "big", "rows": 2_000_000_000, "dim": 64}]},
            "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 2}}
    assert main(["search", str(_write(tmp_path, huge)), "--trials", "3"]) == 3
    assert "no plan fits" in capsys.readouterr().out
