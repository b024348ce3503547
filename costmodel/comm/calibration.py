"""The fitted constants of the collective model, read from ``calibration.yaml`` beside this module.

They are kept apart from the datasheet figures of ``costmodel/catalog/gpus.yaml``: the catalog
says what a link is rated at, this file how much of it NCCL achieves (and how that was fitted).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Final

import yaml

__all__ = ["CommCalibration", "default_calibration"]

_DEFAULT_KEY: Final = "default"


def _efficiency(section: str, entry: Any) -> float:
    value = entry.get("value") if isinstance(entry, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"The {section!r} calibration value must be a number in (0, 1]. Got {value!r} instead.")
    return float(value)


def _per_gpu(data: dict[str, Any], section: str) -> tuple[tuple[str, float], ...]:
    table = data.get(section)
    if not isinstance(table, dict) or _DEFAULT_KEY not in table:
        raise ValueError(f"The {section!r} calibration section must map GPU names to entries and hold "
                         f"'{_DEFAULT_KEY}'. Got {table!r} instead.")
    return tuple((str(name), _efficiency(f"{section}.{name}", entry)) for name, entry in table.items())


@dataclass(frozen=True, kw_only=True)
class CommCalibration:
    """Achieved-to-nominal ratios of each link tier (dimensionless, in (0, 1]) and the p2p ceiling.

    ``ring_bus_efficiency`` and ``all_to_all_bus_efficiency`` map catalog GPU names (and
    ``"default"``) to the NVLink-domain efficiency of ring collectives and of alltoall.
    """

    ring_bus_efficiency: tuple[tuple[str, float], ...]
    all_to_all_bus_efficiency: tuple[tuple[str, float], ...]
    p2p_efficiency: float
    net_bus_efficiency: float
    net_all_to_all_efficiency: float
    net_p2p_peer_bandwidth_bytes_per_s: float

    def ring_efficiency_for(self, gpu_name: str) -> float:
        """Ring collective efficiency inside the NVLink domain of ``gpu_name``."""
        table = dict(self.ring_bus_efficiency)
        return table.get(gpu_name, table[_DEFAULT_KEY])

    def all_to_all_efficiency_for(self, gpu_name: str) -> float:
        """alltoall efficiency inside the NVLink domain of ``gpu_name``."""
        table = dict(self.all_to_all_bus_efficiency)
        return table.get(gpu_name, table[_DEFAULT_KEY])


def calibration_from_mapping(data: dict[str, Any]) -> CommCalibration:
    """Build a :class:`CommCalibration` from the parsed YAML mapping."""
    peer = data.get("net_p2p_peer_bandwidth_GBps", {})
    peer_gbps = peer.get("value") if isinstance(peer, dict) else None
    if isinstance(peer_gbps, bool) or not isinstance(peer_gbps, (int, float)) or peer_gbps <= 0:
        raise ValueError(f"The 'net_p2p_peer_bandwidth_GBps' calibration value must be a number > 0. "
                         f"Got {peer_gbps!r} instead.")
    return CommCalibration(
        ring_bus_efficiency=_per_gpu(data, "ring_bus_efficiency"),
        all_to_all_bus_efficiency=_per_gpu(data, "all_to_all_bus_efficiency"),
        p2p_efficiency=_efficiency("p2p_efficiency", data.get("p2p_efficiency")),
        net_bus_efficiency=_efficiency("net_bus_efficiency", data.get("net_bus_efficiency")),
        net_all_to_all_efficiency=_efficiency("net_all_to_all_efficiency", data.get("net_all_to_all_efficiency")),
        net_p2p_peer_bandwidth_bytes_per_s=float(peer_gbps) * 1e9,
    )


@lru_cache(maxsize=1)
def default_calibration() -> CommCalibration:
    """The shipped calibration (``costmodel/comm/calibration.yaml``)."""
    text = resources.files("costmodel.comm").joinpath("calibration.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    if not isinstance(data, dict):  # pragma: no cover - shipped file
        raise RuntimeError("costmodel/comm/calibration.yaml must be a mapping")
    return calibration_from_mapping(data)
