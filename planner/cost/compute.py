"""Kernel time of one layer per micro-batch on one GPU: GEMMs, attention, memory-bound elementwise work, launches.

  t_f = GEMMs/(peak*eff) + attention/(peak*eff_attn) + elementwise bytes/HBM + kernel launches
  t_b = 2x the GEMM and elementwise work, 2.5x attention (FlashAttention backward recomputes QK^T: 5 of 7 matmuls),
  recompute: full = one more forward; selective = one more attention core (Korthikanti et al. 2022)
MFU = model FLOPs (no recompute) / (step time * GPUs * dense BF16 peak)  (PaLM App. B; Megatron FLOP convention).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cost import expert, flops, host
from planner.cost.attention_rate import (  # noqa: F401  (re-exported: the attention rates' older home)
    all_tiles_factor,
    attention_length_factor,
    head_dim_factor,
    kernel_length_factor,
    ring_length_factor,
)
from planner.cost.profiles import fused_attention, kernel_efficiency, profile_for, sink_attention_all_tiles
from planner.inputs.hardware import (
    FP4_OVER_FP8_KERNEL_RATE,
    FP8_CAST_BYTES,
    FP8_GEMM_EFFICIENCY,
    HBM_EFFICIENCY,
    KERNEL_OVERHEAD_S,
    KERNELS_PER_LAYER_FWD,
    NVFP4_CAST_BYTES,
)
from planner.inputs.layout import Recompute, Schedule
from planner.inputs.problem import Problem
from planner.inputs.specs import GPUSpec, ModelSpec


def is_fp8(problem: Problem) -> bool:
    """fp8 and fp4 recipes both cast GEMM operands to 8 bits (Transformer Engine)."""
    return problem.training.precision in ("fp8", "fp4")


@dataclass(frozen=True)
class Rates:
    """Achieved rates of one GPU under the framework profile."""

    peak: float  # FLOP/s of the training precision
    eff: float  # GEMM efficiency x the profile's kernel efficiency
    bf16_peak: float  # dense BF16 FLOP/s (attention runs in bf16; the MFU denominator)
    hbm: float  # achievable HBM bytes/s
    bf16_eff: float  # BF16 GEMM efficiency x kernel efficiency (GEMMs a low-precision recipe leaves in BF16)


def gemm_efficiency(gpu: GPUSpec, precision: str, fp8_recipe: str = "tensorwise") -> float:
    """Best-case GEMM efficiency at the precision's own peak: BF16 MAMF; FP8 MAMF (or BF16 x the fallback ratio),
    or with block scales on a GPU that promotes them on CUDA cores its measured block-scaled rate
    (GPUSpec.fp8_blockwise_matmul_efficiency, DeepGEMM on Hopper); NVFP4: the FP8 one, capped at
    FP4_OVER_FP8_KERNEL_RATE x the FP8 rate, eff8·min(1, 1.90·peak8/peak4) (Transformer Engine's B300 kernels). A GPU
    without an FP4 peak runs fp4 recipes at its FP8 peak and FP8 efficiency."""
    fp8 = gpu.fp8_matmul_efficiency or gpu.matmul_efficiency * FP8_GEMM_EFFICIENCY
    if precision == "fp8" and fp8_recipe == "blockwise" and gpu.fp8_blockwise_matmul_efficiency:
        fp8 = gpu.fp8_blockwise_matmul_efficiency
    if precision == "fp4" and gpu.fp4_tflops:
        cap = FP4_OVER_FP8_KERNEL_RATE * (gpu.fp8_tflops or gpu.bf16_tflops) / gpu.fp4_tflops
        return fp8 * min(1.0, cap)
    return fp8 if precision in ("fp8", "fp4") else gpu.matmul_efficiency


def rates(problem: Problem) -> Rates:
    gpu, tr = problem.cluster.gpu, problem.training
    kernel = kernel_efficiency(tr)
    eff = gemm_efficiency(gpu, tr.precision, tr.fp8_recipe) * kernel
    return Rates(peak=gpu.peak_tflops(tr.precision) * 1e12, eff=eff,
                 bf16_peak=gpu.bf16_tflops * 1e12, hbm=gpu.hbm_tbps * 1e12 * HBM_EFFICIENCY,
                 bf16_eff=gpu.matmul_efficiency * kernel)


def cast_bytes(gpu: GPUSpec, precision: str) -> float:
    """HBM bytes per element of quantising one GEMM operand: FP8_CAST_BYTES, NVFP4_CAST_BYTES on a GPU with FP4
    tensor cores (elsewhere an fp4 recipe runs as fp8, see `gemm_efficiency`), 0 in bf16."""
    if precision == "fp4" and gpu.fp4_tflops:
        return NVFP4_CAST_BYTES
    return FP8_CAST_BYTES if precision in ("fp8", "fp4") else 0.0


def tokens_per_gpu(mbs: np.ndarray, seq_len: float, cp: np.ndarray) -> np.ndarray:
    """Tokens each GPU processes per micro-batch: mbs·s/cp."""
    return mbs * seq_len / cp


def moe_fraction(m: ModelSpec) -> float:
    """Share of the layers that are MoE layers."""
    return m.moe_layers / m.num_hidden_layers


def elementwise_bytes_per_token(m: ModelSpec) -> tuple[float, float, float]:
    """HBM traffic of the memory-bound kernels of one layer's forward, per token: (replicated, sharded, moe extra).

    Norms read+write h each (x2), residual adds read 2h write h (x2), RoPE reads+writes Q and K, the activation
    function reads its inputs and writes its output; 2 bytes per element. Under TP without SP the norm/residual part
    is repeated on every TP rank (Korthikanti et al. 2022 §4.2.2), which is why SP speeds layers up, not only memory.
    A MoE layer also permutes each token's k copies into expert order and back (read + write k·h twice; Megatron-Core
    moe_utils permute/unpermute) and runs a softmax/top-k over E router logits. Biased experts (gpt-oss) add fc2's
    bias per expert outside the GEMM (TEGroupedMLP._apply_bias at NVIDIA/Megatron-LM@3bec9aa97: t + b·p per expert's
    chunk, then torch.cat): each routed copy's output read and written, then copied by the concatenation, 8·h bytes.
    gpt-oss's gated activation itself is Megatron-Core's fused bias-GeGLU kernel (the same bytes as SwiGLU's); its
    clamp runs before it as separate kernels (`clamped_glu_bytes_per_token`). Its attention sinks are one logit per
    head inside the fused attention's softmax (cuDNN's softmax_type learnable; Transformer Engine runs no other kernel
    for them).
    """
    h = m.hidden_size
    replicated = 2.0 * (2 * 2 * h + 2 * 3 * h)
    rope = 2.0 * 2 * (m.num_attention_heads + m.kv_heads) * m.d_head
    width = m.intermediate_size
    moe_extra = 0.0
    if m.is_moe:
        width = m.expert_ffn * (m.num_experts_per_tok + m.n_shared_experts)
        moe_extra = 2.0 * (2 * 2 * m.num_experts_per_tok * h) + 4.0 * 3 * m.num_local_experts
        if m.mlp_bias:
            moe_extra += 8.0 * m.num_experts_per_tok * h
    act = 2.0 * (3 * width if m.gated_mlp else 2 * width)
    return replicated, rope + act, moe_extra


def clamped_glu_bytes_per_token(m: ModelSpec) -> tuple[float, float]:
    """(forward, backward) HBM bytes per token of clamping a gated expert activation's inputs outside its fused
    kernel (gpt-oss's swiglu_limit; 0 without one). Megatron-Core clamps the fc1 output's two halves and concatenates
    them before the fused bias-GeGLU (weighted_bias_quick_geglu_impl at NVIDIA/Megatron-LM@3bec9aa97,
    megatron/core/fusions/fused_bias_geglu.py L424-L432: chunk, two clamps, torch.cat), as Hugging Face's
    GptOssExperts does in eager code. Per routed copy of width 2f (f = expert_ffn), 2 bytes an element: forward, each
    clamp reads and writes its half (4f elements) and the concatenation reads and writes both (4f), 16f bytes;
    backward, each clamp's gradient reads the gradient and the saved input and writes one (6f elements) and the two
    halves are concatenated into fc1's output gradient (4f), 20f bytes."""
    if not (m.is_moe and m.swiglu_limit):
        return 0.0, 0.0
    copies = m.num_experts_per_tok * m.expert_ffn
    return 16.0 * copies, 20.0 * copies


def linear_io_widths(m: ModelSpec) -> tuple[float, float]:
    """Sum of input and output widths of one layer's linear layers (per token), for fp8 cast traffic."""
    h, q = m.hidden_size, m.num_attention_heads * m.d_head
    kv = 2 * m.kv_heads * m.d_head
    width = m.intermediate_size
    if m.is_moe:
        width = m.expert_ffn * m.num_experts_per_tok
    up = (2 if m.gated_mlp else 1) * width
    return h + q + h + width, (q + kv) + h + up + h


def gemm_time(problem: Problem, r: Rates, tok: np.ndarray, tp: np.ndarray, ep: np.ndarray) -> np.ndarray:
    """Forward GEMMs of an average layer: tok·((1-f_moe)·dense + f_moe·moe)/tp / (peak·eff); the MoE share carries
    the busiest expert's extra load, and its routed-expert part runs at the grouped-GEMM rate of its tokens per
    expert and its contraction depths (planner.cost.expert)."""
    m = problem.model
    tf = flops.token_flops(m, problem.training.seq_len)
    frac_moe = moe_fraction(m)
    load = expert.busiest_rank_load(problem.training, ep)
    moe_layer = expert.moe_layer_flops(m, tf, load)
    if m.is_moe:
        routed = load * flops.routed_flops(m)
        half = expert.gemm_depth_half(problem.cluster.gpu, problem.training.precision)
        slow = 1.0 / (expert.grouped_gemm_rate(m, tok, tp, ep) * expert.expert_depth_rate(m, tok, tp, ep, half)) - 1.0
        moe_layer = moe_layer + routed * slow
    gemm_flops = tok * ((1 - frac_moe) * tf.dense_gemm + frac_moe * moe_layer) / tp
    return gemm_flops / (r.peak * r.eff)


def attention_time(problem: Problem, r: Rates, tok: np.ndarray, tp: np.ndarray,
                   ring: np.ndarray | float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) time of one layer's attention core; `ring` is the ring context-parallel size (its steps
    run shorter kernels, ring_length_factor), and narrow heads run below the d = 128 rate (head_dim_factor). Attention
    with learnable sinks on a stack that runs it through cuDNN's composite graph computes every score tile
    (profiles.sink_attention_all_tiles, all_tiles_factor)."""
    m, gpu, s = problem.model, problem.cluster.gpu, float(problem.training.seq_len)
    tf = flops.token_flops(m, problem.training.seq_len)
    # Fused attention runs in bf16 even in fp8 recipes (Transformer Engine keeps DPA in bf16 by default).
    if fused_attention(problem.training):
        length = kernel_length_factor(m, problem.training.seq_len, ring) * head_dim_factor(m, gpu)
        kernel = kernel_efficiency(problem.training)
        attn_f = tok * tf.attention / tp / (r.bf16_peak * gpu.attention_efficiency * kernel * length)
        if sink_attention_all_tiles(problem.training, m):
            attn_f = attn_f * all_tiles_factor(m, problem.training.seq_len, ring)
        attn_b = 2.5 * attn_f  # FlashAttention backward: 5 matmuls against the forward's 2 (Dao et al. 2022)
    else:
        # Unfused: QK^T and PV run as batched GEMMs over the full s x s scores (the causal mask is applied after),
        # and the scores go through HBM: write, scale-mask-softmax read+write, dropout read+write+mask, PV read,
        # ~13 bytes per score forward (Korthikanti et al. 2022 §4.1 count the 5 stored bytes of these).
        scores = tok * m.num_attention_heads * s / tp
        attn_f = 2 * tok * tf.attention / tp / (r.peak * r.eff) + 13.0 * scores / r.hbm
        attn_b = 2 * attn_f
    return attn_f, attn_b


def elementwise_bytes(problem: Problem, tok: np.ndarray, tp: np.ndarray,
                      sp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) HBM bytes of one layer's memory-bound kernels; backward moves twice the forward's."""
    m = problem.model
    frac_moe = moe_fraction(m)
    repl_b, shard_b, moe_b = elementwise_bytes_per_token(m)
    clamp_f, clamp_b = clamped_glu_bytes_per_token(m)
    elem_bytes = tok * (np.where(sp == 1, repl_b / tp, repl_b) + shard_b / tp + frac_moe * moe_b / tp)
    elem_bytes_b = 2 * elem_bytes + tok * frac_moe * clamp_b / tp
    elem_bytes = elem_bytes + tok * frac_moe * clamp_f / tp
    # fp8 / fp4: Transformer Engine quantises each GEMM operand (cast_bytes per element, planner.inputs.hardware)
    if is_fp8(problem):
        w_in, w_out = linear_io_widths(m)
        cast = cast_bytes(problem.cluster.gpu, problem.training.precision)
        elem_bytes = elem_bytes + tok * cast * w_in / tp
        elem_bytes_b = elem_bytes_b + tok * cast * w_out / tp
    return elem_bytes, elem_bytes_b


def launch_time(problem: Problem, ep: np.ndarray) -> np.ndarray | float:
    """GPU-side gaps of one layer's forward kernel launches (KERNEL_OVERHEAD_S each), plus a MoE layer's grouped-GEMM
    launches and its router's, dispatcher's and experts' other kernels."""
    m = problem.model
    launch_f = KERNEL_OVERHEAD_S * KERNELS_PER_LAYER_FWD
    if m.is_moe:  # expert GEMMs: a launch/tail per local expert, or per grouped kernel (expert.moe_launch_time)
        prof = profile_for(problem.training.framework)
        deepep = expert.dispatcher_profile(prof, problem.training).deepep
        extra = host.moe_extra_kernels(problem, host.router_fused(problem), deepep)
        launch_f = launch_f + expert.moe_launch_time(m, ep, extra, prof.grouped_expert_gemm)
    return launch_f


@dataclass(frozen=True)
class LayerTimes:
    """One average layer, one micro-batch, one GPU, kernels only (no exposed communication)."""

    fwd: np.ndarray  # t_f
    bwd: np.ndarray  # t_b (input and weight gradients)
    wgrad: np.ndarray  # weight-gradient GEMMs, the W of zero-bubble schedules
    attn_f: np.ndarray
    attn_b: np.ndarray
    elem_f: np.ndarray  # memory-bound forward kernels
    launch_f: np.ndarray | float
    moe_f: np.ndarray | float = 0.0  # the MoE block's share of the forward GPU time (expert.moe_block_time)


def local_layer_weights(problem: Problem, tp: np.ndarray, ep: np.ndarray,
                        etp: np.ndarray | None = None) -> np.ndarray:
    """Parameters of an average layer held by one GPU (the one definition; sharding.stage_params builds stages on
    it): dense layers / tp, and in MoE layers the non-expert part (attention, shared experts, router) / tp and the
    routed experts over etp·ep (`etp` None: sliced like the attention, the fewest bytes)."""
    m = problem.model
    f = moe_fraction(m)
    dense_p = flops.dense_layer_params(m) / tp
    if not m.is_moe:
        return dense_p
    experts_p = flops.expert_params(m) / ((tp if etp is None else etp) * ep)
    return (1 - f) * dense_p + f * (flops.moe_layer_shared_params(m) / tp + experts_p)


def weight_stream_times(problem: Problem, r: Rates, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(forward or input-gradient, weight-gradient) floor of one layer's GEMMs per micro-batch: however few tokens
    a micro-batch brings, each pass streams the layer's weights from HBM once (fwd and dgrad read them, 1 byte in fp8
    recipes, 2 in bf16), and the weight gradient is accumulated across micro-batches in the stack's gradient dtype,
    read and written once per micro-batch (Megatron's gradient_accumulation_fusion adds the wgrad GEMM into the fp32
    main_grad buffer, beta = 1; the Williams et al. 2009 roofline). With tokens per GPU below about
    peak / HBM x bytes per weight / 2 (~300 in bf16 on H100, ~1,200 for an fp32-accumulated wgrad) the GEMMs are
    memory-bound, which the FLOP rate alone prices as free."""
    prof = profile_for(problem.training.framework)
    weight_elt = 1.0 if is_fp8(problem) else 2.0
    return weights * weight_elt / r.hbm, weights * 2.0 * prof.grad_bytes / r.hbm


def layer_times(problem: Problem, r: Rates, tok: np.ndarray, tp: np.ndarray, sp: np.ndarray,
                ep: np.ndarray, ring: np.ndarray | float = 1.0,
                etp: np.ndarray | None = None, sched: np.ndarray | None = None) -> LayerTimes:
    """GPU: g_f = max(gemm, weight read) + attn + elem + launch; g_b = max(gemm, weight read) (dgrad) + W + attn_b +
    2·elem_bytes/HBM + 2·launch; W = max(gemm, gradient accumulate) (`weight_stream_times`). Each pass runs at the
    slower of the GPU and the host issuing its kernels (planner.cost.host; `sched` marks the rows whose layers are
    issued as combined-1F1B schedule nodes): t_f = max(g_f, host_f) + the GPU's idle time after a host sync,
    t_b = max(g_b, host_b)."""
    gemm_f = gemm_time(problem, r, tok, tp, ep)
    read_s, accumulate_s = weight_stream_times(problem, r, local_layer_weights(problem, tp, ep, etp))
    gemm_io = np.maximum(gemm_f, read_s)
    wgrad = np.maximum(gemm_f, accumulate_s)
    attn_f, attn_b = attention_time(problem, r, tok, tp, ring)
    elem_bytes, elem_bytes_b = elementwise_bytes(problem, tok, tp, sp)
    elem_f = elem_bytes / r.hbm
    launch_f = launch_time(problem, ep)
    prof = profile_for(problem.training.framework)
    deepep = expert.dispatcher_profile(prof, problem.training).deepep
    combined = False if sched is None else sched == Schedule.COMBINED_1F1B
    issue = host.layer_host_time(problem, ep, host.router_fused(problem), deepep, combined)
    layer_f = np.maximum(gemm_io + attn_f + elem_f + launch_f, issue.fwd) + issue.sync_bubble
    layer_b = np.maximum(gemm_io + wgrad + attn_b + elem_bytes_b / r.hbm + 2 * launch_f, issue.bwd)
    moe_f = expert.moe_block_time(problem.model, problem.training, tok, tp, ep, r.peak * r.eff, r.hbm,
                                  elementwise_bytes_per_token(problem.model)[2]
                                  + clamped_glu_bytes_per_token(problem.model)[0],
                                  expert.gemm_depth_half(problem.cluster.gpu, problem.training.precision),
                                  prof.grouped_expert_gemm)
    return LayerTimes(layer_f, layer_b, wgrad, attn_f, attn_b, elem_f, launch_f, moe_f)


def recompute_time(problem: Problem, rc: np.ndarray, lt: LayerTimes, tok: np.ndarray,
                   tp: np.ndarray) -> np.ndarray:
    """Extra backward work per layer: full = one forward; selective = see below; none = 0.

    Selective recompute: with unfused attention it is Korthikanti et al.'s (re-run the attention core); with fused
    attention there is no s^2 state to drop, and Megatron-Core's selective modules re-run the memory-bound
    norms and activation functions instead (`--recompute-modules layernorm mlp/moe_act`): one forward of them.
    torchtitan's op-level checkpointing (FrameworkProfile.selective_saves "alternate-mm") re-runs those and every
    other matmul of its dense blocks (unsaved_mm_flops).
    With multi-head latent attention the up-projections are re-run too (`--recompute-modules mla_up_proj`; DeepSeek-V3
    report §3.2.3 recomputes them): their GEMMs once more, f_mla·tok·2·a·(q_lora·qk + kv_lora·(nope + v))/tp.
    """
    m, prof = problem.model, profile_for(problem.training.framework)
    selective_cost = lt.elem_f if fused_attention(problem.training) else lt.attn_f
    rerun_flops = 0.0  # GEMM FLOPs per token that selective recompute runs again
    if m.is_mla:
        rerun_flops = mla_up_proj_flops(m)
    elif prof.selective_saves == "alternate-mm":  # op-level SAC re-runs the matmuls whose outputs it did not keep
        rerun_flops = (1.0 - moe_fraction(m)) * unsaved_mm_flops(m)
    if rerun_flops:
        r = rates(problem)
        selective_cost = selective_cost + tok * rerun_flops / tp / (r.peak * r.eff)
    return np.where(rc == Recompute.FULL, lt.fwd, np.where(rc == Recompute.SELECTIVE, selective_cost, 0.0))


def unsaved_mm_flops(m: ModelSpec) -> float:
    """Forward FLOPs per token of the matmuls torchtitan's op-level selective checkpointing does not save, which
    backward runs again: every other matmul of a dense block in call order (the 2nd, 4th, ...: K, the output
    projection and the gated MLP's up projection; without a gate, the down projection), 2·in·out each
    (pytorch/torchtitan@9dec370ad torchtitan/parallelisms/parallelize_llama.py#L214-L270, the policy
    memory.alternate_mm_bytes_per_token keeps the other half of; flops.block_matmuls gives the order)."""
    return sum(2.0 * i * o for n, (i, o, _) in enumerate(flops.block_matmuls(m), start=1) if n % 2 == 0)


def mla_up_proj_flops(m: ModelSpec) -> float:
    """Forward FLOPs per token of MLA's up-projections (query from its latent, per-head keys/values from theirs),
    averaged over the layers that have MLA: 2·a·(q_lora·(nope + rope) + kv_lora·(nope + v))."""
    a = m.num_attention_heads
    q_in = m.q_lora_rank or m.hidden_size
    return 2.0 * a * (q_in * (m.qk_nope_head_dim + m.qk_rope_head_dim)
                      + m.kv_lora_rank * (m.qk_nope_head_dim + m.v_head_dim))


def head_time(problem: Problem, r: Rates, tok: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """LM head forward: its GEMM tok·2hV/tp + the logits' 6 B/entry through HBM (bf16 + fp32 copy), and the MTP
    modules' blocks and head passes.

    The vocabulary projections stay in bf16 in fp8/fp4 recipes: Megatron-Core's output layer is a plain
    tensor_parallel.ColumnParallelLinear, outside Transformer Engine's low-precision autocast (gpt/gpt_model.py), and
    DeepSeek-V3 keeps "the embedding module, the output head" in bf16 (report §3.3.1); only the MTP blocks' own GEMMs
    run at the training precision's rate."""
    m = problem.model
    tf = flops.token_flops(m, problem.training.seq_len)
    passes = 1 + m.num_nextn_predict_layers  # the LM head, and again per MTP module
    vocab = passes * flops.lm_head_flops(m)
    bf16_rate = r.bf16_peak * r.bf16_eff
    return (tok * vocab / tp / bf16_rate + tok * (tf.head - vocab) / tp / (r.peak * r.eff)
            + passes * tok * m.vocab_size * 6.0 / tp / r.hbm)


def tokens_per_step(problem: Problem) -> float:
    return float(problem.training.global_batch) * float(problem.training.seq_len)


def throughput_per_gpu(problem: Problem, step: np.ndarray) -> np.ndarray:
    """Tokens per second per GPU: global batch·s / (step·GPUs)."""
    return tokens_per_step(problem) / (step * float(problem.num_gpus))


def mfu(problem: Problem, step: np.ndarray, r: Rates) -> np.ndarray:
    """Model FLOPs (3x forward, no recompute) per step / (step·GPUs·dense BF16 peak) (PaLM App. B)."""
    model_flops = flops.model_flops_per_token(problem.model, problem.training.seq_len) * tokens_per_step(problem)
    return model_flops / (step * float(problem.num_gpus) * r.bf16_peak)


def recompute_step_time(micro: np.ndarray, layers: np.ndarray, recompute_b: np.ndarray) -> np.ndarray:
    """recompute_s: m·L·(recompute_time per layer: a forward under full recompute, the selective modules under
    selective) (Korthikanti et al. 2022 §5)."""
    return micro * layers * recompute_b
