"""Mock round-trips for the exports whose real consumer cannot run here, and what every export must say.

Megatron-LM's argument parser ships in no index package and Megatron-Bridge needs Transformer
Engine (no CPU build), so their exports round-trip through the hand-written readers below; torchtitan
and DeepSpeed exports go through the real consumers in tests/conformance instead (and Megatron's
through megatron-core's config checks there too).
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from costmodel.specs import Strategy, get_model
from costmodel.specs.errors import SpecError
from search.exporters import EXPORTERS
from search.space import KNOBS
from tests.search.conftest import small_problem

PROBLEM = small_problem(64)
MOE = small_problem(64, model=get_model("qwen3-30b-a3b"))
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
    "graphs-per-layer": (PROBLEM, Strategy(tp=2, pp=4, dp=8, micro_batch_size=1, global_batch_size=64,
                                           cuda_graphs="layers")),
    "graphs-full-iteration": (PROBLEM, Strategy(tp=2, pp=2, dp=16, micro_batch_size=1, global_batch_size=64,
                                                recompute="full", cuda_graphs="full_iteration")),
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
    p.add_argument("--ckpt-format", choices=("torch", "torch_dist", "torch_dcp", "fsdp_dtensor"))
    p.add_argument("--data-path", nargs="*")
    p.add_argument("--tokenizer-type")
    p.add_argument("--tokenizer-model")
    for flag in ("--kv-channels", "--mtp-num-layers", "--moe-shared-expert-intermediate-size", "--q-lora-rank",
                 "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim",
                 "--window-attn-skip-freq", "--num-distributed-optimizer-instances"):
        p.add_argument(flag, type=int)
    for flag in ("--qk-layernorm", "--add-qkv-bias", "--multi-latent-attention"):
        p.add_argument(flag, action="store_true")
    for flag in ("--attention-dropout", "--hidden-dropout"):
        p.add_argument(flag, type=float)
    p.add_argument("--window-size")
    p.add_argument("--moe-layer-freq")
    p.add_argument("--outer-dp-sharding-strategy", choices=("no_shard", "optim"))
    p.add_argument("--normalization", choices=("LayerNorm", "RMSNorm"))
    p.add_argument("--cuda-graph-impl", choices=("none", "local", "transformer_engine", "full_iteration"),
                   default="none")
    p.add_argument("--no-check-for-nan-in-loss-and-grad", action="store_false", dest="check_for_nan_in_loss_and_grad")
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
            "moe_a2a_overlap": a.overlap_moe_expert_parallel_comm, "cuda_graphs": _megatron_cuda_graphs(a)}


def _megatron_cuda_graphs(a: argparse.Namespace) -> str:
    """``--cuda-graph-impl`` back to the scope; Megatron-LM refuses full_iteration with the NaN check on."""
    if a.cuda_graph_impl == "full_iteration":
        assert not a.check_for_nan_in_loss_and_grad
    return {"none": "none", "local": "layers", "transformer_engine": "layers"}.get(a.cuda_graph_impl, a.cuda_graph_impl)


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


def read_nemo(text: str, problem: Any) -> dict[str, Any]:
    c = yaml.safe_load(text)
    m, ddp = c["model"], c["ddp"]
    zero = {None: 1 if ddp["use_distributed_optimizer"] else 0, "optim_grads": 2,
            "optim_grads_params": 3}[ddp.get("data_parallel_sharding_strategy")]
    mp = m["tensor_model_parallel_size"] * m["pipeline_model_parallel_size"] * m["context_parallel_size"]
    # ConfigContainer has no trainer section; an Optional comm_overlap is instantiated, not merged as a dict
    assert set(c) <= {"model", "train", "dataset", "checkpoint", "ddp", "optimizer", "mixed_precision",
                      "comm_overlap", "env_vars"}
    assert c["comm_overlap"]["_target_"] == "megatron.bridge.training.comm_overlap.CommOverlapConfig"
    assert c["dataset"]["seq_length"] == m["seq_length"] == problem.seq_length
    assert c["checkpoint"]["ckpt_format"] == ("fsdp_dtensor" if ddp.get("use_megatron_fsdp") else "torch_dist")
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
            "moe_a2a_overlap": m.get("overlap_moe_expert_parallel_comm"),
            "cuda_graphs": {None: "none", "transformer_engine": "layers"}.get(m.get("cuda_graph_impl"),
                                                                             m.get("cuda_graph_impl"))}


READERS = {"megatron": read_megatron, "slurm": read_slurm, "nemo": read_nemo}
REAL_CONSUMER = {"torchtitan": "tests/conformance/test_torchtitan.py",
                 "deepspeed": "tests/conformance/test_deepspeed.py"}


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


def test_every_exporter_has_a_reader_or_a_real_consumer_test() -> None:
    assert set(READERS) | set(REAL_CONSUMER) == set(EXPORTERS) and not set(READERS) & set(REAL_CONSUMER)
    assert all((Path(__file__).parents[2] / path).is_file() for path in REAL_CONSUMER.values())


@pytest.mark.parametrize("name", sorted(READERS))
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
    # torchtitan's llama3_405b config trains in float8
    titan = EXPORTERS["torchtitan"].write(dataclasses.replace(strategy, precision="fp8", zero_stage=0), problem,
                                          tmp_path / "t").read_text()
    flag = "--parallelism.module-fqns-per-model-part "
    parts = [p.split(",") for p in titan.split(flag, 1)[1].splitlines()[0].split()]
    assert [sum(name.startswith("layers.") for name in part) for part in parts] == [7] + [8] * 14 + [7]
    assert parts[0][:2] == ["tok_embeddings", "layers.0"] and parts[-1][-3:] == ["layers.125", "norm", "output"]
    even, even_strategy = STRATEGIES["ddp-no-sp"]
    assert "--decoder-first" not in EXPORTERS["megatron"].write(even_strategy, even, tmp_path / "e").read_text()


def _flags(text: str) -> list[str]:
    return shlex.split(" ".join(line for line in text.splitlines() if line.strip() and not line.startswith("#")))


def test_megatron_fsdp_saves_fsdp_dtensor_and_unsets_device_connections(tmp_path: Path) -> None:
    problem, strategy = STRATEGIES["fsdp-full"]  # ZeRO-3 with tp=2: Megatron-FSDP
    args = EXPORTERS["megatron"].write(strategy, problem, tmp_path / "m").read_text()
    assert "--ckpt-format fsdp_dtensor" in args and "unset CUDA_DEVICE_MAX_CONNECTIONS" in args
    sbatch = EXPORTERS["slurm"].write(strategy, problem, tmp_path / "s").read_text()
    assert "\nunset CUDA_DEVICE_MAX_CONNECTIONS" in sbatch and "export CUDA_DEVICE_MAX_CONNECTIONS" not in sbatch
    nemo = yaml.safe_load(EXPORTERS["nemo"].write(strategy, problem, tmp_path / "n").read_text())
    assert nemo["checkpoint"]["ckpt_format"] == "fsdp_dtensor" and "env_vars" not in nemo


def test_tp_without_fsdp_sets_one_device_connection(tmp_path: Path) -> None:
    problem, strategy = STRATEGIES["dense-interleaved"]  # tp=4, cp=2, ZeRO-1
    args = EXPORTERS["megatron"].write(strategy, problem, tmp_path / "m").read_text()
    assert "# Required environment: export CUDA_DEVICE_MAX_CONNECTIONS=1" in args and "--ckpt-format torch_dist" in args
    sbatch = EXPORTERS["slurm"].write(strategy, problem, tmp_path).read_text()
    assert "\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n" in sbatch
    nemo = yaml.safe_load(EXPORTERS["nemo"].write(strategy, problem, tmp_path / "n").read_text())
    assert nemo["env_vars"] == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}


def test_no_tp_or_cp_needs_no_device_connection_setting(tmp_path: Path) -> None:
    strategy = Strategy(tp=1, dp=64, micro_batch_size=1, global_batch_size=64, zero_stage=1)
    text = EXPORTERS["slurm"].write(strategy, PROBLEM, tmp_path).read_text()
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in text


def test_megatron_export_is_a_complete_command(tmp_path: Path) -> None:
    problem, strategy = STRATEGIES["dense-interleaved"]
    flags = _flags(EXPORTERS["megatron"].write(strategy, problem, tmp_path).read_text())
    for flag in ("--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length", "--data-path",
                 "--tokenizer-model", "--micro-batch-size", "--global-batch-size", "--ckpt-format"):
        assert flag in flags


def test_mla_and_shared_experts_are_spelled_for_deepseek(tmp_path: Path) -> None:
    problem = small_problem(64, model=get_model("deepseek-v3"))
    strategy = Strategy(tp=1, pp=8, dp=8, ep=8, micro_batch_size=1, global_batch_size=64, zero_stage=1)
    a = megatron_parser().parse_args(_flags(EXPORTERS["megatron"].write(strategy, problem, tmp_path).read_text()))
    m = problem.model
    assert a.multi_latent_attention and (a.q_lora_rank, a.kv_lora_rank) == (m.q_lora_rank, m.kv_lora_rank)
    assert a.moe_shared_expert_intermediate_size == m.num_shared_experts * m.moe_ffn_hidden_size
    assert a.moe_layer_freq == f"([0]*{m.first_k_dense_layers}+[1]*{m.num_layers - m.first_k_dense_layers})"


@pytest.mark.parametrize(("name", "strategy", "knob"), [
    ("megatron", Strategy(tp=2, dp=32, micro_batch_size=1, global_batch_size=64, sequence_parallel=False,
                          tp_comm_overlap=True), "tp_comm_overlap"),
    ("deepspeed", Strategy(tp=2, pp=2, dp=16, micro_batch_size=1, global_batch_size=64, zero_stage=3), "zero_stage"),
    ("deepspeed", Strategy(tp=2, dp=32, micro_batch_size=1, global_batch_size=64, zero_stage=3, hsdp_shard_size=8),
     "hsdp_shard_size"),
    ("torchtitan", Strategy(tp=2, dp=32, micro_batch_size=1, global_batch_size=64, zero_stage=1), "zero_stage"),
    ("torchtitan", Strategy(tp=2, cp=2, dp=16, micro_batch_size=1, global_batch_size=64, zero_stage=3,
                            cp_comm_type="p2p"), "cp_comm_type"),
])
def test_a_strategy_the_launcher_cannot_run_is_refused_on_one_line(name: str, strategy: Strategy, knob: str,
                                                                   tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        EXPORTERS[name].write(strategy, PROBLEM, tmp_path / "out")
    assert info.value.field == f"{name} export: {knob}" and "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()  # nothing half-written


@pytest.mark.parametrize("name", ["torchtitan", "nemo"])
def test_a_model_without_a_recipe_is_refused_by_recipe_launchers(name: str, tmp_path: Path) -> None:
    problem = small_problem(64, model=get_model("mixtral-8x7b"))
    strategy = Strategy(tp=2, dp=32, ep=8, micro_batch_size=1, global_batch_size=64, zero_stage=3)
    with pytest.raises(SpecError, match="mixtral-8x7b") as info:
        EXPORTERS[name].write(strategy, problem, tmp_path)
    assert info.value.field == f"{name} export: model"


def test_an_hf_copy_of_a_catalog_model_finds_its_recipe(tmp_path: Path) -> None:
    problem = small_problem(64, model=dataclasses.replace(get_model("llama3.1-8b"), name="my-llama"))
    strategy = Strategy(tp=1, dp=64, micro_batch_size=1, global_batch_size=64, zero_stage=3)
    assert "--config llama3_8b" in EXPORTERS["torchtitan"].write(strategy, problem, tmp_path / "t").read_text()
    assert "--model llama31_8b" in EXPORTERS["nemo"].write(strategy, problem, tmp_path / "n").read_text()


def test_torchtitan_batch_is_the_predicted_micro_batch_and_accumulation(tmp_path: Path) -> None:
    """pp = 1: the local batch is the micro-batch (torchtitan accumulates global / (local x dp) steps)."""
    strategy = Strategy(tp=1, dp=64, micro_batch_size=1, global_batch_size=256, zero_stage=3)
    flags = _flags(EXPORTERS["torchtitan"].write(strategy, small_problem(64, global_batch_size=256),
                                                 tmp_path).read_text())
    assert flags[flags.index("--training.local-batch-size") + 1] == "1"
    assert flags[flags.index("--training.global-batch-size") + 1] == "256"
