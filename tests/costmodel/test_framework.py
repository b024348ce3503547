"""Framework files load, carry a source for every value, and the run spec's ``framework:`` parses."""

from __future__ import annotations

import pytest
import yaml

from costmodel.specs.errors import SpecError
from costmodel.specs.framework import (FIELD_NAMES, FRAMEWORK_NAMES, framework_for_label, framework_sources,
                                       get_framework, resolve_framework)
from costmodel.specs.runspec import run_spec_from_mapping

RUN = {"model": "llama3.1-8b", "seq_length": 4096, "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 8},
       "strategy": {"tp": 1, "global_batch_size": 32}}


@pytest.mark.parametrize("name", FRAMEWORK_NAMES)
def test_every_framework_loads_and_sources_each_value_it_sets(name: str) -> None:
    fw = get_framework(name)
    assert fw.name == name
    own = set(yaml.safe_load(open(f"costmodel/catalog/frameworks/{name}.yaml", encoding="utf-8"))) & FIELD_NAMES
    assert own - set(framework_sources(name)) - {"display_name", "exporter"} == set()


def test_nemo_inherits_megatron_core_and_changes_only_its_recipe_defaults() -> None:
    core, nemo = get_framework("megatron-core"), get_framework("nemo")
    assert nemo.grad_reduce_dtype == core.grad_reduce_dtype == "fp32"
    assert not core.distributed_optimizer and nemo.distributed_optimizer
    assert get_framework("megatron-bridge").zero_stages == core.zero_stages


def test_gradient_bytes_follow_the_framework() -> None:
    assert get_framework("megatron-core").main_grad_bytes == 4
    assert resolve_framework({"name": "megatron-core", "grad_reduce_dtype": "bf16"}).main_grad_bytes == 2
    assert get_framework("deepspeed").main_grad_bytes == 2
    # FSDP2's sharded gradient stays fp32 on the fp32 parameter
    assert get_framework("torchtitan").main_grad_bytes == 4


def test_run_spec_defaults_to_megatron_core_and_takes_a_name_or_a_mapping() -> None:
    assert run_spec_from_mapping(RUN).framework.name == "megatron-core"
    assert run_spec_from_mapping({**RUN, "framework": "torchtitan"}).framework.fsdp_implementation == "fsdp2"
    fw = run_spec_from_mapping({**RUN, "framework": {"name": "nemo", "fsdp_prefetch_layers": 2}}).framework
    assert (fw.name, fw.fsdp_prefetch_layers) == ("nemo", 2)


@pytest.mark.parametrize(("value", "field"), [
    ("pytorch-lightning", "framework"),
    (3, "framework"),
    ({"name": "nemo", "grad_reduce_dtype": "fp8"}, "framework.grad_reduce_dtype"),  # fp16: Megatron-LM 2021-22
    ({"name": "nemo", "no_such_knob": 1}, "framework.no_such_knob"),
    ({"name": "nemo", "zero_stages": [5]}, "framework.zero_stages"),
])
def test_bad_framework_is_a_one_line_spec_error_naming_the_field(value: object, field: str) -> None:
    with pytest.raises(SpecError) as err:
        run_spec_from_mapping({**RUN, "framework": value})
    assert err.value.field == field
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("label", "name"), [
    ("NeMo 24.07 (Megatron-Core)", "nemo"), ("Megatron-Core r0.8.0 / Megatron-LM", "megatron-core-r0.8"),
    ("Megatron-LM (2021)", "megatron-core"), ("torchtitan (PyTorch FSDP2)", "torchtitan"),
    ("Megatron-DeepSpeed", "deepspeed"), ("deepspeed", "deepspeed"), ("JAX/Pax", None),
])
def test_validation_labels_name_a_framework(label: str, name: str | None) -> None:
    assert framework_for_label(label) == name
