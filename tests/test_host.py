"""Host-bound layers (planner.cost.host): each pass of a layer takes max(GPU time, host time); host time is the layer's
eager ops counted from Megatron-Core times the host's CPU time per op; CUDA graphs remove what they capture."""

import json
from functools import cache

import numpy as np
import pytest
from conftest import layout

from planner.cost import compute, host
from planner.cost.fitted import current
from planner.evidence.validate import validate
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.layout import Layout
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec
from planner.search.search import price_layout

EP8 = np.array([8.0])


def _problem(model: str, cluster: str, **training: object) -> Problem:
    return Problem(load_model(model), load_cluster(cluster), TrainingSpec(seq_len=4096, global_batch=512,
                                                                          **training))


def _host(problem: Problem, ep: np.ndarray = EP8, combined: bool = False) -> host.LayerHost:
    return host.layer_host_time(problem, ep, router_fused=False, deepep=False, combined=combined)


def test_host_time_is_counted_ops_times_the_time_per_op() -> None:
    """A dense layer: attention (3 ops, 3 TE modules) and MLP (2 ops, 2 TE modules), backward twice the forward."""
    p = _problem("llama3-8b", "h100x8", framework="nemo")
    ops = (3 + 2) + (3 + 2) * host.TE_MODULE_OPS
    t = _host(p)
    assert t.fwd[0] == pytest.approx(ops * current().host_op_s)
    assert t.bwd[0] == pytest.approx(host.BACKWARD_OVER_FORWARD * t.fwd[0])
    assert t.sync_bubble[0] == 0.0  # no MoE dispatcher, no host sync


def test_a_grace_host_takes_the_fitted_ratio_longer() -> None:
    """Same layer, same ops: a GB200's Grace host takes GRACE_HOST_SLOWDOWN times a B200 node's x86 host."""
    x86 = _host(_problem("qwen3-30b-a3b", "b200x8", framework="nemo"))
    grace = _host(_problem("qwen3-30b-a3b", "gb200x8", framework="nemo"))
    assert load_cluster("gb200x8").gpu.host_cpu == "grace" and load_cluster("b200x8").gpu.host_cpu == "x86"
    assert grace.fwd[0] / x86.fwd[0] == pytest.approx(host.GRACE_HOST_SLOWDOWN)


def test_moe_layers_cost_more_host_time_with_more_local_experts() -> None:
    """TE GroupedLinear splits and allocates per local expert: fewer experts per GPU (larger EP), less host time."""
    p = _problem("qwen3-30b-a3b", "h100x64", framework="nemo")
    t = _host(p, np.array([8.0, 64.0]))
    assert t.fwd[0] > t.fwd[1]
    per_expert = host.EXPERTS.per_expert * (128 / 8 - 128 / 64) * current().host_op_s
    assert t.fwd[0] - t.fwd[1] == pytest.approx(per_expert * p.model.moe_layers / p.model.num_hidden_layers)
    assert t.sync_bubble[0] > 0  # dropless: the dispatcher copies the token counts to the host every forward


def test_cuda_graphs_remove_the_captured_modules_host_time() -> None:
    eager = _host(_problem("qwen3-30b-a3b", "h100x8", framework="nemo"))
    per_layer = _host(_problem("qwen3-30b-a3b", "h100x8", framework="nemo", cuda_graphs="per-layer"))
    full = _host(_problem("qwen3-30b-a3b", "h100x8", framework="nemo", cuda_graphs="full-iteration"))
    assert 0 < per_layer.fwd[0] < eager.fwd[0]  # dropless: the dispatch after preprocessing and the experts remain
    assert full.fwd[0] == full.bwd[0] == full.sync_bubble[0] == 0.0
    padded = _host(_problem("qwen3-30b-a3b", "h100x8", framework="nemo", cuda_graphs="per-layer",
                            moe_capacity_factor=1.0, moe_pad_to_capacity=True))
    assert padded.fwd[0] == padded.sync_bubble[0] == 0.0  # drop-and-pad: the whole layer is captured
    dense = _host(_problem("llama3-8b", "h100x8", framework="nemo", cuda_graphs="per-layer"))
    assert dense.fwd[0] == 0.0


def test_per_layer_graphs_take_only_the_modules_the_run_names() -> None:
    """Megatron-Core --cuda-graph-modules: Qwen3-30B-A3B's Blackwell presets capture moe_router and moe_preprocess
    only, so the attention's ops stay on the host (and its static buffers are not kept); the recipes' usual list
    (attn, moe_router, moe_preprocess) is the default's pricing."""
    def graphed(modules: tuple[str, ...] | None) -> Problem:
        return _problem("qwen3-30b-a3b", "gb200x8", framework="nemo", cuda_graphs="per-layer",
                        cuda_graph_modules=modules)

    usual, no_attn = graphed(None), graphed(("moe_router", "moe_preprocess"))
    assert _host(graphed(("attn", "moe_router", "moe_preprocess"))).fwd[0] == pytest.approx(_host(usual).fwd[0])
    attention = host.ATTENTION.cost(0.0) * current().host_op_s * host.GRACE_HOST_SLOWDOWN
    assert _host(no_attn).fwd[0] - _host(usual).fwd[0] == pytest.approx(attention)
    router_only = _host(graphed(("attn", "moe_router"))).fwd[0] - _host(usual).fwd[0]  # preprocessing is eager
    assert router_only == pytest.approx(host.DISPATCH_ALLTOALL[0].cost(0.0) * current().host_op_s
                                        * host.GRACE_HOST_SLOWDOWN)
    tok, one = np.array([16384.0]), np.array([1.0])
    surfaces = 4 * 16384 * usual.model.hidden_size * 2
    assert (host.graph_buffer_bytes(usual, tok, one, one, deepep=True)[0]
            - host.graph_buffer_bytes(no_attn, tok, one, one, deepep=True)[0]) == pytest.approx(surfaces)


@pytest.mark.parametrize("modules, says", [(("moe_preprocess",), "add moe_router"),
                                           (("moe",), "drop-and-pad"),
                                           (("moe", "moe_router"), "drop moe_router")])
def test_graph_module_lists_megatron_refuses_are_refused(modules: tuple[str, ...], says: str) -> None:
    """The asserts of Megatron-Core's TransformerConfig (transformer_config.py cuda_graph_modules checks)."""
    with pytest.raises(ValueError, match=says):
        TrainingSpec(seq_len=4096, global_batch=512, cuda_graphs="per-layer", cuda_graph_modules=modules)
    with pytest.raises(ValueError, match="per-layer"):
        TrainingSpec(seq_len=4096, global_batch=512, cuda_graph_modules=("attn",))


def test_validate_prices_the_graph_modules_the_runs_ran() -> None:
    """MB-088 (Qwen3-30B-A3B on 8 GB200) captured moe_router and moe_preprocess only: its Grace host issues the
    attention eagerly, which the model now prices (+8.2 % before, when every per-layer row counted it captured)."""
    case = _validated()["MB-088"]
    assert case["knobs"]["cuda_graphs"]["scope"] == ["moe_router", "moe_preprocess"]
    assert case["error"]["throughput"] < 0.06


def test_ep_overlap_issues_each_layer_as_schedule_nodes() -> None:
    p = _problem("qwen3-30b-a3b", "h100x8", framework="nemo")
    plain, combined = _host(p), _host(p, combined=True)
    node = host.COMBINED_NODE_OPS * current().host_op_s
    assert combined.fwd[0] - plain.fwd[0] == pytest.approx(host.COMBINED_NODES_FWD * node)
    assert combined.bwd[0] - plain.bwd[0] == pytest.approx(host.COMBINED_NODES_BWD * node)


def test_a_pass_runs_at_the_slower_of_gpu_and_host() -> None:
    """Few tokens per GPU make the GPU faster than its host; many make it slower."""
    p = _problem("qwen3-30b-a3b", "gb200x8", framework="nemo")
    r = compute.rates(p)
    one = np.array([1.0])
    for tok, host_bound in ((np.array([512.0]), True), (np.array([65536.0]), False)):
        lt = compute.layer_times(p, r, tok, one, one, EP8)
        issue = host.layer_host_time(p, EP8, router_fused=True, deepep=True)  # nemo: fused router, flex dispatch
        assert bool(lt.fwd[0] == pytest.approx(issue.fwd[0] + issue.sync_bubble[0])) is host_bound
        assert bool(lt.bwd[0] == pytest.approx(issue.bwd[0])) is host_bound


def test_the_plan_option_prices_graphs_and_their_memory() -> None:
    """--cuda-graphs per-layer: less host time, static buffers per captured layer and micro-batch in flight."""
    layout = Layout.from_dict({"tp": 1, "pp": 2, "dp": 4, "cp": 1, "ep": 4, "etp": 1, "vpp": 1, "mbs": 1, "zero": 1,
                               "recompute": 0, "sp": 0, "schedule": 0, "cp_comm": 0})
    eager = price_layout(_problem("qwen3-30b-a3b", "gb200x8", framework="nemo"), layout)
    graphs = price_layout(_problem("qwen3-30b-a3b", "gb200x8", framework="nemo", cuda_graphs="per-layer"), layout)
    assert graphs["step_time_s"] < eager["step_time_s"]
    assert graphs["memory_peak_gib"] > eager["memory_peak_gib"]


def test_graph_buffers_hold_the_permuted_copies_only_where_preprocess_permutes() -> None:
    """moe_preprocess's static output is what dispatch_preprocess returns: the k permuted copies with the all-to-all
    dispatcher (it permutes before the exchange), the tokens as they came with the flex one (DeepEP / HybridEP
    permute after it). Qwen3-30B-A3B at 16,384 tokens per rank: 2 x 8 copies x 2,048 x 2 bytes more per token."""
    p = _problem("qwen3-30b-a3b", "gb200x8", framework="nemo", cuda_graphs="per-layer")
    tok, one = np.array([16384.0]), np.array([1.0])
    alltoall = host.graph_buffer_bytes(p, tok, one, one, deepep=False)
    flex = host.graph_buffer_bytes(p, tok, one, one, deepep=True)
    m = p.model
    assert alltoall[0] - flex[0] == pytest.approx(16384 * 2 * m.num_experts_per_tok * m.hidden_size * 2)
    assert flex[0] == pytest.approx(2 * 4 * 16384 * m.hidden_size * 2)  # attention's and the router's surfaces


def test_flex_dispatch_runs_with_graphs_fit_as_they_ran() -> None:
    """Megatron-Bridge's Qwen3-30B rows on 8 GB200/B300 ran HybridEP with per-layer graphs at micro-batch 4-8; with
    the permuted copies counted they were priced over the GPU's memory."""
    cases = _validated()
    for cid in ("MB-088", "MB-089", "MB-135", "MB-178", "MB-216"):
        assert "exceed" not in (cases[cid].get("note") or ""), cid


@cache
def _validated() -> dict[str, dict]:
    return {c["id"]: c for c in json.loads(json.dumps(validate()["cases"]))}


def test_validate_prices_the_cuda_graphs_the_runs_ran() -> None:
    """The knob file's cuda_graphs is priced, not only recorded (MB-044: full-iteration graphs; MB-046: per-layer)."""
    cases = _validated()
    for cid in ("MB-044", "MB-046", "MB-141"):
        assert cases[cid]["knobs"]["cuda_graphs"]["status"] == "priced"


def test_gpt_oss_biased_experts_run_as_their_kernels() -> None:
    """gpt-oss's per-expert fc2 bias: eager ops per local expert on the host (TEGroupedMLP._apply_bias) and each
    routed copy's output read, written and concatenated on the GPU (8·h bytes); its sinks run inside the fused
    attention and add neither (its clamp: the test below)."""
    m = load_model("gpt-oss-120b")
    plain = m.model_copy(update={"mlp_bias": False})
    assert m.mlp_bias and m.attention_sinks and m.swiglu_limit
    extra = compute.elementwise_bytes_per_token(m)[2] - compute.elementwise_bytes_per_token(plain)[2]
    assert extra == 8.0 * m.num_experts_per_tok * m.hidden_size
    biased = Problem(m, load_cluster("b300x64"), TrainingSpec(seq_len=4096, global_batch=512))
    unbiased = Problem(plain, load_cluster("b300x64"), TrainingSpec(seq_len=4096, global_batch=512))
    ops = (_host(biased).fwd[0] - _host(unbiased).fwd[0]) / current().host_op_s
    assert ops == pytest.approx(host.EXPERT_BIAS.cost(128 / 8))


def test_gpt_oss_clamp_runs_before_the_fused_activation_and_syncs_the_host() -> None:
    """Megatron-Core clamps the fc1 output's halves and concatenates them outside its fused bias-GeGLU, and makes the
    GLU offset a device tensor with a blocking copy (weighted_bias_quick_geglu_impl): 16·k·f bytes forward and
    20·k·f backward per token, 5 more eager ops and a second host sync per MoE layer's forward. An unclamped model
    pays none of it."""
    m = load_model("gpt-oss-120b")
    plain = m.model_copy(update={"swiglu_limit": None})
    copies = m.num_experts_per_tok * m.expert_ffn
    assert compute.clamped_glu_bytes_per_token(m) == (16.0 * copies, 20.0 * copies)
    assert compute.clamped_glu_bytes_per_token(plain) == (0.0, 0.0)
    training = TrainingSpec(seq_len=4096, global_batch=512)
    cluster = load_cluster("b300x64")
    clamped, unclamped = Problem(m, cluster, training), Problem(plain, cluster, training)
    tok, one = np.array([16384.0]), np.array([1.0])
    fwd, bwd = compute.elementwise_bytes(clamped, tok, one, np.array([0]))
    fwd0, bwd0 = compute.elementwise_bytes(unclamped, tok, one, np.array([0]))
    assert (fwd - fwd0)[0] == pytest.approx(16384 * 16.0 * copies)
    assert (bwd - bwd0)[0] == pytest.approx(16384 * 20.0 * copies)
    t, t0 = _host(clamped), _host(unclamped)
    assert (t.fwd[0] - t0.fwd[0]) / current().host_op_s == pytest.approx(host.CLAMPED_GLU.ops)
    assert t.sync_bubble[0] == pytest.approx(2 * t0.sync_bubble[0])  # the dispatcher's sync and the clamp's


def test_the_run_says_whether_its_router_is_fused() -> None:
    """TrainingSpec.moe_router_fusion overrides the stack's recipes' default (megatron-core: unfused, Megatron-Core's
    default; nemo: fused, as NVIDIA's performance scripts run it), and a fused router issues ROUTER_FUSED's ops
    instead of ROUTER's."""
    stack = _problem("qwen3-30b-a3b", "h100x64", framework="megatron-core")
    fused = _problem("qwen3-30b-a3b", "h100x64", framework="megatron-core", moe_router_fusion=True)
    assert not host.router_fused(stack) and host.router_fused(fused)
    assert host.router_fused(_problem("qwen3-30b-a3b", "h100x64", framework="nemo"))
    assert not host.router_fused(_problem("qwen3-30b-a3b", "h100x64", framework="generic", moe_router_fusion=False))
    one = layout(dp=64, ep=8, mbs=1, zero=1, etp=1)
    saved = price_layout(stack, one)["step_time_s"] - price_layout(fused, one)["step_time_s"]
    assert saved > 0  # the H100 row is host-bound: fewer router ops, a shorter step


def test_validate_prices_the_router_the_runs_ran() -> None:
    """Megatron-Bridge's performance scripts turn the fused router on for every MoE model in its tables
    (scripts/performance/configs/*: set_qwen3_common_configs, set_deepseek_v3_common_configs,
    set_gpt_oss_common_configs), which the knob file records per row; DGX Cloud's NeMo 1 Grok rows predate it."""
    cases = _validated()
    for cid in ("MB-141", "MB-046", "MB-019", "MB-255"):
        knob = cases[cid]["knobs"]["moe_router_fusion"]
        assert knob["status"] == "priced" and knob["value"] is True and "Megatron-Bridge@" in knob["source"]
    assert "moe_router_fusion" not in cases["DGXC-105"]["knobs"]


def test_an_unfused_attention_kernel_prices_the_scores_through_hbm() -> None:
    """TrainingSpec.attention_kernel = unfused overrides the stack's fused attention: the core runs as batched GEMMs
    over the s x s scores (slower), keeps the scores for backward unless selective recompute re-runs it, and
    selective recompute then re-runs the attention core (Korthikanti et al.) instead of the norms."""
    fused = _problem("deepseek-v3", "gb200x256", framework="nemo")
    unfused = _problem("deepseek-v3", "gb200x256", framework="nemo", attention_kernel="unfused")
    r = compute.rates(fused)
    tok, one = np.array([4096.0]), np.array([1.0])
    assert compute.attention_time(unfused, r, tok, one)[0][0] > 2 * compute.attention_time(fused, r, tok, one)[0][0]
    one_layout = layout(tp=2, pp=4, dp=32, ep=64, mbs=1, zero=1, etp=1, recompute=0)
    assert price_layout(unfused, one_layout)["memory_peak_gib"] > price_layout(fused, one_layout)["memory_peak_gib"]


def test_a_grouped_gemm_stack_issues_no_ops_per_local_expert() -> None:
    """torchtitan runs each expert matrix as one torch._grouped_mm over all local experts: its MoE layer's host time
    does not grow with the experts a GPU holds, while Transformer Engine's GroupedLinear (nemo) splits per expert.
    Measured on one H100 (bench/real_step.py --shape qwen3-30b-a3b-4l, 128 local experts): the host issued the
    whole eager step in 29 ms of a 104 ms step, where per-expert counts would have priced 11 ms per layer forward."""
    from planner.cost.profiles import profile_for

    assert profile_for("torchtitan").grouped_expert_gemm and not profile_for("nemo").grouped_expert_gemm
    eps = np.array([1.0, 8.0, 64.0])
    titan = _host(_problem("qwen3-30b-a3b", "h100x64", framework="torchtitan"), eps)
    nemo = _host(_problem("qwen3-30b-a3b", "h100x64", framework="nemo"), eps)
    assert np.ptp(titan.fwd) == pytest.approx(0.0, abs=1e-12)
    assert nemo.fwd[0] > nemo.fwd[1] > nemo.fwd[2]
    assert titan.fwd[0] < nemo.fwd[0] / 3  # 128 local experts: 256 split/allocate ops gone


def test_a_grouped_gemm_stack_pays_one_launch_per_expert_matrix() -> None:
    """GPU-side launch gaps: one per local expert and matrix for GroupedLinear, one per matrix for a grouped kernel."""
    from planner.cost import expert

    m = load_model("qwen3-30b-a3b")
    eps = np.array([1.0, 8.0])
    per_expert = expert.moe_launch_time(m, eps)
    grouped = expert.moe_launch_time(m, eps, grouped=True)
    assert per_expert[0] / per_expert[1] == pytest.approx(8.0)
    assert grouped[0] == pytest.approx(grouped[1])
    assert grouped[0] == pytest.approx(per_expert[0] * m.mlp_matrices / (m.mlp_matrices * 128))
