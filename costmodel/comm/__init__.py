"""Collective communication time: where each process group sits, and what its collectives cost."""

from costmodel.comm.calibration import CommCalibration, default_calibration
from costmodel.comm.collectives import IntraPredictor, collective_seconds, link_figures, nccl_algorithm
from costmodel.comm.formulas import OPS, LinkFigures, bus_bandwidth, bus_factor
from costmodel.comm.placement import (
    DEFAULT_ORDER,
    GROUP_KINDS,
    GroupPlacement,
    group_placement,
    pipeline_placements,
    scale_up_domain_size,
)

__all__ = [
    "DEFAULT_ORDER",
    "GROUP_KINDS",
    "OPS",
    "CommCalibration",
    "GroupPlacement",
    "IntraPredictor",
    "LinkFigures",
    "bus_bandwidth",
    "bus_factor",
    "collective_seconds",
    "default_calibration",
    "group_placement",
    "link_figures",
    "nccl_algorithm",
    "pipeline_placements",
    "scale_up_domain_size",
]
