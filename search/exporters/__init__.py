"""Launcher exporters: Megatron-LM and torchtitan arguments, DeepSpeed JSON, Megatron-Bridge overrides, sbatch."""

from search.exporters._base import Exporter
from search.exporters._deepspeed import DeepSpeedExporter
from search.exporters._megatron import MegatronExporter
from search.exporters._nemo import NeMoExporter
from search.exporters._registry import EXPORTERS, export, get_exporter, implied_framework, launcher_restrictions
from search.exporters._slurm import SlurmExporter
from search.exporters._torchtitan import TorchtitanExporter

__all__ = ["EXPORTERS", "DeepSpeedExporter", "Exporter", "MegatronExporter", "NeMoExporter", "SlurmExporter",
           "TorchtitanExporter", "export", "get_exporter", "implied_framework", "launcher_restrictions"]
