"""MoE as the frontier trains it (issue 12 items 1 and 3), checked against hand-worked numbers and published figures."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import cols, layout

from planner.cost import expert, fitted, pipeline
from planner.cost.fabric import NETWORK_EFFICIENCY, NVLINK_EFFICIENCY, Fabric
from planner.cost.fit_check import state_memory_floor_gib
from planner.cost.profiles import profile_for
from planner.errors import NoFeasiblePlan
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.layout import Recompute, Schedule, Zero
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec
from planner.search.search import price_layout, search
from planner.strategies.pipeline_orders import orders_dualpipe
from planner.strategies.pipeline_sim import simulate_schedule

IMBALANCE = fitted.current().expert_imbalance  # the dropless busiest-rank load the cost model prices with

ROOT = Path(__file__).resolve().parent.parent


def _problem(model: str, cluster: str, seq: int = 4096, gbs: int = 512, precision: str = "bf16",
             framework: str = "generic") -> Problem:
    return Problem(load_model(model), load_cluster(cluster),
                   TrainingSpec(seq_len=seq, global_batch=gbs, precision=precision, framework=framework))


# ------------------------------------------------------------------------------------------- model states per group

def test_expert_states_shard_over_the_expert_data_parallel_group_not_all_data_ranks():
    """ZeRO-3 on 1024 GPUs: every GPU holds 1/1024 of every state whatever ep is (dense states over 1024 data ranks,
    expert states over 1024/ep expert-data ranks of 1/ep of the experts). Before, ep=8 divided the experts twice."""
    p = _problem("deepseek-v3", "h100x1024")
    floors = [state_memory_floor_gib(p, cols(dp=1024, ep=ep, zero=int(Zero.PARAMETERS)))[0] for ep in (1, 8, 64)]
    assert floors[1] == pytest.approx(floors[0], rel=0.02) and floors[2] == pytest.approx(floors[0], rel=0.02)
    # generic profile: 2 B weights + 4 B grads + 12 B optimizer per parameter, all sharded 1024 ways
    assert floors[0] == pytest.approx(671e9 * 18 / 1024 / 2**30, rel=0.05)


def test_a_model_whose_states_cannot_fit_is_infeasible_with_the_reason():
    """DeepSeek-V3 (671B): weights + fp32 grads + Adam need ~16 B/param = 10 TiB > 64 x 80 GiB."""
    with pytest.raises(NoFeasiblePlan):
        search(_problem("deepseek-v3", "h100x64"), top=1)
    proc = subprocess.run([sys.executable, "-m", "cli.main", "--model", "deepseek-v3", "--cluster", "h100x64"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert proc.returncode != 0 and "memory_fits" in proc.stderr and "GiB per GPU" in proc.stderr


# ----------------------------------------------------------------------------------------------- the all-to-all

def test_node_limited_routing_caps_the_domains_a_token_reaches():
    m = load_model("deepseek-v3")
    # uniform: 8 (1 - (7/8)^8) = 5.25 of 8 nodes; DeepSeek-V3 limits each token to 4 nodes (n_group 8, topk_group 4)
    uniform = 8 * (1 - (7 / 8) ** 8)
    reached = expert.domains_reached(m, np.array([8.0]))[0]
    assert reached == pytest.approx(min(uniform, 4.0) if m.topk_group else uniform)
    assert expert.domains_reached(m, np.array([1.0]))[0] == 1.0


def test_deduplicated_dispatch_sends_a_token_once_per_remote_node():
    """EP 64 over 8 H800 nodes, 4096 tokens, hidden 7168, top-8, bf16, no fp8 dispatch (nemo profile):
    network bytes = tokens x h x 2 B x remote nodes; NVLink carries the k copies x 7/8; the busiest rank receives
    (dispatch) and sends back (combine) the fitted expert imbalance times the mean over NVLink, and everyone waits
    for it; a GPU's network receive carries its whole node's tokens, whose excess is the rank's over sqrt(8)."""
    m, cl = load_model("deepseek-v3"), load_cluster("h800x2048")
    fab = Fabric(cl, {}, 3.35e12)
    prof = profile_for("nemo")
    one = np.array([1.0])
    t = expert.a2a_pass_time(m, fab, prof, np.array([4096.0]), one, np.array([64.0]), one, fp8=False,
                             load=IMBALANCE)
    remote = expert.domains_reached(m, np.array([8.0]))[0] * 7 / 8
    net = 4096 * 7168 * 2.0 * remote / (50e9 * NETWORK_EFFICIENCY)
    nvl = 4096 * 8 * 7168 * 2.0 * 7 / 8 / (200e9 * NVLINK_EFFICIENCY)
    node_load = 1 + (IMBALANCE - 1) / 8 ** 0.5
    per_exchange = max(node_load * net, IMBALANCE * nvl)
    assert t[0] == pytest.approx(2 * per_exchange, rel=0.01)  # dispatch + combine, latency is microseconds
    plain = expert.a2a_pass_time(m, fab, profile_for("torchtitan"), np.array([4096.0]), one, np.array([64.0]), one,
                                 fp8=False, load=IMBALANCE)
    assert plain[0] > 1.5 * t[0]  # every copy of every token crosses the network without deduplication


def test_fp8_dispatch_halves_dispatch_bytes_only_where_the_stack_does_it():
    m, cl = load_model("deepseek-v3"), load_cluster("h800x2048")
    fab, one, tok, ep = Fabric(cl, {}, 3.35e12), np.array([1.0]), np.array([4096.0]), np.array([64.0])
    generic = profile_for("generic")
    bf16 = expert.a2a_pass_time(m, fab, generic, tok, one, ep, one, fp8=False, load=IMBALANCE)[0]
    fp8 = expert.a2a_pass_time(m, fab, generic, tok, one, ep, one, fp8=True, load=IMBALANCE)[0]
    # dispatch at 1 + 4/128 bytes, combine at 2: (1.03 + 2) / 4 of the bf16 time
    assert fp8 == pytest.approx(bf16 * (expert.FP8_DISPATCH_BYTES + 2) / 4, rel=0.02)
    nemo = profile_for("nemo")
    assert expert.a2a_pass_time(m, fab, nemo, tok, one, ep, one, fp8=True, load=IMBALANCE)[0] == pytest.approx(
        expert.a2a_pass_time(m, fab, nemo, tok, one, ep, one, fp8=False, load=IMBALANCE)[0])


def test_overlap_hides_the_all_to_all_behind_the_other_micro_batch():
    """exposed = (1 - s) A + s (max(A, C/(1 - σ)) - C), σ = COMM_SM_SHARE min(A/C, 1)."""
    m, cl = load_model("mixtral-8x7b"), load_cluster("h100x64")
    fab, prof = Fabric(cl, {}, 3.35e12), profile_for("megatron-core")
    one, tok, ep = np.array([1.0]), np.array([8192.0]), np.array([8.0])
    a2a = 2 * expert.a2a_pass_time(m, fab, prof, tok, one, ep, one, fp8=False, load=IMBALANCE)[0]
    plain, _ = expert.dispatch_exposed(m, fab, prof, tok, one, ep, one, False)
    assert plain[0] == pytest.approx(a2a)
    sigma = expert.COMM_SM_SHARE
    # A = C/10: the kernels need a tenth of the saturating SM share; the compute stretches by 1/(1 - σ/10)
    hidden, _ = expert.dispatch_exposed(m, fab, prof, tok, one, ep, one, False, 1.0, 10 * a2a)
    assert hidden[0] == pytest.approx(10 * a2a / (1 - sigma / 10) - 10 * a2a)
    # A = C: DeepSeek's 1:1 ratio, the full share: C/(1 - σ) - C exposed
    even, _ = expert.dispatch_exposed(m, fab, prof, tok, one, ep, one, False, 1.0, a2a)
    assert even[0] == pytest.approx(a2a * sigma / (1 - sigma))
    # A = 4C, half the passes paired: the pair is communication-bound
    short, _ = expert.dispatch_exposed(m, fab, prof, tok, one, ep, one, False, 0.5, 0.25 * a2a)
    assert short[0] == pytest.approx(0.5 * a2a + 0.5 * 0.75 * a2a)


def test_overlapped_share_counts_the_unpaired_warm_up():
    s = Schedule
    share = expert.overlapped_share(np.array([s.COMBINED_1F1B, s.COMBINED_1F1B, s.DUALPIPE, s.ONE_F_ONE_B]),
                                    np.array([8.0, 64.0, 64.0, 64.0]), np.array([1.0, 4.0, 16.0, 4.0]),
                                    np.array([1.0, 2.0, 1.0, 1.0]))
    # pp=1: the first forward runs alone, 7 of 8 pair; pp=4 v=2: warm-up 2*3 + 1*4 + 1 = 11 of 128 chunks;
    # DualPipe p=16, m=64, edge rank (dualpipe.py): step 4 2*(32 - 16 + 1) = 34 + step 5 (8 - 1) = 7 -> 41 of 64
    assert share == pytest.approx([7 / 8, (128 - 11) / 128, 41 / 64, 0.0])


# ----------------------------------------------------------------------------------------------------- DualPipe

def test_dualpipe_bubble_memory_and_parameters_follow_the_deepseek_table():
    """DeepSeek-V3 report Table 2: bubble (PP/2 - 1)(F&B + B - 3W), PP + 1 activations, 2x parameters."""
    sched, p, v = np.array([Schedule.DUALPIPE]), np.array([16.0]), np.array([1.0])
    tf, tb, tw = np.array([1.0]), np.array([2.0]), np.array([1.0])
    assert pipeline.bubble_time(sched, p, v, tf, tb, tw, m=np.array([64.0]))[0] == pytest.approx(7 * (3 + 2 - 3))
    assert pipeline.inflight_microbatches(sched, p, v, np.array([64.0]))[0] == 17
    prob = _problem("deepseek-v3", "h800x2048", gbs=15360, precision="fp8")
    lay = layout(pp=16, dp=128, ep=64, zero=1, recompute=int(Recompute.SELECTIVE))
    one = price_layout(prob, lay)
    two = price_layout(prob, lay.replace(schedule=Schedule.DUALPIPE))
    # two stages per rank, and the busiest rank may be the edge one that also holds the embedding, head and MTP
    assert 2 * one["mem_weights_gib"] <= two["mem_weights_gib"] <= 3 * one["mem_weights_gib"]
    assert two["pp_comm_s"] == 0.0 and two["ep_comm_s"] < 0.5 * one["ep_comm_s"]


def test_dualpipe_order_replays_dualpipe_py_steps():
    p, m = 8, 32
    orders = orders_dualpipe(p, m)
    for order in orders:
        for kind in "FBW":
            assert sum(op.kind == kind for op in order) == m  # every micro-batch once per pass on every rank
    sim = simulate_schedule("dualpipe", p, m, t_f=1.0, t_b=1.0, t_w=1.0)
    assert sim.peak_inflight[0] == p + 1  # PP + 1 (DeepSeek-V3 report Table 2)
    one = simulate_schedule("1f1b", p, m, t_f=1.0, t_b=2.0)
    assert sim.bubble < one.bubble / 3
    with pytest.raises(ValueError):
        orders_dualpipe(8, 12)  # fewer than 2 x pp micro-batches: dualpipe.py asserts


def test_deepseek_v3_published_layout_near_its_report_and_fits():
    """DeepSeek-V3 report §1 / Table 1: 180K H800 GPU-hours per trillion tokens = 1e12 / (180e3 x 3600) = 1543
    tokens/s/GPU, on PP16 x EP64 (8 nodes) x ZeRO-1 DP, no TP, DualPipe, seq 4096, batch 15360 (§3.1, §4.2), with
    its fp8 recipe: 128 x 128 block scales (§3.3.2), bf16 Adam moments and the SwiGLU input cached in fp8 (§3.3.3),
    the norms and MLA up-projections recomputed (§3.2.3). It trained on 80 GB H800s, so the layout must fit."""
    published = 1e12 / (180e3 * 3600)
    prob = Problem(load_model("deepseek-v3"), load_cluster("h800x2048"),
                   TrainingSpec(seq_len=4096, global_batch=15360, precision="fp8", fp8_recipe="blockwise",
                                optimizer_moments="bf16"))
    lay = layout(pp=16, dp=128, ep=64, zero=1, recompute=int(Recompute.SELECTIVE), schedule=int(Schedule.DUALPIPE))
    priced = price_layout(prob, lay)
    assert priced["memory_peak_gib"] <= 80.0
    # Issue 12 asked for 15 %. The report's figure is the whole pre-training's average (the batch ramp over the first
    # 469B tokens, checkpoints, restarts included), which the steady-state price leaves out. DeepSeek routed for real
    # (aux-loss-free balancing), priced at the expert imbalance the model zoo's dropless / forced-balance pairs anchor
    # (1.25, planner.evidence.anchors): 9 % fast (24 % at the mean load).
    assert priced["tokens_per_s_per_gpu"] == pytest.approx(published, rel=0.15)
    plain = price_layout(prob, lay.replace(schedule=Schedule.ONE_F_ONE_B))["tokens_per_s_per_gpu"]
    assert plain < 0.85 * priced["tokens_per_s_per_gpu"]  # without the pairing the all-to-all is exposed


def test_grouped_gemm_rate_follows_deepgemm_tokens_per_expert():
    """DeepGEMM (README @55ab91f): masked grouped GEMMs reach ~0.65-0.70 of the large-M rate at 256 tokens per
    expert and ~0.76-0.92 at 1024."""
    m = load_model("deepseek-v3")
    one = np.array([1.0])
    # tokens per expert = tok x k x ep / E: 4096 x 8 x 8 / 256 = 1024; x 2 = 256 at ep=2... pick tok to hit each
    at_1024 = expert.grouped_gemm_rate(m, np.array([4096.0]), one, np.array([8.0]))[0]
    at_256 = expert.grouped_gemm_rate(m, np.array([4096.0]), one, np.array([2.0]))[0]
    assert expert.tokens_per_expert(m, np.array([4096.0]), one, np.array([8.0]))[0] == 1024
    assert 0.62 <= at_256 <= 0.72 and 0.80 <= at_1024 <= 0.92
    big = expert.grouped_gemm_rate(m, np.array([65536.0]), one, np.array([64.0]))[0]
    assert big == 1.0  # at and beyond the reference shape the catalog rate holds


def test_gemm_depth_half_point_follows_the_tensor_rate_per_sm():
    """K0 of the contraction-depth curve is DeepGEMM's 500 on H800 in FP8 and scales with the precision's peak per SM;
    OpenXLA's measured GEMM tables (matmul_interpolator_data.h, BF16, batch 2, M 2048, N 4096, K 256 and 1024 against
    4096) give 210-285 on H100 and 520-550 on B200."""
    h100, b200 = load_cluster("h100x8").gpu, load_cluster("b200x8").gpu
    assert expert.gemm_depth_half(h100, "fp8") == pytest.approx(expert.GEMM_DEPTH_HALF)
    assert 210 * 0.9 <= expert.gemm_depth_half(h100, "bf16") <= 285 * 1.1
    assert 520 * 0.9 <= expert.gemm_depth_half(b200, "bf16") <= 550 * 1.1
    # a fine-grained expert (Qwen3-30B-A3B: 2048 -> 768) runs its short contractions slower on the faster SM
    m, tok, one, ep = load_model("qwen3-30b-a3b"), np.array([16384.0]), np.array([1.0]), np.array([8.0])
    on_h100 = expert.expert_depth_rate(m, tok, one, ep, expert.gemm_depth_half(h100, "fp8"))[0]
    on_b200 = expert.expert_depth_rate(m, tok, one, ep, expert.gemm_depth_half(b200, "fp8"))[0]
    assert on_b200 < 0.95 * on_h100


# ------------------------------------------------------------------------------ expert-TP collectives of routed copies

def test_expert_tp_gathers_the_routed_copies_not_the_tokens():
    """Experts split over an expert-TP group gather what the all-to-all delivered, k routed copies per token, and
    reduce-scatter them back (Megatron-Core MoEAlltoAllTokenDispatcher): k·load passes of the dense MLP's bytes, plus
    one for a TP-split shared expert; the flex dispatcher folds TP into its exchange (one pass); whole experts none."""
    from planner.cost.tensor import moe_tp_passes

    mixtral, dsv3 = load_model("mixtral-8x22b"), load_model("deepseek-v3")
    split, whole = np.array([4.0]), np.array([1.0])
    assert moe_tp_passes(mixtral, split, False, 1.0)[0] == mixtral.num_experts_per_tok == 2
    assert moe_tp_passes(mixtral, split, False, 1.25)[0] == pytest.approx(2.5)  # padded capacity buffers travel whole
    assert moe_tp_passes(mixtral, whole, False, 1.0)[0] == 0.0
    assert moe_tp_passes(mixtral, split, True, 1.0)[0] == 1.0
    assert moe_tp_passes(dsv3, split, False, 1.0)[0] == 1 + dsv3.num_experts_per_tok  # shared expert + 8 copies
    assert moe_tp_passes(dsv3, whole, False, 1.0)[0] == 1.0


def test_expert_tp_exposes_k_gathers_of_the_layer_tokens_with_the_alltoall_dispatcher():
    """Priced end to end, DeepSeek-V3 (k = 8) on Megatron-Core's alltoall dispatcher with TP 2: experts split over
    TP expose k more all-gather + reduce-scatter passes per MoE layer than whole experts (which still gather for the
    shared expert), each carrying the busiest rank's load (dropless learned routing: the expert imbalance); the flex
    dispatcher adds one. Attention's TP collectives are the same in all three."""
    def tp_s(dispatcher: str, etp: int) -> float:
        p = Problem(load_model("deepseek-v3"), load_cluster("h100x1024"),
                    TrainingSpec(seq_len=4096, global_batch=512, framework="megatron-core", moe_dispatcher=dispatcher))
        return price_layout(p, layout(tp=2, pp=8, dp=64, ep=16, mbs=1, zero=1, sp=1, etp=etp))["tp_comm_s"]

    pass_a2a = tp_s("alltoall", 0) - tp_s("alltoall", 1)
    pass_flex = tp_s("flex", 0) - tp_s("flex", 1)
    assert pass_flex > 0
    load = expert.busiest_rank_load(TrainingSpec(seq_len=4096, global_batch=512))
    assert pass_a2a == pytest.approx(8 * load * pass_flex, rel=1e-6)


def test_a_domain_receives_its_ranks_average_excess_over_the_network():
    """DeepEP sends a token to the same-index GPU of each remote node, so a GPU's network receive carries its whole
    node's tokens: the busiest rank's excess load shrinks by sqrt(ranks per node) there, and vanishes when the
    router is forced to balance (load 1)."""
    assert expert.domain_load(1.25, np.array([1.0]))[0] == pytest.approx(1.25)
    assert expert.domain_load(1.25, np.array([8.0]))[0] == pytest.approx(1 + 0.25 / 8 ** 0.5)
    assert expert.domain_load(1.0, np.array([8.0]))[0] == pytest.approx(1.0)
    m, cl = load_model("deepseek-v3"), load_cluster("h800x2048")
    fab, one, tok = Fabric(cl, {}, 3.35e12), np.array([1.0]), np.array([4096.0])
    deepep = profile_for("nemo")
    # the network leg is the bottleneck at EP 64, so dropless routing costs it the node's load, not the rank's
    dropless = expert.a2a_pass_time(m, fab, deepep, tok, one, np.array([64.0]), one, fp8=False, load=1.25)[0]
    balanced = expert.a2a_pass_time(m, fab, deepep, tok, one, np.array([64.0]), one, fp8=False, load=1.0)[0]
    assert dropless / balanced == pytest.approx(1 + 0.25 / 8 ** 0.5, rel=0.02)


def test_a_rank_holding_every_expert_waits_for_no_busier_rank():
    """Dropless imbalance is the busiest EP rank's excess over the mean; with EP 1 each rank computes all of its own
    tokens' copies, so its load is the mean however unevenly the router spread them (measured on one H100: the
    busiest of 128 experts got 3.7-6.4x the mean, bench/results/h100-2026-11-27-s11). Padded capacity is what it
    is at any EP, and a capacity below 1 still caps the single rank."""
    current = fitted.current
    eps = np.array([1.0, 2.0, 64.0])
    free = TrainingSpec(seq_len=4096, global_batch=64)
    assert list(expert.busiest_rank_load(free, eps)) == pytest.approx([1.0] + [current().expert_imbalance] * 2)
    assert expert.busiest_rank_load(free) == pytest.approx(current().expert_imbalance)
    padded = TrainingSpec(seq_len=4096, global_batch=64, moe_capacity_factor=1.5, moe_pad_to_capacity=True)
    assert list(expert.busiest_rank_load(padded, eps)) == pytest.approx([1.5] * 3)
    capped = TrainingSpec(seq_len=4096, global_batch=64, moe_capacity_factor=0.8)
    assert list(expert.busiest_rank_load(capped, eps)) == pytest.approx([0.8] * 3)
