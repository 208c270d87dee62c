"""Memory per GPU: model states per ZeRO stage, activations (Korthikanti et al. 2022), logits, runtime reserve.

All sizes in bytes, per GPU, for one pipeline stage.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cost.profiles import FrameworkProfile, profile_for
from planner.inputs.layout import Recompute, Zero
from planner.inputs.problem import Problem
from planner.inputs.specs import ModelSpec

GIB = 2.0**30
# CUDA context and kernels take 1-2 GB ("Ultra-Scale Playbook", First Steps); each NCCL communicator adds ~0.5-0.7 GB
# of buffers (NVIDIA/nccl #964); the caching allocator loses some to fragmentation, which Megatron's estimator covers
# with +5% (theoretical_memory_usage.py).
CONTEXT_BYTES = 1.0 * GIB
NCCL_BYTES_PER_GROUP = 0.5 * GIB
FRAGMENTATION = 0.05


def state_bytes(params: np.ndarray, zero: np.ndarray, shard: np.ndarray, prof: FrameworkProfile,
                fp8: bool) -> dict[str, np.ndarray]:
    """Weights, gradients and optimizer states (Rajbhandari et al. 2020, ZeRO §5): stage k shards the first k of
    (optimizer, gradients, parameters) over `shard` data-parallel ranks. Transformer Engine keeps an extra fp8 copy of
    GEMM weights (1 byte/param) in fp8 training."""
    shard = np.maximum(shard, 1)
    weights = params * (prof.weight_bytes + (1.0 if fp8 else 0.0))
    grads = params * prof.grad_bytes
    optim = params * prof.optimizer_bytes
    return {
        "weights": np.where(zero >= Zero.PARAMETERS, weights / shard, weights),
        "grads": np.where(zero >= Zero.GRADIENTS, grads / shard, grads),
        "optimizer": np.where(zero >= Zero.OPTIMIZER, optim / shard, optim),
    }


def layer_activation_bytes_per_token(m: ModelSpec, tp: np.ndarray, sp: np.ndarray, moe: bool,
                                     dropout: bool, fp8: bool = False) -> np.ndarray:
    """Activations one layer saves for backward, per token, with fused (flash) attention.

    Korthikanti et al. 2022 §4.1 count 34·h bytes/token for a GPT layer plus 5·a·s for the s^2 softmax terms; fused
    attention keeps only Q, K, V, the output and a fp32 log-sum-exp per head (Dao et al. 2022), so the s^2 term goes.
    Generalised to GQA and gated MLPs: each GEMM input and each stored elementwise input counts 2 bytes.
    In fp8 training Transformer Engine saves the fp8 cast of each GEMM input for the weight gradient, so the QKV,
    fc1 and fc2 inputs cost 1 byte instead of 2 (transformer_engine/pytorch/module/linear.py saves `inputmat`).
    Without sequence parallelism the layer-norm inputs, the two GEMM inputs after them and dropout masks stay
    replicated across TP ranks (Korthikanti eq. 2: the 10·sbh term); everything else divides by tp.
    """
    h, q = m.hidden_size, m.num_attention_heads * m.d_head
    kv = m.kv_heads * m.d_head if not m.is_mla else m.kv_lora_rank + m.qk_rope_head_dim
    gemm_in = 1 if fp8 else 2  # bytes per saved GEMM input element
    replicated = 2 * h + 2 * h + gemm_in * 2 * h + (2 * h if dropout else 0)  # 2 norm inputs, QKV + fc1 inputs, masks
    attn = 2 * (q + 2 * kv) + 2 * q + 4 * m.num_attention_heads  # Q, K, V, attention output, fp32 LSE
    if moe:
        width = m.expert_ffn
        per_copy = gemm_in * h + (4 if m.gated_mlp else 2) * width + gemm_in * width
        mlp = m.num_experts_per_tok * per_copy + 2 * m.num_local_experts  # routed copies + router probabilities
        if m.n_shared_experts:
            mlp += (6 if m.gated_mlp else 4) * width * m.n_shared_experts
    else:
        f = m.intermediate_size
        # gated: gate and up outputs + their product (fc2 input); plain: activation input and output (fc2 input)
        mlp = (4 if m.gated_mlp else 2) * f + gemm_in * f
    sharded = attn + mlp
    tp = np.maximum(tp, 1)
    return np.where(sp == 1, (replicated + sharded) / tp, replicated + sharded / tp)


def logits_bytes(tokens: np.ndarray, m: ModelSpec, tp: np.ndarray) -> np.ndarray:
    """Vocabulary-parallel logits on the last stage: bf16 logits + fp32 copy for the cross-entropy (Korthikanti §4.3,
    Megatron theoretical_memory_usage.py keeps 4·s·b·V/t for the loss)."""
    return tokens * m.vocab_size * 6.0 / np.maximum(tp, 1)


def runtime_reserve(groups_active: np.ndarray, allocated: np.ndarray) -> np.ndarray:
    """CUDA context + NCCL buffers per active communicator + allocator fragmentation (constants above)."""
    return CONTEXT_BYTES + NCCL_BYTES_PER_GROUP * groups_active + FRAGMENTATION * allocated


def activation_bytes_per_token(problem: Problem, tp: np.ndarray, sp: np.ndarray, rc: np.ndarray) -> np.ndarray:
    """Bytes one average layer saves per token, with the recompute mode's adjustments (full is applied later).

    Dense and MoE layers mixed by their share; GPT-style models (GeLU, no gate) train with dropout.
    """
    m, s = problem.model, float(problem.training.seq_len)
    prof = profile_for(problem.training.framework)
    fp8 = problem.training.precision in ("fp8", "fp4")
    frac_moe = m.moe_layers / m.num_hidden_layers
    dropout = m.hidden_act.lower().startswith("gelu") and not m.gated_mlp  # GPT-style models train with dropout
    dense_act = layer_activation_bytes_per_token(m, tp, sp, False, dropout, fp8)
    moe_act = layer_activation_bytes_per_token(m, tp, sp, True, dropout, fp8) if m.is_moe else dense_act
    act_per_token = (1 - frac_moe) * dense_act + frac_moe * moe_act
    act_per_token = act_per_token + layer_kind_bytes_per_token(m, fp8) / np.maximum(tp, 1)
    if not prof.flash_attention:  # softmax output, dropout mask and output: 5·a·s bytes per token (Korthikanti eq. 1)
        act_per_token = act_per_token + np.where(rc == Recompute.SELECTIVE, 0.0, 5.0 * m.num_attention_heads * s / tp)
    else:  # selective drops the norm outputs (QKV and fc1 inputs) and the activation output (fc2 input)
        gemm_in = 1.0 if fp8 else 2.0
        width = m.intermediate_size
        if m.is_moe:
            width = (1 - frac_moe) * m.intermediate_size + frac_moe * m.expert_ffn * (
                m.num_experts_per_tok + m.n_shared_experts)
        saved = np.where(sp == 1, 2 * gemm_in * m.hidden_size / tp, 2 * gemm_in * m.hidden_size) + gemm_in * width / tp
        act_per_token = act_per_token - np.where(rc == Recompute.SELECTIVE, saved, 0.0)
    return act_per_token


def layer_activation_bytes(problem: Problem, tok: np.ndarray, tp: np.ndarray, sp: np.ndarray,
                           rc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(kept per layer per micro-batch, recompute working set) in bytes.

    Full recompute keeps only each layer's input (2·h bytes per token, /tp with SP) and needs one layer's full
    activations while that layer is recomputed; otherwise each layer keeps its activations and nothing extra.
    """
    h = problem.model.hidden_size
    act_per_token = activation_bytes_per_token(problem, tp, sp, rc)
    layer_input = np.where(sp == 1, 2.0 * h / tp, 2.0 * h)
    per_layer_act = np.where(rc == Recompute.FULL, layer_input, act_per_token) * tok
    return per_layer_act, np.where(rc == Recompute.FULL, act_per_token * tok, 0.0)


def stage_activation_bytes(per_layer_act: np.ndarray, working: np.ndarray, layers: np.ndarray,
                           inflight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first, last) stage activations: the first stage holds `inflight` micro-batches of its layers at its peak
    (planner.cost.pipeline.inflight_microbatches), the last one micro-batch; both + the recompute working set."""
    return per_layer_act * layers * inflight + working, per_layer_act * layers + working


def fsdp_buffer_bytes(zero: np.ndarray, per_layer_p: np.ndarray, prof: FrameworkProfile) -> np.ndarray:
    """ZeRO-3 working buffers: two gathered bf16 layers (running + prefetched) and one layer's unsharded grads."""
    return np.where(zero == Zero.PARAMETERS, 2 * per_layer_p * 2.0 + per_layer_p * prof.grad_reduce_bytes, 0.0)


def active_groups(tp: np.ndarray, pp: np.ndarray, dp: np.ndarray, cp: np.ndarray, ep: np.ndarray) -> np.ndarray:
    """Communicators with more than one rank (each holds NCCL buffers): tp, pp, dp·cp, cp, ep."""
    return sum((x > 1).astype(float) for x in (tp, pp, dp * cp, cp, ep))


@dataclass(frozen=True)
class StageMemory:
    """Allocations of one pipeline stage's GPU, bytes."""

    states: dict[str, np.ndarray]  # weights, grads, optimizer (state_bytes)
    activations: np.ndarray
    logits: np.ndarray
    total: np.ndarray  # states + activations + logits + ZeRO-3 buffers


def stage_memory(states: dict[str, np.ndarray], acts: np.ndarray, logits: np.ndarray,
                 buffer: np.ndarray) -> StageMemory:
    """total = states + activations + logits + ZeRO-3 buffers."""
    return StageMemory(states, acts, logits, sum(states.values()) + acts + logits + buffer)


def report(first: StageMemory, last: StageMemory, buffer: np.ndarray, groups: np.ndarray) -> dict[str, np.ndarray]:
    """GiB per GPU of the stage with the larger allocations, split by kind, and both stages' device totals.

    memory_allocated_gib is the peak of live tensors, what frameworks print (torch.cuda.max_memory_allocated;
    Megatron's "max allocated", DeepSpeed's "Max_MA"); memory_peak_gib adds allocator slack, the CUDA context and
    NCCL buffers (runtime_reserve).
    """
    first_is_peak = first.total >= last.total
    peak_alloc = np.maximum(first.total, last.total)
    reserve = runtime_reserve(groups, peak_alloc)
    pick = lambda a, b: np.where(first_is_peak, a, b)  # noqa: E731
    return {
        "memory_peak_gib": (peak_alloc + reserve) / GIB,
        "memory_allocated_gib": peak_alloc / GIB,
        "mem_weights_gib": pick(first.states["weights"], last.states["weights"]) / GIB,
        "mem_grads_gib": pick(first.states["grads"], last.states["grads"]) / GIB,
        "mem_optimizer_gib": pick(first.states["optimizer"], last.states["optimizer"]) / GIB,
        "mem_activations_gib": pick(first.activations, last.activations) / GIB,
        "mem_logits_gib": pick(first.logits, last.logits) / GIB,
        "mem_reserve_gib": (reserve + buffer) / GIB,
        "mem_first_stage_gib": (first.total + reserve) / GIB,
        "mem_last_stage_gib": (last.total + reserve) / GIB,
    }


def layer_kind_bytes_per_token(m: ModelSpec, fp8: bool = False) -> float:
    """Mean per-layer change, in TP-sharded bytes per token, from layers that differ from the uniform layer priced by
    layer_activation_bytes_per_token: no-op mixers or MLPs (Nemotron-H blocks, block_configs), per-layer MLP widths,
    and linear-time mixers whose saved tensors replace attention's Q, K, V, output and LSE.

    Gated DeltaNet keeps its projection outputs (q, k, v, gate z, beta, decay), the conv outputs, the core output
    and the gated-norm output (HF Qwen3NextGatedDeltaNet; fla recomputes the chunk states in backward). Mamba-2
    keeps the in_proj output (z, x, B, C, dt), the conv output, the scan output and the gated-norm output
    (mamba_ssm mamba_chunk_scan_combined saves its inputs, not the states). 2 bytes each; GEMM inputs 1 in fp8.
    """
    gemm_in = 1 if fp8 else 2
    q, kv = m.num_attention_heads * m.d_head, m.kv_heads * m.d_head
    if m.is_mla:
        kv = m.kv_lora_rank + m.qk_rope_head_dim
    attn = 2 * (q + 2 * kv) + 2 * q + 4 * m.num_attention_heads
    per_width = (4 if m.gated_mlp else 2) + gemm_in
    total = 0.0
    for i, (mix, mlp) in enumerate(zip(m.mixer_kinds, m.mlp_kinds, strict=True)):
        if mix in ("none", "linear"):
            total -= attn
        elif mix == "linear_attention":
            kd = m.linear_num_key_heads * m.linear_key_head_dim
            vd = m.linear_num_value_heads * m.linear_value_head_dim
            total += 2 * (2 * kd + 2 * vd + 2 * m.linear_num_value_heads) + 2 * (2 * kd + vd) + 2 * vd + gemm_in * vd
            total -= attn
        elif mix == "mamba":
            inner = m.mamba_num_heads * m.mamba_head_dim
            conv_dim = inner + 2 * m.n_groups * m.ssm_state_size
            total += 2 * (inner + conv_dim + m.mamba_num_heads) + 2 * conv_dim + 2 * inner + gemm_in * inner
            total -= attn
        if mlp in ("none", "linear"):
            total -= per_width * m.intermediate_size
        elif mlp == "dense":
            total += per_width * (m.layer_ffn(i) - m.intermediate_size)
    return total / m.num_hidden_layers
