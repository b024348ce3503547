"""DLRM spec parsing: catalog entries, access forms, one-line errors, the run-spec hook."""

from __future__ import annotations

import pytest

from costmodel.recsys.plan import ShardingPlan, TableSharding, plan_from_mapping, uniform_plan
from costmodel.specs.errors import SpecError
from costmodel.specs.recsys import (
    access_profile,
    dlrm_catalog,
    dlrm_from_mapping,
    dlrm_run_spec_from_mapping,
    get_dlrm,
    load_dlrm_run_spec,
)
from costmodel.specs.runspec import load_any_run_spec, run_spec_from_mapping

SMALL = {"bottom_mlp": [13, 64, 16], "top_mlp": [32, 1],
         "tables": [{"name": "a", "rows": 1000, "dim": 16, "pooling_mean": 4, "access": {"zipf": 1.05}},
                    {"name": "b", "rows": 50, "dim": 16, "count": 3}]}


def test_mlperf_dcnv2_tables_match_the_reference_config():
    spec = get_dlrm("mlperf-dlrm-dcnv2")
    assert len(spec.tables) == 26
    assert sum(t.rows for t in spec.tables) == 204184588  # sum of --num_embeddings_per_feature
    assert sum(t.pooling_mean for t in spec.tables) == 214  # sum of --multi_hot_sizes


def test_kaggle_dot_interaction_width_is_the_reference_top_mlp_input():
    # facebookresearch/dlrm: ln_top = [367, 512, 256, 1] for the Kaggle config (27*26/2 + 16)
    assert get_dlrm("dlrm-criteo-kaggle").interaction_width == 367


def test_every_catalog_entry_names_its_source():
    assert all(spec.source for spec in dlrm_catalog().values())


def test_count_repeats_a_table_and_access_forms_parse():
    spec = dlrm_from_mapping(SMALL)
    assert [t.name for t in spec.tables] == ["a", "b_0", "b_1", "b_2"]
    assert spec.tables[0].access.kind == "zipf" and spec.tables[1].access.kind == "uniform"


def test_published_histogram_is_rescaled_to_one():
    hist = access_profile("meta-dlrm-datasets-2022").reuse_histogram
    assert sum(share for _, share in hist) == pytest.approx(1.0)


@pytest.mark.parametrize("patch, field", [
    ({"interaction": "mlp"}, "recsys.interaction"),
    ({"tables": [{"name": "a", "rows": 0, "dim": 16}]}, "tables.a.rows"),
    ({"tables": [{"name": "a", "rows": 10, "dim": 16, "optimizer": "lamb"}]}, "tables.a.optimizer"),
    ({"tables": [{"name": "a", "rows": 10, "dim": 16, "access": {"zipf": -1}}]}, "recsys.tables[0].access.zipf"),
    ({"tables": [{"name": "a", "rows": 10, "dim": 16, "access": {"reuse_histogram": [[1, 0.5]]}}]},
     "access.reuse_histogram"),
    ({"tables": [{"name": "a", "rows": 10, "dim": 8}]}, "tables.a.dim"),  # dot: dim must equal bottom output
    ({"tables": [{"name": "a", "rows": 10, "dim": 16, "colour": 1}]}, "recsys.tables[0].colour"),
    ({"bottom_mlp": "13-x"}, "recsys.bottom_mlp"),
])
def test_bad_field_is_one_line_naming_it(patch, field):
    with pytest.raises(SpecError) as info:
        dlrm_from_mapping({**SMALL, **patch})
    assert info.value.field == field and "\n" not in str(info.value)


def test_long_value_is_truncated_in_the_error():
    with pytest.raises(SpecError) as info:
        dlrm_from_mapping({**SMALL, "interaction": "x" * 10_000})
    assert len(str(info.value)) < 400


def test_run_spec_hook_reads_both_forms(tmp_path):
    block = tmp_path / "a.yaml"
    block.write_text("recsys: dlrm-criteo-kaggle\ncluster: {gpu: h100-sxm5-80gb, num_gpus: 8}\n")
    kind = tmp_path / "b.yaml"
    kind.write_text("model: {kind: dlrm, base: dlrm-criteo-kaggle, batch_size: 4096}\n"
                    "cluster: {gpu: h100-sxm5-80gb, num_gpus: 8}\n")
    assert load_dlrm_run_spec(block).model == get_dlrm("dlrm-criteo-kaggle")
    assert load_any_run_spec(kind).model.batch_size == 4096
    with pytest.raises(SpecError) as info:
        run_spec_from_mapping({"recsys": "dlrm-criteo-kaggle", "cluster": {"gpu": "h100-sxm", "num_gpus": 8}})
    assert info.value.field == "model.kind"


def test_run_spec_needs_a_cluster():
    with pytest.raises(SpecError) as info:
        dlrm_run_spec_from_mapping({"recsys": "dlrm-criteo-kaggle"})
    assert info.value.field == "cluster"


def test_plan_mapping_must_cover_every_table():
    spec = dlrm_from_mapping(SMALL)
    with pytest.raises(SpecError) as info:
        plan_from_mapping({"a": {"sharding_type": "table_wise", "ranks": [0]}}, spec, world_size=2)
    assert "missing" in str(info.value)


def test_plan_refuses_table_row_wise_across_nodes_and_bad_column_split():
    spec = dlrm_from_mapping(SMALL)
    base = uniform_plan(spec, 16, "table_wise").as_dict()
    across = ShardingPlan.from_dict(16, {**base, "a": TableSharding("table_row_wise", (0, 8))})
    with pytest.raises(SpecError, match="one node"):
        across.check_covers(spec, gpus_per_node=8)
    uneven = ShardingPlan.from_dict(16, {**base, "a": TableSharding("column_wise", (0, 1, 2))})
    with pytest.raises(SpecError, match="divides dim=16"):
        uneven.check_covers(spec)


def test_table_wise_needs_exactly_one_rank():
    with pytest.raises(SpecError):
        TableSharding("table_wise", (0, 1))


def test_documented_example_parses_with_its_plan(tmp_path):
    # the commented mapping of docs/run_spec.md's DLRM section, uncommented
    path = tmp_path / "dlrm.yaml"
    path.write_text("""
recsys:
  base: mlperf-dlrm-dcnv2
  name: my-dlrm
  bottom_mlp: "13-512-256-128"
  tables:
    - {name: cat_0, rows: 40000000, dim: 128, dtype: fp32, pooling_mean: 3, pooling_max: 3, num_features: 1,
       optimizer: rowwise_adagrad, access: {zipf: 1.05}}
    - {name: cat_1, rows: 39060, dim: 128, access: {profile: meta-dlrm-datasets-2022}}
    - {name: hot, rows: 1000000, dim: 128, access: {hot_rows_fraction: 0.01, hot_access_fraction: 0.9}}
cluster: {gpu: h100-sxm5-80gb, num_gpus: 8}
plan:
  cat_0: {sharding_type: row_wise, ranks: [0, 1, 2, 3, 4, 5, 6, 7]}
  cat_1: {sharding_type: table_wise, ranks: [3]}
  hot: {sharding_type: data_parallel, ranks: []}
""")
    run = load_any_run_spec(path)
    plan = plan_from_mapping(run.plan, run.model, run.cluster.num_gpus, run.cluster.gpus_per_node)
    assert run.model.interaction == "dcnv2" and len(run.model.tables) == 3
    assert plan["hot"].compute_kernel == "dense"
