"""One test per layout rule: a layout that breaks it is refused by that rule, a close one that keeps it passes."""

from pathlib import Path

import pytest
from conftest import cols

from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.frameworks import capabilities_for
from planner.inputs.layout import Schedule, parse_pairs
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec
from planner.report.explain import explain
from planner.search.rules import RULES, RULES_BY_NAME
from planner.search.search import search

HF = Path(__file__).resolve().parent / "data" / "hf_configs"


def prob(model="llama3-70b", cluster="h100x64", seq=8192, gbs=64, framework="generic", fixed=None, precision="bf16"):
    return Problem(load_model(str(model)), load_cluster(cluster), TrainingSpec(seq_len=seq, global_batch=gbs,
                                                                          framework=framework, precision=precision),
                   fixed=fixed or {})


def graphed(model="llama3-70b", modules=None):
    """A problem priced with per-layer CUDA graphs (`modules`: the captured ones, None: the default scope)."""
    return Problem(load_model(model), load_cluster("h100x64"), TrainingSpec(
        seq_len=8192, global_batch=64, framework="megatron-core", cuda_graphs="per-layer", cuda_graph_modules=modules))


CASES = {
    # rule: (problem, breaking layout, keeping layout)
    "world_size": (prob(), dict(tp=8, pp=2, dp=2), dict(tp=8, pp=2, dp=4)),
    "heads_divisible_by_tp": (prob("llama2-13b", "h100x48"), dict(tp=3, dp=16), dict(tp=4, dp=12)),
    "kv_heads_divisible_by_tp": (prob("llama3-70b", "h100x64"), dict(tp=16, dp=4), dict(tp=8, dp=8)),
    "tp_within_nvlink_domain": (prob("llama3-405b", "h100x64"), dict(tp=16, dp=4), dict(tp=8, dp=8)),
    "layers_fill_stages": (prob("llama2-7b", "h100x64"), dict(pp=16, vpp=4, dp=4, schedule=1),
                           dict(pp=16, vpp=2, dp=4, schedule=1)),
    "sequence_divisible_by_2cp": (prob(seq=8190), dict(cp=2, dp=32), dict(cp=1, dp=64)),
    "global_batch_divisible": (prob(gbs=60), dict(dp=64), dict(tp=8, dp=4, pp=2)),
    "vpp_needs_pipeline": (prob(), dict(vpp=2, dp=64, schedule=1), dict(vpp=2, pp=2, dp=32, schedule=1)),
    "schedule_matches_vpp": (prob(), dict(pp=2, dp=32, vpp=1, schedule=1), dict(pp=2, dp=32, vpp=2, schedule=1)),
    "schedule_matches_vpp_zbv": (prob(), dict(pp=2, dp=32, vpp=4, schedule=4), dict(pp=2, dp=32, vpp=2, schedule=4)),
    "schedule_needs_pipeline": (prob(), dict(dp=64, schedule=2), dict(pp=2, dp=32, schedule=2)),
    "interleaved_microbatches": (prob(gbs=64), dict(pp=8, dp=8, vpp=2, mbs=2, schedule=1),
                                 dict(pp=8, dp=8, vpp=2, mbs=1, schedule=1)),
    "sequence_parallel_needs_tp": (prob(), dict(dp=64, sp=1), dict(tp=2, dp=32, sp=1)),
    "expert_parallel_needs_moe": (prob(), dict(dp=64, ep=8), dict(dp=64, ep=1)),
    "experts_divisible_by_ep": (prob("mixtral-8x7b"), dict(dp=64, ep=16), dict(dp=64, ep=8)),
    "ep_divides_data_ranks": (prob("mixtral-8x7b"), dict(pp=32, dp=2, ep=8), dict(pp=8, dp=8, ep=8)),
    "expert_tp_fits_data_ranks": (prob("mixtral-8x7b"), dict(tp=2, sp=1, pp=8, dp=4, ep=8, etp=0),
                                  dict(tp=2, sp=1, pp=8, dp=4, ep=8, etp=1)),
    "ep_with_tp_needs_sp": (prob("mixtral-8x7b"), dict(tp=2, dp=32, ep=8, sp=0), dict(tp=2, dp=32, ep=8, sp=1)),
    "sharding_needs_replicas": (prob(cluster="h100x8"), dict(tp=8, zero=1), dict(tp=4, dp=2, zero=1)),
    "framework_schedule": (prob(framework="megatron"), dict(pp=2, dp=32, schedule=2), dict(pp=2, dp=32, schedule=0)),
    # 126 layers: 8 x 17 chunks leave some without a layer, and 128 (with embedding and loss) does not divide over
    # them; pp4 x vpp3 splits neither but Megatron-Core states it as a pipeline layout (layout.chunk_layers)
    "stage_split_launchable": (prob("llama3-405b"), dict(tp=8, pp=8, vpp=17, schedule=1),
                               dict(tp=8, pp=4, vpp=3, dp=2, schedule=1)),
    # the same pp4 x vpp3 where the framework has neither first/last counts under interleaving nor a layout
    "stage_split_launchable_layoutless": (prob("llama3-405b", framework="megatron-deepspeed"),
                                          dict(tp=8, pp=4, vpp=3, dp=2, schedule=1), dict(tp=8, pp=2, dp=4)),
    # torchtitan's launcher spells out per-rank modules and has no embedding/loss-as-layer switch here
    "stage_split_launchable_torchtitan": (prob("llama3-405b", framework="torchtitan"),
                                          dict(tp=8, pp=8, vpp=2, schedule=1), dict(tp=8, pp=8, vpp=1)),
    "stage_split_launchable_paper": (prob("llama3-405b", framework="megatron"), dict(tp=8, pp=8), dict(tp=8, dp=8)),
    "framework_zero": (prob(framework="megatron"), dict(dp=64, zero=3), dict(dp=64, zero=1)),
    "muon_without_fsdp": (Problem(load_model("llama3-70b"), load_cluster("h100x64"),
                                  TrainingSpec(seq_len=8192, global_batch=64, framework="megatron-core",
                                               optimizer="muon")), dict(dp=64, zero=3), dict(dp=64, zero=1)),
    "framework_zero_with_pipeline": (prob(framework="megatron-core"), dict(pp=2, dp=32, zero=3),
                                     dict(pp=2, dp=32, zero=1)),
    "framework_context_parallel": (prob(framework="torchtitan"), dict(cp=2, dp=32, cp_comm=1),
                                   dict(cp=2, dp=32, cp_comm=0)),
    "framework_context_parallel_paper": (prob(framework="megatron"), dict(cp=2, dp=32), dict(dp=64)),
    # gpt-oss's attention sinks under CP: Transformer Engine's fused attention with the all-to-all exchange only
    "framework_sink_attention_cp": (prob("gpt-oss-120b", framework="nemo"), dict(cp=2, dp=32, ep=8, cp_comm=0),
                                    dict(cp=2, dp=32, ep=8, cp_comm=1)),
    # DeepSpeed under a Trainer: AutoTP yes (ZeRO 0-2, no SP, not beside Ulysses), pipelines and experts no
    "framework_model_parallel": (prob(framework="deepspeed"), dict(pp=2, dp=32), dict(tp=2, dp=32)),
    "framework_zero_with_tensor_parallel": (prob(framework="deepspeed"), dict(tp=2, dp=32, zero=3),
                                            dict(tp=2, dp=32, zero=2)),
    "framework_sequence_parallel": (prob(framework="deepspeed"), dict(tp=2, dp=32, sp=1), dict(tp=2, dp=32, sp=0)),
    "framework_tp_with_cp": (prob(framework="deepspeed"), dict(tp=2, cp=2, dp=16, cp_comm=1),
                             dict(tp=1, cp=2, dp=32, cp_comm=1)),
    "param_offload_needs_zero3": (Problem(load_model("llama3-70b"), load_cluster("h100x64"),
                                          TrainingSpec(seq_len=8192, global_batch=64, framework="deepspeed",
                                                       param_offload=True)), dict(dp=64, zero=2), dict(dp=64, zero=3)),
    "framework_ddp_alone": (prob(framework="torchtitan"), dict(tp=2, dp=32, zero=0), dict(tp=2, dp=32, zero=3)),
    # the Trainer's gradient checkpointing is whole decoder layers: full yes, selective no
    "framework_recompute": (prob(framework="deepspeed"), dict(dp=64, zero=3, recompute=1),
                            dict(dp=64, zero=3, recompute=2)),
    "framework_fp8_needs_zero": (prob(framework="nemo", precision="fp8"), dict(tp=8, dp=8, zero=0),
                                 dict(tp=8, dp=8, zero=1)),
    "cp_comm_needs_cp": (prob(), dict(dp=64, cp_comm=1), dict(dp=32, cp=2, cp_comm=1)),
    "hybrid_cp_spans_domains": (prob("llama2-7b", "h100x64"), dict(tp=1, cp=4, dp=16, cp_comm=2),
                                dict(tp=1, cp=16, dp=4, cp_comm=2)),
    "ulysses_heads_divisible": (prob("llama3-70b", "h100x64"), dict(tp=8, cp=2, dp=4, cp_comm=1),
                                dict(tp=4, cp=2, dp=8, cp_comm=1)),
    "hsdp_spans_domains": (prob(cluster="h100x8"), dict(dp=8, zero=4), dict(tp=1, dp=8, zero=3)),
    "ep_overlap_needs_experts": (prob("mixtral-8x7b"), dict(dp=64, ep=1, schedule=6),
                                 dict(dp=64, ep=8, schedule=6)),
    "ep_overlap_needs_experts_no_full_recompute": (prob("mixtral-8x7b"), dict(dp=64, ep=8, schedule=6, recompute=2),
                                                   dict(dp=64, ep=8, schedule=6, recompute=1)),
    "schedule_matches_vpp_combined": (prob("mixtral-8x7b"), dict(pp=2, dp=32, ep=8, vpp=1, schedule=6),
                                      dict(pp=2, dp=32, ep=8, vpp=2, schedule=6)),
    "dualpipe_shape": (prob(gbs=256), dict(pp=8, dp=8, mbs=4, schedule=7), dict(pp=8, dp=8, mbs=1, schedule=7)),
    "dualpipe_shape_even_ranks": (prob("llama2-7b", "h100x48", gbs=96), dict(pp=3, dp=16, schedule=7),
                                  dict(pp=2, dp=24, schedule=7)),
    "seq1f1b_segments_divide": (prob(seq=8196), dict(pp=2, dp=32, schedule=5), dict(pp=2, dp=32, schedule=0)),
    # DeepSeek-V3 carries one MTP layer: EP overlap runs it only with a pipeline (the real-validator test found it)
    "ep_overlap_mtp_needs_pipeline": (prob("deepseek-v3", "h100x1024", seq=4096, gbs=1024),
                                      dict(dp=1024, ep=64, schedule=6),
                                      dict(pp=2, vpp=2, dp=512, ep=64, schedule=6)),
    "offload_needs_one_stage": (prob(), dict(pp=2, dp=32, recompute=3), dict(pp=1, dp=64, recompute=3)),
    # gpt-oss's experts carry biases: Megatron-Core runs them whole only
    "framework_moe_bias_whole_experts": (prob("gpt-oss-120b", framework="megatron-core"),
                                         dict(tp=2, dp=32, ep=8, etp=0), dict(tp=2, dp=32, ep=8, etp=1)),
    # Qwen3-Next's Gated DeltaNet layers have 16 key heads: tp 32 cannot split them
    "mixer_heads_divisible_by_tp": (prob(HF / "qwen3-next-80b-a3b.json", "h100x64", framework="megatron-core"),
                                    dict(tp=32, dp=2), dict(tp=4, dp=16)),
    # Megatron-Core runs no context parallelism for DeepSeek sparse attention (V3.2) or Gated DeltaNet
    "framework_cp_mixers": (prob(HF / "deepseek-v3.2.json", "h100x1024", seq=4096, gbs=1024, framework="nemo"),
                            dict(dp=512, cp=2, ep=64), dict(dp=1024, ep=64)),
    # fine-grained offloading rides Megatron-Core's schedules: DualPipe-V no, interleaved 1F1B yes
    "offload_modules_needs_mcore_schedule": (prob(), dict(pp=4, dp=16, recompute=4, schedule=8),
                                             dict(pp=4, vpp=2, dp=16, recompute=4, schedule=1)),
    "offload_needs_one_stage_combined": (prob("mixtral-8x7b"), dict(dp=64, ep=8, schedule=6, recompute=3),
                                         dict(dp=64, ep=8, schedule=0, recompute=3)),
    # Nemotron-H on Megatron-Core's Mamba stack: no virtual pipeline stages, no full recompute (core_v0.16)
    "framework_mamba_stack": (prob(HF / "nemotron-h-56b.json", "h100x64", framework="megatron-core"),
                              dict(tp=8, pp=2, vpp=2, dp=4, schedule=1), dict(tp=8, pp=2, dp=4)),
    "framework_mamba_stack_no_full_recompute": (prob(HF / "nemotron-h-56b.json", "h100x64", framework="megatron-core"),
                                                dict(tp=8, dp=8, recompute=2), dict(tp=8, dp=8, recompute=1)),
    # Nemotron-H: 256 Mamba heads in 8 groups; tp 8 leaves 32 heads and one group per rank, which cp 64 cannot split
    # (mamba_context_parallel.py: nheads_local_tp % cp == 0); cp 8 splits the heads and repeats the group
    "mamba_heads_divisible_by_cp": (prob(HF / "nemotron-h-56b.json", "h100x512"), dict(tp=8, cp=64),
                                    dict(tp=8, cp=8, dp=8)),
    # data parallelism outermost: torchtitan's mesh keeps pp outermost; Megatron-Core runs it beside the distributed
    # optimizer only, and with pp > 1 only where the experts' data-parallel size is the dense one (no CP when dense)
    "framework_rank_order": (prob(framework="torchtitan"), dict(pp=2, dp=32, zero=3, order=1),
                             dict(pp=2, dp=32, zero=3, order=0)),
    "rank_order_zero": (prob(framework="megatron-core"), dict(dp=64, zero=3, order=1), dict(dp=64, zero=1, order=1)),
    "rank_order_expert_data": (prob(framework="megatron-core"), dict(tp=8, cp=2, pp=2, dp=2, order=1),
                               dict(tp=8, cp=1, pp=2, dp=4, order=1)),
    # Megatron-Core: full recompute only under the full-iteration graph; per-layer graphs keep selective or none
    "per_layer_graphs_need_selective_recompute": (graphed(), dict(dp=64, recompute=2), dict(dp=64, recompute=1)),
    # combined 1F1B schedules the MoE block itself: per-layer graphs may not take moe / mlp
    "ep_overlap_graphs_skip_mlp": (graphed("mixtral-8x7b", modules=("attn", "mlp")),
                                   dict(dp=64, ep=8, schedule=6), dict(dp=64, ep=8, schedule=0)),
    # gpt-oss's attention biases: with delayed weight gradients the attention may not be captured
    "ep_overlap_graphs_skip_attention_bias": (graphed("gpt-oss-120b", modules=("attn", "moe_router")),
                                              dict(dp=64, ep=8, schedule=6), dict(dp=64, ep=8, schedule=0)),
}


def _rule_name(case: str) -> str:
    for suffix in ("_zbv", "_paper", "_no_full_recompute", "_combined", "_even_ranks", "_torchtitan", "_layoutless"):
        case = case.removesuffix(suffix)
    return case


def test_every_rule_has_a_test():
    assert {_rule_name(name) for name in CASES} == {r.name for r in RULES}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule(name):
    problem, bad, good = CASES[name]
    rule = RULES_BY_NAME[_rule_name(name)]
    assert not rule.check(cols(**bad), problem)[0], f"{name} should refuse {bad}"
    assert rule.check(cols(**good), problem)[0], f"{name} should allow {good}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_explain_names_the_broken_rule(name):
    problem, bad, _ = CASES[name]
    out = explain(problem, {k: v for k, v in bad.items()} | {"dp": bad.get("dp", 1)})
    assert _rule_name(name) in [r["rule"] for r in out["broken_rules"]]


def test_search_never_returns_a_plan_breaking_a_rule():
    problem = prob("mixtral-8x7b", "h100x64", gbs=256)
    result = search(problem, top=50)
    for plan in result.plans:
        c = cols(**plan.layout.as_dict())
        assert all(r.check(c, problem)[0] for r in RULES)


def test_pruned_counts_add_up():
    result = search(prob(), top=1)
    assert result.candidates == result.feasible + sum(result.pruned.values())
    assert result.pruned["world_size"] > 0


def test_pinned_knobs_are_respected():
    problem = prob(fixed=parse_pairs(["tp=4,pp=2,recompute=full"], "--fix"))
    for plan in search(problem, top=10).plans:
        assert (plan.layout.tp, plan.layout.pp, plan.layout.recompute) == (4, 2, 2)


def test_megatron_profile_offers_no_zero_bubble():
    assert Schedule.ZB_H1 not in capabilities_for("megatron").schedules
    plans = search(prob(framework="megatron", cluster="h100x512", gbs=512), top=20).plans
    assert all(p.layout.schedule in (0, 1) for p in plans)


def test_zbv_takes_any_microbatch_count_interleaved_needs_a_multiple_of_pp():
    """A pinned zb-v with 120 micro-batches at pp=16 is allowed (torch ScheduleZBVZeroBubble needs exactly two stages
    per rank, nothing of the micro-batch count); interleaved 1F1B at the same count is refused (Megatron M14)."""
    problem = prob("llama3-405b", "h100x1024", gbs=960)
    zbv = cols(tp=8, pp=16, dp=8, vpp=2, schedule=4, mbs=1)
    inter = cols(tp=8, pp=16, dp=8, vpp=2, schedule=1, mbs=1)
    assert 960 // 8 == 120
    assert RULES_BY_NAME["interleaved_microbatches"].check(zbv, problem)[0]
    assert not RULES_BY_NAME["interleaved_microbatches"].check(inter, problem)[0]


def test_published_runs_are_not_judged_by_capabilities():
    """Validation pins what a published run did; capability rules judge only what the search chooses."""
    from dataclasses import replace

    problem = prob(framework="megatron", fixed=parse_pairs(["zero=3"], "--fix"))
    assert not RULES_BY_NAME["framework_zero"].check(cols(dp=64, zero=3), problem)[0]
    assert RULES_BY_NAME["framework_zero"].check(cols(dp=64, zero=3), replace(problem, trust_pins=True))[0]


def test_cp_limits_on_mixers_are_the_frameworks_not_physics():
    """Megatron-Core refuses context parallelism for Gated DeltaNet; the generic planner, whose kernels are any
    stack's, keeps it (ring attention needs no such limit in principle)."""
    rule = RULES_BY_NAME["framework_cp_mixers"]
    layout = cols(dp=32, cp=2)
    qwen_next = HF / "qwen3-next-80b-a3b.json"
    assert rule.check(layout, prob(qwen_next, "h100x64"))[0]
    assert not rule.check(layout, prob(qwen_next, "h100x64", framework="megatron-core"))[0]
    assert rule.check(layout, prob("llama3-70b", "h100x64", framework="megatron-core"))[0]


def test_mamba_stack_limits_are_megatron_cores_not_physics():
    """The Mamba stack's limits bind the megatron-core framework only, and only models with Mamba layers."""
    rule = RULES_BY_NAME["framework_mamba_stack"]
    interleaved = cols(tp=8, pp=2, vpp=2, dp=4, schedule=1)
    nemotron_h = HF / "nemotron-h-56b.json"
    assert rule.check(interleaved, prob(nemotron_h, "h100x64"))[0]
    assert not rule.check(interleaved, prob(nemotron_h, "h100x64", framework="megatron-core"))[0]
    assert rule.check(interleaved, prob("llama3-70b", "h100x64", framework="megatron-core"))[0]
