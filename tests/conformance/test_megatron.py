"""Megatron-LM exports (``megatron_args.txt`` and the sbatch script) through Megatron's own checks.

Two consumers:

- megatron-core (the ``conformance`` extra): the flags become the ``TransformerConfig`` /
  ``MLATransformerConfig`` and ``DistributedDataParallelConfig`` that Megatron-LM builds from them
  (``core_transformer_config_from_args``, Megatron-LM core_v0.16.1 arguments.py lines 1306-1380), so
  their ``__post_init__`` checks run; every flag must be one of their fields or a Megatron-LM
  training flag.
- Megatron-LM's ``parse_args(ignore_unknown_args=False)`` + ``validate_args`` with the export's
  environment, when ``PARPLAN_MEGATRON_LM`` names a checkout (no wheel on the package index ships
  ``megatron/training``; tag core_v0.16.1 matches the pinned megatron-core).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from costmodel.specs.errors import SpecError
from search.exporters import EXPORTERS
from tests.conformance.matrix import CASES, WORLD

HOPPER = 9  # CUDA compute capability major of the matrix's H100s (validate_args asks the device)

# Megatron-LM flags (core_v0.16.1 arguments.py) that configure the training loop, data, checkpoints
# or the GPT model builder rather than a megatron.core config dataclass field of the same name.
TRAINING_FLAGS = {"micro_batch_size", "global_batch_size", "seq_length", "max_position_embeddings",
                  "group_query_attention", "untie_embeddings_and_output_weights", "position_embedding_type",
                  "ckpt_format", "data_path", "tokenizer_type", "tokenizer_model", "swiglu", "disable_bias_linear",
                  "num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank",
                  "grad_reduce_in_bf16", "fp8_param_gather", "fp8_format", "num_experts",
                  "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
                  "use_distributed_optimizer", "multi_latent_attention"}


def export_text(name: str, strategy: Any, problem: Any, tmp_path: Path) -> str | None:
    """The export's text, or None after checking that a refusal is one line naming the knob."""
    try:
        return EXPORTERS[name].write(strategy, problem, tmp_path).read_text()
    except SpecError as exc:
        assert "\n" not in str(exc) and f"{name} export: " in exc.field
        assert not any(tmp_path.iterdir())
        return None


def launch(name: str, text: str) -> tuple[list[str], dict[str, str | None]]:
    """``(pretrain_gpt.py argv, environment)`` as the file launches it."""
    if name == "megatron":
        argv = shlex.split(" ".join(line for line in text.splitlines() if line.strip() and not line.startswith("#")))
        env = dict(re.findall(r"^# Required environment: export (\w+)=(\S+)$", text, re.M))
        env |= {k: None for k in re.findall(r"^# Required environment: unset (\w+)", text, re.M)}
        return argv, env
    block = text.split("MEGATRON_ARGS=(\n", 1)[1].split("\n)\n", 1)[0]
    tail = text.split('"${MEGATRON_ARGS[@]}"', 1)[1]
    tail = tail.replace('"$DATA_PATH"', "DATA_PREFIX").replace('"$TOKENIZER_MODEL"', "TOKENIZER_MODEL")
    env: dict[str, str | None] = dict(re.findall(r"^export (\w+)=(\S+)$", text, re.M))
    env |= {k: None for k in re.findall(r"^unset (\w+)", text, re.M)}
    return shlex.split(block) + shlex.split(tail.replace("\\\n", " ")), env


def flag_values(argv: list[str]) -> dict[str, list[str]]:
    """``{dest: values}``: each ``--flag`` with the tokens up to the next flag."""
    out: dict[str, list[str]] = {}
    dest = None
    for token in argv:
        if token.startswith("--"):
            dest = token[2:].replace("-", "_")
            assert dest not in out, f"--{token} given twice"
            out[dest] = []
        else:
            assert dest is not None, f"value {token!r} before any flag"
            out[dest].append(token)
    return out


def _value(field: dataclasses.Field[Any], values: list[str]) -> Any:
    if not values:
        return True
    text = values[0]
    if field.name == "window_size":
        return tuple(int(v) for v in text.split(","))
    if field.name == "moe_layer_freq":
        return eval(text, {"__builtins__": {}})  # noqa: S307 - Megatron-LM's moe_freq_type evaluates this list expression
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def core_configs(argv: list[str]) -> tuple[Any, Any]:
    """(TransformerConfig, DistributedDataParallelConfig) as Megatron-LM builds them from ``argv``."""
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    flags = flag_values(argv)
    model_cls = MLATransformerConfig if "multi_latent_attention" in flags else TransformerConfig
    model_fields = {f.name: f for f in dataclasses.fields(model_cls)}
    ddp_fields = {f.name: f for f in dataclasses.fields(DistributedDataParallelConfig)}
    unknown = set(flags) - set(model_fields) - set(ddp_fields) - TRAINING_FLAGS
    assert not unknown, f"flags no Megatron config or training option has: {sorted(unknown)}"
    model = {k: _value(model_fields[k], v) for k, v in flags.items() if k in model_fields}
    ddp = {k: _value(ddp_fields[k], v) for k, v in flags.items() if k in ddp_fields}
    # core_transformer_config_from_args' renames and derived fields (arguments.py 1323-1351)
    model["num_moe_experts"] = int(flags["num_experts"][0]) if "num_experts" in flags else None
    model["num_query_groups"] = model.get("num_query_groups") if "group_query_attention" in flags else None
    model["gated_linear_unit"] = "swiglu" in flags
    model["add_bias_linear"] = "disable_bias_linear" not in flags
    model["num_layers_in_first_pipeline_stage"] = (int(flags["decoder_first_pipeline_num_layers"][0])
                                                   if "decoder_first_pipeline_num_layers" in flags else None)
    model["num_layers_in_last_pipeline_stage"] = (int(flags["decoder_last_pipeline_num_layers"][0])
                                                  if "decoder_last_pipeline_num_layers" in flags else None)
    if "fp8_format" in flags:
        model["fp8"] = flags["fp8_format"][0]
    pp = int(model.get("pipeline_model_parallel_size", 1))
    if "num_layers_per_virtual_pipeline_stage" in flags:  # validate_args derives the vpp degree
        units = int(model["num_layers"]) + bool(model.get("account_for_embedding_in_pipeline_split")) + bool(
            model.get("account_for_loss_in_pipeline_split"))
        model["virtual_pipeline_model_parallel_size"] = units // (
            pp * int(flags["num_layers_per_virtual_pipeline_stage"][0]))
    if "num_virtual_stages_per_pipeline_rank" in flags:
        model["virtual_pipeline_model_parallel_size"] = int(flags["num_virtual_stages_per_pipeline_rank"][0])
    if "bf16" in flags:
        import torch

        model["params_dtype"] = model["pipeline_dtype"] = torch.bfloat16
    ddp["use_distributed_optimizer"] = "use_distributed_optimizer" in flags
    ddp["grad_reduce_in_fp32"] = "grad_reduce_in_bf16" not in flags
    return model_cls(**model), DistributedDataParallelConfig(**ddp)


@pytest.mark.parametrize("name", ["megatron", "slurm"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_export_builds_megatron_core_configs(name: str, case: str, tmp_path: Path) -> None:
    pytest.importorskip("megatron.core")
    problem, strategy = CASES[case]
    text = export_text(name, strategy, problem, tmp_path)
    if text is None:
        return
    argv, env = launch(name, text)
    model, ddp = core_configs(argv)
    s = strategy
    assert (model.tensor_model_parallel_size, model.pipeline_model_parallel_size, model.context_parallel_size,
            model.expert_model_parallel_size) == (s.tp, s.pp, s.cp, s.ep)
    assert (model.virtual_pipeline_model_parallel_size or 1) == s.vpp
    assert model.sequence_parallel == s.sequence_parallel and model.num_layers == problem.model.num_layers
    assert (ddp.use_megatron_fsdp, ddp.use_distributed_optimizer) == (s.zero_stage >= 2, s.zero_stage >= 1)
    flags = flag_values(argv)
    assert flags["ckpt_format"] == ["fsdp_dtensor" if s.zero_stage >= 2 else "torch_dist"]
    assert flags["seq_length"] == [str(problem.seq_length)] and "data_path" in flags
    assert (int(flags["micro_batch_size"][0]), int(flags["global_batch_size"][0])) == (s.micro_batch_size,
                                                                                        s.global_batch_size)
    # validate_args (core_v0.16.1): Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS != 1,
    # TP/CP without it asserts == 1
    if s.zero_stage >= 2:
        assert env.get("CUDA_DEVICE_MAX_CONNECTIONS", "unset") != "1"
    elif (s.tp > 1 or s.cp > 1) and not model.overlap_moe_expert_parallel_comm:
        assert env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1"


def test_an_unknown_flag_is_caught() -> None:
    pytest.importorskip("megatron.core")
    with pytest.raises(AssertionError, match="tensor_model_paralel_size"):
        core_configs(["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                      "--tensor-model-paralel-size", "2"])


def test_a_bad_degree_is_caught_by_megatron_core() -> None:
    pytest.importorskip("megatron.core")
    with pytest.raises(ValueError, match="tensor_model_parallel_size"):
        core_configs(["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                      "--tensor-model-parallel-size", "3"])


def test_exports_pass_megatron_lm_parse_args_and_validate_args(tmp_path: Path) -> None:
    """Megatron-LM's real argument parser and validator (needs a checkout: ``PARPLAN_MEGATRON_LM``)."""
    checkout = os.environ.get("PARPLAN_MEGATRON_LM")
    if not checkout or not (Path(checkout) / "megatron" / "training" / "arguments.py").is_file():
        pytest.skip("PARPLAN_MEGATRON_LM is not a Megatron-LM checkout (no index package ships megatron/training)")
    cases, expected = [], []
    for case, (problem, strategy) in sorted(CASES.items()):
        for name in ("megatron", "slurm"):
            text = export_text(name, strategy, problem, tmp_path / case / name)
            if text is None:
                continue
            argv, env = launch(name, text)
            cases.append({"argv": argv, "env": env, "world_size": WORLD, "arch": HOPPER})
            expected.append((f"{case}/{name}", strategy))
    helper = Path(__file__).with_name("_megatron_lm_validate.py")
    done = subprocess.run([sys.executable, str(helper)], input=json.dumps(cases), capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": checkout}, timeout=600, check=True)
    results = json.loads(done.stdout.strip().splitlines()[-1])
    failed = {label: r["error"] for (label, _), r in zip(expected, results) if not r["ok"]}
    assert not failed
    for (label, s), r in zip(expected, results):
        a = r["args"]
        assert (a["tensor_model_parallel_size"], a["pipeline_model_parallel_size"], a["context_parallel_size"],
                a["data_parallel_size"], a["micro_batch_size"]) == (s.tp, s.pp, s.cp, s.dp, s.micro_batch_size), label
        assert (a["virtual_pipeline_model_parallel_size"] or 1) == s.vpp, label
