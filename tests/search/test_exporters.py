"""Every export parses with its format's own parser and round-trips the strategy (shared conformance suite)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from costmodel.specs import Strategy, get_model
from search.exporters import EXPORTERS
from search.space import KNOBS
from tests.search.conftest import small_problem

PROBLEM = small_problem(64)
MOE = small_problem(64, model=get_model("mixtral-8x7b"))
UNEVEN = small_problem(64, model=get_model("llama3.1-405b"))
STRATEGIES = {
    "dense-interleaved": (PROBLEM, Strategy(tp=4, pp=2, vpp=2, cp=2, dp=4, micro_batch_size=2, global_batch_size=64,
                                            recompute="selective", zero_stage=1, precision="bf16")),
    "fsdp-full": (PROBLEM, Strategy(tp=2, pp=1, dp=32, micro_batch_size=1, global_batch_size=64, recompute="full",
                                    zero_stage=3, precision="fp8", tp_comm_overlap=True)),
    "ddp-no-sp": (PROBLEM, Strategy(tp=2, pp=4, dp=8, micro_batch_size=2, global_batch_size=64,
                                    sequence_parallel=False, zero_stage=0, precision="fp16")),
    "moe-zero2": (MOE, Strategy(tp=2, pp=2, dp=16, ep=8, micro_batch_size=1, global_batch_size=64, zero_stage=2)),
    # 126 layers on 16 stages: 7, 14 x 8, 7
    "uneven-pp": (UNEVEN, Strategy(tp=4, pp=16, dp=1, micro_batch_size=1, global_batch_size=64)),
}


def megatron_parser() -> argparse.ArgumentParser:
    """The Megatron-LM flags the exporters emit (names as in megatron/training/arguments.py)."""
    p = argparse.ArgumentParser(prog="pretrain_gpt.py")
    for flag in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
                 "--expert-model-parallel-size", "--micro-batch-size", "--global-batch-size",
                 "--num-layers-per-virtual-pipeline-stage", "--recompute-num-layers", "--num-layers",
                 "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--seq-length",
                 "--max-position-embeddings", "--num-query-groups", "--num-experts", "--moe-router-topk",
                 "--moe-ffn-hidden-size", "--decoder-first-pipeline-num-layers",
                 "--decoder-last-pipeline-num-layers"):
        p.add_argument(flag, type=int)
    for flag in ("--sequence-parallel", "--use-distributed-optimizer", "--use-megatron-fsdp", "--bf16", "--fp16",
                 "--tp-comm-overlap", "--overlap-grad-reduce", "--overlap-param-gather", "--group-query-attention",
                 "--swiglu", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
                 "--grad-reduce-in-bf16", "--fp8-param-gather"):
        p.add_argument(flag, action="store_true")
    p.add_argument("--recompute-granularity", choices=("full", "selective"))
    p.add_argument("--recompute-method", choices=("uniform", "block"))
    p.add_argument("--data-parallel-sharding-strategy", choices=("no_shard", "optim", "optim_grads",
                                                                 "optim_grads_params"))
    p.add_argument("--fp8-format", choices=("e4m3", "hybrid"))
    p.add_argument("--fp8-recipe", choices=("tensorwise", "delayed", "mxfp8", "blockwise", "custom"))
    p.add_argument("--moe-token-dispatcher-type", choices=("allgather", "alltoall", "flex"))
    p.add_argument("--moe-flex-dispatcher-backend", choices=("deepep", "hybridep"))
    p.add_argument("--moe-expert-capacity-factor", type=float)
    p.add_argument("--expert-tensor-parallel-size", type=int)
    p.add_argument("--cp-comm-type", choices=("p2p", "all_gather", "a2a", "a2a+p2p"))
    for flag in ("--moe-pad-expert-input-to-capacity", "--moe-shared-expert-overlap",
                 "--overlap-moe-expert-parallel-comm"):
        p.add_argument(flag, action="store_true")
    p.add_argument("--attention-backend", choices=("flash", "fused", "unfused", "local", "auto"))
    p.add_argument("--normalization", choices=("LayerNorm", "RMSNorm"))
    p.add_argument("--position-embedding-type", choices=("learned_absolute", "rope", "none"))
    return p


def from_megatron_argv(argv: list[str], problem: Any) -> dict[str, Any]:
    a = megatron_parser().parse_args(argv)
    zero = 0 if not a.use_distributed_optimizer else {None: 1, "optim_grads": 2,
                                                      "optim_grads_params": 3}[a.data_parallel_sharding_strategy]
    mp = a.tensor_model_parallel_size * a.pipeline_model_parallel_size * a.context_parallel_size
    chunk = a.num_layers_per_virtual_pipeline_stage
    return {"tp": a.tensor_model_parallel_size, "pp": a.pipeline_model_parallel_size, "cp": a.context_parallel_size,
            "ep": a.expert_model_parallel_size, "dp": problem.num_gpus // mp,
            "vpp": 1 if chunk is None else problem.model.num_layers // (a.pipeline_model_parallel_size * chunk),
            "micro_batch_size": a.micro_batch_size, "global_batch_size": a.global_batch_size,
            "sequence_parallel": a.sequence_parallel, "recompute": a.recompute_granularity or "none",
            "zero_stage": zero, "precision": "fp8" if a.fp8_format else "fp16" if a.fp16 else "bf16",
            "flash_attention": a.attention_backend == "flash", "tp_comm_overlap": a.tp_comm_overlap,
            "overlap_grad_reduce": a.overlap_grad_reduce, "overlap_param_gather": a.overlap_param_gather,
            "cp_comm_type": a.cp_comm_type or "p2p", "etp": a.expert_tensor_parallel_size,
            "moe_token_dispatcher": ("hybridep" if a.moe_flex_dispatcher_backend == "hybridep"
                                     else a.moe_token_dispatcher_type),
            "moe_capacity_factor": a.moe_expert_capacity_factor if a.moe_pad_expert_input_to_capacity else None,
            "moe_shared_expert_overlap": a.moe_shared_expert_overlap,
            "moe_a2a_overlap": a.overlap_moe_expert_parallel_comm}


def read_megatron(text: str, problem: Any) -> dict[str, Any]:
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return from_megatron_argv(shlex.split(" ".join(lines)), problem)


def read_slurm(text: str, problem: Any) -> dict[str, Any]:
    sbatch = {k: v for k, _, v in (line[len("#SBATCH --"):].partition("=") for line in text.splitlines()
                                     if line.startswith("#SBATCH --"))}
    assert int(sbatch["nodes"]) == problem.cluster.num_nodes
    assert int(sbatch["gpus-per-node"]) * int(sbatch["nodes"]) == problem.num_gpus
    block = text.split("MEGATRON_ARGS=(\n", 1)[1].split("\n)\n", 1)[0]
    return from_megatron_argv(shlex.split(block), problem)


def read_torchtitan(text: str, problem: Any) -> dict[str, Any]:
    c = tomllib.loads(text)
    par, train = c["parallelism"], c["training"]
    shard, rep = par["data_parallel_shard_degree"], par["data_parallel_replicate_degree"]
    zero = 0 if shard == 1 and rep > 1 else {"never": 2, "always": 3}[par["fsdp_reshard_after_forward"]]
    parts = par.get("module_fqns_per_model_part")
    pp = par["pipeline_parallel_degree"]
    layers = [name for part in parts or [] for name in part if name.startswith("layers.")]
    assert layers == [f"layers.{i}" for i in range(problem.model.num_layers)] or parts is None  # each layer once
    fp8 = "float8" in c.get("model", {}).get("converters", [])
    rotate = {"alltoall": "p2p", "allgather": "all_gather"}  # torchtitan's names for the K/V exchange
    return {"tp": par["tensor_parallel_degree"], "pp": pp, "cp": par["context_parallel_degree"],
            "cp_comm_type": rotate.get(par.get("context_parallel_rotate_method", "allgather"), "p2p"),
            "ep": par["expert_parallel_degree"], "dp": shard * rep,
            "vpp": 1 if parts is None else len(parts) // pp,
            "micro_batch_size": par["pipeline_parallel_microbatch_size"],
            "global_batch_size": train["global_batch_size"], "sequence_parallel": par["tensor_parallel_degree"] > 1,
            "recompute": c["activation_checkpoint"]["mode"], "zero_stage": zero,
            "precision": "fp8" if fp8 else "bf16" if train["mixed_precision_param"] == "bfloat16" else "fp16"}


def read_deepspeed(text: str, problem: Any) -> dict[str, Any]:
    c = json.loads(text)
    tp = c["tensor_parallel"]["autotp_size"]
    dp = c["train_batch_size"] // (c["train_micro_batch_size_per_gpu"] * c["gradient_accumulation_steps"])
    return {"tp": tp, "dp": dp, "micro_batch_size": c["train_micro_batch_size_per_gpu"],
            "global_batch_size": c["train_batch_size"], "zero_stage": c["zero_optimization"]["stage"],
            "precision": "fp16" if c["fp16"]["enabled"] else "bf16"}


def read_nemo(text: str, problem: Any) -> dict[str, Any]:
    c = yaml.safe_load(text)
    m, ddp = c["model"], c["ddp"]
    zero = {None: 1 if ddp["use_distributed_optimizer"] else 0, "optim_grads": 2,
            "optim_grads_params": 3}[ddp.get("data_parallel_sharding_strategy")]
    mp = m["tensor_model_parallel_size"] * m["pipeline_model_parallel_size"] * m["context_parallel_size"]
    assert c["trainer"]["num_nodes"] * c["trainer"]["devices"] == problem.num_gpus
    return {"tp": m["tensor_model_parallel_size"], "pp": m["pipeline_model_parallel_size"],
            "cp": m["context_parallel_size"], "ep": m["expert_model_parallel_size"], "dp": problem.num_gpus // mp,
            "vpp": m["virtual_pipeline_model_parallel_size"] or 1, "micro_batch_size": c["train"]["micro_batch_size"],
            "global_batch_size": c["train"]["global_batch_size"], "sequence_parallel": m["sequence_parallel"],
            "recompute": m["recompute_granularity"] or "none", "zero_stage": zero,
            "precision": {"bf16_mixed": "bf16", "fp16_mixed": "fp16"}.get(c["mixed_precision"], "fp8"),
            "tp_comm_overlap": c["comm_overlap"]["tp_comm_overlap"],
            "overlap_grad_reduce": ddp["overlap_grad_reduce"], "overlap_param_gather": ddp["overlap_param_gather"],
            "cp_comm_type": m.get("cp_comm_type") or "p2p", "etp": m.get("expert_tensor_parallel_size"),
            "moe_token_dispatcher": ("hybridep" if m.get("moe_flex_dispatcher_backend") == "hybridep"
                                     else m.get("moe_token_dispatcher_type")),
            "moe_capacity_factor": m.get("moe_expert_capacity_factor"),
            "moe_shared_expert_overlap": m.get("moe_shared_expert_overlap"),
            "moe_a2a_overlap": m.get("overlap_moe_expert_parallel_comm")}


READERS = {"megatron": read_megatron, "slurm": read_slurm, "torchtitan": read_torchtitan,
           "deepspeed": read_deepspeed, "nemo": read_nemo}


MOE_KNOBS = frozenset({"etp", "moe_token_dispatcher", "moe_capacity_factor", "moe_shared_expert_overlap",
                       "moe_a2a_overlap"})


def _as_predicted(strategy: Strategy, problem: Any) -> dict[str, Any]:
    """The strategy's knobs with every unset (None) one resolved as the prediction resolved it: the export
    must spell what the prediction assumed, so a knob the user left to the framework comes back as its default."""
    fw = problem.framework
    out = {f.name: getattr(strategy, f.name) for f in dataclasses.fields(strategy)}
    out["etp"] = strategy.expert_tensor_parallel_size
    if strategy.moe_token_dispatcher is None:
        out["moe_token_dispatcher"] = fw.moe_token_dispatcher
    for knob in ("moe_shared_expert_overlap", "moe_a2a_overlap"):
        if out[knob] is None:
            out[knob] = bool(getattr(fw, knob))
    return out


def test_every_exporter_has_a_reader() -> None:
    assert set(READERS) == set(EXPORTERS)


@pytest.mark.parametrize("name", sorted(EXPORTERS))
@pytest.mark.parametrize("case", sorted(STRATEGIES))
def test_export_parses_and_round_trips(name: str, case: str, tmp_path: Path) -> None:
    problem, strategy = STRATEGIES[case]
    exporter = EXPORTERS[name]
    path = exporter.write(strategy, problem, tmp_path)
    assert path.name == exporter.filename
    back = READERS[name](path.read_text(), problem)
    carried = exporter.carried(strategy)
    assert {"tp", "dp", "micro_batch_size", "global_batch_size"} <= carried
    if not problem.model.is_moe:  # MoE knobs are written for MoE models only
        carried -= MOE_KNOBS
    assert carried <= set(back)
    expected = _as_predicted(strategy, problem)
    assert {k: back[k] for k in carried} == {k: expected[k] for k in carried}


@pytest.mark.parametrize("name", sorted(EXPORTERS))
def test_what_an_export_cannot_say_becomes_a_note(name: str) -> None:
    problem, strategy = STRATEGIES["dense-interleaved"]
    exporter = EXPORTERS[name]
    missing = [k for k in KNOBS if k != "dp" and k not in exporter.carried(strategy)
               and getattr(strategy, k) != getattr(Strategy(global_batch_size=64, tp=strategy.tp), k)]
    notes = " ".join(exporter.notes(strategy))
    assert all(f"{k}=" in notes for k in missing)


def test_megatron_export_names_the_layers_per_virtual_stage(tmp_path: Path) -> None:
    problem, strategy = STRATEGIES["dense-interleaved"]
    text = EXPORTERS["megatron"].write(strategy, problem, tmp_path).read_text()
    assert "--num-layers-per-virtual-pipeline-stage 8" in text  # 32 layers / (pp 2 * vpp 2)


def test_uneven_pipeline_split_is_spelled_in_each_framework(tmp_path: Path) -> None:
    problem, strategy = STRATEGIES["uneven-pp"]
    megatron = EXPORTERS["megatron"].write(strategy, problem, tmp_path / "m").read_text()
    assert "--decoder-first-pipeline-num-layers 7" in megatron and "--decoder-last-pipeline-num-layers 7" in megatron
    nemo = yaml.safe_load(EXPORTERS["nemo"].write(strategy, problem, tmp_path / "n").read_text())["model"]
    assert (nemo["num_layers_in_first_pipeline_stage"], nemo["num_layers_in_last_pipeline_stage"]) == (7, 7)
    titan = tomllib.loads(EXPORTERS["torchtitan"].write(strategy, problem, tmp_path / "t").read_text())["parallelism"]
    parts = titan["module_fqns_per_model_part"]
    assert [sum(name.startswith("layers.") for name in part) for part in parts] == [7] + [8] * 14 + [7]
    assert parts[0][:2] == ["tok_embeddings", "layers.0"] and parts[-1][-3:] == ["layers.125", "norm", "output"]
    even, even_strategy = STRATEGIES["ddp-no-sp"]
    assert "--decoder-first" not in EXPORTERS["megatron"].write(even_strategy, even, tmp_path / "e").read_text()
