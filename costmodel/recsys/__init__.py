"""Recommendation-model (DLRM) cost model: embedding lookups, sparse optimizer, dense MLPs, all-to-alls."""

from costmodel.recsys.plan import SHARDING_TYPES, ShardingPlan, TableSharding, plan_from_mapping, uniform_plan

__all__ = ["SHARDING_TYPES", "ShardingPlan", "TableSharding", "plan_from_mapping", "uniform_plan"]
