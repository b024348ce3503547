"""The strategies every exporter's output is fed to its real consumer with (dense/MoE, FSDP, TP+SP,
CP, PP with VPP and uneven layouts, fp8, HSDP), each legal by ``constraints.rules``.

Every case runs on 64 H100s (8 nodes), so one world size serves the consumers that need one.
"""

from __future__ import annotations

from costmodel.specs import Strategy, get_gpu, get_model
from search.space import SearchProblem

WORLD = 64


def problem(model: str, seq_length: int = 4096, global_batch_size: int = 64) -> SearchProblem:
    return SearchProblem(model=get_model(model), gpu=get_gpu("h100-sxm5-80gb"), num_gpus=WORLD,
                         global_batch_size=global_batch_size, seq_length=seq_length)


def _s(**kw: object) -> Strategy:
    kw.setdefault("global_batch_size", 64)
    kw.setdefault("micro_batch_size", 1)
    return Strategy(**kw)  # type: ignore[arg-type]


CASES: dict[str, tuple[SearchProblem, Strategy]] = {
    "dense-tp-sp": (problem("llama3.1-8b"), _s(tp=4, dp=16, zero_stage=1)),
    "dense-ddp": (problem("llama3.1-8b"), _s(tp=1, dp=64, zero_stage=0, micro_batch_size=1)),
    "dense-fsdp": (problem("llama3.1-8b"), _s(tp=1, dp=64, zero_stage=3, recompute="full")),
    "dense-fsdp-tp": (problem("llama3.1-70b"), _s(tp=2, dp=32, zero_stage=3, recompute="selective")),
    "dense-hsdp": (problem("llama3.1-8b"), _s(tp=2, dp=32, zero_stage=3, hsdp_shard_size=8)),
    "dense-cp-all-gather": (problem("llama3.1-8b", seq_length=16384),
                            _s(tp=2, cp=4, dp=8, zero_stage=3, cp_comm_type="all_gather")),
    "dense-cp-p2p": (problem("llama3.1-70b", seq_length=16384), _s(tp=8, cp=2, dp=4, zero_stage=1)),
    "pp-vpp": (problem("llama3.1-70b"), _s(tp=4, pp=4, vpp=5, dp=4, micro_batch_size=1, zero_stage=0,
                                          recompute="selective")),
    "pp-ddp-no-sp": (problem("llama3.1-8b"), _s(tp=2, pp=4, dp=8, micro_batch_size=2, zero_stage=0,
                                               sequence_parallel=False)),
    # 126 layers on 16 stages: 7, 14 x 8, 7
    "pp-uneven": (problem("llama3.1-405b"), _s(tp=4, pp=16, dp=1, zero_stage=1)),
    "pp-uneven-vpp": (problem("llama3.1-8b"), _s(tp=2, pp=4, vpp=2, dp=8, zero_stage=0, first_stage_layers=6,
                                                last_stage_layers=6)),
    "fp8-pp": (problem("llama3.1-405b"), _s(tp=8, pp=8, dp=1, zero_stage=0, precision="fp8")),
    "fp8-fsdp-overlap": (problem("llama3.1-8b"), _s(tp=2, dp=32, zero_stage=3, precision="fp8",
                                                   tp_comm_overlap=True, recompute="full")),
    "moe-ep": (problem("qwen3-30b-a3b"), _s(tp=1, dp=64, ep=8, zero_stage=1, moe_token_dispatcher="alltoall")),
    "moe-fsdp": (problem("gpt-oss-20b"), _s(tp=1, dp=64, ep=8, zero_stage=3, moe_token_dispatcher="alltoall")),
    "moe-pp-tp": (problem("mixtral-8x7b"), _s(tp=2, pp=2, dp=16, ep=8, zero_stage=1)),
    "moe-mla-pp": (problem("deepseek-v3"), _s(tp=1, pp=8, dp=8, ep=8, zero_stage=3, moe_token_dispatcher="alltoall",
                                             recompute="full")),
}


def expressible(exporter: object) -> int:
    """How many matrix strategies ``exporter`` writes rather than refuses (``Exporter.check`` passes)."""
    from costmodel.specs.errors import SpecError

    written = 0
    for problem_, strategy in CASES.values():
        try:
            exporter.check(strategy, problem_)  # type: ignore[attr-defined]
            written += 1
        except SpecError:
            pass
    return written
