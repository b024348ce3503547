"""torchtitan job TOML: the ``[parallelism]``, ``[training]`` and ``[activation_checkpoint]`` sections."""

from __future__ import annotations

from costmodel.specs.layout import EMBEDDING, LOSS, PipelineLayout, layout_of
from costmodel.specs.strategy import Strategy
from search.exporters._base import Exporter, header
from search.space import SearchProblem

# ZeRO stage -> torchtitan data parallelism: replicate (DDP) for 0; FSDP2 for 2 and 3, resharding
# parameters after forward only for 3 (ZeRO-2 keeps them gathered until backward).
RESHARD = {2: "never", 3: "always"}


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


# parplan cp_comm_type -> torchtitan [parallelism] context_parallel_rotate_method (PyTorch ring
# attention: "allgather" gathers all K/V shards first, "alltoall" passes them around the ring).
ROTATE_METHOD = {"p2p": "alltoall", "all_gather": "allgather"}

class TorchtitanExporter(Exporter):
    """``torchtitan.toml``, merged into a torchtitan train config (``--job.config_file``)."""

    name = "torchtitan"
    filename = "torchtitan.toml"

    def carried(self, strategy: Strategy) -> frozenset[str]:
        out = {"tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size", "global_batch_size", "recompute",
               "precision"}
        if strategy.cp_comm_type in ROTATE_METHOD:  # torchtitan has no Ulysses (a2a) context parallelism
            out.add("cp_comm_type")
        if strategy.zero_stage != 1:  # torchtitan has no optimizer-only sharding
            out.add("zero_stage")
        if strategy.shard_replicas > 1 and strategy.zero_stage == 3:  # HSDP: FSDP2 on a 2-D mesh
            out.add("hsdp_shard_size")
        if strategy.sequence_parallel == (strategy.tp > 1):  # its TP plan always shards norms (SP)
            out.add("sequence_parallel")
        return frozenset(out)

    def notes(self, strategy: Strategy) -> list[str]:
        out = super().notes(strategy)
        if strategy.zero_stage == 1:
            out.append("torchtitan: zero_stage=1 has no equivalent; written as FSDP with "
                       "fsdp_reshard_after_forward=\"never\" (ZeRO-2)")
        if strategy.precision == "fp8":
            out.append("torchtitan: fp8 needs torchao (model.converters = [\"float8\"])")
        return out

    def render(self, strategy: Strategy, problem: SearchProblem) -> str:
        s = strategy
        # torchtitan's dp degrees exclude cp (FSDP shards over dp_shard * cp); HSDP replicas split dp
        replicate, shard = (s.dp, 1) if s.zero_stage == 0 else (s.shard_replicas, s.dp // s.shard_replicas)
        lines = [header(problem, s).rstrip("\n"), ""]
        if s.precision == "fp8":
            lines += ["[model]", 'converters = ["float8"]', ""]
        lines += [
            "[training]",
            f"local_batch_size = {s.global_batch_size // s.dp}",
            f"global_batch_size = {s.global_batch_size}",
            f"seq_len = {problem.seq_length}",
            f'mixed_precision_param = "{"float32" if s.precision == "fp16" else "bfloat16"}"',
            # the reduce dtype the prediction assumed (torchtitan accepts only "float32" today)
            f'mixed_precision_reduce = "{"float32" if problem.framework.grad_reduce_dtype == "fp32" else "bfloat16"}"',
            "",
            "[parallelism]",
            f"data_parallel_replicate_degree = {replicate}",
            f"data_parallel_shard_degree = {shard}",
            f'fsdp_reshard_after_forward = "{RESHARD.get(s.zero_stage, "never")}"',
            f"tensor_parallel_degree = {s.tp}",
            f"enable_async_tensor_parallel = {str(s.tp_comm_overlap).lower()}",
            f"pipeline_parallel_degree = {s.pp}",
            f'pipeline_parallel_schedule = "{"Interleaved1F1B" if s.vpp > 1 else "1F1B"}"',
            f"pipeline_parallel_microbatch_size = {s.micro_batch_size}",
            f"context_parallel_degree = {s.cp}",
            f'context_parallel_rotate_method = "{ROTATE_METHOD.get(s.cp_comm_type, "alltoall")}"',
            f"expert_parallel_degree = {s.ep}",
        ]
        if s.pp > 1:
            parts = model_parts(layout_of(problem.model, s))
            lines.append("module_fqns_per_model_part = [" + ", ".join(
                "[" + ", ".join(f'"{name}"' for name in part) + "]" for part in parts) + "]")
        lines += ["", "[activation_checkpoint]", f'mode = "{s.recompute}"']
        if s.recompute == "selective":
            lines.append('selective_ac_option = "op"')
        return "\n".join(lines) + "\n"
