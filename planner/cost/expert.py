"""Mixture-of-experts terms: the busiest expert's extra load, grouped-GEMM launches, and the token all-to-all
(dispatch and combine) with the share of it the schedule hides. The host's time to issue a MoE layer is
planner.cost.host's.

One constant here is fitted on the MoE cases (the busiest rank's load imbalance): its value, meaning, range and fit
live in fitted.yaml, read through planner.cost.fitted.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from planner.cost import fitted, flops
from planner.cost.fabric import Fabric
from planner.cost.profiles import FrameworkProfile
from planner.inputs.hardware import KERNEL_OVERHEAD_S
from planner.inputs.layout import Schedule
from planner.inputs.specs import GPUSpec, ModelSpec, TrainingSpec

# While the all-to-all overlaps the other micro-batch's compute, its kernels occupy SMs the GEMMs then lack:
# DeepSeek-V3 dedicates 20 of H800's 132 SMs to dispatch/combine (report §3.2.2); DeepEP's example reserves 24.
COMM_SM_SHARE = 20 / 132
# Fp8 dispatch sends 1 byte per value plus one fp32 scale per 128 values (DeepSeek-V3 report §3.3.3, 1x128 tiles).
FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128


def busiest_rank_load(training: TrainingSpec, ep: np.ndarray | None = None) -> np.ndarray | float:
    """Routed tokens the busiest expert-parallel rank computes, in units of the even share k·tokens/E.

    Dropless: the fitted expert imbalance I of learned routing (fitted.yaml: the busiest rank gets more than the even
    k/E share and everyone waits for it; the same rank also receives and returns that many tokens in
    `a2a_pass_time`); 1 where the router is forced to balance (TrainingSpec.moe_force_balance: Megatron-Core's
    benchmarking switch hands every expert the same count, so every rank carries the mean). With a
    capacity factor c each expert keeps at most c times its share and drops the rest (Megatron-Core get_capacity,
    moe_utils.py), so min(I, c); padded to capacity every expert computes exactly c times its share, however the
    router spread the tokens (token_dispatcher.py drop_and_pad: num_tokens_per_local_expert = capacity x tp x ep).

    With `ep` given, a rank that holds every expert (EP 1) carries exactly the mean, whatever the router did: its
    tokens' k copies all stay on it, so no rank waits on a busier one (measured on one H100, bench/real_step.py
    --shape qwen3-30b-a3b-4l: the busiest of 128 experts got 3.7-6.4x the mean while the layer's time followed the
    total, bench/results/h100-2026-11-27-s11). Capacity still caps each expert there."""
    c = training.moe_capacity_factor
    imbalance = 1.0 if training.moe_force_balance else fitted.current().expert_imbalance
    if c is not None and training.moe_pad_to_capacity:
        load, single = c, c
    else:
        load = imbalance if c is None else min(imbalance, c)
        single = 1.0 if c is None else min(1.0, c)
    if ep is None:
        return load
    return np.where(np.asarray(ep) > 1, load, single)


def routed_memory_load(training: TrainingSpec) -> float:
    """Routed token copies whose activations a rank keeps, in units of the even share: the padded capacity buffers
    (c) when padded, else the mean share (1): dropless and unpadded capacity are priced at the average rank."""
    c = training.moe_capacity_factor
    return c if (c is not None and training.moe_pad_to_capacity) else 1.0


def dispatcher_profile(prof: FrameworkProfile, training: TrainingSpec) -> FrameworkProfile:
    """The profile the token exchange runs with. Token dropping runs on Megatron-Core's plain alltoall dispatcher:
    Megatron-Bridge's apply_moe_token_drop asserts it (training/utils/moe_token_drop.py), and megatron-core refuses
    padding with the DeepEP backend (transformer_config.py) - so no node-deduplicated, fp8-quantised dispatch. A run
    that names its dispatcher (TrainingSpec.moe_dispatcher, validate's knob) runs that one: alltoall sends every
    routed copy, flex (DeepEP / HybridEP) deduplicates per node."""
    if training.moe_capacity_factor is not None or training.moe_dispatcher == "alltoall":
        if prof.deepep or prof.fp8_dispatch:
            return replace(prof, deepep=False, fp8_dispatch=False)
        return prof
    if training.moe_dispatcher == "flex" and not prof.deepep:
        return replace(prof, deepep=True)
    return prof


def moe_layer_flops(m: ModelSpec, tf: flops.TokenFlops, load: np.ndarray | float) -> np.ndarray | float:
    """Forward GEMM FLOPs per token of a MoE layer as the busiest rank sees them:
    moe_gemm + (load - 1)·routed, routed = 2·k·(expert MLP params), load = `busiest_rank_load`."""
    routed = 2.0 * m.num_experts_per_tok * flops.mlp_params(m, m.expert_ffn) if m.is_moe else 0.0
    return tf.moe_gemm + (load - 1) * routed


# Grouped expert GEMMs run below the large-GEMM rate when each expert gets few tokens (short M per group): DeepGEMM
# (README @55ab91f, FP8 on H800; frontier_facts.md §F) measures masked grouped GEMMs at 815-932 TFLOP/s with 256
# tokens per expert and 925-1233 with 1024, against 1214-1346 for 4 groups of 8192. A saturating M / (M + M0) puts
# 256 at 0.68 and 1024 at 0.87 of 8192's rate with M0 = 125 tokens (the midpoints of those ranges); the catalog's
# GEMM efficiency is the large-shape rate, so the factor is normalised at 8192 tokens per expert.
# Measured on one H100 in bf16 (bench/grouped_gemm.py, bench/results/h100-2026-11-27), this curve misprices the
# expert-shape rates by a median 12 % (a soft weight-streaming roofline: 7 %); kept for now, and why, in
# docs/accuracy.md "Real hardware".
GROUPED_GEMM_HALF_TOKENS = 125.0
GROUPED_GEMM_REFERENCE_TOKENS = 8192.0


def tokens_per_expert(m: ModelSpec, tok: np.ndarray, tp: np.ndarray, ep: np.ndarray) -> np.ndarray:
    """Average tokens each local expert's GEMM sees: the EP group's tok/tp tokens x k copies spread over E experts
    and gathered onto E/ep per GPU, tok·k·ep/(tp·E) (expert TP keeps the token count and slices the width)."""
    return tok * m.num_experts_per_tok * ep / (np.maximum(tp, 1) * max(m.num_local_experts, 1))


def grouped_gemm_rate(m: ModelSpec, tok: np.ndarray, tp: np.ndarray, ep: np.ndarray) -> np.ndarray:
    """Rate of the routed-expert grouped GEMMs relative to the catalog's large-GEMM rate:
    (M / (M + M0)) / (M_ref / (M_ref + M0)), M = tokens per expert, capped at 1."""
    tpe = np.maximum(tokens_per_expert(m, tok, tp, ep), 1.0)
    ref = GROUPED_GEMM_REFERENCE_TOKENS / (GROUPED_GEMM_REFERENCE_TOKENS + GROUPED_GEMM_HALF_TOKENS)
    return np.minimum(tpe / (tpe + GROUPED_GEMM_HALF_TOKENS) / ref, 1.0)


# A GEMM tile also pays fixed work per output tile (pipeline fill, the epilogue's scaling and store) that a short
# contraction K amortises poorly: DeepGEMM's FP8 GEMMs at M = 4096 on H800 (README @55ab91f, "Normal GEMMs") run
# 751, 1125, 1168 and 1426 TFLOP/s at K = 512, 1536, 2048 and 16384 (N >= 7168), which K / (K + K0) fits with
# K0 = 500 tokens (466-534 from each pair with K = 16384). Dense layers contract over the hidden or FFN width (4k-16k:
# within a few % of the catalog's rate); a fine-grained expert contracts over its own narrow width in fc2's forward and
# fc1's input gradient, and over its few tokens in the weight gradient. Normalised at K = 8192, like the M curve.
GEMM_DEPTH_HALF = 500.0
GEMM_DEPTH_REFERENCE = 8192.0
# The fixed work per tile costs a fixed time, so the depth that amortises it grows with the tensor-core rate of one
# SM: K0 = 500 x (the precision's peak per SM) / (H800's FP8 peak per SM, 1979 TFLOP/s over 132 SMs). OpenXLA's
# measured default GEMM tables (xla/service/gpu/model/matmul_interpolator_data.h, sm_90 and sm_100, BF16, batch 2,
# M = 2048, N = 4096) bear it out: K0 fitted from K = 256 and 1024 against K = 4096 is 210-285 on H100 (BF16, half of
# H800's FP8 rate per SM: 250 predicted) and 520-550 on B200 (BF16 per SM 2.0x H100's: 505 predicted). A GPU the
# catalog gives no SM count keeps the measured 500.
H800_FP8_TFLOPS_PER_SM = 1979.0 / 132


def gemm_depth_half(gpu: GPUSpec, precision: str) -> float:
    """K0 of the depth curve on `gpu` at `precision` (see GEMM_DEPTH_HALF)."""
    if not gpu.sm_count:
        return GEMM_DEPTH_HALF
    return GEMM_DEPTH_HALF * gpu.peak_tflops(precision) / gpu.sm_count / H800_FP8_TFLOPS_PER_SM


def _depth_rate(k: np.ndarray | float, half: float = GEMM_DEPTH_HALF) -> np.ndarray:
    ref = GEMM_DEPTH_REFERENCE / (GEMM_DEPTH_REFERENCE + half)
    k = np.maximum(np.asarray(k, dtype=float), 1.0)
    return np.minimum(k / (k + half) / ref, 1.0)


def expert_depth_rate(m: ModelSpec, tok: np.ndarray, tp: np.ndarray, ep: np.ndarray,
                      half: float = GEMM_DEPTH_HALF) -> np.ndarray:
    """Rate of the routed experts' GEMMs from their contraction depths, relative to the catalog rate, averaged over
    the forward, input-gradient and weight-gradient passes (equal FLOPs each): forward fc1 over the expert input
    width, fc2 over the expert width; input gradients fc1 over its output width (matrices - 1 expert widths),
    fc2 over the expert input width; weight gradients over the tokens per expert. Each pass's time is the FLOP-
    weighted sum of its GEMMs' times (fc1 carries matrices - 1 of the matrices), so the rate is their harmonic mean."""
    h_in = float(m.moe_latent_size or m.hidden_size)
    ffn = float(m.expert_ffn)
    up = float(max(m.mlp_matrices - 1, 1))
    total = float(m.mlp_matrices)

    def pass_time(k_fc1: float | np.ndarray, k_fc2: float | np.ndarray) -> np.ndarray:
        return (up / _depth_rate(k_fc1, half) + 1.0 / _depth_rate(k_fc2, half)) / total

    tpe = tokens_per_expert(m, tok, tp, ep)
    time = pass_time(h_in, ffn) + pass_time(up * ffn, h_in) + pass_time(tpe, tpe)
    return 3.0 / time


def moe_launch_time(m: ModelSpec, ep: np.ndarray, extra_kernels: float = 0.0, grouped: bool = False) -> np.ndarray:
    """GPU-side launch gaps per average layer and pass: f_moe·launch·(matrices·E/ep + extra) (Megatron-Core's
    Transformer Engine GroupedLinear, one GEMM launch and tail per local expert; `extra`: the router's, dispatcher's
    and experts' other kernels, planner.cost.host.moe_extra_kernels); f_moe·launch·(matrices + extra) where one
    grouped-GEMM kernel runs every local expert (`grouped`, FrameworkProfile.grouped_expert_gemm). The host's time to
    issue them is planner.cost.host's."""
    frac_moe = m.moe_layers / m.num_hidden_layers
    per_matrix = np.ones_like(np.asarray(ep, dtype=float)) if grouped else m.num_local_experts / ep
    return frac_moe * KERNEL_OVERHEAD_S * (m.mlp_matrices * per_matrix + extra_kernels)


def moe_block_time(m: ModelSpec, training: TrainingSpec, tok: np.ndarray, tp: np.ndarray, ep: np.ndarray,
                   gemm_rate: float, hbm: float, moe_bytes: float, depth_half: float = GEMM_DEPTH_HALF,
                   grouped: bool = False) -> np.ndarray:
    """Forward GPU time of an average layer's MoE block (router, routed and shared experts, the permutations and the
    grouped GEMMs' launches): f_moe·tok·((router/shared GEMMs + load·routed/grouped rate)/gemm_rate + (permutation
    bytes `moe_bytes` + activation bytes)/hbm)/tp + launches. Combined 1F1B schedules the attention and the MoE block
    of two micro-batches against the all-to-alls (`combined_pair_time`)."""
    if not m.is_moe:
        return np.zeros_like(tok)
    frac_moe = m.moe_layers / m.num_hidden_layers
    rate = grouped_gemm_rate(m, tok, tp, ep) * expert_depth_rate(m, tok, tp, ep, depth_half)
    gemm = flops.moe_mlp_shared_gemm(m) + busiest_rank_load(training, ep) * flops.routed_flops(m) / rate
    act = 2.0 * (3 if m.gated_mlp else 2) * m.expert_ffn * (m.num_experts_per_tok + m.n_shared_experts)
    return frac_moe * tok * (gemm / gemm_rate + (moe_bytes + act) / hbm) / tp + moe_launch_time(m, ep, grouped=grouped)


def domains_reached(m: ModelSpec, domains: np.ndarray) -> np.ndarray:
    """Expected NVLink domains (nodes) one token's k routed experts land in, over the D domains of its EP group.

    Uniform routing: D·(1 - (1 - 1/D)^k). Group-limited routing (DeepSeek-V3 `n_group` / `topk_group`, Megatron
    `--moe-router-num-groups` / `--moe-router-group-topk`; report §2.1.2 "node-limited routing", M = 4 nodes) caps
    it at topk_group groups, i.e. topk_group·D/n_group domains when the groups tile the domains.
    """
    d = np.maximum(np.asarray(domains, dtype=float), 1.0)
    k = float(max(m.num_experts_per_tok, 1))
    uniform = d * (1.0 - (1.0 - 1.0 / d) ** k)
    n_group, topk_group = getattr(m, "n_group", 0) or 0, getattr(m, "topk_group", 0) or 0
    if n_group and topk_group:
        uniform = np.minimum(uniform, topk_group * np.maximum(d / n_group, 1.0))
    return np.minimum(uniform, d)


def domain_load(load: np.ndarray | float, ranks: np.ndarray) -> np.ndarray:
    """Tokens the busiest NVLink domain receives over the network, in units of the even share, when its busiest rank
    receives `load` times the even share: node-deduplicated kernels (DeepEP normal kernels) send a token to the
    same-index GPU of each remote domain it is routed to, so one GPU's network receive carries its whole domain's
    tokens, split evenly over the domain's g local indices. The domain averages its g ranks' loads; with the ranks'
    excess loads independent the busiest domain's excess is at most the busiest rank's over sqrt(g),
    1 + (load - 1)/sqrt(g) (the maximum over fewer, larger groups is smaller again, so this is an upper bound)."""
    return 1.0 + (load - 1.0) / np.sqrt(np.maximum(np.asarray(ranks, dtype=float), 1.0))


def a2a_parts(m: ModelSpec, fab: Fabric, prof: FrameworkProfile, tok: np.ndarray, tp: np.ndarray,
              ep: np.ndarray, etp: np.ndarray, fp8: bool, load: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """(dispatch, combine) of one pass of one MoE layer (`a2a_pass_time` is their sum)."""
    tokens = tok / tp
    dispatch_elt = FP8_DISPATCH_BYTES if (fp8 and prof.fp8_dispatch) else 2.0
    copies = load * tokens * m.num_experts_per_tok * m.hidden_size
    if not prof.deepep:
        return (fab.collective("all_to_all", copies * dispatch_elt, ep, etp, "ep"),
                fab.collective("all_to_all", copies * 2.0, ep, etp, "ep"))
    g = np.minimum(np.maximum(fab.cluster.nvlink_domain // np.maximum(etp, 1), 1), ep)
    domains = np.maximum(ep / g, 1.0)
    remote = domains_reached(m, domains) * (domains - 1) / domains
    per_remote = domain_load(load, g) * tokens * m.hidden_size * remote
    return (fab.routed_all_to_all(copies * dispatch_elt, per_remote * dispatch_elt, ep, etp, "ep"),
            fab.routed_all_to_all(copies * 2.0, per_remote * 2.0, ep, etp, "ep"))


def nic_bytes_per_pass(m: ModelSpec, fab: Fabric, prof: FrameworkProfile, tok: np.ndarray, tp: np.ndarray,
                       ep: np.ndarray, etp: np.ndarray, fp8: bool, load: np.ndarray | float) -> np.ndarray:
    """Bytes one GPU's NIC carries each way in one pass of one MoE layer (dispatch + combine): the routed copies bound
    for expert ranks outside its NVLink domain, (ep - g)/ep of its k copies under uniform routing with a plain
    all-to-all, or one copy per remote domain reached with node-deduplicated kernels (`a2a_parts`); g the EP ranks
    one domain holds. 0 where the EP group fits in one domain. What the NIC carries also crosses the GPU's PCIe link
    on x86 nodes (planner.cost.activation_offload.nic_busy)."""
    tokens = tok / tp
    elt = (FP8_DISPATCH_BYTES if (fp8 and prof.fp8_dispatch) else 2.0) + 2.0  # dispatch, then the bf16 combine
    g = np.minimum(np.maximum(fab.cluster.nvlink_domain // np.maximum(etp, 1), 1), ep)
    domains = np.maximum(ep / g, 1.0)
    if prof.deepep:
        remote = domain_load(load, g) * tokens * m.hidden_size * domains_reached(m, domains) * (domains - 1) / domains
    else:
        remote = load * tokens * m.num_experts_per_tok * m.hidden_size * (ep - g) / np.maximum(ep, 1)
    return np.where(domains > 1, remote * elt, 0.0)


def a2a_pass_time(m: ModelSpec, fab: Fabric, prof: FrameworkProfile, tok: np.ndarray, tp: np.ndarray,
                  ep: np.ndarray, etp: np.ndarray, fp8: bool, load: np.ndarray | float) -> np.ndarray:
    """Dispatch + combine of one pass (forward or backward) of one MoE layer: each GPU's tok/tp tokens, k copies of
    h values each, received (dispatch) and sent back (combine) by the busiest rank at `load` times the mean
    (`busiest_rank_load`; padded capacity buffers travel whole): the exchange ends when that rank's share has crossed
    its links, as its grouped GEMMs wait for that share.
    Dispatch carries fp8 where the stack quantises it, combine bf16. A plain all-to-all (Megatron's alltoall
    dispatcher) sends every copy; node-deduplicated kernels (DeepEP) send a token once per remote domain and forward
    its copies over NVLink (planner.cost.fabric.routed_all_to_all_time)."""
    dispatch, combine = a2a_parts(m, fab, prof, tok, tp, ep, etp, fp8, load)
    return dispatch + combine


def overlapped_share(schedule: np.ndarray, micro: np.ndarray, pp: np.ndarray, vpp: np.ndarray) -> np.ndarray:
    """Share of micro-batch passes that run paired with another micro-batch's opposite pass.

    Combined 1F1B (Megatron-Core combined_1f1b.py): every chunk after the warm-up (2(p-1) + (v-1)p + 1 chunks on
    the first rank, none without a pipeline but the first forward) pairs with a backward. DualPipe
    (deepseek-ai/DualPipe dualpipe.py step()): on a rank h ranks from the nearer edge, step 4 runs
    m/2 - p + h + 1 iterations of two overlapped forward-backward chunks and step 5 p/2 - h - 1 more, so
    m - 1.5p + h + 1 of its m forwards pair; the edge ranks (h = 0, which also hold the embedding and the head) pair
    the fewest, m - 1.5p + 1. DualPipe-V: all but p warm-up and cool-down chunks. Other schedules: 0.
    """
    chunks = micro * np.maximum(vpp, 1)
    warm = np.where(pp > 1, 2 * (pp - 1) + (np.maximum(vpp, 1) - 1) * pp + 1, 1.0)
    combined = np.clip((chunks - warm) / np.maximum(chunks, 1), 0.0, 1.0)
    dual = np.clip((micro - 1.5 * pp + 1) / np.maximum(micro, 1), 0.0, 1.0)
    dual_v = np.clip((micro - pp) / np.maximum(micro, 1), 0.0, 1.0)
    return np.where(schedule == Schedule.COMBINED_1F1B, combined, np.where(
        schedule == Schedule.DUALPIPE, dual, np.where(schedule == Schedule.DUALPIPE_V, dual_v, 0.0)))


def combined_pair_time(attn_f: np.ndarray, moe_f: np.ndarray, attn_b: np.ndarray, moe_b: np.ndarray,
                       dispatch: np.ndarray, combine: np.ndarray) -> np.ndarray:
    """One layer's forward of one micro-batch and backward of another as Megatron-Core's combined 1F1B runs them
    (models/common/model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run): the communication stream runs
    combine_bwd | dispatch_fwd -> dispatch_bwd | combine_fwd while the computation stream runs attn_fwd |
    mlp_bwd -> mlp_bwd_dw -> mlp_fwd | attn_bwd, each op waiting for the one whose output it reads (dispatch_fwd
    for attn_fwd, mlp_bwd for combine_bwd, dispatch_bwd for mlp_bwd, mlp_fwd for dispatch_fwd, combine_fwd for
    mlp_fwd, attn_bwd for dispatch_bwd). `moe_b` is split evenly into the input gradient and the delayed weight
    gradient (delay_wgrad_compute). The pair ends when both streams have."""
    attn_done = attn_f
    combine_b_done = combine
    start = np.maximum(attn_done, combine_b_done)
    mlp_b_done = np.maximum(attn_done, combine_b_done) + 0.5 * moe_b
    dispatch_f_done = start + dispatch
    mlp_dw_done = mlp_b_done + 0.5 * moe_b
    dispatch_b_done = np.maximum(dispatch_f_done, mlp_b_done) + dispatch
    mlp_f_done = np.maximum(mlp_dw_done, dispatch_f_done) + moe_f
    combine_f_done = np.maximum(dispatch_b_done, mlp_f_done) + combine
    attn_b_done = np.maximum(mlp_f_done, dispatch_b_done) + attn_b
    return np.maximum(combine_f_done, attn_b_done)


def dispatch_exposed(m: ModelSpec, fab: Fabric, prof: FrameworkProfile, tok: np.ndarray, tp: np.ndarray,
                     ep: np.ndarray, etp: np.ndarray, fp8: bool, share: np.ndarray | float = 0.0,
                     pair_compute: np.ndarray | float = 0.0,
                     load: np.ndarray | float | None = None,
                     combined: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(forward + backward, forward) exposed all-to-all per average layer and micro-batch.

    A = a2a forward + backward (2 x `a2a_pass_time`). Unpaired passes expose all of it. A paired pass runs the
    communication kernels beside the other micro-batch's layer compute C (forward + backward kernels): they take a
    share σ of the SMs, enough to keep pace, σ = COMM_SM_SHARE·min(A/C, 1) (the share that saturates the links when
    A = C, DeepSeek-V3's 1:1 case), so the compute stretches to C/(1 - σ). DualPipe's hand-tuned chunks hide all
    they can, the pair takes max(A, C/(1 - σ)); Megatron-Core's combined 1F1B (`combined`: (is-combined mask, layer
    forward, layer backward, MoE block forward) per average layer) runs its fixed order of the layer's four parts
    (`combined_pair_time`). exposed = (1 - s)·A + s·(pair - C), s = `overlapped_share`. `load`:
    `busiest_rank_load`, the dropless fitted imbalance when not given.
    """
    if not m.is_moe:
        return np.zeros_like(tp), np.zeros_like(tp)
    frac_moe = m.moe_layers / m.num_hidden_layers
    if load is None:
        load = fitted.current().expert_imbalance
    dispatch, combine = a2a_parts(m, fab, prof, tok, tp, ep, etp, fp8, load)
    a2a = 2.0 * (dispatch + combine)
    compute = np.maximum(pair_compute, 1e-12)
    sm_share = COMM_SM_SHARE * np.minimum(frac_moe * a2a / compute, 1.0)
    stretch = 1.0 / (1.0 - sm_share)
    pair = np.maximum(frac_moe * a2a, pair_compute * stretch)
    if combined is not None:
        mask, fwd, bwd, moe_f = combined
        moe_f = np.minimum(moe_f, fwd)
        moe_b = np.minimum(2.0 * moe_f, bwd)
        ordered = combined_pair_time((fwd - moe_f) * stretch, moe_f * stretch, (bwd - moe_b) * stretch,
                                     moe_b * stretch, frac_moe * dispatch, frac_moe * combine)
        pair = np.where(mask, ordered, pair)
    hidden = np.maximum(pair - pair_compute, 0.0)
    exposed = (1.0 - share) * frac_moe * a2a + share * hidden
    return exposed, 0.5 * exposed


def ep_comm_time(micro: np.ndarray, layers: np.ndarray, per_layer: np.ndarray) -> np.ndarray:
    """ep_comm_s: exposed EP per step on the busiest stage, m·L·(dispatch_exposed per average layer: the MoE
    layers' dispatch + combine all-to-alls not hidden by paired micro-batches) (DeepSeek-V3 report §3.2)."""
    return micro * layers * per_layer
