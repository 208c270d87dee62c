"""Parameter counts and FLOPs (per token, forward pass), one function per term.

Conventions follow Megatron-LM `num_floating_point_operations` (NVIDIA/Megatron-LM training.py): 2 FLOPs per
multiply-accumulate, backward = 2 x forward, causal attention counts half of the s^2 work, the LM head is one GEMM
of h x V. Narayanan et al. 2021 (arXiv 2104.04473) eq. 2-3 are the GPT special case (tested in tests/test_flops.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike

from planner.cost import mixers
from planner.inputs.specs import ModelSpec


# --- parameters -----------------------------------------------------------------------------------------------
def attention_params(m: ModelSpec) -> int:
    """One full-attention layer's projections (planner.cost.mixers.attention_params)."""
    return mixers.attention_params(m)


def mlp_params(m: ModelSpec, width: int) -> int:
    """Gated MLPs (SwiGLU, GeGLU) have 3 matrices, plain ones 2 (Megatron ffn_expansion_factor)."""
    return m.mlp_matrices * m.hidden_size * width


def norm_params(m: ModelSpec) -> int:
    return 2 * m.hidden_size  # two RMS/LayerNorm weight vectors per layer (biases ignored)


def expert_mlp_params(m: ModelSpec) -> int:
    """One routed expert; a LatentMoE expert (Nemotron-3, moe_latent_size) maps latent -> latent instead of h -> h."""
    return m.mlp_matrices * (m.moe_latent_size or m.hidden_size) * m.expert_ffn


def expert_params(m: ModelSpec) -> int:
    """All routed experts of one MoE layer."""
    return m.num_local_experts * expert_mlp_params(m)


def _moe_non_expert(m: ModelSpec) -> int:
    """Router (h x E), shared experts and LatentMoE's h -> latent -> h projections of one MoE layer."""
    latent = 2 * m.hidden_size * m.moe_latent_size
    return m.hidden_size * m.num_local_experts + (mlp_params(m, m.shared_ffn) if m.shared_ffn else 0) + latent


def _mlp_part(m: ModelSpec, i: int) -> int:
    """Layer i's MLP parameters outside the routed experts."""
    kind = m.mlp_kinds[i]
    if kind == "dense":
        return mlp_params(m, m.layer_ffn(i))
    if kind == "moe":
        return _moe_non_expert(m)
    return m.hidden_size * m.hidden_size if kind == "linear" else 0


def _layer_norms(m: ModelSpec, i: int) -> int:
    """One norm per sub-block present (a Nemotron-H block has one, a no-op block_configs attention none)."""
    return m.hidden_size * ((m.mixer_kinds[i] != "none") + (m.mlp_kinds[i] != "none"))


@dataclass(frozen=True)
class LayerSums:
    """Sums over the layers of each group (dense = every non-MoE layer), computed once per model."""

    dense: int  # non-MoE layers
    moe: int
    dense_params: int  # everything in the non-MoE layers
    moe_shared_params: int  # MoE layers less their routed experts
    dense_gemm: float  # forward GEMM FLOPs per token, summed over the group's layers
    moe_gemm: float  # MoE layers' projections + shared experts + router (routed experts added by the caller)


@lru_cache(maxsize=64)
def layer_sums(m: ModelSpec) -> LayerSums:
    dense = moe = dense_p = moe_p = 0
    dense_f = moe_f = 0.0
    for i, mlp in enumerate(m.mlp_kinds):
        shared = mixers.layer_mixer_params(m, i) + _mlp_part(m, i) + _layer_norms(m, i)
        gemm = mixers.layer_mixer_gemm_flops(m, i) + 2.0 * _mlp_part(m, i)
        if mlp == "moe":
            moe, moe_p, moe_f = moe + 1, moe_p + shared, moe_f + gemm
        else:
            dense, dense_p, dense_f = dense + 1, dense_p + shared, dense_f + gemm
    return LayerSums(dense, moe, dense_p, moe_p, dense_f, moe_f)


@lru_cache(maxsize=256)
def moe_mlp_shared_gemm(m: ModelSpec) -> float:
    """Forward GEMM FLOPs per token of a mean MoE layer's MLP outside the routed experts: router, shared experts,
    LatentMoE projections (the MoE block's part of moe_gemm; the mixer's projections are the rest)."""
    parts = [2.0 * _mlp_part(m, i) for i, kind in enumerate(m.mlp_kinds) if kind == "moe"]
    return sum(parts) / len(parts) if parts else 0.0


@lru_cache(maxsize=256)
def core_flops_by_kind(m: ModelSpec, seq_len: int) -> tuple[tuple[str, float], ...]:
    """Forward mixer-core FLOPs per token of each layer kind, summed over its layers, in first-seen order."""
    sums: dict[str, float] = {}
    for i, kind in enumerate(m.mixer_kinds):
        sums[kind] = sums.get(kind, 0.0) + mixers.layer_core_flops(m, seq_len, i)
    return tuple(sums.items())


def attention_core_sum(m: ModelSpec, seq_len: int) -> float:
    """Forward mixer-core FLOPs per token summed over all layers (each layer's own kind)."""
    return sum(core for _, core in core_flops_by_kind(m, seq_len))


def dense_layer_params(m: ModelSpec) -> int:
    """Mean parameters of a non-MoE layer (a uniform model's one dense layer)."""
    sums = layer_sums(m)
    if sums.dense == 0:
        return mixers.attention_params(m) + mlp_params(m, m.intermediate_size) + norm_params(m)
    return round(sums.dense_params / sums.dense)


def moe_layer_shared_params(m: ModelSpec) -> int:
    """Mean non-expert part of a MoE layer: mixer, norms, router (h x E) and shared experts."""
    sums = layer_sums(m)
    if sums.moe == 0:
        return mixers.attention_params(m) + norm_params(m) + _moe_non_expert(m)
    return round(sums.moe_shared_params / sums.moe)


def layer_params(m: ModelSpec) -> tuple[tuple[int, int], ...]:
    """(non-expert, routed-expert) parameters of each layer, in order."""
    experts = expert_params(m)
    return tuple((mixers.layer_mixer_params(m, i) + _mlp_part(m, i) + _layer_norms(m, i),
                  experts if mlp == "moe" else 0) for i, mlp in enumerate(m.mlp_kinds))


def layer_forward_flops(m: ModelSpec, seq_len: int) -> tuple[float, ...]:
    """Forward FLOPs per token of each layer, in order: its mixer's projections and core, its MLP (top-k routed
    experts, shared experts and router for a MoE layer). The pipeline partition weighs layers by these."""
    routed = routed_flops(m)
    return tuple(mixers.layer_mixer_gemm_flops(m, i) + mixers.layer_core_flops(m, seq_len, i)
                 + 2.0 * _mlp_part(m, i) + (routed if mlp == "moe" else 0.0)
                 for i, mlp in enumerate(m.mlp_kinds))


def embedding_params(m: ModelSpec) -> int:
    return m.vocab_size * m.hidden_size


def lm_head_params(m: ModelSpec) -> int:
    return 0 if m.tie_word_embeddings else m.vocab_size * m.hidden_size


def total_params(m: ModelSpec) -> int:
    """The main model: every layer by its kind, embedding, LM head, final norm; MTP modules are not included
    (DeepSeek-V3's 671B convention; see mtp_params)."""
    sums = layer_sums(m)
    layers = sums.dense_params + sums.moe_shared_params + sums.moe * expert_params(m)
    return layers + embedding_params(m) + lm_head_params(m) + m.hidden_size  # + final norm


def active_params(m: ModelSpec) -> int:
    """Parameters one token touches: routed experts count top-k of E."""
    if not m.is_moe:
        return total_params(m)
    sums = layer_sums(m)
    routed = m.num_experts_per_tok * expert_mlp_params(m)
    layers = sums.dense_params + sums.moe_shared_params + sums.moe * routed
    return layers + embedding_params(m) + lm_head_params(m) + m.hidden_size


def _mtp_block_params(m: ModelSpec, routed: int) -> int:
    """One MTP module (DeepSeek-V3 §2.2, Fig. 3): two RMSNorms and a 2h -> h projection in front of one transformer
    block (full attention, the model's MoE or dense MLP); embedding and output head are shared with the model."""
    h = m.hidden_size
    block = mixers.attention_params(m) + norm_params(m) + 2 * h
    block += _moe_non_expert(m) + routed if m.is_moe else mlp_params(m, m.intermediate_size)
    return 2 * h * h + block


def mtp_params(m: ModelSpec) -> tuple[int, int]:
    """(non-expert, routed-expert) parameters of the num_nextn_predict_layers MTP modules."""
    d = m.num_nextn_predict_layers
    experts = expert_params(m) if m.is_moe else 0
    return d * _mtp_block_params(m, 0), d * experts


def block_matmuls(m: ModelSpec) -> list[tuple[int, int, bool]]:
    """A dense Llama-style block's matmuls in the order torchtitan's modules call them (wq, wk, wv, wo, then w1, w3,
    w2; without a gate w1, w2), each as (input width, output width, row-parallel). Op-level selective checkpointing
    counts matmuls in this order: memory.alternate_mm_bytes_per_token keeps the odd ones, compute.unsaved_mm_flops
    re-runs the even ones."""
    h, q, kv, ffn = m.hidden_size, m.num_attention_heads * m.d_head, m.kv_heads * m.d_head, m.intermediate_size
    mlp = [(h, ffn, False), (h, ffn, False), (ffn, h, True)] if m.gated_mlp else [(h, ffn, False), (ffn, h, True)]
    return [(h, q, False), (h, kv, False), (h, kv, False), (q, h, True), *mlp]


# --- forward FLOPs per token ----------------------------------------------------------------------------------
def attention_proj_flops(m: ModelSpec) -> float:
    """QKV and output projection GEMMs of a full-attention layer: 2 FLOPs per weight."""
    return 2.0 * attention_params(m)


def attention_core_flops(m: ModelSpec, seq_len: int, causal: bool = True) -> float:
    """QK^T and PV of a full-attention layer: 2 * s * heads * (d_qk + d_v) per token; a causal mask halves it
    (Megatron convention). Other layer kinds: planner.cost.mixers.attention_core_flops."""
    return mixers.attention_core_flops(m, seq_len, "full_attention", causal)


def routed_flops(m: ModelSpec) -> float:
    """Top-k routed experts of one MoE layer."""
    return 2.0 * m.num_experts_per_tok * expert_mlp_params(m)


def lm_head_flops(m: ModelSpec) -> float:
    return 2.0 * m.hidden_size * m.vocab_size


def mtp_flops(m: ModelSpec, seq_len: int) -> float:
    """Forward FLOPs per token of the MTP modules: each runs its block and the shared LM head again (DeepSeek-V3
    §2.2; Megatron-LM training.py counts mtp_num_layers the same way in num_floating_point_operations)."""
    d = m.num_nextn_predict_layers
    if not d:
        return 0.0
    routed = routed_flops(m) / 2.0 if m.is_moe else 0.0
    block = 2.0 * (_mtp_block_params(m, round(routed)) - norm_params(m) - 2 * m.hidden_size)
    return d * (block + attention_core_flops(m, seq_len) + lm_head_flops(m))


@dataclass(frozen=True)
class TokenFlops:
    """Forward FLOPs per token, split by the kernel that executes them (they run at different efficiencies).

    Per-layer kinds (interleaved dense/MoE, sliding/linear/Mamba mixers, block_configs) enter as means over the
    layers of each group, so L_dense·dense_gemm + L_moe·moe_gemm + L·attention is the exact per-layer sum."""

    dense_gemm: float  # mean non-MoE layer's GEMMs
    moe_gemm: float  # mean MoE layer's GEMMs (mixer projections + routed/shared experts + router)
    attention: float  # mean layer's mixer core (causal attention, sliding window, linear attention, SSD scan)
    head: float  # LM head, plus the MTP modules (Megatron-Core runs them on the last pipeline stage)

    def model_forward(self, m: ModelSpec) -> float:
        layers = m.dense_layers * self.dense_gemm + m.moe_layers * self.moe_gemm
        return layers + m.num_hidden_layers * self.attention + self.head


def token_flops(m: ModelSpec, seq_len: int) -> TokenFlops:
    sums = layer_sums(m)
    proj = attention_proj_flops(m)
    dense = sums.dense_gemm / sums.dense if sums.dense else proj + 2.0 * mlp_params(m, m.intermediate_size)
    moe = (sums.moe_gemm / sums.moe + routed_flops(m)) if sums.moe else 0.0
    return TokenFlops(
        dense_gemm=dense,
        moe_gemm=moe,
        attention=attention_core_sum(m, seq_len) / m.num_hidden_layers,
        head=lm_head_flops(m) + mtp_flops(m, seq_len),
    )


def model_flops_per_token(m: ModelSpec, seq_len: int) -> float:
    """Training FLOPs per token for MFU: forward + backward (2x), no recomputation (PaLM App. B definition)."""
    return 3.0 * token_flops(m, seq_len).model_forward(m)


# --- Muon's orthogonalisation ------------------------------------------------------------------------------------
# Newton-Schulz steps Megatron-Core's Muon runs per update (OptimizerConfig.muon_num_ns_steps default 5; Megatron-
# Bridge's distributed_muon_with_cosine_annealing keeps 5, recipes/utils/optimizer_utils.py).
MUON_NS_STEPS = 5


def newton_schulz_flops(rows: ArrayLike, cols: ArrayLike, steps: int = MUON_NS_STEPS) -> np.ndarray:
    """One matrix's orthogonalisation: each quintic Newton-Schulz step forms A = X Xᵀ (2m²n), A² (2m³) and
    (bA + cA²) X (2m²n), m <= n the matrix's sides (Jordan et al. 2024, "Muon"; emerging_optimizers
    newton_schulz): steps·(4m²n + 2m³)."""
    m, n = np.minimum(rows, cols), np.maximum(rows, cols)
    return steps * (4.0 * m * m * n + 2.0 * m ** 3)


def muon_layer_flops(m: ModelSpec, tp: ArrayLike, etp: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Newton-Schulz FLOPs of one mean layer's matrices as one tensor-parallel rank holds them: (the non-expert
    matrices, one routed expert's). Megatron-Core's Muon orthogonalises each matrix shard on its own rank
    (muon_tp_mode "blockwise", Megatron-Bridge's setting) and Q, K and V apart (muon_split_qkv); MLA's down
    projections are whole on every TP rank. Other mixers count as one h x (params / h) matrix sliced by tp. The
    embedding, the LM head and the norms take Adam (Muon's scalar optimizer)."""
    h, a = m.hidden_size, m.num_attention_heads
    if m.is_mla:
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = (newton_schulz_flops(m.q_lora_rank, h) + newton_schulz_flops(a * qk / tp, m.q_lora_rank)
             if m.q_lora_rank else newton_schulz_flops(a * qk / tp, h))
        attn = (q + newton_schulz_flops(m.kv_lora_rank + m.qk_rope_head_dim, h)
                + newton_schulz_flops(a * (m.qk_nope_head_dim + m.v_head_dim) / tp, m.kv_lora_rank)
                + newton_schulz_flops(h, a * m.v_head_dim / tp))
    else:
        qd, kvd = a * m.d_head, m.kv_heads * m.d_head
        attn = 2 * newton_schulz_flops(qd / tp, h) + 2 * newton_schulz_flops(kvd / tp, h)
    full = sum(kind == "full_attention" for kind in m.mixer_kinds)
    other = len(m.mixer_kinds) - full
    mixer_other = sum(mixers.layer_mixer_params(m, i) for i, kind in enumerate(m.mixer_kinds)
                      if kind != "full_attention") / max(other, 1)
    mixer = (full * attn + other * newton_schulz_flops(h, mixer_other / h / tp)) / len(m.mixer_kinds)

    def mlp(width: float, split: float) -> float:
        up = newton_schulz_flops((2 if m.gated_mlp else 1) * width / split, h)
        return up + newton_schulz_flops(h, width / split)

    f = m.moe_layers / m.num_hidden_layers if m.is_moe else 0.0
    dense = mlp(m.intermediate_size, tp) if f < 1 else 0.0
    shared = (mlp(m.shared_ffn, tp) if m.shared_ffn else 0.0) + newton_schulz_flops(m.num_local_experts, h)
    expert = mlp(m.expert_ffn, etp) if m.is_moe else 0.0
    return mixer + (1 - f) * dense + f * shared, f * expert
