"""Memory, communication and schedule terms against hand-worked numbers from the papers."""

import numpy as np
import pytest
from conftest import cols, gpt

from planner.cost import compute, flops, memory
from planner.cost import fabric as comm
from planner.cost import pipeline as schedule
from planner.cost.profiles import profile_for
from planner.cost.step import evaluate
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.layout import Recompute, Schedule
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec

ONE = np.array([1])


# --- activations: Korthikanti et al. 2022 Table 2 ----------------------------------------------------------------
def _korthikanti(m, tp, sp):
    """Per-token bytes without the s^2 term; our fused-attention count adds a 4 B/head log-sum-exp."""
    got = memory.layer_activation_bytes_per_token(m, np.array([tp]), np.array([sp]), False, dropout=True)[0]
    return got - 4 * m.num_attention_heads / (tp if sp else tp)


def test_activation_no_parallelism_is_34h():
    m = gpt(96, 12288, 96)
    assert _korthikanti(m, 1, 0) == pytest.approx(34 * 12288)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_activation_tensor_parallel_is_10_plus_24_over_t(t):
    m = gpt(96, 12288, 96)
    assert _korthikanti(m, t, 0) == pytest.approx(12288 * (10 + 24 / t))


@pytest.mark.parametrize("t", [2, 4, 8])
def test_activation_sequence_parallel_is_34_over_t(t):
    m = gpt(96, 12288, 96)
    assert _korthikanti(m, t, 1) == pytest.approx(12288 * 34 / t)


def test_unfused_attention_adds_5as_unless_selective():
    """Korthikanti eq. 1: sbh(34 + 5as/h); selective recompute removes the 5as term."""
    m = gpt(4, 1024, 16)
    base = dict(model=m, cluster=load_cluster("a100x8"))
    s = 2048
    p = Problem(training=TrainingSpec(seq_len=s, global_batch=8, framework="megatron"), **base)
    none = evaluate(p, cols(dp=8, mbs=1, recompute=0))["mem_activations_gib"][0]
    sel = evaluate(p, cols(dp=8, mbs=1, recompute=1))["mem_activations_gib"][0]
    assert (none - sel) * 2**30 == pytest.approx(4 * s * 5 * 16 * s, rel=1e-6)


# --- model states ---------------------------------------------------------------------------------------------------
def test_megatron_states_18_bytes_and_distributed_optimizer_6_plus_12_over_d():
    """Megatron dist_optimizer.md: 18 B/param without sharding, 6 + 12/d with the distributed optimizer."""
    prof = profile_for("megatron")
    psi = np.array([1e9])
    plain = memory.state_bytes(psi, np.array([0]), np.array([8]), prof, fp8=False)
    dist = memory.state_bytes(psi, np.array([1]), np.array([8]), prof, fp8=False)
    assert sum(plain.values())[0] == pytest.approx(18e9)
    assert sum(dist.values())[0] == pytest.approx((6 + 12 / 8) * 1e9)


def test_zero3_fsdp_shards_everything_16_bytes():
    prof = profile_for("torchtitan")
    st = memory.state_bytes(np.array([1e9]), np.array([3]), np.array([64]), prof, fp8=False)
    assert sum(st.values())[0] == pytest.approx(16e9 / 64)


def test_zero_stages_never_increase_state_memory():
    prof = profile_for("generic")
    totals = [sum(memory.state_bytes(np.array([7e9]), np.array([z]), np.array([32]), prof, False).values())[0]
              for z in range(4)]
    assert totals == sorted(totals, reverse=True)


# --- communication ----------------------------------------------------------------------------------------------------
def test_ring_all_reduce_in_one_domain():
    """nccl-tests: t = S * 2(n-1)/n / busbw (+ latency) for a group inside one NVLink domain."""
    cl = load_cluster("h100x8")
    size = 1e9
    t = comm.all_reduce_time(np.array([size]), np.array([8]), ONE, cl)[0]
    bw = 450e9 * comm.NVLINK_EFFICIENCY
    assert t == pytest.approx(size * 2 * 7 / 8 / bw, rel=0.01)


def test_hierarchical_all_reduce_sends_one_gth_over_the_network():
    """8 GPUs per node, 4 nodes: intra 2(g-1)/g S on NVLink, inter 2(k-1)/k S/g per NIC (ml-engineering)."""
    cl = load_cluster("h100x32")
    size = 4e9
    t = comm.all_reduce_time(np.array([size]), np.array([32]), ONE, cl)[0]
    nv = 450e9 * comm.NVLINK_EFFICIENCY
    net = 50e9 * comm.NETWORK_EFFICIENCY
    expected = 2 * 7 / 8 * size / nv + 2 * 3 / 4 * size / 8 / net
    assert t == pytest.approx(expected, rel=0.01)


def test_all_gather_is_half_an_all_reduce():
    cl = load_cluster("h100x64")
    ar = comm.all_reduce_time(np.array([2e9]), np.array([64]), ONE, cl)[0]
    ag = comm.all_gather_time(np.array([2e9]), np.array([64]), ONE, cl)[0]
    assert ag == pytest.approx(ar / 2, rel=0.01)


# --- pipeline schedules ---------------------------------------------------------------------------------------------
def test_bubbles_per_schedule():
    p, v, tf, tb, tw = np.array([8]), np.array([4]), np.array([1.0]), np.array([2.0]), np.array([1.0])
    one_f = schedule.bubble_time(np.array([Schedule.ONE_F_ONE_B]), p, ONE, tf, tb, tw)[0]
    inter = schedule.bubble_time(np.array([Schedule.INTERLEAVED]), p, v, tf, tb, tw)[0]
    zb1 = schedule.bubble_time(np.array([Schedule.ZB_H1]), p, ONE, tf, tb, tw)[0]
    zb2 = schedule.bubble_time(np.array([Schedule.ZB_H2]), p, ONE, tf, tb, tw)[0]
    assert one_f == pytest.approx(7 * 3.0)  # (p-1)(t_f + t_b)
    assert inter == pytest.approx(one_f / 4)  # / v
    assert zb1 == pytest.approx(one_f / 3)  # T_F = T_B = T_W: a third of 1F1B (Qi et al. 2024)
    assert zb2 == pytest.approx(0.0)


def test_inflight_microbatches():
    p, m = np.array([8]), np.array([64])
    assert schedule.inflight_microbatches(np.array([Schedule.ONE_F_ONE_B]), p, ONE, m)[0] == 8
    inter = schedule.inflight_microbatches(np.array([Schedule.INTERLEAVED]), p, np.array([4]), m)[0]
    assert inter == pytest.approx(8 * (1 + 7 / 32))  # 1 + (p-1)/(p v), Korthikanti §4.2.3
    assert schedule.inflight_microbatches(np.array([Schedule.ZB_H2]), p, ONE, m)[0] == 15  # 2p - 1


# --- assembled step -----------------------------------------------------------------------------------------------
def test_step_time_decomposes_and_mfu_is_consistent(llama70b_h100x512):
    p = llama70b_h100x512
    r = evaluate(p, cols(tp=8, pp=4, dp=16, vpp=5, mbs=1, zero=1, recompute=1, sp=1, schedule=1))
    step = r["step_time_s"][0]
    parts = r["compute_s"][0] + r["exposed_comm_s"][0] + r["bubble_s"][0] + r["optimizer_s"][0]
    assert parts == pytest.approx(step, rel=0.02)
    tokens = 512 * 8192
    assert r["tokens_per_s_per_gpu"][0] == pytest.approx(tokens / step / 512)
    assert 0.2 < r["mfu"][0] < 0.7


def test_the_step_decomposes_on_the_busiest_rank_under_dualpipe_too():
    """compute_s counts the rank the stage times price: under DualPipe the rank holding the first and last stages,
    which runs half the micro-batches through each (and the LM head with them), so compute + exposed communication
    + bubble + optimizer still make the step (it had counted the whole head every micro-batch, more than the step)."""
    from planner.inputs.catalog import load_cluster, load_model
    from planner.inputs.layout import parse_pairs
    from planner.inputs.problem import Problem
    from planner.inputs.specs import TrainingSpec
    from planner.report.explain import complete_layout
    from planner.search.search import price_layout

    problem = Problem(load_model("deepseek-v3"), load_cluster("h800x2048"),
                      TrainingSpec(seq_len=4096, global_batch=15360, precision="fp8", framework="generic"))
    for layout in ("tp=1,pp=16,ep=64,mbs=1,zero=1,recompute=selective,schedule=dualpipe",
                   "tp=1,pp=16,vpp=2,ep=64,mbs=1,zero=1,recompute=selective,schedule=combined-1f1b"):
        m = price_layout(problem, complete_layout(problem, parse_pairs([layout], "--layout")))
        parts = m["compute_s"] + m["exposed_comm_s"] + m["bubble_s"] + m["optimizer_s"]
        assert parts == pytest.approx(m["step_time_s"], rel=0.03), layout


def test_more_recompute_is_slower_and_leaner(llama70b_h100x512):
    p = llama70b_h100x512
    rs = [evaluate(p, cols(tp=8, pp=4, dp=16, mbs=1, zero=1, recompute=rc, sp=1)) for rc in (0, 2)]
    assert rs[1]["step_time_s"][0] > rs[0]["step_time_s"][0]
    assert rs[1]["memory_peak_gib"][0] < rs[0]["memory_peak_gib"][0]


def test_fp8_is_faster_than_bf16():
    m, cl = load_model("llama3-8b"), load_cluster("h100x8")
    t = {prec: evaluate(Problem(m, cl, TrainingSpec(seq_len=4096, global_batch=64, precision=prec)),
                        cols(dp=8, mbs=2, zero=1))["step_time_s"][0] for prec in ("bf16", "fp8")}
    assert 1.1 < t["bf16"] / t["fp8"] < 2.0


# --- compression what-if and Ulysses -------------------------------------------------------------------------------
def test_compression_divides_traffic_and_adds_codec_time():
    from planner.cost.fabric import Squeezer

    sq = Squeezer({"dp": 4.0}, hbm_bytes_per_s=1e12)
    assert sq.wire("dp", 8e9) == pytest.approx(2e9)
    assert sq.wire("tp", 8e9) == pytest.approx(8e9)  # other dimensions untouched
    assert sq.codec("dp", 8e9) == pytest.approx(2 * 8e9 * 1.25 / 1e12)
    assert sq.codec("tp", 8e9) == 0.0


def test_compressing_dp_speeds_up_a_dp_bound_layout():
    m, cl = load_model("llama3-8b"), load_cluster("a100x64")
    tr = TrainingSpec(seq_len=2048, global_batch=64)
    lay = cols(dp=64, mbs=1, zero=0)
    plain = evaluate(Problem(m, cl, tr), lay)
    squeezed = evaluate(Problem(m, cl, tr, compress={"dp": 4.0}), lay)
    assert squeezed["dp_comm_s"][0] < plain["dp_comm_s"][0]
    assert squeezed["step_time_s"][0] < plain["step_time_s"][0]


def test_ulysses_exchanges_qkv_and_output_with_all_to_all():
    """DeepSpeed-Ulysses: 2 all-to-alls forward (QKV, output) and 2 backward per layer, not overlapped."""
    m, cl = load_model("llama2-7b"), load_cluster("h100x8")
    p = Problem(m, cl, TrainingSpec(seq_len=32768, global_batch=1))
    r = evaluate(p, cols(cp=8, mbs=1, zero=1, cp_comm=1))
    tok = 32768 / 8
    qkv = tok * (4096 + 2 * 4096) * 2.0
    out = tok * 4096 * 2.0
    eight, one = np.array([8]), np.array([1])
    per_layer = 2 * sum(comm.all_to_all_time(np.array([b]), eight, one, cl)[0] for b in (qkv, out))
    assert r["cp_comm_s"][0] == pytest.approx(per_layer * 32, rel=1e-6)  # 32 layers, one micro-batch


# --- closed forms agree with the timeline simulation ----------------------------------------------------------------
@pytest.mark.parametrize("name,v,split", [("1f1b", 1, False), ("interleaved", 4, False), ("zb-h1", 1, True),
                                          ("zb-h2", 1, True), ("seq1f1b", 1, False)])
@pytest.mark.parametrize("p,m", [(4, 8), (8, 16), (8, 32)])
def test_schedule_closed_forms_match_simulation(name, v, split, p, m):
    """planner.cost.pipeline (used by the vectorised search) against planner.strategies.pipeline_sim (order of
    operations)."""
    from planner.inputs.layout import SCHEDULES, SEQ1F1B_SEGMENTS
    from planner.strategies.pipeline_sim import simulate_schedule

    t_f, t_b, t_w = 1.0, 2.0, 1.0
    kwargs = {"t_b": t_b - t_w, "t_w": t_w} if split else {"t_b": t_b}
    extra = {"k": SEQ1F1B_SEGMENTS, "attn_frac": 0.0} if name == "seq1f1b" else {}
    sim = simulate_schedule(name, p, m, t_f=t_f, v=v, **kwargs, **extra)
    code = np.array([SCHEDULES.index(name)])
    closed = schedule.bubble_time(code, np.array([p]), np.array([v]), np.array([t_f]), np.array([t_b]),
                                  np.array([t_w]))[0]
    assert closed == pytest.approx(sim.bubble, abs=1e-6)
    inflight = schedule.inflight_microbatches(code, np.array([p]), np.array([v]), np.array([m]))[0]
    assert inflight == pytest.approx(sim.peak_inflight[0] / v, rel=1e-6)


def test_zb_v_reaches_zero_bubble_at_1f1b_memory():
    from planner.inputs.layout import SCHEDULES
    from planner.strategies.pipeline_sim import simulate_schedule

    sim = simulate_schedule("zb-v", 8, 16, t_f=1.0, t_b=1.0, t_w=1.0, v=2, w_share=0.0)
    code = np.array([SCHEDULES.index("zb-v")])
    closed = schedule.bubble_time(code, np.array([8]), np.array([2]), np.array([1.0]), np.array([2.0]),
                                  np.array([1.0]))[0]
    assert sim.bubble == pytest.approx(0.0, abs=1e-9) and closed == pytest.approx(0.0)
    assert schedule.inflight_microbatches(code, np.array([8]), np.array([2]), np.array([16]))[0] == 8


def test_hybrid_cp_is_ulysses_inside_the_domain_and_ring_across():
    """USP / Megatron a2a+p2p: all-to-all among the 8 CP ranks of a node, ring over the 4 nodes."""
    m, cl = load_model("llama2-7b"), load_cluster("h100x32")
    p = Problem(m, cl, TrainingSpec(seq_len=131072, global_batch=1))
    hyb = evaluate(p, cols(cp=32, mbs=1, zero=1, cp_comm=2))
    ring = evaluate(p, cols(cp=32, mbs=1, zero=1, cp_comm=0))
    uly_rule_ok = cols(cp=32, mbs=1, zero=1, cp_comm=2)
    from planner.search.rules import RULES_BY_NAME

    assert RULES_BY_NAME["hybrid_cp_spans_domains"].check(uly_rule_ok, p)[0]
    assert hyb["cp_comm_s"][0] != ring["cp_comm_s"][0]
    assert hyb["step_time_s"][0] > 0


# --- the LM head stays in bf16 under fp8 recipes --------------------------------------------------------------------
def test_vocabulary_projection_runs_at_the_bf16_rate_in_fp8_training():
    """Megatron-Core's output layer is outside Transformer Engine's fp8 autocast and DeepSeek-V3 keeps the output head
    in bf16 (report §3.3.1): switching a run to fp8 must not speed its LM head GEMM, while the layers' GEMMs do."""
    from planner.cost import compute

    def head_and_gemm(precision: str) -> tuple[float, float]:
        p = Problem(load_model("llama3-70b"), load_cluster("h100x8"),
                    TrainingSpec(seq_len=8192, global_batch=8, precision=precision))
        r, tok, tp = compute.rates(p), np.array([8192.0]), np.array([1.0])
        return compute.head_time(p, r, tok, tp)[0], compute.gemm_time(p, r, tok, tp, tp)[0]

    (head_bf16, gemm_bf16), (head_fp8, gemm_fp8) = head_and_gemm("bf16"), head_and_gemm("fp8")
    assert head_fp8 == pytest.approx(head_bf16, rel=1e-9)
    assert gemm_fp8 < 0.75 * gemm_bf16


def test_few_tokens_per_micro_batch_stream_the_weights_and_the_fp32_gradient_accumulation():
    """Roofline (Williams et al. 2009): a layer's GEMMs cannot beat reading its weights once per pass, and the
    weight gradient is added into the fp32 main_grad buffer (read + write, 8 B per weight) every micro-batch.
    Llama 3 8B on H100, tp1, 128 tokens: 218M weights per layer -> 0.44 GB read per pass, 1.74 GB accumulated."""
    p = Problem(load_model("llama3-8b"), load_cluster("h100x8"), TrainingSpec(seq_len=8192, global_batch=8,
                                                                             framework="megatron-core"))
    r = compute.rates(p)
    one = np.array([1.0])
    weights = compute.local_layer_weights(p, one, one)[0]
    assert weights == flops.dense_layer_params(p.model)
    few = compute.layer_times(p, r, np.array([128.0]), one, one * 0, one)
    many = compute.layer_times(p, r, np.array([8192.0]), one, one * 0, one)
    assert few.wgrad[0] == pytest.approx(weights * 8.0 / r.hbm)  # memory-bound: the accumulate, not the FLOPs
    assert few.wgrad[0] > 3 * compute.gemm_time(p, r, np.array([128.0]), one, one)[0]
    assert many.wgrad[0] == pytest.approx(compute.gemm_time(p, r, np.array([8192.0]), one, one)[0])  # compute-bound


def test_catalog_sm_counts_set_the_collectives_share_of_the_gpu() -> None:
    """The catalog's SM counts (NVIDIA H100/Blackwell whitepapers, AMD CDNA 3) and the share of them a collective
    takes from overlapped compute, COLLECTIVE_SMS / SMs."""
    counts = {"a100": 108, "h100": 132, "h800": 132, "h200": 132, "b200": 148, "b300": 160, "gb200": 148,
              "gb300": 160, "mi300x": 304}
    for key, sms in counts.items():
        cluster = load_cluster(f"{key}x8")
        assert cluster.gpu.sm_count == sms
        assert comm.collective_sm_share(cluster) == pytest.approx(comm.COLLECTIVE_SMS / sms)


# --- torchtitan's op-level selective checkpointing re-runs half its matmuls ------------------------------------------
def test_unsaved_matmuls_are_every_other_one_in_call_order():
    """Llama 3 8B's block calls wq, wk, wv, wo, w1, w3, w2; op-level SAC keeps the 1st, 3rd, 5th and 7th outputs, so
    backward runs wk (h x kv), wo (q x h) and w3 (h x ffn) again: 2 x (4096·1024 + 4096·4096 + 4096·14336)."""
    m = load_model("llama3-8b")
    assert compute.unsaved_mm_flops(m) == 2.0 * (4096 * 1024 + 4096 * 4096 + 4096 * 14336)
    # about 37 % of the block's forward GEMM FLOPs: not a rounding error in a step
    assert 0.3 < compute.unsaved_mm_flops(m) / flops.token_flops(m, 8192).dense_gemm < 0.4


def _selective_extra(framework: str) -> tuple[float, float, float]:
    from planner.inputs.problem import Problem
    from planner.inputs.specs import TrainingSpec

    problem = Problem(load_model("llama3-8b"), load_cluster("h100x8"),
                      TrainingSpec(seq_len=8192, global_batch=8, framework=framework, torch_compile=True))
    one = np.array([1.0])
    tok = np.array([8192.0])
    r = compute.rates(problem)
    lt = compute.layer_times(problem, r, tok, one, 0 * one, one)
    sel = compute.recompute_time(problem, np.array([int(Recompute.SELECTIVE)]), lt, tok, one)[0]
    mm = tok[0] * compute.unsaved_mm_flops(problem.model) / (r.peak * r.eff)
    return sel, float(lt.elem_f[0]), mm


def test_op_level_selective_recompute_prices_the_rerun_matmuls():
    """torchtitan's selective recompute costs its elementwise ops and the unsaved matmuls; Megatron-Core's selective
    modules re-run memory-bound ops only."""
    sel, elem, mm = _selective_extra("torchtitan")
    assert sel == pytest.approx(elem + mm)
    assert mm > elem  # the matmuls are most of it
    sel_mc, elem_mc, _ = _selective_extra("megatron-core")
    assert sel_mc == pytest.approx(elem_mc)
