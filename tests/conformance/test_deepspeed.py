"""DeepSpeed exports through ``deepspeed.runtime.config.DeepSpeedConfig`` with the export's world size.

DeepSpeedConfig reads the data-parallel world from the ``mpu`` it is given (the pipeline and tensor
groups' complement), checks ``train_batch_size == micro * accumulation * dp`` and every key it
knows. Skips without the ``conformance`` extra.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from costmodel.specs.errors import SpecError
from search.exporters import EXPORTERS
from tests.conformance.matrix import CASES, expressible

config = pytest.importorskip("deepspeed.runtime.config")

EXPORTER = EXPORTERS["deepspeed"]


class DataParallelGroups:
    """The one ``mpu`` method DeepSpeedConfig asks: the data-parallel world of the export."""

    def __init__(self, dp: int) -> None:
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp


def validate(text: str, dp: int) -> object:
    return config.DeepSpeedConfig(json.loads(text), mpu=DataParallelGroups(dp))


@pytest.mark.parametrize("case", sorted(CASES))
def test_export_validates_in_deepspeed_or_is_refused(case: str, tmp_path: Path, deepspeed_world: None) -> None:
    problem, strategy = CASES[case]
    try:
        text = EXPORTER.write(strategy, problem, tmp_path).read_text()
    except SpecError as exc:
        assert "\n" not in str(exc) and "deepspeed export: " in exc.field
        assert not any(tmp_path.iterdir())
        return
    ds = validate(text, strategy.dp)
    s = strategy
    assert ds.world_size == s.dp
    assert (ds.train_batch_size, ds.train_micro_batch_size_per_gpu) == (s.global_batch_size, s.micro_batch_size)
    assert ds.gradient_accumulation_steps == s.global_batch_size // (s.micro_batch_size * s.dp)
    assert ds.zero_optimization_stage == s.zero_stage
    assert (ds.bfloat16_config.enabled, ds.float16_config.enabled) == (s.precision in ("bf16", "fp8"),
                                                                        s.precision == "fp16")
    if s.pp > 1:  # deepspeed/runtime/pipe/engine.py: ZeRO-2/3 are incompatible with pipeline parallelism
        assert ds.zero_optimization_stage < 2


def test_most_of_the_matrix_validates() -> None:
    written = expressible(EXPORTER)
    assert written >= 12


def test_the_world_size_is_what_makes_the_batch_valid(tmp_path: Path, deepspeed_world: None) -> None:
    """The check is not vacuous: the same file is rejected for another data-parallel world."""
    problem, strategy = CASES["dense-fsdp"]
    text = EXPORTER.write(strategy, problem, tmp_path).read_text()
    with pytest.raises(AssertionError):
        validate(text, strategy.dp * 2)
