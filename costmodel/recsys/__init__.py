"""Recommendation-model (DLRM) cost model: embedding lookups, sparse optimizer, dense MLPs, all-to-alls.

``plan_step_seconds(spec, cluster, plan)`` is the entry point (``step``); ``plan`` holds the sharding plan,
``access`` what a distribution implies for memory traffic, ``embedding`` the lookup predictor, ``dense``
and ``comm`` the data-parallel part and the collectives. Names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from costmodel.lazy import lazy_exports

if TYPE_CHECKING:
    from costmodel.recsys.embedding import CacheLevels, EmbeddingBagPredictor, LookupShard
    from costmodel.recsys.plan import SHARDING_TYPES, ShardingPlan, TableSharding, plan_from_mapping, uniform_plan
    from costmodel.recsys.step import RankTimes, StepBreakdown, plan_step_seconds

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "costmodel.recsys.embedding": ("CacheLevels", "EmbeddingBagPredictor", "LookupShard"),
    "costmodel.recsys.plan": ("SHARDING_TYPES", "ShardingPlan", "TableSharding", "plan_from_mapping",
                              "uniform_plan"),
    "costmodel.recsys.step": ("RankTimes", "StepBreakdown", "plan_step_seconds"),
}, globals())
