"""MoE dispatch, expert load and overlap as Megatron-Core runs them (costmodel/llm/moe.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from constraints.rules import rule_violations
from costmodel.llm import moe
from costmodel.comm.placement import GroupPlacement
from costmodel.llm.decompose import layer_ops
from costmodel.specs.errors import SpecError
from costmodel.specs.runspec import RunSpec, run_spec_from_mapping
from costmodel.specs.strategy import Strategy


def _run(model: str = "mixtral-8x7b", num_gpus: int = 64, seq: int = 4096, **strategy: Any) -> RunSpec:
    base = {"tp": 1, "pp": 1, "ep": 8, "micro_batch_size": 1, "global_batch_size": 256}
    base.update(strategy)
    return run_spec_from_mapping({"model": model, "seq_length": seq,
                                  "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": num_gpus},
                                  "strategy": base})


def _bytes(transfers: list[moe.Transfer], op: str) -> float:
    return sum(t.message_bytes for t in transfers if t.op == op)


def _one_second_per_byte(op: str, nbytes: float, group: GroupPlacement) -> float:
    return nbytes * 1e-9


def test_dispatch_volume_scales_as_one_over_tp_under_sequence_parallelism() -> None:
    one = moe.alltoall_transfers(_run(tp=1, dp=64, ep=8))
    two = moe.alltoall_transfers(_run(tp=2, dp=32, ep=8, sequence_parallel=True))
    assert _bytes(two, "all_to_all") == pytest.approx(_bytes(one, "all_to_all") / 2)
    no_sp = moe.alltoall_transfers(_run(tp=2, dp=32, ep=8, sequence_parallel=False))
    assert _bytes(no_sp, "all_to_all") == pytest.approx(_bytes(one, "all_to_all"))


def test_alltoall_gathers_within_expert_tp_after_the_all_to_all() -> None:
    run = _run(tp=2, dp=32, ep=8)
    m = run.model
    rows = 1 * 4096 / 2 * m.moe_router_topk
    gathered = _bytes(moe.alltoall_transfers(run), "all_gather")
    assert gathered == pytest.approx(rows * 2 * (m.hidden_size * 2 + 4))
    assert _bytes(moe.alltoall_transfers(_run(tp=2, dp=32, ep=8, etp=1)), "all_gather") == 0


def test_allgather_dispatcher_gathers_every_tp_ep_rank_s_tokens() -> None:
    run = _run(tp=2, dp=32, ep=4)
    (t,) = moe.allgather_transfers(run)
    m = run.model
    assert t.op == "all_gather" and t.group.size == 8
    assert t.message_bytes == pytest.approx(4096 / 2 * 8 * (m.hidden_size * 2 + m.num_experts * 5))


def test_flex_sends_a_token_once_per_destination_rank() -> None:
    run = _run(ep=2, dp=64)  # 8 experts, 4 per rank, top-2: both on one rank 3/7 of the time
    (t,) = moe.flex_transfers(run)
    expected_ranks = 2 * (1 - 6 / 28)
    assert t.message_bytes == pytest.approx(4096 * expected_ranks * (run.model.hidden_size * 2 + 4))
    assert t.message_bytes < _bytes(moe.alltoall_transfers(run), "all_to_all")


def test_deepep_across_domains_crosses_the_network_once_per_destination_domain() -> None:
    inside = _run(ep=8, dp=64)
    assert moe.hybridep_transfers(inside) == moe.flex_transfers(inside)
    across = _run(model="deepseek-v3", num_gpus=256, ep=64, dp=256, global_batch_size=256)
    net, nvlink = moe.flex_transfers(across)
    assert net.op == moe.NETWORK_LEG and net.group.num_domains == 8 and net.group.gpus_per_node == 1
    assert not nvlink.group.crosses_nodes and nvlink.pipelined
    m = across.model
    per_rank = 4096 * moe.distinct_holders(256, 64, 8) * (m.hidden_size * 2 + 4)
    per_domain = 4096 * moe.distinct_holders(256, 8, 8) * (m.hidden_size * 2 + 4)
    assert net.message_bytes == pytest.approx(per_domain) and per_domain < per_rank
    assert nvlink.message_bytes == pytest.approx(per_rank)  # every rank copy is delivered over NVLink
    assert moe.hybridep_transfers(across) == moe.flex_transfers(across)


def test_two_tier_legs_are_pipelined_so_the_slower_sets_the_time() -> None:
    across = _run(model="deepseek-v3", num_gpus=256, ep=64, dp=256, global_batch_size=256,
                  moe_token_dispatcher="flex")
    net, _ = moe.flex_transfers(across)
    network = moe.network_leg_seconds(across, net)
    fast_nvlink = moe.layer_comm_seconds(across, lambda op, nbytes, g: 0.0)
    assert fast_nvlink == pytest.approx(2 * network)  # dispatch + combine, NVLink hidden under the network
    slow_nvlink = moe.layer_comm_seconds(across, lambda op, nbytes, g: 10 * network)
    assert slow_nvlink == pytest.approx(2 * 10 * network)


def test_network_leg_runs_at_deepep_s_measured_share_of_the_nic() -> None:
    across = _run(model="deepseek-v3", num_gpus=256, ep=64, dp=256, global_batch_size=256)
    net, _ = moe.flex_transfers(across)
    gpu = across.cluster.gpu
    # EP64 over 8 domains: DeepEP's EP64 row, 51 GB/s x 7/8 on the wire of a 50 GB/s NIC
    wire = net.message_bytes * 7 / 8 / (gpu.inter_node_bandwidth_bytes_per_s * 51 * 7 / 8 / 50)
    assert moe.network_leg_seconds(across, net) == pytest.approx(gpu.inter_node_latency_s + wire)


def test_network_efficiency_uses_every_deepep_row_and_interpolates() -> None:
    """docs/legacy.md EP16/32/64 (2/4/8 nodes): 43, 58, 51 GB/s counted with the own node, 1 - 1/n on the wire."""
    eff = moe.two_tier_network_efficiency
    assert (eff(2), eff(4), eff(8)) == pytest.approx((43 / 2 / 50, 58 * 3 / 4 / 50, 51 * 7 / 8 / 50))
    assert eff(3) == pytest.approx((eff(2) + eff(4)) / 2) and eff(16) == eff(8)
    assert eff(2) < 0.5 < eff(4)  # the two-node row is the conservative one the old constant dropped


def test_round_robin_routing_reaches_the_ranks_its_consecutive_experts_sit_on() -> None:
    # 256 experts on 64 ranks (4 each), top-8 from a multiple of 8: always 2 ranks, 1 of 8 domains
    assert moe.round_robin_holders(256, 64, 8) == 2
    assert moe.round_robin_holders(256, 8, 8) == 1
    # 12 experts on 4 ranks (3 each), top-2 from starts 0, 2, ..., 10: ranks {0}, {0,1}, {1}, {2}, {2,3}, {3}
    assert moe.round_robin_holders(12, 4, 2) == pytest.approx(8 / 6)
    assert moe.round_robin_holders(256, 64, 8) < moe.distinct_holders(256, 64, 8)


def test_round_robin_routing_moves_fewer_bytes_than_uniform() -> None:
    uniform = _run(model="deepseek-v3", num_gpus=256, ep=64, dp=256, global_batch_size=256)
    rr = _run(model="deepseek-v3", num_gpus=256, ep=64, dp=256, global_batch_size=256, moe_routing="round_robin")
    assert moe.flex_transfers(rr)[0].message_bytes == pytest.approx(moe.flex_transfers(uniform)[0].message_bytes
                                                                    / moe.distinct_holders(256, 8, 8))
    with pytest.raises(SpecError, match="strategy.moe_routing"):
        Strategy(moe_routing="random")


def test_dispatcher_defaults_to_the_framework_and_the_strategy_overrides_it() -> None:
    assert moe.dispatcher(_run()) == "allgather"  # megatron-core.yaml
    assert moe.dispatcher(_run(moe_token_dispatcher="alltoall")) == "alltoall"
    with pytest.raises(SpecError, match="strategy.moe_token_dispatcher"):
        Strategy(moe_token_dispatcher="nccl")


def _expert_flops(run: RunSpec) -> float:
    return sum(op.flops * op.count for op in layer_ops(run.model, run.strategy, run.seq_length, moe=True)
               if op.name.startswith("moe.experts") and op.family == "gemm")


def test_imbalance_makes_expert_compute_and_all_to_all_scale_on_the_critical_path() -> None:
    balanced, skewed = _run(), _run(moe_load_imbalance=1.5)
    assert _expert_flops(skewed) == pytest.approx(1.5 * _expert_flops(balanced), rel=1e-3)
    a2a = [_bytes(moe.alltoall_transfers(r), "all_to_all") for r in (balanced, skewed)]
    assert a2a[1] == pytest.approx(1.5 * a2a[0])
    assert moe.moe_notes(balanced)[0].startswith("MoE routing assumed balanced")
    assert "1.5x" in moe.moe_notes(skewed)[0]


def test_capacity_factor_pads_every_expert_to_its_capacity() -> None:
    padded = _run(moe_capacity_factor=1.25, moe_load_imbalance=2.0)  # tokens beyond capacity dropped
    assert _expert_flops(padded) == pytest.approx(1.25 * _expert_flops(_run()), rel=1e-3)


def test_expert_tp_splits_the_expert_gemms_and_shares_their_rows() -> None:
    run = _run(tp=2, dp=32, etp=1)
    # etp=1: a rank's rows are its own SP share, with the whole expert FFN
    assert moe.expert_rows(run.model, run.strategy, run.seq_length) == pytest.approx(4096 / 2 * 2)
    assert _expert_flops(run) == pytest.approx(_expert_flops(_run(tp=2, dp=32)), rel=1e-3)


def test_permutation_streams_at_hbm_bandwidth_not_the_embedding_gather_fit() -> None:
    from costmodel.analytic import memory_kind

    op = next(op for op in layer_ops(_run().model, _run().strategy, 4096, moe=True) if op.name == "moe.permute.fwd")
    assert memory_kind(op) == "residual"


@pytest.mark.parametrize("compute_s", [0.0, 1e-5, 1e-3, 1.0])
@pytest.mark.parametrize("knob", ["moe_shared_expert_overlap", "moe_a2a_overlap"])
def test_overlap_never_slower_than_no_overlap(knob: str, compute_s: float) -> None:
    plain = _run(moe_token_dispatcher="alltoall", global_batch_size=512, dp=64)
    overlapped = replace(plain, strategy=replace(plain.strategy, **{knob: True}))
    args = (_one_second_per_byte, 4, compute_s, compute_s / 3, compute_s / 2)
    off = moe.ep_exposed_seconds(plain, *args)
    on = moe.ep_exposed_seconds(overlapped, *args)
    assert on <= off
    if compute_s >= 1.0:
        assert on < off


def test_expert_groups_fold_over_tp_dp_cp() -> None:
    run = _run(model="qwen3-30b-a3b", tp=4, dp=16, ep=32, etp=1)  # ep 32 > dp*cp = 16: legal only by folding
    assert run.strategy.expert_data_parallel_size == 2
    assert moe.expert_group("ep", run).size == 32 and moe.expert_group("edp", run).size == 2
    assert moe.expert_group("tp_ep", run).size == 32
    assert not [v for v in rule_violations(run) if "ep" in v]


def test_folding_rules() -> None:
    assert any("etp*ep" in v for v in rule_violations(_run(tp=2, dp=32, ep=8, etp=16)))
    assert any("etp=3" in v for v in rule_violations(_run(tp=1, dp=64, etp=3)))
    assert any("moe_a2a_overlap" in v for v in rule_violations(_run(moe_a2a_overlap=True)))  # allgather
    assert any("vpp" in v for v in rule_violations(_run(pp=2, dp=32, moe_token_dispatcher="alltoall",
                                                        moe_a2a_overlap=True)))
    assert not rule_violations(_run(dp=64, moe_token_dispatcher="alltoall", moe_a2a_overlap=True))


def test_expert_weights_shard_by_ep_and_etp() -> None:
    from constraints.memory import moe_layer_params_per_gpu

    full = moe_layer_params_per_gpu(_run(tp=2, dp=32).model, _run(tp=2, dp=32).strategy)[1]
    folded = moe_layer_params_per_gpu(_run(tp=2, dp=32, etp=1).model, _run(tp=2, dp=32, etp=1).strategy)[1]
    assert folded == pytest.approx(2 * full)


# -- per-stage, rack-aware expert placement ---------------------------------------------------------
def _gb200(model: str, num_gpus: int, **strategy: Any) -> RunSpec:
    base = {"tp": 1, "pp": 1, "micro_batch_size": 1, "global_batch_size": 256}
    base.update(strategy)
    return run_spec_from_mapping({"model": model, "seq_length": 4096,
                                  "cluster": {"gpu": "gb200", "num_gpus": num_gpus}, "strategy": base})


def test_ep_group_that_fits_one_rack_stays_off_the_nic_with_the_rack_fill() -> None:
    # 64 of 72 GPUs used per rack (gpus_per_nvlink_domain_used): ranks 64-95 sit in rack 2, not across racks 1-2
    # folded (etp=1 under tp=2): the tp_ep group is 32 consecutive ranks, laid out like every other group
    run = _gb200("deepseek-v3", 256, tp=2, dp=128, ep=32, etp=1, sequence_parallel=True)
    for kind in ("ep", "tp_ep"):
        g = moe.expert_group(kind, run)
        assert g.size == 32 and not g.crosses_nodes
    assert all(not t.group.crosses_nodes for t in moe.alltoall_transfers(run) + moe.flex_transfers(run))


def test_each_stage_s_expert_groups_are_placed_on_their_own() -> None:
    # 48 ranks per stage on 64-GPU rack segments: stage 0 holds ranks 0-47 (one rack), stage 1 48-95 (two)
    run = _gb200("mixtral-8x7b", 192, pp=4, dp=48, ep=8, global_batch_size=192)
    assert not moe.expert_group("edp", run, stage=0).crosses_nodes
    assert moe.expert_group("edp", run, stage=1).crosses_nodes
    assert moe.expert_group("edp", run).crosses_nodes  # the job's worst group


# -- TP collectives of an MoE layer: the dispatcher does the MLP side ----------------------------------
def _tp_log(run: RunSpec, moe_layer: bool) -> list[tuple[str, float]]:
    from costmodel.predict import timer_for
    from costmodel.llm.tp_comm import tp_layer_exposed_s

    log: list[tuple[str, float]] = []

    def collective(op: str, nbytes: float) -> float:
        log.append((op, nbytes))
        return nbytes * 1e-9

    tp_layer_exposed_s(run, timer_for(run.cluster.gpu), collective, moe=moe_layer)
    return log


def test_moe_layer_counts_no_mlp_tp_collectives_without_shared_experts() -> None:
    run = _run(tp=2, dp=32, ep=8, sequence_parallel=True)  # mixtral: no shared expert
    dense, moe_layer = _tp_log(run, False), _tp_log(run, True)
    assert len(moe_layer) == len(dense) // 2 > 0  # qkv and proj only; fc1/fc2 are the dispatcher's


def test_shared_expert_keeps_its_tp_collectives() -> None:
    run = _run(model="deepseek-v3", num_gpus=64, tp=2, dp=32, ep=8, sequence_parallel=True)
    assert run.model.num_shared_experts == 1
    assert len(_tp_log(run, True)) == len(_tp_log(run, False))


def test_step_books_moe_layers_tp_comm_without_the_mlp_pair() -> None:
    from costmodel.comm import group_placement
    from costmodel.predict import timer_for
    from costmodel.llm.step import _on_group, predict_step
    from costmodel.llm.tp_comm import tp_layer_exposed_s

    run = _run(tp=2, dp=32, ep=8, sequence_parallel=True)
    timer = timer_for(run.cluster.gpu)
    on = _on_group(timer, group_placement("tp", run.strategy, run.cluster, stage=0), run.cluster.gpu)
    per_layer = tp_layer_exposed_s(run, timer, on, moe=True)
    assert per_layer < tp_layer_exposed_s(run, timer, on)
    step = predict_step(run, timer)
    m = run.strategy.num_microbatches
    assert step.breakdown["tp_comm_s"] == pytest.approx(m * run.model.num_layers * per_layer, rel=1e-6)


# -- expert element-wise ops as the framework runs them ------------------------------------------------
def _moe_ops(model: str, framework: str) -> list[Any]:
    from costmodel.llm.decompose import stage_ops

    run = run_spec_from_mapping({"model": model, "seq_length": 4096, "framework": framework,
                                 "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 8},
                                 "strategy": {"tp": 1, "pp": 1, "ep": 8, "dp": 8, "micro_batch_size": 1,
                                              "global_batch_size": 64}})
    return [op for op in stage_ops(run, 0) if op.name.startswith("moe.experts") and op.family != "gemm"]


def test_automodel_runs_expert_biases_eagerly_and_its_compiled_activation_in_one_pass() -> None:
    fused = _moe_ops("gpt-oss-20b", "megatron-core")
    eager = _moe_ops("gpt-oss-20b", "automodel")
    assert {op.name for op in fused} == {"moe.experts.swiglu.fwd", "moe.experts.swiglu.bwd"}
    assert {"moe.experts.up_bias.fwd", "moe.experts.geglu_compiled.bwd", "moe.experts.down_bias.fwd"} \
        <= {op.name for op in eager} and not any(".swiglu." in op.name for op in eager)
    # @torch.compile'd quick_geglu_deepep streams its rows once, as the fused SwiGLU does; the eager
    # bias kernels (split, add, cat) are what Automodel's experts move on top
    nbytes = {op.name: op.bytes * op.count for op in eager + fused}
    for phase in ("fwd", "bwd"):
        assert nbytes[f"moe.experts.geglu_compiled.{phase}"] == pytest.approx(nbytes[f"moe.experts.swiglu.{phase}"])
    bias = sum(b for name, b in nbytes.items() if "_bias." in name)
    assert sum(op.bytes * op.count for op in eager) == pytest.approx(sum(op.bytes * op.count for op in fused) + bias)
    assert bias > 0


def test_eager_expert_path_needs_expert_biases() -> None:
    # Qwen3 experts have no bias: Automodel runs its fused weighted SwiGLU, the same ops as Megatron-Core
    assert [op.name for op in _moe_ops("qwen3-30b-a3b", "automodel")] == \
        [op.name for op in _moe_ops("qwen3-30b-a3b", "megatron-core")]


def test_dispatch_is_recomputed_where_the_policy_reruns_whole_layers() -> None:
    """torchtitan's layer policy re-runs every other layer's forward, its dispatch and combine with it."""
    from costmodel.specs.framework import get_framework
    base = _run(moe_token_dispatcher="alltoall", recompute="selective")
    args = (_one_second_per_byte, 4, 0.0, 0.0, 0.0)
    policies = {p: moe.ep_exposed_seconds(replace(base, framework=replace(get_framework("megatron-core"),
                                                                         selective_recompute=p)), *args)
                for p in ("megatron", "layer")}
    full = moe.ep_exposed_seconds(replace(base, strategy=replace(base.strategy, recompute="full")), *args)
    comm = moe.layer_comm_seconds(base, _one_second_per_byte)
    assert policies["megatron"] == pytest.approx(4 * 2 * comm)
    assert policies["layer"] == pytest.approx(4 * 2.5 * comm) and full == pytest.approx(4 * 3 * comm)



def test_automodel_runs_its_shared_experts_on_a_side_stream_beside_the_dispatch() -> None:
    # nemo_automodel/components/moe/layers.py MoE.forward @01926a5c: _shared_experts_stream
    from costmodel.llm.moe import shared_expert_overlap

    def run(framework: object) -> Any:
        return run_spec_from_mapping({"model": "deepseek-v3", "seq_length": 4096, "framework": framework,
                                      "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 64},
                                      "strategy": {"ep": 64, "dp": 64, "micro_batch_size": 1, "global_batch_size": 64,
                                                   "zero_stage": 3, "moe_token_dispatcher": "flex"}})

    assert shared_expert_overlap(run("automodel"))
    assert not shared_expert_overlap(run({"name": "automodel", "moe_shared_expert_overlap": False}))
    assert not shared_expert_overlap(run("megatron-core"))  # Megatron-Core's default is off
