"""TorchRec ParameterSharding JSON (costmodel/recsys/torchrec_plan.py), parsed back by TorchRec itself."""

from __future__ import annotations

import json

import pytest

from costmodel.recsys.plan import ShardingPlan, TableSharding
from costmodel.recsys.torchrec_plan import torchrec_json, write_torchrec_json
from costmodel.specs.errors import SpecError
from costmodel.specs.recsys import DLRMSpec, EmbeddingTable

TABLES = tuple(EmbeddingTable(name=f"t{i}", rows=1003 + i, dim=256) for i in range(5))
SPEC = DLRMSpec(name="t", tables=TABLES, bottom_mlp=(13, 256), top_mlp=(64, 1), interaction="cat")
PLAN = ShardingPlan.from_dict(8, {
    "t0": TableSharding("table_wise", (3,)),
    "t1": TableSharding("row_wise", tuple(range(8))),
    "t2": TableSharding("column_wise", (1, 5)),
    "t3": TableSharding("table_row_wise", (4, 5, 6, 7)),
    "t4": TableSharding("data_parallel", (), "dense"),
})


def test_json_is_plain_and_written_atomically(tmp_path):
    data = torchrec_json(SPEC, PLAN, local_world_size=4)
    path = write_torchrec_json(tmp_path / "plan.json", data)
    assert json.loads(path.read_text()) == data
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]  # no temporary left behind
    assert data["plan"]["t2"]["shards"][1] == {"offsets": [0, 128], "sizes": [1003 + 2, 128],
                                               "placement": "rank:5/cuda:1"}


@pytest.mark.parametrize("name,sharding", [("t1", TableSharding("row_wise", (0, 1))),
                                           ("t3", TableSharding("table_row_wise", (1, 2, 3, 4)))])
def test_layouts_torchrec_cannot_express_are_refused(name, sharding):
    plan = ShardingPlan.from_dict(8, {**PLAN.as_dict(), name: sharding})
    with pytest.raises(SpecError, match=f"plan.{name}.ranks"):
        torchrec_json(SPEC, plan, local_world_size=4)


def test_torchrec_parses_it_into_the_plan_its_own_helpers_build(tmp_path):
    pytest.importorskip("torchrec", reason="TorchRec is the optional 'recsys' extra")
    import torch
    from torchrec.distributed.sharding_plan import (
        column_wise, construct_module_sharding_plan, data_parallel, row_wise, table_row_wise, table_wise,
    )
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    from costmodel.recsys.torchrec_plan import load_torchrec_plan

    path = write_torchrec_json(tmp_path / "plan.json",
                               torchrec_json(SPEC, PLAN, local_world_size=4, module_path="ebc"))
    loaded = load_torchrec_plan(json.loads(path.read_text()))
    ebc = EmbeddingBagCollection(tables=[EmbeddingBagConfig(name=t.name, embedding_dim=t.dim,
                                                            num_embeddings=t.rows, feature_names=[f"f_{t.name}"])
                                         for t in TABLES], device=torch.device("meta"))
    expected = construct_module_sharding_plan(ebc, {
        "t0": table_wise(rank=3, compute_kernel="fused"), "t1": row_wise(compute_kernel="fused"),
        "t2": column_wise(ranks=[1, 5], compute_kernel="fused"), "t3": table_row_wise(host_index=1),
        "t4": data_parallel()}, local_size=4, world_size=8, device_type="cuda")
    got = loaded.get_plan_for_module("ebc")
    for name in expected:
        want = expected[name]
        if name == "t3":  # table_row_wise() takes no compute_kernel; TorchRec's default is "dense"
            assert got[name].compute_kernel == "fused"
            want.compute_kernel = "fused"
        assert got[name] == want, name
