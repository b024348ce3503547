"""torchtitan launch arguments for its config manager (``--module``/``--config`` plus overrides).

torchtitan 0.3 (the config system that replaced TOML files in February 2026) builds a run from a
``config_registry`` function of a model module and applies ``--section.key value`` overrides
(``torchtitan/config/manager.py`` ``ConfigManager.parse_args``, tyro). The export names that
function and overrides every setting the prediction assumed.
"""

from __future__ import annotations

from costmodel.specs.layout import EMBEDDING, LOSS, PipelineLayout, layout_of
from costmodel.specs.model import ModelSpec
from costmodel.specs.strategy import Strategy
from search.exporters._base import Exporter, catalog_match, header
from search.space import SearchProblem

# ZeRO stage -> torchtitan data parallelism: replicate (DDP) for 0; FSDP2 for 2 and 3, resharding
# parameters after forward only for 3 (ZeRO-2 keeps them gathered until backward).
RESHARD = {2: "never", 3: "always"}

# Catalog model -> (module, config_registry function) of torchtitan 0.3.0
# (torchtitan/models/{llama3,qwen3,deepseek_v3,gpt_oss}/config_registry.py).
FLAVORS = {"llama3.1-8b": ("llama3", "llama3_8b"), "llama3.1-70b": ("llama3", "llama3_70b"),
           "llama3.1-405b": ("llama3", "llama3_405b"), "qwen3-30b-a3b": ("qwen3", "qwen3_30b_a3b"),
           "deepseek-v3": ("deepseek_v3", "deepseek_v3_671b"), "gpt-oss-20b": ("gpt_oss", "gpt_oss_20b"),
           "gpt-oss-120b": ("gpt_oss", "gpt_oss_120b")}
# Functions whose model spec carries torchao's Float8LinearConverter (the CLI cannot add or remove
# a converter): llama3_405b (model_registry("405B", converters=[Float8LinearConverter...])) and
# deepseek_v3_671b_float8, torchtitan 0.3.0 config_registry.py.
FP8_FLAVORS = {"llama3.1-405b": ("llama3", "llama3_405b"), "deepseek-v3": ("deepseek_v3", "deepseek_v3_671b_float8")}
FP8_BUILT_IN = {flavor for flavor in FP8_FLAVORS.values()}
# PyTorch ring attention's default K/V exchange; torchtitan 0.3 has no setting for it
# (context_parallel_rotate_method was removed from ParallelismConfig).
CP_EXCHANGE = "all_gather"


def model_parts(layout: PipelineLayout) -> list[list[str]]:
    """torchtitan's ``module_fqns_per_model_part``: the modules of each of the ``pp * vpp`` model chunks.

    One part per chunk of the pipeline layout (``costmodel.specs.layout``; chunk ``i`` runs on
    rank ``i % pp``, torchtitan's loop-style stage order): ``tok_embeddings`` where the layout has
    the embedding, its decoder layers by global index, and ``norm`` and ``output`` where it has the
    loss. Spelled out, so that torchtitan's own split (which weighs the embedding and output as
    layers, ``pipeline_parallel_{first,last}_stage_less_layers``) cannot differ from the one
    predicted. torchtitan has no MTP module: MTP layers of a layout are left out.
    """
    parts = []
    for index, chunk in enumerate(layout.chunks):
        part = ["tok_embeddings"] if EMBEDDING in chunk else []
        part += [f"layers.{i}" for i in layout.chunk_layer_ids(index)]
        parts.append(part + (["norm", "output"] if LOSS in chunk else []))
    return parts


def flavor(model: ModelSpec, precision: str) -> tuple[str, str] | None:
    """``(module, config function)`` that builds ``model`` at ``precision``, or None."""
    name = catalog_match(model, FLAVORS)
    if name is None:
        return None
    chosen = FP8_FLAVORS.get(name) if precision == "fp8" else FLAVORS[name]
    if chosen is None or (precision != "fp8" and chosen in FP8_BUILT_IN):
        return None
    return chosen


def model_refusal(model: ModelSpec) -> tuple[str, object, str] | None:
    """Why no torchtitan config function builds ``model``, or None."""
    if catalog_match(model, FLAVORS) is None:
        return "model", model.name, "one with a torchtitan 0.3 config function (" + ", ".join(FLAVORS) + ")"
    return None


def batch_sizes(strategy: Strategy) -> tuple[int, int]:
    """``(training.local_batch_size, parallelism.pipeline_parallel_microbatch_size)`` as predicted.

    torchtitan accumulates ``global / (local * dp)`` steps and, with pp > 1, splits each local batch
    into pipeline micro-batches (trainer.py): without pp the local batch is the micro-batch; with pp
    the whole per-rank batch is one pipeline flush of ``global / (dp * mbs)`` micro-batches.
    """
    s = strategy
    return (s.global_batch_size // s.dp if s.pp > 1 else s.micro_batch_size), s.micro_batch_size


class TorchtitanExporter(Exporter):
    """``torchtitan_args.txt``: ``torchrun ... -m torchtitan.train $(grep -v '^#' torchtitan_args.txt)``.

    Replace ``HF_ASSETS`` (tokenizer) and ``DATASET_PATH``.
    """

    name = "torchtitan"
    filename = "torchtitan_args.txt"
    framework = "torchtitan"

    def carried(self, strategy: Strategy) -> frozenset[str]:
        out = {"tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size", "global_batch_size", "recompute",
               "precision", "zero_stage", "sequence_parallel", "tp_comm_overlap", "cp_comm_type"}
        if strategy.shard_replicas > 1 and strategy.zero_stage == 3:  # HSDP: FSDP2 on a 2-D mesh
            out.add("hsdp_shard_size")
        return frozenset(out)

    def allowed(self, model: ModelSpec) -> dict[str, tuple[object, ...]]:
        self.refuse(model_refusal(model))
        precisions = tuple(p for p in ("bf16", "fp8") if flavor(model, p) is not None)
        return {"cp_comm_type": (CP_EXCHANGE,), "zero_stage": (0, 2, 3), "tp_comm_overlap": (False,),
                "precision": precisions}

    def refusal(self, strategy: Strategy, problem: SearchProblem) -> tuple[str, object, str] | None:
        s = strategy
        name = catalog_match(problem.model, FLAVORS)
        if name is None:
            return model_refusal(problem.model)
        if flavor(problem.model, s.precision) is None:
            if s.precision == "fp8":
                return "precision", "fp8", f"bf16: torchtitan's {FLAVORS[name][1]} config has no float8 variant"
            return ("precision", s.precision, f"fp8: torchtitan's {FLAVORS[name][1]} config converts the linears "
                    "to float8 and its command line cannot undo it")
        if s.zero_stage == 1:
            return "zero_stage", 1, "0, 2 or 3 (torchtitan has no optimizer-only sharding)"
        if s.precision == "fp16":
            return "precision", "fp16", "bf16 or fp8 (mixed_precision_param is bfloat16 or float32)"
        if s.cp > 1 and s.cp_comm_type != CP_EXCHANGE:
            return "cp_comm_type", s.cp_comm_type, f"{CP_EXCHANGE} (torchtitan 0.3 has no rotate-method setting)"
        if s.tp_comm_overlap:
            return "tp_comm_overlap", True, "false (torchtitan's async TP is not Transformer Engine's overlap)"
        if s.cuda_graphs != "none":  # the export disables them: parplan models no torchtitan capture
            return "cuda_graphs", s.cuda_graphs, "none (the export sets --training.disable-cuda-graphs)"
        shard = 1 if s.zero_stage == 0 else s.dp // s.shard_replicas
        if s.ep > 1 and (shard * s.cp * s.tp) % s.ep:  # ParallelDims: dp_shard * cp * tp == efsdp * ep
            return "ep", s.ep, (f"a divisor of dp_shard * cp * tp = {shard * s.cp * s.tp} (torchtitan's experts "
                                "borrow FSDP and TP ranks, not replicas)")
        if s.shard_replicas > 1 and s.zero_stage != 3:
            return "hsdp_shard_size", s.hsdp_shard_size, "unset below ZeRO-3 (HSDP is FSDP2 on a 2-D mesh)"
        if s.pp > 1 and not all(model_parts(layout_of(problem.model, s))):
            return ("pipeline_layout", s.pipeline_layout, "a layout whose every chunk holds a module torchtitan "
                    "has (it has no MTP module)")
        if problem.framework.grad_reduce_dtype != "fp32":
            return ("framework.grad_reduce_dtype", problem.framework.grad_reduce_dtype,
                    "fp32 (training.mixed_precision_reduce accepts only float32)")
        return None

    def argv(self, strategy: Strategy, problem: SearchProblem) -> list[list[str]]:
        """Every argument, grouped per flag (``--module``/``--config`` first, the subcommand last)."""
        s = strategy
        found = flavor(problem.model, s.precision)
        assert found is not None, "check() refuses models without a torchtitan config"
        module, config = found
        # torchtitan's dp degrees exclude cp (FSDP shards over dp_shard * cp); HSDP replicas split dp
        replicate, shard = (s.dp, 1) if s.zero_stage == 0 else (s.shard_replicas, s.dp // s.shard_replicas)
        local, micro = batch_sizes(s)
        args = [["--module", module], ["--config", config],
                ["--hf-assets-path", "HF_ASSETS"], ["--dataloader.dataset-path", "DATASET_PATH"],
                ["--training.seq-len", str(problem.seq_length)],
                ["--training.local-batch-size", str(local)],
                ["--training.global-batch-size", str(s.global_batch_size)],
                ["--training.mixed-precision-param", "bfloat16"],
                ["--training.mixed-precision-reduce", "float32"],
                # parplan predicts eager kernels; torchtitan refuses CUDA graphs with pp (trainer.py)
                ["--training.disable-cuda-graphs"],
                ["--parallelism.data-parallel-replicate-degree", str(replicate)],
                ["--parallelism.data-parallel-shard-degree", str(shard)],
                ["--parallelism.fsdp-reshard-after-forward", RESHARD.get(s.zero_stage, "default")],
                ["--parallelism.tensor-parallel-degree", str(s.tp)],
                ["--parallelism.enable-sequence-parallel" if s.sequence_parallel
                 else "--parallelism.no-enable-sequence-parallel"],
                ["--compile.no-enable-async-tensor-parallel"],
                ["--parallelism.pipeline-parallel-degree", str(s.pp)],
                ["--parallelism.pipeline-parallel-schedule", "Interleaved1F1B" if s.vpp > 1 else "1F1B"],
                ["--parallelism.pipeline-parallel-microbatch-size", str(micro)],
                ["--parallelism.context-parallel-degree", str(s.cp)],
                ["--parallelism.expert-parallel-degree", str(s.ep)]]
        if s.pp > 1:
            parts = model_parts(layout_of(problem.model, s))
            args.append(["--parallelism.module-fqns-per-model-part", *(",".join(part) for part in parts)])
        args.append([f"activation-checkpoint:{s.recompute}"])  # tyro subcommand: none, selective or full
        return args

    def render(self, strategy: Strategy, problem: SearchProblem) -> str:
        local, _ = batch_sizes(strategy)
        accumulation = strategy.global_batch_size // (local * strategy.dp)
        return (header(problem, strategy)
                + f"# Launch {problem.num_gpus} ranks: torchrun ... -m torchtitan.train "
                  f"$(grep -v '^#' {self.filename}); replace HF_ASSETS and DATASET_PATH.\n"
                + f"# {accumulation} accumulation step(s) of {local} sequences per data-parallel rank"
                + (f", split into pipeline micro-batches of {strategy.micro_batch_size}.\n" if strategy.pp > 1
                   else ".\n")
                + "\n".join(" ".join(group) for group in self.argv(strategy, problem)) + "\n")
