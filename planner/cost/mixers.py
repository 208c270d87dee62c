"""Token mixers of one layer, by kind: parameters and forward FLOPs per token of full, sliding-window, chunked and
sparse (DeepSeek-V3.2 indexer) attention, Gated DeltaNet linear attention, the Mamba-2 SSD mixer, Mamba-1 (Jamba) and
LFM2's gated short convolution.

The projections are GEMMs (2 FLOPs per weight per token); the "core" is what runs in the attention/scan kernel.
Attention cores follow Megatron-LM's convention (causal mask halves the s^2 work); a layer that sees at most w keys
(sliding window, top-k sparse) does sum_i min(i, w) / s = w - w^2 / (2s) key lookups per query (w <= s), which is
s / 2 at w = s. The linear-time mixers cost O(chunk + state) per token, independent of the sequence length.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.inputs.specs import ModelSpec

# Chunk length of the chunkwise-parallel delta-rule kernel: flash-linear-attention's chunk_gated_delta_rule tiles the
# sequence in BT = 64 token chunks (fla-org/flash-linear-attention fla/ops/gated_delta_rule/chunk.py), the kernel
# Qwen3-Next's HF modeling code calls.
DELTA_RULE_CHUNK = 64


@dataclass(frozen=True)
class AttentionShape:
    heads: int
    kv_heads: int
    d_qk: int
    d_v: int
    v_proj: bool = True  # False: V reuses the K projection (Gemma 4 attention_k_eq_v on global layers)


def attention_shape(m: ModelSpec, kind: str) -> AttentionShape:
    """Heads and head sizes of one attention layer; MLA's are set by its own formulas below."""
    d_v = m.v_head_dim or m.d_head
    if kind == "sliding_attention" and (m.swa_num_key_value_heads or m.swa_head_dim):
        return AttentionShape(m.swa_num_attention_heads or m.num_attention_heads,
                              m.swa_num_key_value_heads or m.kv_heads, m.swa_head_dim or m.d_head,
                              m.swa_v_head_dim or d_v)
    if kind == "full_attention" and (m.num_global_key_value_heads or m.global_head_dim):
        d = m.global_head_dim or m.d_head
        return AttentionShape(m.num_attention_heads, m.num_global_key_value_heads or m.kv_heads, d, d,
                              v_proj=not m.attention_k_eq_v)
    return AttentionShape(m.num_attention_heads, m.kv_heads, m.d_head, d_v)


def indexer_params(m: ModelSpec) -> int:
    """DeepSeek-V3.2 lightning indexer (DeepSeek-V3.2-Exp report §2.1; inference/model.py Indexer): query heads from
    the q latent, one shared key head from h, per-head weights from h, a key LayerNorm."""
    if not m.index_topk:
        return 0
    q_in = m.q_lora_rank or m.hidden_size
    return (q_in * m.index_n_heads * m.index_head_dim + m.hidden_size * m.index_head_dim
            + m.hidden_size * m.index_n_heads + 2 * m.index_head_dim)


def attention_params(m: ModelSpec, kind: str = "full_attention") -> int:
    """Q, K, V and output projections. GQA shrinks K and V to num_key_value_heads heads (Ainslie et al. 2023); an
    output gate (Qwen3-Next attn_output_gate) doubles the query projection.

    MLA (DeepSeek-V2, arXiv 2405.04434 §2.1): queries through a rank-q_lora down/up projection, keys and values
    through a shared kv_lora latent plus a decoupled RoPE key; output from heads x v_head_dim.
    """
    h, a = m.hidden_size, m.num_attention_heads
    if m.is_mla:
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = h * m.q_lora_rank + m.q_lora_rank * a * qk if m.q_lora_rank else h * a * qk
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim)
        return q + kv + a * m.v_head_dim * h + indexer_params(m)
    s = attention_shape(m, kind)
    q = s.heads * s.d_qk * (2 if m.attn_output_gate else 1)
    kv = s.kv_heads * (s.d_qk + (s.d_v if s.v_proj else 0))
    return h * (q + kv) + s.heads * s.d_v * h


def linear_attention_params(m: ModelSpec) -> int:
    """Gated DeltaNet (Yang et al. 2024, arXiv 2412.06464) as in HF Qwen3NextGatedDeltaNet: in_proj_qkvz
    (q, k, v and the output gate z), in_proj_ba (per-head beta and decay), a depthwise causal conv over q, k, v,
    dt_bias and A_log per value head, a gated RMSNorm over the value head, out_proj."""
    h, nv = m.hidden_size, m.linear_num_value_heads
    key_dim = m.linear_num_key_heads * m.linear_key_head_dim
    value_dim = nv * m.linear_value_head_dim
    conv = (2 * key_dim + value_dim) * m.linear_conv_kernel_dim
    return h * (2 * key_dim + 2 * value_dim) + h * 2 * nv + conv + 2 * nv + m.linear_value_head_dim + value_dim * h


def mamba_params(m: ModelSpec) -> int:
    """Mamba-2 mixer (Dao & Gu 2024, arXiv 2405.21060 §7; HF NemotronHMamba2Mixer): in_proj to z, x, B, C and dt,
    a depthwise conv (with bias) over x, B, C, per-head dt_bias, A_log and D, a gated RMSNorm, out_proj."""
    h, heads = m.hidden_size, m.mamba_num_heads
    inner = heads * m.mamba_head_dim
    conv_dim = inner + 2 * m.n_groups * m.ssm_state_size
    return h * (inner + conv_dim + heads) + conv_dim * (m.conv_kernel + 1) + 3 * heads + inner + inner * h


def mamba1_params(m: ModelSpec) -> int:
    """Mamba-1 selective-SSM mixer (Gu & Dao 2023, arXiv 2312.00752 §3.4; HF JambaMambaMixer): in_proj to x and the
    gate z (2 x inner), x_proj to Δ's rank-R input, B and C (R + 2N), dt_proj back to inner, out_proj; plus the
    small terms in _small_params (depthwise conv with bias, dt bias, A_log, D, RMSNorms on Δ, B and C)."""
    h, n, r = m.hidden_size, m.ssm_state_size, m.mamba_dt_rank
    inner = m.mamba_expand * h
    return h * 2 * inner + inner * (r + 2 * n) + r * inner + inner * h + _small_params(m, "mamba1")


def short_conv_params(m: ModelSpec) -> int:
    """LFM2 gated short convolution (HF Lfm2ShortConv): in_proj to B, C and x (3 x hidden), a depthwise causal conv of
    conv_kernel taps (conv_L_cache) over B*x, out_proj; C gates the conv output. Biases off (conv_bias false)."""
    h = m.hidden_size
    return 3 * h * h + h * h + _small_params(m, "conv")


def mixer_params(m: ModelSpec, kind: str) -> int:
    if kind == "conv":
        return short_conv_params(m)
    if kind == "linear_attention":
        return linear_attention_params(m)
    if kind == "mamba":
        return mamba_params(m)
    if kind == "mamba1":
        return mamba1_params(m)
    if kind == "linear":  # block_configs replace_with_linear: one h x h matrix (Puzzle, arXiv 2411.19146 §3)
        return m.hidden_size * m.hidden_size
    if kind == "none":
        return 0
    return attention_params(m, kind)


def _small_params(m: ModelSpec, kind: str) -> int:
    """Parameters of a mixer that are not GEMM weights (convolutions, per-head scalars, norms)."""
    if kind == "linear_attention":
        key_dim = m.linear_num_key_heads * m.linear_key_head_dim
        conv = (2 * key_dim + m.linear_num_value_heads * m.linear_value_head_dim) * m.linear_conv_kernel_dim
        return conv + 2 * m.linear_num_value_heads + m.linear_value_head_dim
    if kind == "mamba":
        inner = m.mamba_num_heads * m.mamba_head_dim
        conv_dim = inner + 2 * m.n_groups * m.ssm_state_size
        return conv_dim * (m.conv_kernel + 1) + 3 * m.mamba_num_heads + inner
    if kind == "mamba1":
        inner, n = m.mamba_expand * m.hidden_size, m.ssm_state_size
        return inner * (m.conv_kernel + 1) + inner + inner * n + inner + m.mamba_dt_rank + 2 * n
    if kind == "conv":
        return m.hidden_size * m.conv_kernel
    return 0


def mixer_gemm_flops(m: ModelSpec, kind: str) -> float:
    """Forward projection GEMM FLOPs per token (2 per weight)."""
    return 2.0 * (mixer_params(m, kind) - _small_params(m, kind))


def keys_seen(window: int, seq_len: int) -> float:
    """Mean keys per query under a causal mask capped at `window` keys: w - w^2/(2s) for w = min(window, s)."""
    w = min(window, seq_len)
    return w - w * w / (2.0 * seq_len)


def attention_core_flops(m: ModelSpec, seq_len: int, kind: str = "full_attention", causal: bool = True) -> float:
    """QK^T and PV per token: 2 * keys * heads * (d_qk + d_v); keys = s/2 causal, s without a mask.

    Sliding window (Beltagy et al. 2020; gpt-oss, Gemma): keys_seen(sliding_window). Chunked attention (Llama 4
    attention_chunk_size c): keys restart every chunk, c/2 on average. DeepSeek-V3.2 sparse attention attends
    index_topk keys per query (keys_seen(topk)) after a lightning indexer scores every causal key with
    index_n_heads x index_head_dim (DeepSeek-V3.2-Exp report §2.1). gpt-oss attention sinks add one logit per head:
    no FLOPs worth counting.
    """
    if kind == "linear_attention":
        return linear_attention_core_flops(m)
    if kind == "mamba":
        return mamba_core_flops(m)
    if kind == "mamba1":
        return mamba1_core_flops(m)
    if kind == "conv":  # B*x, the conv taps, C*y per channel: linear in the sequence length
        return 2.0 * m.hidden_size * (m.conv_kernel + 2)
    if kind in ("linear", "none"):
        return 0.0
    if m.is_mla:
        a, d_qk, d_v = m.num_attention_heads, m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
    else:
        s = attention_shape(m, kind)
        a, d_qk, d_v = s.heads, s.d_qk, s.d_v
    if not causal:
        return 2.0 * seq_len * a * (d_qk + d_v)
    keys = seq_len / 2.0
    if kind == "sliding_attention":
        keys = keys_seen(m.sliding_window or seq_len, seq_len)
    elif kind == "chunked_attention":
        keys = min(m.attention_chunk_size or seq_len, seq_len) / 2.0
    indexer = 0.0
    if m.index_topk:
        indexer = indexer_core_flops(m, seq_len)
        keys = keys_seen(m.index_topk, seq_len)
    return 2.0 * keys * a * (d_qk + d_v) + indexer


def indexer_core_flops(m: ModelSpec, seq_len: int) -> float:
    """The lightning indexer scores every causal key with index_n_heads x index_head_dim (DeepSeek-V3.2-Exp §2.1)."""
    return 2.0 * (seq_len / 2.0) * m.index_n_heads * m.index_head_dim if m.index_topk else 0.0


def _shares_indexer(m: ModelSpec, i: int) -> bool:
    """GLM-5.2 indexer_types 'shared': the layer reuses the last 'full' layer's top-k, so it has no indexer weights
    and does not score keys again; its sparse attention over the top-k keys is unchanged."""
    return bool(m.index_topk and m.indexer_types and m.indexer_types[i] == "shared")


def layer_mixer_params(m: ModelSpec, i: int) -> int:
    """Layer i's mixer parameters (its kind's, less the indexer where the layer shares one)."""
    own = mixer_params(m, m.mixer_kinds[i])
    return own - indexer_params(m) if _shares_indexer(m, i) else own


def layer_mixer_gemm_flops(m: ModelSpec, i: int) -> float:
    own = mixer_gemm_flops(m, m.mixer_kinds[i])
    return own - 2.0 * indexer_params(m) if _shares_indexer(m, i) else own


def layer_core_flops(m: ModelSpec, seq_len: int, i: int) -> float:
    own = attention_core_flops(m, seq_len, m.mixer_kinds[i])
    return own - indexer_core_flops(m, seq_len) if _shares_indexer(m, i) else own


def linear_attention_core_flops(m: ModelSpec) -> float:
    """Chunkwise gated delta rule per token (Yang et al. 2024, arXiv 2406.06484 §3.3 and arXiv 2412.06464 §3), per
    value head with chunk C, key size dk, value size dv, in multiply-accumulates: K K^T within the chunk (C·dk/2),
    the UT transform (C^2/3), W = T K and U = T V (C·dk/2 + C·dv/2), the inter-chunk state terms (q·S, k·S and the
    state update k^T v': 3·dk·dv) and the causal intra-chunk attention (C·dk/2 + C·dv/2); plus the short conv.
    Linear in the sequence length: nothing here depends on s."""
    c, dk, dv = DELTA_RULE_CHUNK, m.linear_key_head_dim, m.linear_value_head_dim
    per_head = c * dk / 2 + c * c / 3 + c * (dk + dv) / 2 + 3 * dk * dv + c * (dk + dv) / 2
    key_dim = m.linear_num_key_heads * dk
    conv = (2 * key_dim + m.linear_num_value_heads * dv) * m.linear_conv_kernel_dim
    return 2.0 * (m.linear_num_value_heads * per_head + conv)


def mamba_core_flops(m: ModelSpec) -> float:
    """Mamba-2 SSD, chunked (Dao & Gu 2024, arXiv 2405.21060 §6; mamba_ssm ssd_combined.py), per token in
    multiply-accumulates with chunk Q, state N, head size P, H heads, G groups: C·B^T within the chunk per group
    (G·Q/2·N, causal), its product with x per head (H·Q/2·P), the chunk state B^T x and the state-to-output C·S
    (2·H·N·P), plus the short conv over x, B, C. Linear in the sequence length."""
    q, n, p, heads = m.chunk_size, m.ssm_state_size, m.mamba_head_dim, m.mamba_num_heads
    conv_dim = heads * p + 2 * m.n_groups * n
    return 2.0 * (m.n_groups * q / 2 * n + heads * q / 2 * p + 2 * heads * n * p + conv_dim * m.conv_kernel)


def mamba1_core_flops(m: ModelSpec) -> float:
    """Mamba-1 selective scan per token (Gu & Dao 2023, arXiv 2312.00752 eqs. 2a-2b, 4; mamba_ssm selective_scan_fn),
    in multiply-accumulates: per channel and state, Δ·A before its exponential, Δ·B·x, the recurrence dA·h + dB·x and
    C·h into y (4); per channel, D·x and the z gate (2) and the depthwise conv (d_conv). Linear in the sequence
    length: the state is carried, never attended over."""
    inner = m.mamba_expand * m.hidden_size
    return 2.0 * (4 * inner * m.ssm_state_size + 2 * inner + inner * m.conv_kernel)
