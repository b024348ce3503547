"""Run Megatron-LM's own ``parse_args`` + ``validate_args`` over launch commands (a subprocess helper).

Usage: ``PYTHONPATH=MEGATRON_LM_CHECKOUT python _megatron_lm_validate.py < cases.json``. Each case is
``{"argv": [...], "env": {name: value or null}, "world_size": N, "arch": major}``; prints one JSON
list, per case ``{"ok": true, "args": {...}}`` or ``{"ok": false, "error": "..."}``. A subprocess,
because the checkout's ``megatron`` package must not mix with an installed megatron-core.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

KEPT = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
        "expert_model_parallel_size", "data_parallel_size", "micro_batch_size", "global_batch_size",
        "virtual_pipeline_model_parallel_size", "sequence_parallel", "recompute_granularity",
        "use_distributed_optimizer", "use_megatron_fsdp", "data_parallel_sharding_strategy", "ckpt_format",
        "seq_length", "num_layers", "fp8", "fp16", "bf16")


def main() -> None:
    cases = json.load(sys.stdin)
    from megatron.training import arguments

    results = []
    for case in cases:
        # the export's GPU generation (CUDA compute capability major): the CPU has no device to ask
        arguments.get_device_arch_version = lambda arch=case["arch"]: arch
        for name, value in case["env"].items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        os.environ.update({"WORLD_SIZE": str(case["world_size"]), "RANK": "0"})
        sys.argv = ["pretrain_gpt.py", *case["argv"]]
        log = io.StringIO()
        try:
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                args = arguments.parse_args(ignore_unknown_args=False)
                arguments.validate_args(args, {})
            results.append({"ok": True, "args": {k: getattr(args, k, None) for k in KEPT}})
        except (AssertionError, ValueError, SystemExit, RuntimeError, TypeError) as exc:
            tail = log.getvalue().strip().splitlines()[-1:] if isinstance(exc, SystemExit) else []
            results.append({"ok": False, "error": f"{type(exc).__name__}: {exc} {' '.join(tail)}"})
        for name in case["env"]:
            os.environ.pop(name, None)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
