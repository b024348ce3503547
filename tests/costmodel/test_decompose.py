"""The decomposition conserves FLOPs and shards shapes the way Megatron-LM does."""

from __future__ import annotations

import pytest

from costmodel.llm.decompose import layer_ops, stage_ops
from costmodel.llm.flops import forward_flops_per_token, recompute_flops_per_step
from costmodel.specs import ClusterSpec, RunSpec, Strategy, get_gpu, get_model

CASES = [  # model, tp, pp, cp, ep, seq
    ("gpt3-175b", 8, 8, 1, 1, 2048),
    ("megatron-22b", 8, 1, 1, 1, 2048),
    ("llama3.1-70b", 8, 4, 2, 1, 8192),
    ("llama3.1-8b", 2, 2, 1, 1, 4096),
    ("llama2-7b", 1, 1, 1, 1, 4096),
    ("qwen2.5-7b", 4, 1, 1, 1, 4096),
    ("gpt-neox-20b", 4, 2, 1, 1, 2048),
    ("mixtral-8x7b", 2, 4, 1, 4, 4096),
    ("llama3.1-405b", 8, 16, 1, 1, 8192),  # uneven stages: 7, 14 x 8, 7 layers
    ("deepseek-v3", 2, 4, 1, 8, 4096),  # MLA, 3 dense + 58 MoE layers, uneven stages
    ("deepseek-v3-mtp", 4, 2, 1, 8, 4096),  # + one MTP layer on the last stage
    ("gpt-oss-20b", 2, 2, 1, 4, 4096),  # alternating 128-token sliding-window layers
    ("qwen3-30b-a3b", 2, 2, 2, 8, 4096),  # QK-norm, head_dim 128 != hidden / heads, cp 2
]


def _run(name: str, tp: int, pp: int, cp: int, ep: int, seq: int, recompute: str = "none",
         mbs: int = 2) -> RunSpec:
    dp = 8
    strategy = Strategy(tp=tp, pp=pp, cp=cp, ep=ep, dp=dp, micro_batch_size=mbs, global_batch_size=mbs * dp * 4,
                        sequence_parallel=tp > 1, recompute=recompute)
    cluster = ClusterSpec(gpu=get_gpu("h100-sxm5-80gb"), num_gpus=tp * pp * cp * dp, gpus_per_node=8)
    return RunSpec(model=get_model(name), cluster=cluster, strategy=strategy, seq_length=seq)


def _duplicated_flops(run: RunSpec) -> float:
    """FLOPs of the (tp - 1) extra copies of work every TP rank runs whole.

    MLA's down projections (Megatron-Core duplicates them) and, without sequence
    parallelism, the MoE router (with it, each TP rank routes its own 1/tp of the tokens).
    """
    model, s = run.model, run.strategy
    down = sum(n_in * n_out for _, n_in, n_out, sharded in model.attention_linears() if not sharded)
    router = 0 if s.sequence_parallel else model.hidden_size * model.num_experts
    passes = 3 + (s.recompute == "full")  # forward, data and weight gradient, forward again
    moe_layers = model.num_moe_layers + (model.mtp_num_layers if model.is_moe else 0)
    per_token = 2 * (down * (model.num_layers + model.mtp_num_layers) + router * moe_layers)
    return (s.tp - 1) * passes * per_token * s.micro_batch_size * run.seq_length


def _decomposed_flops_per_microbatch(run: RunSpec) -> float:
    """Whole-model FLOPs of one micro-batch: every stage's per-GPU ops times the tp x cp GPUs sharing them."""
    s = run.strategy
    per_gpu = sum(op.total_flops for stage in range(s.pp) for op in stage_ops(run, stage))
    return per_gpu * s.tp * s.cp


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_flops_conservation(case: tuple, recompute: str) -> None:
    run = _run(*case, recompute=recompute)
    b, seq = run.strategy.micro_batch_size, run.seq_length
    closed = 3 * forward_flops_per_token(run.model, seq, causal=True) * b * seq
    closed += recompute_flops_per_step(run.model, run.strategy, seq, b, causal=True)
    closed += _duplicated_flops(run)
    assert _decomposed_flops_per_microbatch(run) == pytest.approx(closed, rel=0.005)


def test_closed_form_matches_narayanan_for_gpt() -> None:
    """72 B s l h^2 (1 + s/(6h) + V/(12 l h)) per step (contract definition, full attention)."""
    from costmodel.llm.flops import model_flops_per_step

    m = get_model("gpt3-175b")
    B, s, l, h, V = 1536, 2048, m.num_layers, m.hidden_size, m.vocab_size
    narayanan = 72 * B * s * l * h**2 * (1 + s / (6 * h) + V / (12 * l * h))
    assert model_flops_per_step(m, s, B) == pytest.approx(narayanan, rel=0.001)


def test_backward_gemms_have_their_own_shapes() -> None:
    run = _run("llama3.1-70b", 8, 1, 1, 1, 4096, mbs=1)
    ops = {op.name: op for op in layer_ops(run.model, run.strategy, run.seq_length)}
    tokens, h = 4096, 8192
    n_qkv = (64 // 8) * 128 + 2 * 1 * 128  # 8 query heads and 1 KV head per GPU
    assert ops["qkv_proj.fwd"].shape == (tokens, n_qkv, h)
    assert ops["qkv_proj.dgrad"].shape == (tokens, h, n_qkv)
    assert ops["qkv_proj.wgrad"].shape == (n_qkv, h, tokens)
    assert ops["mlp.up.fwd"].shape == (tokens, 2 * 28672 // 8, h)
    assert ops["mlp.down.wgrad"].shape == (h, 28672 // 8, tokens)


def test_sequence_parallel_shards_norms_only() -> None:
    run = _run("llama3.1-8b", 4, 1, 1, 1, 4096, mbs=1)
    ops = {op.name: op for op in layer_ops(run.model, run.strategy, run.seq_length)}
    assert ops["input_norm.fwd"].shape == (4096 * 4096 // 4,)
    assert ops["qkv_proj.fwd"].shape[0] == 4096


def test_moe_experts_are_grouped_and_balanced() -> None:
    run = _run("mixtral-8x7b", 1, 1, 1, 4, 4096, mbs=1)
    ops = {op.name: op for op in layer_ops(run.model, run.strategy, run.seq_length, moe=True)}
    up = ops["moe.experts.up.fwd"]
    assert up.count == 2  # 8 experts over ep=4
    assert up.shape[0] == 4096 * 2 // 2  # top-2 tokens spread over the 2 local experts
    assert ops["moe.router.fwd"].shape == (4096, 8, 4096)


def test_recompute_adds_forward_ops() -> None:
    none = layer_ops(get_model("llama3.1-8b"), Strategy(recompute="none"), 2048)
    full = layer_ops(get_model("llama3.1-8b"), Strategy(recompute="full"), 2048)
    selective = layer_ops(get_model("llama3.1-8b"), Strategy(recompute="selective"), 2048)
    assert [op.name for op in selective if op.phase == "recompute"] == ["attention.recompute"]
    assert sum(op.phase == "recompute" for op in full) == sum(op.phase == "fwd" for op in none)


# Knobs that shape no operator, with a second legal value each (dp changes the cluster too).
_NON_SHAPING = {"global_batch_size": 64 * 4, "zero_stage": 3, "vpp": 2, "allow_tp_across_nodes": True,
                "tp_comm_overlap": True, "overlap_grad_reduce": False, "overlap_param_gather": False}
_SHAPING = {"tp": 4, "cp": 2, "micro_batch_size": 1, "sequence_parallel": False, "recompute": "full",
            "precision": "fp8", "flash_attention": False, "pp": 8, "ep": 2}


def _with(run: RunSpec, **changes: object) -> RunSpec:
    from dataclasses import replace

    strategy = replace(run.strategy, **changes)
    cluster = replace(run.cluster, num_gpus=strategy.tp * strategy.pp * strategy.cp * strategy.dp)
    return replace(run, strategy=strategy, cluster=cluster)


@pytest.mark.parametrize("knob", sorted(_NON_SHAPING))
def test_stage_ops_key_leaves_out_only_knobs_that_shape_no_operator(knob):
    from costmodel.llm.compute import stage_ops_key

    run = _run("mixtral-8x7b", 2, 4, 1, 4, 4096)
    other = _with(run, **{knob: _NON_SHAPING[knob]})
    for stage in range(4):
        assert stage_ops_key(other, stage) == stage_ops_key(run, stage)
        assert stage_ops(other, stage) == stage_ops(run, stage)


@pytest.mark.parametrize("knob", sorted(_SHAPING))
def test_stage_ops_key_changes_with_every_shaping_knob(knob):
    from costmodel.llm.compute import stage_ops_key

    run = _run("mixtral-8x7b", 2, 4, 1, 4, 4096)
    other = _with(run, **{knob: _SHAPING[knob]})
    assert stage_ops_key(other, 1) != stage_ops_key(run, 1)
    assert stage_ops(other, 1) != stage_ops(run, 1)


def test_stage_ops_key_tells_an_uneven_split_from_an_unsupported_one():
    # 126 layers on pp 16: vpp 1 splits 7, 14 x 8, 7; vpp 2 has no split (the rules reject it, a report
    # still times it at 126 / 16 layers per stage): the keys must differ, or a shared memo mixes them up.
    from costmodel.llm.compute import stage_ops_key

    run = _run("llama3.1-405b", 8, 16, 1, 1, 8192)
    other = _with(run, vpp=2)
    assert stage_ops_key(other, 0) != stage_ops_key(run, 0)
    assert stage_ops(other, 0) != stage_ops(run, 0)


def test_mla_projections_have_their_real_shapes() -> None:
    # DeepSeek-V3 on tp 8: 16 heads per GPU; down projections duplicated (whole), up and output split.
    run = _run("deepseek-v3", 8, 1, 1, 8, 4096, mbs=1)
    ops = {op.name: op for op in layer_ops(run.model, run.strategy, run.seq_length, moe=True)}
    tokens, h, heads = 4096, 7168, 16
    assert ops["q_down_proj.fwd"].shape == (tokens, 1536, h)
    assert ops["q_up_proj.fwd"].shape == (tokens, heads * (128 + 64), 1536)
    assert ops["kv_down_proj.fwd"].shape == (tokens, 512 + 64, h)
    assert ops["kv_up_proj.fwd"].shape == (tokens, heads * (128 + 128), 512)
    assert ops["out_proj.fwd"].shape == (tokens, h, heads * 128)
    assert ops["q_latent_norm.fwd"].shape == (tokens * 1536,)
    assert "qkv_proj.fwd" not in ops
    attention = ops["attention.fwd"]
    assert attention.shape == (1, 4096, heads, heads, 192, 1)  # keys of nope + rope
    assert attention.flops == 2 * 4096 * 4096 * heads * (192 + 128) * 0.5  # scores at d_qk, values at d_v


def test_mla_closed_form_attention_core_uses_qk_and_v_head_dims() -> None:
    from costmodel.llm.flops import attention_flops_per_token

    m = get_model("deepseek-v3")
    assert attention_flops_per_token(m, 4096, causal=False) == 2 * 4096 * 128 * (192 + 128)


def test_sliding_window_layers_attend_over_the_window() -> None:
    from costmodel.llm.flops import attention_flops_per_token

    m = get_model("gpt-oss-120b")
    per_key = 2 * 64 * (64 + 64)  # heads x (d_qk + d_v), two matmuls
    for seq in (4096, 32768):  # a windowed layer's cost per token does not grow with the sequence
        assert attention_flops_per_token(m, seq, causal=True, window=True) == 128 * per_key
    assert attention_flops_per_token(m, 4096, causal=True) == 4096 / 2 * per_key


def test_sliding_window_decomposition_mixes_full_and_windowed_layers() -> None:
    run = _run("gpt-oss-120b", 2, 1, 1, 8, 4096, mbs=2)
    ops = {op.name: op for op in layer_ops(run.model, run.strategy, run.seq_length, moe=True)}
    full, windowed = ops["attention.fwd"], ops["attention_window.fwd"]
    assert full.count == windowed.count == 0.5  # 18 of 36 layers each
    assert full.shape == (2, 4096, 32, 4, 64, 1)
    assert windowed.shape == (2 * 4096 // 256, 256, 32, 4, 64, 1)  # causal blocks of twice the window


def test_window_covering_the_sequence_is_full_attention() -> None:
    from dataclasses import replace

    run = _run("gpt-oss-20b", 1, 1, 1, 1, 2048, mbs=1)
    wide = replace(run.model, sliding_window=4096)
    names = {op.name for op in layer_ops(wide, run.strategy, 2048, moe=True)}
    windowed = next(op for op in layer_ops(wide, run.strategy, 2048, moe=True) if op.name == "attention_window.fwd")
    assert "attention.fwd" in names and windowed.shape[:2] == (1, 2048)


def test_mtp_layer_runs_on_the_last_stage_only() -> None:
    run = _run("deepseek-v3-mtp", 4, 2, 1, 8, 4096, mbs=1)
    first = {op.name for op in stage_ops(run, 0)}
    last = {op.name: op for op in stage_ops(run, 1)}
    assert not any(name.startswith("mtp0.") for name in first)
    assert last["mtp0.eh_proj.fwd"].shape == (4096, 7168 // 4, 2 * 7168)
    assert last["mtp0.lm_head.fwd"].shape == last["lm_head.fwd"].shape
    assert "mtp0.moe.experts.up.fwd" in last and "mtp0.kv_down_proj.fwd" in last


def test_qk_norm_adds_a_norm_over_queries_and_keys() -> None:
    run = _run("qwen3-30b-a3b", 2, 1, 1, 8, 4096, mbs=1)
    ops = {op.name: op for op in layer_ops(run.model, run.strategy, run.seq_length, moe=True)}
    assert ops["qk_norm.fwd"].shape == (4096 * (16 * 128 + 2 * 128),)
    assert "qk_norm.fwd" not in {op.name for op in layer_ops(get_model("llama3.1-8b"), run.strategy, 4096)}
