"""Context parallelism and ZeRO-2 have a price (issue 11 items 1-2), checked against hand-worked numbers."""

import numpy as np
import pytest
from conftest import layout

from planner.cost import context, data
from planner.cost.compute import attention_length_factor, ring_length_factor
from planner.cost.fabric import Fabric
from planner.cost.profiles import profile_for
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.layout import CpComm, Zero
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec
from planner.search.search import price_layout


def test_attention_on_short_chunks_runs_slower_per_flop_as_fa3_measured():
    # FA3 (arXiv 2407.08608 Fig. 5): about 0.75x of the 16k-token rate at 512 tokens
    assert attention_length_factor(512) / attention_length_factor(16384) == pytest.approx(0.75, abs=0.02)
    assert attention_length_factor(8192) == pytest.approx(1.0)
    assert attention_length_factor(1024) < attention_length_factor(8192)


def test_narrow_heads_run_attention_slower_per_flop_as_fa3_measured():
    """FA3 (arXiv 2407.08608 Fig. 5, H100 BF16 forward at 16k tokens): d = 64 at 473/616 (causal) and 497/648
    (non-causal) of d = 128; d = 256 at 642/648, no faster. MLA's query/key width (192) counts as wide."""
    from planner.cost.compute import head_dim_factor

    llama = load_model("llama3-8b")  # d = 128
    assert head_dim_factor(llama) == 1.0
    assert head_dim_factor(llama.model_copy(update={"head_dim": 64})) == pytest.approx(473 / 616, abs=0.005)
    assert head_dim_factor(llama.model_copy(update={"head_dim": 64})) == pytest.approx(497 / 648, abs=0.005)
    assert head_dim_factor(llama.model_copy(update={"head_dim": 256})) == 1.0
    assert head_dim_factor(load_model("gpt-oss-120b")) == pytest.approx(0.767, abs=0.005)  # 64-wide heads
    assert head_dim_factor(load_model("deepseek-v3")) == 1.0


def test_narrow_heads_lengthen_the_attention_core_not_the_gemms():
    from dataclasses import replace as with_

    from planner.cost import compute

    wide = Problem(load_model("llama3-8b"), load_cluster("h100x8"), TrainingSpec(seq_len=8192))
    narrow = with_(wide, model=wide.model.model_copy(update={"head_dim": 64, "num_attention_heads": 64,
                                                             "num_key_value_heads": 16}))
    tok, one = np.array([8192.0]), np.array([1.0])
    r = compute.rates(wide)
    # the same score FLOPs (heads x head size kept), 1/0.767 the time
    f_wide, _ = compute.attention_time(wide, r, tok, one)
    f_narrow, _ = compute.attention_time(narrow, r, tok, one)
    assert f_narrow[0] / f_wide[0] == pytest.approx(1 / compute.head_dim_factor(narrow.model), rel=1e-6)


def test_sliding_window_kernels_run_on_the_window_length():
    """gpt-oss-120b at 4,096 tokens: 18 full-attention layers over the sequence and 18 sliding layers whose kernels
    loop over 128 keys; the cores' rate is their time-weighted mean, sum F / sum (F / f(L))."""
    from planner.cost import mixers
    from planner.cost.compute import kernel_length_factor

    m = load_model("gpt-oss-120b")
    assert m.mixer_kinds.count("sliding_attention") == 18 and m.sliding_window == 128
    full, window = (mixers.attention_core_flops(m, 4096, k) for k in ("full_attention", "sliding_attention"))
    expected = (full + window) / (full / attention_length_factor(4096) + window / attention_length_factor(128))
    assert kernel_length_factor(m, 4096) == pytest.approx(expected)
    assert kernel_length_factor(m, 4096) < attention_length_factor(4096)
    llama = load_model("llama3-8b")  # one kind: the plain length curve
    assert kernel_length_factor(llama, 8192, 4.0) == pytest.approx(ring_length_factor(8192, 4.0))


def test_ring_steps_run_on_half_blocks_of_the_load_balanced_split():
    """4,096 tokens on an 8-way ring: each rank holds 512 tokens as two 256-token chunks (Transformer Engine's
    load-balanced causal split); the diagonal step is causal over 512 tokens, the 7 others pair queries with
    256-token halves, each step 1/8 of the work: rate = 8 / (1/f(512) + 7/f(256))."""
    f512, f256 = attention_length_factor(512), attention_length_factor(256)
    assert ring_length_factor(4096, 8) == pytest.approx(8 / (1 / f512 + 7 / f256))
    assert ring_length_factor(4096, 8) < f512  # slower than pricing every step at s / cp tokens
    assert ring_length_factor(8192, 1) == pytest.approx(attention_length_factor(8192))  # no ring: one kernel
    # long contexts barely notice: 128k over 8 ranks leaves 8k-token halves
    assert ring_length_factor(131072, 8) == pytest.approx(attention_length_factor(16384), rel=0.01)


def test_ring_step_hand_worked():
    """8-way ring at tp=2 (16 GPUs, so it leaves the 8-GPU node), llama3-70b, 1024 tokens per GPU."""
    m, cl = load_model("llama3-70b"), load_cluster("h100x512")
    fab = Fabric(cl, {}, 3.35e12 * 0.85)
    tok, tp, u, r = (np.array([x]) for x in (1024.0, 2.0, 1.0, 8.0))
    block = 1024 * (2 * 8 * 128) * 2.0 / 2  # tokens x K+V width x bf16 / tp
    send = 8.4e-6 + block / (50e9 * 0.92)  # BASE_LATENCY + bytes / (NIC x efficiency): the ring leaves the node
    send_b = 8.4e-6 + 2 * block / (50e9 * 0.92)
    attn_f = np.array([1e-4])
    both, fwd = context.ring_exposed(m, fab, tok, tp, u, r, attn_f, 2.5 * attn_f)
    launches = 8 * 3 * 4e-6
    assert fwd[0] == pytest.approx(7 * max(send - 1e-4 / 8, 0) + launches)
    assert both[0] == pytest.approx(fwd[0] + 7 * max(send_b - 2.5e-4 / 8, 0) + launches)


def test_cp_variants_no_longer_tie_and_ring_across_nodes_costs():
    problem = Problem(load_model("llama3-70b"), load_cluster("h100x512"), TrainingSpec(seq_len=8192, global_batch=512))
    steps, cp_comm = [], []
    for cp in (2, 4, 8):
        met = price_layout(problem, layout(tp=8, cp=cp, dp=64 // cp, mbs=1, sp=1, zero=Zero.OPTIMIZER))
        steps.append(met["step_time_s"])
        cp_comm.append(met["cp_comm_s"])
    assert cp_comm[2] > cp_comm[1] > 0  # more, shorter ring steps: more exposed and more launches
    assert len({round(s, 6) for s in steps}) == 3, steps
    assert steps[2] > steps[0]


def test_ulysses_pays_its_all_to_alls():
    problem = Problem(load_model("llama3-8b"), load_cluster("h100x64"), TrainingSpec(seq_len=32768, global_batch=64))
    met = price_layout(problem, layout(cp=8, dp=8, cp_comm=CpComm.A2A))
    assert met["cp_comm_s"] > 0


def _deepspeed(gbs: int) -> Problem:
    return Problem(load_model("llama3-8b"), load_cluster("h100x64"),
                   TrainingSpec(seq_len=4096, global_batch=gbs, framework="deepspeed"))


def test_deepspeed_zero2_reduces_every_micro_batch_zero1_once():
    """DeepSpeed stage 2 reduce-scatters gradients at every micro-step (stage_1_and_2.py); stage 1 once per step."""
    lay = layout(dp=64, mbs=1)
    z2_one, z2_eight = (price_layout(_deepspeed(g), lay.replace(zero=Zero.GRADIENTS))["dp_comm_s"] for g in (64, 512))
    z1_one, z1_eight = (price_layout(_deepspeed(g), lay.replace(zero=Zero.OPTIMIZER))["dp_comm_s"] for g in (64, 512))
    assert z1_eight == pytest.approx(z1_one, rel=1e-9)  # one reduction per step, however many micro-batches
    assert z2_eight > z2_one


def test_zero2_hand_worked_per_micro_batch():
    problem = _deepspeed(512)
    prof = profile_for("deepspeed")
    fab = Fabric(problem.cluster, {}, 3.35e12 * 0.85)
    params = {"stage": np.array([8e9]), "layers_per_stage": np.array([32.0]), "held_layers": np.array([32.0]),
              "layer_expert_part": np.array([0.0])}
    ranks = (np.array([64.0]), np.array([64.0]))
    one = np.array([1.0])
    rs = fab.collective("reduce_scatter", np.array([8e9 * prof.grad_reduce_bytes]), ranks[0], one, "dp")
    ag = fab.collective("all_gather", np.array([8e9 * 2.0]), ranks[0], one, "dp")
    got = data.zero2_exposed(fab, prof, params, ranks, one, one, one, np.array([8.0]), np.array([0.1]),
                             np.array([0.2]))
    assert got[0] == pytest.approx(8 * max(rs[0] - 0.5 * 0.2, 0) + max(ag[0] - 0.5 * 0.1, 0))
