"""An sbatch script that launches the recommended Megatron-LM command on the right number of nodes."""

from __future__ import annotations

import shlex

from costmodel.specs.strategy import Strategy
from search.exporters._base import Exporter, header
from search.exporters._megatron import MegatronExporter, launch_env, megatron_argv
from search.space import SearchProblem


class SlurmExporter(Exporter):
    """``train.sbatch``: ``#SBATCH`` node shape plus ``torchrun pretrain_gpt.py`` with the Megatron arguments.

    Paths (``MEGATRON_DIR``, data, tokenizer) are environment variables the user sets.
    """

    name = "slurm"
    filename = "train.sbatch"
    framework = "megatron-core"

    def carried(self, strategy: Strategy) -> frozenset[str]:
        return MegatronExporter().carried(strategy)

    def refusal(self, strategy: Strategy, problem: SearchProblem) -> tuple[str, object, str] | None:
        return MegatronExporter().refusal(strategy, problem)

    def render(self, strategy: Strategy, problem: SearchProblem) -> str:
        nodes = problem.cluster.num_nodes
        per_node = min(problem.num_gpus, problem.cluster.gpus_per_node)
        args = "\n".join("  " + " ".join(shlex.quote(a) for a in group) for group in megatron_argv(strategy, problem))
        job = f"parplan-{problem.model.name}-{problem.num_gpus}gpu"
        env = "\n".join(f"export {k}={v}" if v is not None else f"unset {k}  # Megatron-FSDP refuses {k}=1"
                         for k, v in launch_env(strategy, problem.framework).items())
        return f"""#!/bin/bash
#SBATCH --job-name={job}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={per_node}
#SBATCH --exclusive
{header(problem, strategy)}
set -euo pipefail
: "${{MEGATRON_DIR:?set MEGATRON_DIR to a Megatron-LM checkout}}"
: "${{DATA_PATH:?set DATA_PATH to the preprocessed data prefix}}"
: "${{TOKENIZER_MODEL:?set TOKENIZER_MODEL}}"
{env}
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)

MEGATRON_ARGS=(
{args}
)

srun torchrun \\
  --nnodes={nodes} --nproc-per-node={per_node} \\
  --rdzv-backend=c10d --rdzv-endpoint="$MASTER_ADDR:29500" \\
  "$MEGATRON_DIR/pretrain_gpt.py" \\
  "${{MEGATRON_ARGS[@]}}" \\
  --data-path "$DATA_PATH" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$TOKENIZER_MODEL"
"""
