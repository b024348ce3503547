"""torchtitan job TOML: the ``[parallelism]``, ``[training]`` and ``[activation_checkpoint]`` sections."""

from __future__ import annotations

from costmodel.specs.strategy import Strategy, pipeline_layers
from search.exporters._base import Exporter, header
from search.space import SearchProblem

# ZeRO stage -> torchtitan data parallelism: replicate (DDP) for 0; FSDP2 for 2 and 3, resharding
# parameters after forward only for 3 (ZeRO-2 keeps them gathered until backward).
RESHARD = {2: "never", 3: "always"}


class TorchtitanExporter(Exporter):
    """``torchtitan.toml``, merged into a torchtitan train config (``--job.config_file``)."""

    name = "torchtitan"
    filename = "torchtitan.toml"

    def carried(self, strategy: Strategy) -> frozenset[str]:
        out = {"tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size", "global_batch_size", "recompute",
               "precision"}
        if strategy.zero_stage != 1:  # torchtitan has no optimizer-only sharding
            out.add("zero_stage")
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
        replicate, shard = (s.dp, 1) if s.zero_stage == 0 else (1, s.dp)
        lines = [header(problem, s).rstrip("\n"), ""]
        if s.precision == "fp8":
            lines += ["[model]", 'converters = ["float8"]', ""]
        lines += [
            "[training]",
            f"local_batch_size = {s.global_batch_size // s.dp}",
            f"global_batch_size = {s.global_batch_size}",
            f"seq_len = {problem.seq_length}",
            f'mixed_precision_param = "{"float32" if s.precision == "fp16" else "bfloat16"}"',
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
            f"expert_parallel_degree = {s.ep}",
        ]
        split = pipeline_layers(problem.model.num_layers, s.pp, s.vpp)
        if s.pp > 1 and split is not None and len(set(split)) > 1:
            # uneven: name the first layer of every stage after the first
            starts = [sum(split[:stage]) for stage in range(1, s.pp)]
            lines.append("pipeline_parallel_split_points = [" + ", ".join(f'"layers.{i}"' for i in starts) + "]")
        elif s.pp > 1:
            lines.append(f"pipeline_parallel_layers_per_stage = {problem.model.num_layers // (s.pp * s.vpp)}")
        lines += ["", "[activation_checkpoint]", f'mode = "{s.recompute}"']
        if s.recompute == "selective":
            lines.append('selective_ac_option = "op"')
        return "\n".join(lines) + "\n"
