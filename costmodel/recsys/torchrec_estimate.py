"""TorchRec's own planner and estimators on a parplan problem (needs the optional ``recsys`` extra).

Two uses, both for the comparison in ``benchmarks/sharding.py`` and the CLI:

- :func:`torchrec_planner_plan` runs ``EmbeddingShardingPlanner`` (its proposers, partitioner,
  ``EmbeddingPerfEstimator`` and ``EmbeddingStorageEstimator``) and returns its plan as a
  ``ShardingPlan``;
- :func:`torchrec_evaluate` prices *any* plan with TorchRec's estimators, so that no plan is judged
  only by the model that picked it. TorchRec rates a plan by its slowest rank: the sum of its shards'
  ``Perf.total`` (planner/perf_models.py ``NoopPerfModel``) and checks each rank's HBM against the
  topology left after ``HeuristicalStorageReservation`` (15% margin plus a dense-part reserve,
  planners.py defaults).

TorchRec is given the same facts as parplan: the GPU's HBM capacity and bandwidth, the NVLink and
network bandwidths from the catalog, the local batch, each table's pooling factor, and each
table's optimizer. The optimizer is attached as ``param._optimizer_classes``, the attribute
TorchRec's storage estimator reads (torch.distributed.optim ``_apply_optimizer_in_backward`` sets it
the same way). The option space is narrowed to ours: the five sharding types, ``fused`` kernels for
sharded tables and ``dense`` for data-parallel ones (no UVM offload).
"""

from __future__ import annotations

import importlib.util
import logging
import warnings
from dataclasses import dataclass
from typing import Any

from constraints.recsys_memory import dense_params, local_batch
from costmodel.recsys.plan import SHARDING_TYPES, ShardingPlan, TableSharding
from costmodel.specs.gpu import ClusterSpec
from costmodel.specs.recsys import DLRMSpec, EmbeddingTable

RESERVE_PERCENTAGE = 0.15
"""TorchRec planners.py ``heuristical_storage_reservation_percentage`` default."""
DENSE_MULTIPLIER = 6.0
"""TorchRec storage_reservations.py ``parameter_multiplier``: parameter + optimizer (2x) + DDP (3x)."""
_TORCH_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "int8": "int8"}


def available() -> bool:
    """Whether TorchRec (and FBGEMM) are installed."""
    return importlib.util.find_spec("torchrec") is not None and importlib.util.find_spec("fbgemm_gpu") is not None


def _quiet() -> None:
    # TorchRec logs the topology-factory advice and the dry-run reservation caveat on every plan.
    for name in ("torchrec", "torchrec.distributed.planner"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="torchrec")


def _module(spec: DLRMSpec) -> Any:
    """An ``EmbeddingBagCollection`` on the meta device with each table's optimizer attached."""
    import torch
    from torchrec import optim as trec_optim
    from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    dtypes = {"fp32": DataType.FP32, "fp16": DataType.FP16, "bf16": DataType.BF16, "int8": DataType.INT8}
    configs = [EmbeddingBagConfig(name=t.name, embedding_dim=t.dim, num_embeddings=t.rows,
                                  feature_names=[f"{t.name}__f{i}" for i in range(t.num_features)],
                                  data_type=dtypes[t.dtype]) for t in spec.tables]
    ebc = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
    classes = {"sgd": trec_optim.SGD, "rowwise_adagrad": trec_optim.RowWiseAdagrad, "adam": trec_optim.Adam}
    by_name = {t.name: t for t in spec.tables}
    for name, param in ebc.named_parameters():
        table = by_name[name.split(".")[-2]]  # embedding_bags.<table>.weight
        param._optimizer_classes = [classes[table.optimizer]]  # type: ignore[attr-defined]
    return ebc


def _topology(cluster: ClusterSpec, world_size: int) -> Any:
    from torchrec.distributed.planner import Topology

    gpu = cluster.gpu
    return Topology(world_size=world_size, compute_device="cuda", hbm_cap=int(gpu.hbm_capacity_bytes),
                    local_world_size=min(cluster.gpus_per_node, world_size),
                    hbm_mem_bw=gpu.hbm_bandwidth_bytes_per_s / 1000,  # TorchRec: bytes per ms
                    intra_host_bw=gpu.intra_node_bandwidth_bytes_per_s / 1000,
                    inter_host_bw=gpu.inter_node_bandwidth_bytes_per_s / 1000)


def _constraint(table: EmbeddingTable, sharding: TableSharding | None = None) -> Any:
    from torchrec.distributed.planner import ParameterConstraints

    pooling = [table.pooling_mean] * table.num_features
    if sharding is None:
        return ParameterConstraints(sharding_types=list(SHARDING_TYPES), compute_kernels=["fused", "dense"],
                                    pooling_factors=pooling)
    extra = {}
    if sharding.sharding_type == "column_wise":
        extra["min_partition"] = table.dim // sharding.num_shards
    return ParameterConstraints(sharding_types=[sharding.sharding_type], compute_kernels=[sharding.compute_kernel],
                                pooling_factors=pooling, **extra)


def _reservation(spec: DLRMSpec) -> Any:
    """TorchRec's default reservation, told the dense part's size (our module holds only the tables,
    and TorchRec's own dry-run count of it is known to misfire: storage_reservations.py warns so)."""
    from torchrec.distributed.planner.storage_reservations import HeuristicalStorageReservation

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return HeuristicalStorageReservation(percentage=RESERVE_PERCENTAGE, dense_tensor_estimate=int(
            DENSE_MULTIPLIER * dense_params(spec) * 4))


def _sharder() -> Any:
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder

    return EmbeddingBagCollectionSharder()


def from_torchrec(spec: DLRMSpec, world_size: int, module_plan: Any) -> ShardingPlan:
    """A ``ShardingPlan`` from TorchRec's per-table ``ParameterSharding`` mapping."""
    out = {}
    for table in spec.tables:
        ps = module_plan[table.name]
        ranks = () if ps.sharding_type == "data_parallel" else tuple(ps.ranks)
        out[table.name] = TableSharding(ps.sharding_type, ranks, ps.compute_kernel)
    return ShardingPlan.from_dict(world_size, out)


def torchrec_planner_plan(spec: DLRMSpec, cluster: ClusterSpec, world_size: int | None = None) -> ShardingPlan | None:
    """TorchRec's ``EmbeddingShardingPlanner`` plan, or None when it finds none that fits."""
    from torchrec.distributed.planner import EmbeddingShardingPlanner
    from torchrec.distributed.planner.types import PlannerError

    _quiet()
    world = world_size or cluster.num_gpus
    planner = EmbeddingShardingPlanner(topology=_topology(cluster, world), batch_size=local_batch(spec, world),
                                       constraints={t.name: _constraint(t) for t in spec.tables},
                                       storage_reservation=_reservation(spec), debug=False)
    try:
        plan = planner.plan(_module(spec), [_sharder()])
    except PlannerError:
        return None
    return from_torchrec(spec, world, plan.plan[""])


@dataclass(frozen=True)
class TorchRecEstimate:
    """A plan as TorchRec's estimators see it: per-rank time (s) and HBM (bytes) and the HBM left to fill."""

    rank_seconds: tuple[float, ...]
    rank_hbm_bytes: tuple[float, ...]
    rank_capacity_bytes: tuple[float, ...]

    @property
    def step_seconds(self) -> float:
        return max(self.rank_seconds)

    @property
    def fits(self) -> bool:
        return all(h <= c for h, c in zip(self.rank_hbm_bytes, self.rank_capacity_bytes))


def torchrec_evaluate(spec: DLRMSpec, cluster: ClusterSpec, plan: ShardingPlan) -> TorchRecEstimate:
    """Price ``plan`` with TorchRec's enumerator and estimators, placing each shard where ``plan`` puts it."""
    from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
    from torchrec.distributed.planner.shard_estimators import EmbeddingPerfEstimator, EmbeddingStorageEstimator
    _quiet()
    world = plan.world_size
    topology = _topology(cluster, world)
    batch = local_batch(spec, world)
    constraints = {t.name: _constraint(t, plan[t.name]) for t in spec.tables}
    module, sharders = _module(spec), [_sharder()]
    reserved = _reservation(spec).reserve(topology, batch, module, sharders, constraints)
    estimators = [EmbeddingPerfEstimator(topology=topology, constraints=constraints),
                  EmbeddingStorageEstimator(topology=topology, constraints=constraints)]
    options = EmbeddingEnumerator(topology=topology, batch_size=batch, constraints=constraints,
                                  estimator=estimators).enumerate(module, sharders)
    seconds, hbm = [0.0] * world, [0.0] * world
    for option in options:
        ranks = plan.ranks_of(option.name)
        if len(option.shards) != len(ranks):
            raise ValueError(f"TorchRec made {len(option.shards)} shards of {option.name}, the plan {len(ranks)}")
        for shard, rank in zip(option.shards, ranks):
            seconds[rank] += shard.perf.total / 1000  # TorchRec's Perf is in ms
            hbm[rank] += shard.storage.hbm
    return TorchRecEstimate(tuple(seconds), tuple(hbm), tuple(float(d.storage.hbm) for d in reserved.devices))


__all__ = ["TorchRecEstimate", "available", "from_torchrec", "torchrec_evaluate", "torchrec_planner_plan"]
