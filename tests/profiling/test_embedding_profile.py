"""`parplan profile run --ops embedding_bag` / `profile fit`: the design, the table file and its fit."""

from __future__ import annotations

import json

import numpy as np
import pytest

from costmodel.profiling.embedding import (
    DESIGN,
    TABLE_FILE,
    draw_ids,
    fit_embedding_table,
    grid,
    lookup_model_from_profile,
    read_embedding_table,
)
from costmodel.profiling.kinds import parse_ops
from costmodel.specs.errors import SpecError


def test_embedding_bag_is_an_op_group():
    assert parse_ops("embedding_bag") == ("embedding_bag",)


def test_design_covers_three_distributions_and_respects_the_memory_cap():
    points = grid(DESIGN["rows"], DESIGN["dims"], DESIGN["poolings"], DESIGN["batch"], max_table_bytes=2**30)
    assert {p.distribution for p in points} == {"uniform", "zipf1.05", "zipf1.2"}
    assert max(p.table_bytes for p in points) <= 2**30


def test_zipf_ids_are_skewed_and_in_range():
    rng = np.random.default_rng(0)
    ids = draw_ids("zipf1.2", 10**5, 20_000, rng)
    assert ids.min() >= 0 and ids.max() < 10**5
    assert len(np.unique(ids)) < 0.5 * len(np.unique(draw_ids("uniform", 10**5, 20_000, rng)))


def _write_table(folder, seconds_per_lookup: float = 2e-9) -> None:
    records = [{"distribution": p.distribution, "rows": p.rows, "dim": p.dim, "pooling": p.pooling,
                "batch": p.batch, "median_s": 0.0, "min_s": p.batch * p.pooling * p.dim * seconds_per_lookup / 32}
               for p in grid((10**4, 10**5), (32, 64), (1, 4, 16, 64), 256)]
    for r in records:
        r["median_s"] = r["min_s"]
    (folder / TABLE_FILE).write_text(json.dumps(records))


def test_fit_reports_held_out_errors_of_both_models(tmp_path):
    _write_table(tmp_path)  # time proportional to lookups x dim: both models fit it
    report = fit_embedding_table(tmp_path)
    assert report["train"] == report["rows"] // 2  # a short table: half of it (at least 30 rows otherwise)
    assert report["train"] + report["test"] == report["rows"]
    assert report["aware_mape"] < 5.0


def test_profile_gives_a_fitted_lookup_model(tmp_path):
    _write_table(tmp_path)
    model, caches = lookup_model_from_profile(tmp_path)
    assert caches.tlb_reach_bytes > 0 and hasattr(model, "cost_per_unit_")


def test_folder_without_lookups_has_no_report(tmp_path):
    assert fit_embedding_table(tmp_path) is None


@pytest.mark.parametrize("content, field", [
    ('{"a": 1}', TABLE_FILE),
    ('[{"distribution": "zipf9", "rows": 1, "dim": 1, "pooling": 1, "batch": 1, "median_s": 1, "min_s": 1}]',
     f"{TABLE_FILE}[0].distribution"),
    ('[{"rows": 1}]', f"{TABLE_FILE}[0]"),
    ('[NaN]', TABLE_FILE),
])
def test_malformed_table_is_a_one_line_error(tmp_path, content, field):
    (tmp_path / TABLE_FILE).write_text(content)
    with pytest.raises(SpecError) as info:
        read_embedding_table(tmp_path)
    assert info.value.field == field and "\n" not in str(info.value)
