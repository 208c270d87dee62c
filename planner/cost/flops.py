"""Parameter counts and FLOPs (per token, forward pass), one function per term.

Conventions follow Megatron-LM `num_floating_point_operations` (NVIDIA/Megatron-LM training.py): 2 FLOPs per
multiply-accumulate, backward = 2 x forward, causal attention counts half of the s^2 work, the LM head is one GEMM
of h x V. Narayanan et al. 2021 (arXiv 2104.04473) eq. 2-3 are the GPT special case (tested in tests/test_flops.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.inputs.specs import ModelSpec


# --- parameters -----------------------------------------------------------------------------------------------
def attention_params(m: ModelSpec) -> int:
    """Q, K, V and output projections. GQA shrinks K and V to num_key_value_heads heads (Ainslie et al. 2023).

    MLA (DeepSeek-V2, arXiv 2405.04434 §2.1): queries through a rank-q_lora down/up projection, keys and values
    through a shared kv_lora latent plus a decoupled RoPE key; output from heads x v_head_dim.
    """
    h, a = m.hidden_size, m.num_attention_heads
    if m.is_mla:
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = h * m.q_lora_rank + m.q_lora_rank * a * qk if m.q_lora_rank else h * a * qk
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim)
        return q + kv + a * m.v_head_dim * h
    q = a * m.d_head
    kv = 2 * m.kv_heads * m.d_head
    return h * (q + kv) + q * h


def mlp_params(m: ModelSpec, width: int) -> int:
    """Gated MLPs (SwiGLU, GeGLU) have 3 matrices, plain ones 2 (Megatron ffn_expansion_factor)."""
    return m.mlp_matrices * m.hidden_size * width


def norm_params(m: ModelSpec) -> int:
    return 2 * m.hidden_size  # two RMS/LayerNorm weight vectors per layer (biases ignored)


def dense_layer_params(m: ModelSpec) -> int:
    return attention_params(m) + mlp_params(m, m.intermediate_size) + norm_params(m)


def expert_params(m: ModelSpec) -> int:
    """All routed experts of one MoE layer."""
    return m.num_local_experts * mlp_params(m, m.expert_ffn)


def moe_layer_shared_params(m: ModelSpec) -> int:
    """The non-expert part of a MoE layer: attention, norms, router (h x E) and shared experts."""
    shared = mlp_params(m, m.expert_ffn * m.n_shared_experts) if m.n_shared_experts else 0
    return attention_params(m) + norm_params(m) + m.hidden_size * m.num_local_experts + shared


def embedding_params(m: ModelSpec) -> int:
    return m.vocab_size * m.hidden_size


def lm_head_params(m: ModelSpec) -> int:
    return 0 if m.tie_word_embeddings else m.vocab_size * m.hidden_size


def total_params(m: ModelSpec) -> int:
    layers = m.dense_layers * dense_layer_params(m)
    layers += m.moe_layers * (moe_layer_shared_params(m) + expert_params(m))
    return layers + embedding_params(m) + lm_head_params(m) + m.hidden_size  # + final norm


def active_params(m: ModelSpec) -> int:
    """Parameters one token touches: routed experts count top-k of E."""
    if not m.is_moe:
        return total_params(m)
    routed = m.num_experts_per_tok * mlp_params(m, m.expert_ffn)
    layers = m.dense_layers * dense_layer_params(m) + m.moe_layers * (moe_layer_shared_params(m) + routed)
    return layers + embedding_params(m) + lm_head_params(m) + m.hidden_size


# --- forward FLOPs per token ----------------------------------------------------------------------------------
def attention_proj_flops(m: ModelSpec) -> float:
    """QKV and output projection GEMMs: 2 FLOPs per weight."""
    return 2.0 * attention_params(m)


def attention_core_flops(m: ModelSpec, seq_len: int, causal: bool = True) -> float:
    """QK^T and PV: 2 * s * heads * (d_qk + d_v) per token; a causal mask halves it (Megatron convention)."""
    a = m.num_attention_heads
    if m.is_mla:
        d_qk, d_v = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
    else:
        d_qk = d_v = m.d_head
    full = 2.0 * seq_len * a * (d_qk + d_v)
    return full / 2 if causal else full


def dense_mlp_flops(m: ModelSpec) -> float:
    return 2.0 * mlp_params(m, m.intermediate_size)


def moe_mlp_flops(m: ModelSpec) -> float:
    """Top-k routed experts + shared experts + the router GEMM (h x E)."""
    routed = m.num_experts_per_tok * mlp_params(m, m.expert_ffn)
    shared = mlp_params(m, m.expert_ffn * m.n_shared_experts) if m.n_shared_experts else 0
    return 2.0 * (routed + shared + m.hidden_size * m.num_local_experts)


def lm_head_flops(m: ModelSpec) -> float:
    return 2.0 * m.hidden_size * m.vocab_size


@dataclass(frozen=True)
class TokenFlops:
    """Forward FLOPs per token, split by the kernel that executes them (they run at different efficiencies)."""

    dense_gemm: float  # one dense layer's GEMMs
    moe_gemm: float  # one MoE layer's GEMMs (attention projections + routed/shared experts + router)
    attention: float  # one layer's causal attention core
    head: float  # LM head

    def model_forward(self, m: ModelSpec) -> float:
        layers = m.dense_layers * self.dense_gemm + m.moe_layers * self.moe_gemm
        return layers + m.num_hidden_layers * self.attention + self.head


def token_flops(m: ModelSpec, seq_len: int) -> TokenFlops:
    proj = attention_proj_flops(m)
    return TokenFlops(
        dense_gemm=proj + dense_mlp_flops(m),
        moe_gemm=proj + moe_mlp_flops(m) if m.is_moe else 0.0,
        attention=attention_core_flops(m, seq_len),
        head=lm_head_flops(m),
    )


def model_flops_per_token(m: ModelSpec, seq_len: int) -> float:
    """Training FLOPs per token for MFU: forward + backward (2x), no recomputation (PaLM App. B definition)."""
    return 3.0 * token_flops(m, seq_len).model_forward(m)
