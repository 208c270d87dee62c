"""Memory per GPU: model states per ZeRO stage, activations (Korthikanti et al. 2022), logits, runtime reserve.

All sizes in bytes, per GPU, for one pipeline stage.
"""

from __future__ import annotations

import numpy as np

from planner.cost.profiles import FrameworkProfile
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
        "weights": np.where(zero >= 3, weights / shard, weights),
        "grads": np.where(zero >= 2, grads / shard, grads),
        "optimizer": np.where(zero >= 1, optim / shard, optim),
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
    return CONTEXT_BYTES + NCCL_BYTES_PER_GROUP * groups_active + FRAGMENTATION * allocated
