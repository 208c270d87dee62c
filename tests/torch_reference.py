"""Plain-PyTorch reference blocks built from a ModelSpec, for cross-checking planner/cost/flops.py.

Helper module, no tests here (tests/test_torch_crosscheck.py uses it); importing it needs torch.

The blocks follow the public reference implementations closely enough that their GEMM shapes and parameter
tensors are the real ones:

* Llama-style decoder layer: RMSNorm, GQA attention with separate q/k/v/o Linear (no bias), SwiGLU MLP
  (gate/up/down). Hugging Face `LlamaDecoderLayer`.
* GPT-style layer: LayerNorm (weight + bias), MHA, two-matrix GELU MLP; Linear biases optional (GPT-2/3 have them).
* Mixtral-style MoE layer: router Linear h -> E, E SwiGLU experts, top-k routing that gathers each expert's tokens,
  so the expert GEMMs cost exactly k experts per token. DeepSeek-style shared experts (n_shared_experts) are one
  extra always-on MLP of width n_shared * moe_intermediate_size, as in `DeepseekV3MoE`.
* Multi-head latent attention (DeepSeek-V2/V3): q_a/q_b low-rank query, kv_a (latent + decoupled RoPE key) and
  kv_b up-projection, with the q_a/kv_a RMSNorms of `DeepseekV3Attention`.
* Embedding + final norm + LM head (tied or untied).

The attention core computes QK^T and PV with explicit torch.matmul over the full s x s score matrix (non-causal),
in a submodule named `core`, so FlopCounterMode counts it and reports it apart from the projections. No rotary
embedding is applied: it is elementwise and FlopCounterMode counts no FLOPs for it either.

On the `meta` device nothing is computed, so routing cannot depend on router scores there: a meta-device MoE
layer assigns token t, slot j to expert (t*k + j) mod E (every expert gets T*k/E tokens, the same number of expert
GEMM FLOPs as any real top-k routing, which always makes T*k token-expert pairs). On a real device the routing is
the ordinary softmax top-k.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from planner.inputs.specs import ModelSpec

__all__ = [
    "Attention", "AttentionCore", "DecoderLayer", "MLAttention", "MLP", "MoE", "ReferenceModel", "RMSNorm",
    "activation", "build_layer", "count_flops", "layer_norm_bias_params", "linear_bias_params", "numel",
    "reference_active_params", "reference_total_params",
]


# --- building blocks ------------------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5, device: str | torch.device | None = None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, device=device))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def make_norm(dim: int, kind: str, device=None) -> nn.Module:
    if kind == "rms":
        return RMSNorm(dim, device=device)
    return nn.LayerNorm(dim, device=device)  # weight + bias


def activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The elementwise nonlinearity of an MLP (gated or not); FLOP-free for FlopCounterMode."""
    act = name.lower()
    if act in ("silu", "swiglu", "swish"):
        return F.silu
    if act in ("relu2", "squared_relu"):
        return lambda x: torch.relu(x).square()
    if act == "relu":
        return torch.relu
    if act in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        return lambda x: F.gelu(x, approximate="tanh")
    return F.gelu  # gelu, geglu, gelu_gated


class AttentionCore(nn.Module):
    """softmax(Q K^T / sqrt(d)) V over the full s x s matrix, heads in dim 1: (b, heads, s, d)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        return torch.matmul(torch.softmax(scores, dim=-1), v)


class Attention(nn.Module):
    """MHA / GQA with separate q, k, v, o projections (Llama, GPT when kv_heads == heads)."""

    def __init__(self, m: ModelSpec, bias: bool = False, device=None):
        super().__init__()
        h, a, kv, d = m.hidden_size, m.num_attention_heads, m.kv_heads, m.d_head
        self.heads, self.kv_heads, self.d = a, kv, d
        self.q_proj = nn.Linear(h, a * d, bias=bias, device=device)
        self.k_proj = nn.Linear(h, kv * d, bias=bias, device=device)
        self.v_proj = nn.Linear(h, kv * d, bias=bias, device=device)
        self.o_proj = nn.Linear(a * d, h, bias=bias, device=device)
        self.core = AttentionCore()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.d).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.d).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.d).transpose(1, 2)
        group = self.heads // self.kv_heads  # GQA: each K/V head serves `group` query heads (repeat_kv in HF)
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        out = self.core(q, k, v).transpose(1, 2).reshape(b, s, self.heads * self.d)
        return self.o_proj(out)


class MLAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-V2 arXiv 2405.04434 §2.1, HF DeepseekV3Attention), no KV cache."""

    def __init__(self, m: ModelSpec, device=None):
        super().__init__()
        h, a = m.hidden_size, m.num_attention_heads
        self.heads, self.nope, self.rope, self.dv = a, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim
        self.kv_lora = m.kv_lora_rank
        qk = self.nope + self.rope
        if m.q_lora_rank:
            self.q_a_proj = nn.Linear(h, m.q_lora_rank, bias=False, device=device)
            self.q_a_layernorm = RMSNorm(m.q_lora_rank, device=device)
            self.q_b_proj = nn.Linear(m.q_lora_rank, a * qk, bias=False, device=device)
        else:
            self.q_proj = nn.Linear(h, a * qk, bias=False, device=device)
        self.kv_a_proj_with_mqa = nn.Linear(h, m.kv_lora_rank + self.rope, bias=False, device=device)
        self.kv_a_layernorm = RMSNorm(m.kv_lora_rank, device=device)
        self.kv_b_proj = nn.Linear(m.kv_lora_rank, a * (self.nope + self.dv), bias=False, device=device)
        self.o_proj = nn.Linear(a * self.dv, h, bias=False, device=device)
        self.core = AttentionCore()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        a = self.heads
        if hasattr(self, "q_a_proj"):
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        else:
            q = self.q_proj(x)
        q = q.view(b, s, a, self.nope + self.rope).transpose(1, 2)
        latent, k_pe = self.kv_a_proj_with_mqa(x).split([self.kv_lora, self.rope], dim=-1)
        kv = self.kv_b_proj(self.kv_a_layernorm(latent)).view(b, s, a, self.nope + self.dv).transpose(1, 2)
        k_nope, v = kv.split([self.nope, self.dv], dim=-1)
        k_pe = k_pe.view(b, 1, s, self.rope).expand(b, a, s, self.rope)  # one shared RoPE key for all heads
        k = torch.cat([k_nope, k_pe], dim=-1)
        out = self.core(q, k, v).transpose(1, 2).reshape(b, s, a * self.dv)
        return self.o_proj(out)


class MLP(nn.Module):
    """Gated (SwiGLU/GeGLU: gate, up, down) or plain (fc1, fc2) MLP, as ModelSpec.gated_mlp says."""

    def __init__(self, m: ModelSpec, width: int, bias: bool = False, device=None):
        super().__init__()
        h = m.hidden_size
        self.gated = m.gated_mlp
        self.act = activation(m.hidden_act)
        if self.gated:
            self.gate_proj = nn.Linear(h, width, bias=bias, device=device)
            self.up_proj = nn.Linear(h, width, bias=bias, device=device)
            self.down_proj = nn.Linear(width, h, bias=bias, device=device)
        else:
            self.fc1 = nn.Linear(h, width, bias=bias, device=device)
            self.fc2 = nn.Linear(width, h, bias=bias, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))
        return self.fc2(self.act(self.fc1(x)))


def static_routing(tokens: int, k: int, experts: int) -> torch.Tensor:
    """Balanced, data-independent top-k assignment (T, k) for the meta device: slot j of token t -> (t*k+j) % E."""
    return (torch.arange(tokens * k) % experts).view(tokens, k)


class MoE(nn.Module):
    """Router (h -> E, no bias), E experts, top-k routing by gathering each expert's tokens; optional shared experts."""

    def __init__(self, m: ModelSpec, device=None):
        super().__init__()
        self.k, self.num_experts = m.num_experts_per_tok, m.num_local_experts
        self.router = nn.Linear(m.hidden_size, m.num_local_experts, bias=False, device=device)
        self.experts = nn.ModuleList(MLP(m, m.expert_ffn, device=device) for _ in range(m.num_local_experts))
        self.shared = MLP(m, m.expert_ffn * m.n_shared_experts, device=device) if m.n_shared_experts else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        tokens = flat.shape[0]
        probs = torch.softmax(self.router(flat), dim=-1)
        weights, chosen = torch.topk(probs, self.k, dim=-1)
        if flat.is_meta:
            chosen_cpu = static_routing(tokens, self.k, self.num_experts)
            weights = torch.gather(probs, 1, chosen_cpu.to(flat.device))
        else:
            chosen_cpu = chosen.cpu()
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            rows, slots = (chosen_cpu == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            rows, slots = rows.to(flat.device), slots.to(flat.device)
            y = expert(flat.index_select(0, rows)) * weights[rows, slots].unsqueeze(-1)
            out = out.index_add(0, rows, y)
        if self.shared is not None:
            out = out + self.shared(flat)
        return out.view(shape)


class DecoderLayer(nn.Module):
    """Pre-norm transformer layer: x + attn(norm(x)), then x + mlp(norm(x)); mlp is an MLP or a MoE."""

    def __init__(self, m: ModelSpec, moe: bool = False, style: str | None = None, bias: bool = False, device=None):
        super().__init__()
        style = style or ("llama" if m.gated_mlp else "gpt")
        norm = "rms" if style == "llama" else "layer"
        self.input_layernorm = make_norm(m.hidden_size, norm, device)
        self.attn = MLAttention(m, device=device) if m.is_mla else Attention(m, bias=bias, device=device)
        self.post_attention_layernorm = make_norm(m.hidden_size, norm, device)
        self.mlp = MoE(m, device=device) if moe else MLP(m, m.intermediate_size, bias=bias, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


def build_layer(m: ModelSpec, moe: bool | None = None, style: str | None = None, bias: bool = False,
                device="meta") -> DecoderLayer:
    """One decoder layer of `m` (a MoE layer when `moe`, by default when m.is_moe)."""
    return DecoderLayer(m, moe=m.is_moe if moe is None else moe, style=style, bias=bias, device=device)


class ReferenceModel(nn.Module):
    """Embedding, the decoder layers (first_k_dense_replace dense, then MoE), final norm and LM head."""

    def __init__(self, m: ModelSpec, style: str | None = None, bias: bool = False, device="meta"):
        super().__init__()
        self.embed_tokens = nn.Embedding(m.vocab_size, m.hidden_size, device=device)
        self.layers = nn.ModuleList(
            build_layer(m, moe=i >= m.dense_layers, style=style, bias=bias, device=device)
            for i in range(m.num_hidden_layers)
        )
        style = style or ("llama" if m.gated_mlp else "gpt")
        self.norm = make_norm(m.hidden_size, "rms" if style == "llama" else "layer", device)
        self.tied = m.tie_word_embeddings
        self.lm_head = None if self.tied else nn.Linear(m.hidden_size, m.vocab_size, bias=False, device=device)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.embed_tokens.weight if self.tied else self.lm_head.weight
        return F.linear(x, weight)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


# --- counting ----------------------------------------------------------------------------------------------------
def numel(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def linear_bias_params(module: nn.Module) -> int:
    return sum(mod.bias.numel() for mod in module.modules() if isinstance(mod, nn.Linear) and mod.bias is not None)


def layer_norm_bias_params(module: nn.Module) -> int:
    return sum(mod.bias.numel() for mod in module.modules() if isinstance(mod, nn.LayerNorm) and mod.bias is not None)


def count_flops(fn: Callable[[], object]) -> dict[str, int]:
    """Run fn() under FlopCounterMode; {module name: FLOPs} (root module = its class name, "Global" = all)."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return {name: sum(ops.values()) for name, ops in counter.get_flop_counts().items()}


def reference_total_params(m: ModelSpec, style: str | None = None, bias: bool = False) -> int:
    """sum(numel) of the whole reference model, built from one prototype of each layer kind on the meta device."""
    total = m.dense_layers * numel(build_layer(m, moe=False, style=style, bias=bias)) if m.dense_layers else 0
    if m.moe_layers:
        total += m.moe_layers * numel(build_layer(m, moe=True, style=style, bias=bias))
    final_norm = m.hidden_size if (style or ("llama" if m.gated_mlp else "gpt")) == "llama" else 2 * m.hidden_size
    head = 0 if m.tie_word_embeddings else m.vocab_size * m.hidden_size
    return total + m.vocab_size * m.hidden_size + head + final_norm


def reference_active_params(m: ModelSpec, style: str | None = None) -> int:
    """Parameters one token touches: reference total less the (E - k) routed experts it skips in each MoE layer."""
    total = reference_total_params(m, style=style)
    if not m.is_moe:
        return total
    expert = numel(MLP(m, m.expert_ffn, device="meta"))
    return total - m.moe_layers * (m.num_local_experts - m.num_experts_per_tok) * expert
