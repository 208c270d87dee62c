"""Step time, throughput, MFU and peak memory for a table of layouts (vectorised).

Assembly (per pipeline stage, per micro-batch):
  t_f = GEMMs/(peak*eff) + attention/(peak*eff_attn) + elementwise bytes/HBM + kernel launches + exposed TP/CP/EP
  t_b = 2x the GEMM and elementwise work, 2.5x attention (FlashAttention backward recomputes QK^T: 5 of 7 matmuls),
        plus recomputation (full: one more forward; selective: one more attention core; Korthikanti et al. 2022)
  step = m * (t_f + t_b)_slowest stage + bubble(schedule) + exposed DP reduction + optimizer update
MFU = model FLOPs (no recompute) / (step time * GPUs * dense BF16 peak)  (PaLM App. B; Megatron FLOP convention).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from planner.cost import comm, compression, flops, memory, schedule
from planner.cost.profiles import profile_for
from planner.inputs.hardware import FP8_GEMM_EFFICIENCY, HBM_EFFICIENCY, KERNEL_OVERHEAD_S, KERNELS_PER_LAYER_FWD
from planner.inputs.layout import HSDP, SEQ1F1B_SEGMENTS
from planner.inputs.problem import Problem

# Dropless MoE: the busiest expert-parallel rank receives more than the average k/E share of tokens and everyone
# waits for it. Factor on the routed-expert GEMM time, fitted on the MoE cases of validation/published_runs.yaml
# (bench/fit_profiles.py --moe); it lands where Switch Transformer's capacity factors do (Fedus et al. 2021 §2.2:
# 1.0-1.25 drops only ~1% of tokens, i.e. the busiest expert sees up to ~1.25x the mean load).
EXPERT_IMBALANCE = 1.2
# Dropless token dispatch copies the per-expert token counts to the host to size the grouped GEMMs (Megatron-Core
# MoEAlltoAllTokenDispatcher: tokens_per_expert.cpu()), stalling the GPU once per MoE layer and pass until the CPU has
# launched the following kernels again: eager PyTorch enqueues the layer's remaining ~50-100 ops at ~10 us each.
# Fitted together with EXPERT_IMBALANCE on the MoE cases (bench/fit_profiles.py --moe): 0.8 ms per layer and pass.
MOE_HOST_SYNC_S = 0.8e-3
# Adam step touches fp32 master, two moments (read+write, 24 B), reads the fp32 grad (4 B), writes bf16 params (2 B).
OPTIMIZER_BYTES_PER_PARAM = 30.0


def _elementwise_bytes_per_token(p: Problem) -> tuple[float, float, float]:
    """HBM traffic of the memory-bound kernels of one layer's forward, per token: (replicated, sharded, moe extra).

    Norms read+write h each (x2), residual adds read 2h write h (x2), RoPE reads+writes Q and K, the activation
    function reads its inputs and writes its output; 2 bytes per element. Under TP without SP the norm/residual part
    is repeated on every TP rank (Korthikanti et al. 2022 §4.2.2), which is why SP speeds layers up, not only memory.
    A MoE layer also permutes each token's k copies into expert order and back (read + write k·h twice; Megatron-Core
    moe_utils permute/unpermute) and runs a softmax/top-k over E router logits.
    """
    m = p.model
    h = m.hidden_size
    replicated = 2.0 * (2 * 2 * h + 2 * 3 * h)
    rope = 2.0 * 2 * (m.num_attention_heads + m.kv_heads) * m.d_head
    width = m.intermediate_size
    moe_extra = 0.0
    if m.is_moe:
        width = m.expert_ffn * (m.num_experts_per_tok + m.n_shared_experts)
        moe_extra = 2.0 * (2 * 2 * m.num_experts_per_tok * h) + 4.0 * 3 * m.num_local_experts
    act = 2.0 * (3 * width if m.gated_mlp else 2 * width)
    return replicated, rope + act, moe_extra


def _linear_io_widths(m) -> tuple[float, float]:
    """Sum of input and output widths of one layer's linear layers (per token), for fp8 cast traffic."""
    h, q = m.hidden_size, m.num_attention_heads * m.d_head
    kv = 2 * m.kv_heads * m.d_head
    width = m.intermediate_size
    if m.is_moe:
        width = m.expert_ffn * m.num_experts_per_tok
    up = (2 if m.gated_mlp else 1) * width
    return h + q + h + width, (q + kv) + h + up + h


def _expert_tp(c: Mapping[str, np.ndarray]) -> np.ndarray:
    """Expert tensor parallelism follows TP when EP fits in the data ranks; otherwise experts fold onto the TP ranks
    with ETP = 1 (Megatron-Core "MoE parallel folding", expert grid independent of the attention grid)."""
    tp, dp, cp, ep = (c[k].astype(float) for k in ("tp", "dp", "cp", "ep"))
    return np.where((dp * cp) % ep == 0, tp, 1.0)


def stage_params(problem: Problem, c: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Parameters one GPU of the busiest pipeline stage holds (before any ZeRO sharding).

    The busiest stage holds ceil(L/pp) layers (uneven splits via first/last-stage counts or a pipeline layout);
    the first stage adds the embedding, the last the LM head (and the tied embedding's copy).
    """
    m = problem.model
    tp, pp, ep = (c[k].astype(float) for k in ("tp", "pp", "ep"))
    etp = _expert_tp(c)
    frac_moe = m.moe_layers / m.num_hidden_layers
    dense_p = flops.dense_layer_params(m) / tp
    moe_shared_p = flops.moe_layer_shared_params(m) / tp if m.is_moe else 0.0
    experts_p = flops.expert_params(m) / (etp * ep) if m.is_moe else 0.0
    layers_per_stage = np.ceil(m.num_hidden_layers / pp)
    per_layer_p = (1 - frac_moe) * dense_p + frac_moe * (moe_shared_p + experts_p)
    emb_p = flops.embedding_params(m) / tp
    head_p = flops.lm_head_params(m) / tp
    first_p = layers_per_stage * per_layer_p + emb_p + np.where(pp == 1, head_p, 0.0)
    last_p = layers_per_stage * per_layer_p + np.where(pp == 1, emb_p, head_p + (emb_p if m.tie_word_embeddings else 0))
    return {"per_layer": per_layer_p, "layer_expert_part": frac_moe * experts_p, "first": first_p, "last": last_p,
            "stage": np.maximum(first_p, last_p), "embedding": emb_p, "layers_per_stage": layers_per_stage}


def sharding(problem: Problem, c: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(effective ZeRO stage 0-3, HSDP flag, shard group size) of each layout.

    HSDP (PyTorch HYBRID_SHARD; FSDP2 2-D mesh) is ZeRO-3 whose shard group is the data ranks tiling one NVLink
    domain; a profile whose stack always shards optimizer states runs "zero 0" as ZeRO-1.
    """
    prof = profile_for(problem.training.framework)
    hsdp = c["zero"] == HSDP
    zero = np.where(hsdp, 3, c["zero"])
    if prof.optimizer_always_sharded:
        zero = np.maximum(zero, 1)
    data_ranks = (c["dp"] * c["cp"]).astype(float)
    shard = np.where(hsdp, comm.domain_group(problem.cluster.nvlink_domain, c["tp"], c["dp"] * c["cp"]), data_ranks)
    return zero, hsdp, shard


def state_memory_floor_gib(problem: Problem, c: Mapping[str, np.ndarray]) -> np.ndarray:
    """A cheap lower bound on peak memory: model states alone (no activations, no reserve), with the layout's ZeRO
    sharding. The search drops layouts above capacity before pricing them in full; same accounting as `evaluate`."""
    zero, _, shard = sharding(problem, c)
    stage = stage_params(problem, c)["stage"]
    fp8 = problem.training.precision in ("fp8", "fp4")
    states = memory.state_bytes(stage, zero, shard, profile_for(problem.training.framework), fp8)
    return sum(states.values()) / memory.GIB


def evaluate(problem: Problem, c: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    m, cl, tr = problem.model, problem.cluster, problem.training
    gpu = cl.gpu
    prof = profile_for(tr.framework)
    fp8 = tr.precision in ("fp8", "fp4")
    tp, pp, dp, cp, ep = (c[k].astype(float) for k in ("tp", "pp", "dp", "cp", "ep"))
    vpp, mbs = c["vpp"].astype(float), c["mbs"].astype(float)
    rc, sp, sched = c["recompute"], c["sp"], c["schedule"]
    zero, hsdp, shard_group = sharding(problem, c)
    n_gpus = float(problem.num_gpus)
    s = float(tr.seq_len)
    micro = tr.global_batch / (mbs * dp)  # micro-batches per step per pipeline
    etp = _expert_tp(c)

    # --- compute per layer per micro-batch (forward) ------------------------------------------------------------
    tok = mbs * s / cp  # tokens each GPU processes per micro-batch
    tf = flops.token_flops(m, tr.seq_len)
    peak = gpu.peak_tflops(tr.precision) * 1e12
    base_eff = gpu.matmul_efficiency
    if fp8:
        base_eff = gpu.fp8_matmul_efficiency or gpu.matmul_efficiency * FP8_GEMM_EFFICIENCY
    eff = base_eff * prof.kernel_efficiency
    bf16_peak = gpu.bf16_tflops * 1e12
    hbm = gpu.hbm_tbps * 1e12 * HBM_EFFICIENCY
    frac_moe = m.moe_layers / m.num_hidden_layers
    routed = 2.0 * m.num_experts_per_tok * flops.mlp_params(m, m.expert_ffn) if m.is_moe else 0.0
    moe_layer = tf.moe_gemm + (EXPERT_IMBALANCE - 1) * routed
    gemm_flops = tok * ((1 - frac_moe) * tf.dense_gemm + frac_moe * moe_layer) / tp
    gemm_f = gemm_flops / (peak * eff)
    # Fused attention runs in bf16 even in fp8 recipes (Transformer Engine keeps DPA in bf16 by default).
    if prof.flash_attention:
        attn_f = tok * tf.attention / tp / (bf16_peak * gpu.attention_efficiency * prof.kernel_efficiency)
        attn_b = 2.5 * attn_f  # FlashAttention backward: 5 matmuls against the forward's 2 (Dao et al. 2022)
    else:
        # Unfused: QK^T and PV run as batched GEMMs over the full s x s scores (the causal mask is applied after),
        # and the scores go through HBM: write, scale-mask-softmax read+write, dropout read+write+mask, PV read,
        # ~13 bytes per score forward (Korthikanti et al. 2022 §4.1 count the 5 stored bytes of these).
        scores = tok * m.num_attention_heads * s / tp
        attn_f = 2 * tok * tf.attention / tp / (peak * eff) + 13.0 * scores / hbm
        attn_b = 2 * attn_f
    repl_b, shard_b, moe_b = _elementwise_bytes_per_token(problem)
    elem_bytes = tok * (np.where(sp == 1, repl_b / tp, repl_b) + shard_b / tp + frac_moe * moe_b / tp)
    elem_bytes_b = 2 * elem_bytes
    if fp8:  # Transformer Engine casts each GEMM operand: read 2 B, write 1 B, plus a 1 B transpose for backward
        w_in, w_out = _linear_io_widths(m)
        elem_bytes = elem_bytes + tok * 4.0 * w_in / tp
        elem_bytes_b = elem_bytes_b + tok * 4.0 * w_out / tp
    elem_f = elem_bytes / hbm
    launch_f = KERNEL_OVERHEAD_S * KERNELS_PER_LAYER_FWD
    if m.is_moe:  # grouped GEMM: each local expert's GEMMs pay a launch/tail (Megatron-Core GroupedMLP)
        launch_f = launch_f + frac_moe * (KERNEL_OVERHEAD_S * m.mlp_matrices * m.num_local_experts / ep
                                          + MOE_HOST_SYNC_S)
    layer_f = gemm_f + attn_f + elem_f + launch_f
    layer_w = gemm_f  # weight-gradient GEMMs
    layer_b = 2 * gemm_f + attn_b + elem_bytes_b / hbm + 2 * launch_f
    # Selective recompute: with unfused attention it is Korthikanti et al.'s (re-run the attention core); with fused
    # attention there is no s^2 state to drop, and Megatron-Core's selective modules re-run the memory-bound
    # norms and activation functions instead (`--recompute-modules layernorm mlp/moe_act`): one forward of them.
    selective_cost = elem_f if prof.flash_attention else attn_f
    recompute_b = np.where(rc == 2, layer_f, np.where(rc == 1, selective_cost, 0.0))

    # --- communication inside a layer ----------------------------------------------------------------------------
    act_bytes = tok * m.hidden_size * 2.0
    one = np.ones_like(tp)
    squeeze = compression.Squeezer(problem.compress, hbm)
    tp_coll = comm.all_reduce_time(squeeze.wire("tp", act_bytes), tp, one, cl) + squeeze.codec("tp", act_bytes)
    n_tp_coll = 4 + np.where(rc == 2, 2, 0)  # 2 fwd + 2 bwd (Narayanan et al. 2021 §3.2), +2 when recomputing
    tp_exposed = n_tp_coll * tp_coll * (1 - prof.tp_overlap)
    tp_exposed_f = 2 * tp_coll * (1 - prof.tp_overlap)
    kv_width = (m.kv_lora_rank + m.qk_rope_head_dim) if m.is_mla else 2 * m.kv_heads * m.d_head
    # Ring CP (Megatron, --cp-comm-type p2p): KV chunks circulate, overlapped with the attention of the previous
    # chunk (Liu et al. 2023, ring attention). All-to-all CP (DeepSpeed-Ulysses, --cp-comm-type a2a): QKV are
    # re-sharded from sequence to heads before attention and back after, 2 all-to-alls each way, not overlapped
    # (Jacobs et al. 2023, arXiv 2309.14509 §3).
    # Hybrid (USP; Megatron --cp-comm-type a2a+p2p with hierarchical sizes): all-to-all among the u CP ranks inside
    # one NVLink domain, ring among the cp/u domains (Fang & Zhao 2024, arXiv 2405.07719).
    cp_mode = c["cp_comm"] if "cp_comm" in c else np.zeros_like(c["tp"])
    u = np.where(cp_mode == 2, comm.domain_group(cl.nvlink_domain, c["tp"], c["cp"]), np.where(cp_mode == 1, cp, 1.0))
    r = cp / u  # ring length
    ring_bytes = r * tok * kv_width * 2.0 / tp  # KV chunks that pass through a GPU in one ring
    ring = comm.all_to_all_time(squeeze.wire("cp", ring_bytes), r, tp * u, cl) + squeeze.codec("cp", ring_bytes)
    ring_f = np.maximum(ring - attn_f, 0.0)
    ring_all = ring_f + np.maximum(2 * ring - attn_b, 0.0)
    q_width = m.num_attention_heads * (m.v_head_dim if m.is_mla else m.d_head)
    qkv_bytes = tok * (q_width + (kv_width if not m.is_mla else 2 * m.num_attention_heads * m.d_head)) * 2.0 / tp
    out_bytes = tok * q_width * 2.0 / tp
    a2a_cp = sum(comm.all_to_all_time(squeeze.wire("cp", b), u, tp, cl) + squeeze.codec("cp", b)
                 for b in (qkv_bytes, out_bytes))
    cp_exposed_f = ring_f + a2a_cp
    cp_exposed = ring_all + 2 * a2a_cp
    if m.is_moe:
        a2a_bytes = tok * m.num_experts_per_tok * m.hidden_size * 2.0 / tp
        a2a = (comm.all_to_all_time(squeeze.wire("ep", a2a_bytes), ep, etp, cl) + squeeze.codec("ep", a2a_bytes)) * (
            1 - prof.ep_overlap)
        ep_exposed = frac_moe * 4 * a2a
        ep_exposed_f = frac_moe * 2 * a2a
    else:
        ep_exposed = ep_exposed_f = np.zeros_like(tp)

    # --- parameters held per GPU ---------------------------------------------------------------------------------
    sp_ = stage_params(problem, c)
    per_layer_p, layer_expert_part = sp_["per_layer"], sp_["layer_expert_part"]
    first_p, last_p, stage_p = sp_["first"], sp_["last"], sp_["stage"]
    layers_per_stage = sp_["layers_per_stage"]
    data_ranks = dp * cp  # Megatron reduces dense grads over the dp x cp group
    expert_ranks = np.maximum(data_ranks * tp / (etp * ep), 1)

    # --- ZeRO-3 / FSDP: gather weights per layer per micro-batch, reduce-scatter grads ----------------------------
    # HSDP: per-layer gathers stay inside the shard group (one NVLink domain); only a per-step all-reduce of the
    # sharded gradients crosses domains.
    replicas = data_ranks / shard_group
    gathered = per_layer_p * 2.0  # gathered size of one layer's bf16 weights
    ag = comm.all_gather_time(squeeze.wire("dp", gathered), shard_group, tp, cl) + squeeze.codec("dp", gathered)
    grads = per_layer_p * prof.grad_reduce_bytes
    rs = comm.all_gather_time(squeeze.wire("dp", grads), shard_group, tp, cl) + squeeze.codec("dp", grads)
    z3 = zero == 3
    z3_exposed_f = np.where(z3, np.maximum(ag - layer_f, 0.0), 0.0)
    z3_exposed_b = np.where(z3, np.maximum(ag + rs - layer_b, 0.0), 0.0)

    # --- per micro-batch stage time ---------------------------------------------------------------------------------
    per_layer_f = layer_f + tp_exposed_f + cp_exposed_f + ep_exposed_f + z3_exposed_f
    per_layer_b = (layer_b + recompute_b + (tp_exposed - tp_exposed_f) + (cp_exposed - cp_exposed_f)
                   + (ep_exposed - ep_exposed_f) + z3_exposed_b)
    head_f = tok * tf.head / tp / (peak * eff) + tok * m.vocab_size * 6.0 / tp / (hbm)
    stage_f = layers_per_stage * per_layer_f + head_f
    stage_b = layers_per_stage * per_layer_b + 2 * head_f
    stage_w = layers_per_stage * layer_w + head_f
    # Pipeline hand-offs: one activation tensor per micro-batch each way (/tp with scatter-gather or SP);
    # interleaving sends v times as many (Narayanan et al. 2021 §4.1).
    pp_crosses = (n_gpus / pp) >= cl.nvlink_domain
    hand_off = act_bytes / np.where(sp == 1, tp, 1.0)
    p2p = np.where(pp > 1, comm.p2p_time(squeeze.wire("pp", hand_off), pp_crosses, cl) + squeeze.codec("pp", hand_off),
                   0.0)
    p2p_exposed = 2 * p2p * vpp
    t_mb = stage_f + stage_b + p2p_exposed
    bubble = schedule.bubble_time(sched, pp, vpp, stage_f + p2p, stage_b + p2p, stage_w, m=micro)
    # Seq1F1B runs every layer's kernels once per segment: k times the launches per micro-batch.
    seg_launch = np.where(sched == schedule.S_SEQ1F1B, (SEQ1F1B_SEGMENTS - 1) * 3 * launch_f * layers_per_stage, 0.0)
    t_mb = t_mb + seg_launch

    # --- data-parallel gradient reduction and optimizer --------------------------------------------------------------
    dense_local = stage_p - layers_per_stage * layer_expert_part
    expert_local = layers_per_stage * layer_expert_part
    dense_grads, expert_grads = dense_local * prof.grad_reduce_bytes, expert_local * prof.grad_reduce_bytes
    reduce_dense = (comm.all_reduce_time(squeeze.wire("dp", dense_grads), data_ranks, tp, cl)
                    + squeeze.codec("dp", dense_grads))
    reduce_exp = (comm.all_reduce_time(squeeze.wire("dp", expert_grads), expert_ranks, etp * ep, cl)
                  + squeeze.codec("dp", expert_grads))
    shard_grads = stage_p * prof.grad_reduce_bytes / shard_group
    hsdp_reduce = (comm.all_reduce_time(squeeze.wire("dp", shard_grads), replicas, tp * shard_group, cl)
                   + squeeze.codec("dp", shard_grads))
    dp_time = np.where(hsdp, hsdp_reduce, np.where(z3, 0.0, reduce_dense + reduce_exp))
    window = prof.dp_overlap * (stage_b + np.where(zero >= 1, stage_f, 0.0))
    dp_exposed = np.maximum(dp_time - window, 0.0)
    shard_for_optim = np.where(zero >= 1, shard_group, 1.0)
    optim_time = OPTIMIZER_BYTES_PER_PARAM * stage_p / shard_for_optim / (hbm)

    compute = micro * (layers_per_stage * (layer_f + layer_b + recompute_b) + 3 * head_f)
    step = micro * t_mb + bubble + dp_exposed + optim_time
    tokens = float(tr.global_batch) * s
    model_flops = flops.model_flops_per_token(m, tr.seq_len) * tokens
    mfu = model_flops / (step * n_gpus * bf16_peak)

    # --- memory on the busiest stage -------------------------------------------------------------------------------
    dropout = m.hidden_act.lower().startswith("gelu") and not m.gated_mlp  # GPT-style models train with dropout
    dense_act = memory.layer_activation_bytes_per_token(m, tp, sp, False, dropout, fp8)
    moe_act = memory.layer_activation_bytes_per_token(m, tp, sp, True, dropout, fp8) if m.is_moe else dense_act
    act_per_token = (1 - frac_moe) * dense_act + frac_moe * moe_act
    if not prof.flash_attention:  # softmax output, dropout mask and output: 5·a·s bytes per token (Korthikanti eq. 1)
        act_per_token = act_per_token + np.where(rc == 1, 0.0, 5.0 * m.num_attention_heads * s / tp)
    else:  # selective drops the norm outputs (QKV and fc1 inputs) and the activation output (fc2 input)
        gemm_in = 1.0 if fp8 else 2.0
        width = m.intermediate_size
        if m.is_moe:
            width = (1 - frac_moe) * m.intermediate_size + frac_moe * m.expert_ffn * (
                m.num_experts_per_tok + m.n_shared_experts)
        saved = np.where(sp == 1, 2 * gemm_in * m.hidden_size / tp, 2 * gemm_in * m.hidden_size) + gemm_in * width / tp
        act_per_token = act_per_token - np.where(rc == 1, saved, 0.0)
    layer_input = np.where(sp == 1, 2.0 * m.hidden_size / tp, 2.0 * m.hidden_size)
    per_layer_act = np.where(rc == 2, layer_input, act_per_token) * tok
    inflight = schedule.inflight_microbatches(sched, pp, vpp, np.floor(micro))
    acts_first = per_layer_act * layers_per_stage * inflight + np.where(rc == 2, act_per_token * tok, 0.0)
    acts_last = per_layer_act * layers_per_stage + np.where(rc == 2, act_per_token * tok, 0.0)
    logits = memory.logits_bytes(tok, m, tp)
    states_first = memory.state_bytes(first_p, zero, shard_group, prof, fp8)
    states_last = memory.state_bytes(last_p, zero, shard_group, prof, fp8)
    z3_buffer = np.where(z3, 2 * per_layer_p * 2.0 + per_layer_p * prof.grad_reduce_bytes, 0.0)
    total_first = sum(states_first.values()) + acts_first + np.where(pp == 1, logits, 0.0) + z3_buffer
    total_last = sum(states_last.values()) + acts_last + logits + z3_buffer
    first_is_peak = total_first >= total_last
    groups = sum((x > 1).astype(float) for x in (tp, pp, dp * cp, cp, ep))
    peak_alloc = np.maximum(total_first, total_last)
    reserve = memory.runtime_reserve(groups, peak_alloc)
    pick = lambda a, b: np.where(first_is_peak, a, b)  # noqa: E731
    return {
        "step_time_s": step,
        "tokens_per_s_per_gpu": tokens / (step * n_gpus),
        "mfu": mfu,
        "memory_peak_gib": (peak_alloc + reserve) / memory.GIB,
        # Peak of live tensors, what frameworks print (torch.cuda.max_memory_allocated; Megatron's "max allocated",
        # DeepSpeed's "Max_MA"); the device total above adds allocator slack, the CUDA context and NCCL buffers.
        "memory_allocated_gib": peak_alloc / memory.GIB,
        "num_microbatches": micro,
        "compute_s": compute,
        "exposed_comm_s": micro * (p2p_exposed + layers_per_stage * (
            tp_exposed + cp_exposed + ep_exposed + z3_exposed_f + z3_exposed_b)) + dp_exposed,
        "bubble_s": bubble,
        "stage_fwd_s": stage_f,  # one micro-batch through the busiest stage (for the timeline in `explain`)
        # forward + backward of one micro-batch on the first stage (layers; the embedding lookup is negligible) and
        # on the last stage (layers + LM head and loss), for the per-stage view in `explain`
        "first_stage_mb_s": np.where(pp > 1, layers_per_stage * (per_layer_f + per_layer_b), stage_f + stage_b),
        "last_stage_mb_s": stage_f + stage_b,
        "stage_bwd_s": stage_b,
        "stage_wgrad_s": stage_w,
        "p2p_s": p2p,
        "optimizer_s": optim_time,
        "tp_comm_s": micro * layers_per_stage * tp_exposed,
        "cp_comm_s": micro * layers_per_stage * cp_exposed,
        "ep_comm_s": micro * layers_per_stage * ep_exposed,
        "fsdp_comm_s": micro * layers_per_stage * (z3_exposed_f + z3_exposed_b),
        "pp_comm_s": micro * p2p_exposed,
        "dp_comm_s": dp_exposed,
        "recompute_s": micro * layers_per_stage * recompute_b,
        "mem_weights_gib": pick(states_first["weights"], states_last["weights"]) / memory.GIB,
        "mem_grads_gib": pick(states_first["grads"], states_last["grads"]) / memory.GIB,
        "mem_optimizer_gib": pick(states_first["optimizer"], states_last["optimizer"]) / memory.GIB,
        "mem_activations_gib": pick(acts_first, acts_last) / memory.GIB,
        "mem_logits_gib": pick(np.where(pp == 1, logits, 0.0), logits) / memory.GIB,
        "mem_reserve_gib": (reserve + z3_buffer) / memory.GIB,
        "mem_first_stage_gib": (total_first + reserve) / memory.GIB,
        "mem_last_stage_gib": (total_last + reserve) / memory.GIB,
    }
