"""Plain-PyTorch blocks that save for backward what the fused training kernels save, for checking
planner/cost/memory.py's activation bytes (tests/test_activation_memory.py uses it; importing it needs torch).

What is measured: a forward pass under `torch.autograd.graph.saved_tensors_hooks`; every tensor autograd keeps for
backward is recorded by the storage it lives in (a view of a stored tensor costs nothing more, and the same storage
saved by several ops counts once), parameters excluded. That is the memory a layer holds between its forward and
its backward.

The kernels follow Megatron-Core with Transformer Engine, the stack the planner's formula describes:
* fused norms (Apex/TE FusedLayerNorm, FusedRMSNorm) keep their input and the fp32 per-token statistics;
* fused attention (FlashAttention, Dao et al. 2022; TE DotProductAttention) keeps q, k, v, the output and the fp32
  log-sum-exp per head, never the s x s scores; the unfused path (Megatron-LM paper era) keeps Q, K, the softmax
  output, the dropout mask and the dropout output (Korthikanti et al. 2022 §4.1), in Megatron's [s, b, h] layout so
  that the batched GEMMs read strided views instead of copies;
* fused bias-SwiGLU (megatron/core/fusions/fused_bias_swiglu.py) keeps only its input and recomputes silu; with
  `eager_glu` the activation is eager PyTorch instead, silu(gate) * up on chunks of fc1's output (torchtitan's
  FeedForward, Hugging Face's LlamaMLP), which keeps silu(gate) too;
* Linear keeps its input; dropout keeps a 1-byte mask;
* tensor parallelism is emulated on one process: a rank holds heads/t and ffn/t, the column-parallel GEMM input is
  gathered from the sequence shards with sequence parallelism (Megatron saves the local shard and re-gathers in
  backward, tensor_parallel/layers.py LinearWithGradAccumulationAndAsyncCommunication), and the row-parallel output
  is reduced (or reduce-scattered) — collectives move no saved bytes, so the emulation copies or slices;
* MoE as Megatron's token dispatcher: top-k of the router logits, softmax over the k scores, permute by sorted
  indices, experts with the probability applied in their activation (Megatron-Core 0.16 experts.py
  activation_func_with_probs), unpermute (moe_utils.permute/unpermute, no probabilities);
* recompute: "selective" discards the norm outputs and the activation output (Megatron --recompute-modules
  layernorm, moe_act / mlp activation; TE CheckpointWithoutOutput), emulated with torch.utils.checkpoint around
  norm + following GEMM and activation + fc2; "full" checkpoints the layer, keeping its input.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from planner.inputs.specs import ModelSpec

DTYPE = torch.bfloat16


class _FusedNorm(torch.autograd.Function):
    """RMSNorm / LayerNorm that keeps its input and fp32 statistics (rstd; LayerNorm also the mean)."""

    @staticmethod
    def forward(ctx, x, weight, bias, rms):  # noqa: ANN001
        xf = x.float()
        mean = None if rms else xf.mean(-1, keepdim=True)
        centred = xf if rms else xf - mean
        rstd = torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + 1e-5)
        stats = (rstd,) if rms else (rstd, mean)
        ctx.save_for_backward(x, weight, *stats)
        out = centred * rstd * weight.float()
        return (out if bias is None else out + bias.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001
        raise NotImplementedError("forward-only: the test counts what is saved")


class _FlashAttention(torch.autograd.Function):
    """Causal attention that keeps q, k, v, the output and the fp32 log-sum-exp, as fused kernels do.

    q: (s, b, a, d), k/v: (s, b, g, d) (GQA: g key/value heads); output (s, b, a, dv), contiguous."""

    @staticmethod
    def forward(ctx, q, k, v):  # noqa: ANN001
        s, b, a, _ = q.shape
        rep = a // k.shape[2]
        qf = q.float().permute(1, 2, 0, 3)
        kf = k.float().repeat_interleave(rep, 2).permute(1, 2, 0, 3)
        vf = v.float().repeat_interleave(rep, 2).permute(1, 2, 0, 3)
        scores = qf @ kf.transpose(-1, -2) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
        lse = torch.logsumexp(scores, -1)  # (b, a, s) fp32
        out = (torch.softmax(scores, -1) @ vf).permute(2, 0, 1, 3).contiguous().to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001
        raise NotImplementedError("forward-only: the test counts what is saved")


class _FusedSwiGLU(torch.autograd.Function):
    """silu(gate) * up keeping only the concatenated [gate, up] input (Megatron bias_swiglu_impl)."""

    @staticmethod
    def forward(ctx, y):  # noqa: ANN001
        ctx.save_for_backward(y)
        gate, up = y.chunk(2, -1)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001
        raise NotImplementedError("forward-only: the test counts what is saved")


class _WeightedSwiGLU(torch.autograd.Function):
    """(silu(gate) * up) * prob keeping the [gate, up] input and the per-row probability (Megatron-Core
    weighted_bias_swiglu_impl, the experts' activation_func_with_probs: the router probability is applied inside
    the activation, so the unpermute that follows needs no expert output for its gradient)."""

    @staticmethod
    def forward(ctx, y, prob):  # noqa: ANN001
        ctx.save_for_backward(y, prob)
        gate, up = y.chunk(2, -1)
        return F.silu(gate) * up * prob

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001
        raise NotImplementedError("forward-only: the test counts what is saved")


def _dropout(x: torch.Tensor) -> torch.Tensor:
    """Dropout keeping a 1-byte bool mask, as the CUDA kernel does (F.dropout on CPU keeps a mask in x's dtype)."""
    return torch.native_dropout(x, 0.1, True)[0]


def _act(name: str):  # noqa: ANN202
    name = name.lower()
    if name in ("relu2", "squared_relu"):
        return lambda x: torch.relu(x).square()
    return F.gelu


class Par:
    """Tensor-parallel emulation: t ranks, sequence parallel or not."""

    def __init__(self, t: int, sp: bool):
        self.t, self.sp = t, sp

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """Input of a column-parallel GEMM: all-gathered sequence shards with SP, the replicated input without."""
        return x.repeat(self.t, 1, 1) if self.sp and self.t > 1 else x

    def reduce(self, y: torch.Tensor) -> torch.Tensor:
        """Output of a row-parallel GEMM: reduce-scatter to this rank's sequence shard with SP, all-reduce without."""
        return y[: y.shape[0] // self.t] if self.sp and self.t > 1 else y + 0


class ColumnLinear(nn.Linear):
    """Column-parallel Linear that keeps its (sequence-sharded, with SP) input: Megatron re-gathers it in backward."""

    def __init__(self, par: Par, n_in: int, n_out: int):
        super().__init__(n_in, n_out, bias=False, dtype=DTYPE)
        self.par = par

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.par.sp and self.par.t > 1):
            return super().forward(x)
        return _GatheredLinear.apply(x, self.weight, self.par.t)


class _GatheredLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, t):  # noqa: ANN001
        ctx.save_for_backward(x, weight)
        return F.linear(x.repeat(t, 1, 1), weight)

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001
        raise NotImplementedError("forward-only: the test counts what is saved")


class Norm(nn.Module):
    def __init__(self, h: int, rms: bool):
        super().__init__()
        self.rms = rms
        self.weight = nn.Parameter(torch.ones(h, dtype=DTYPE))
        self.bias = None if rms else nn.Parameter(torch.zeros(h, dtype=DTYPE))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _FusedNorm.apply(x, self.weight, self.bias, self.rms)


class Attention(nn.Module):
    """GQA attention of one TP rank (a/t query heads, g/t key/value heads), fused or unfused core."""

    def __init__(self, m: ModelSpec, par: Par, flash: bool, dropout: bool):
        super().__init__()
        t, d = par.t, m.d_head
        self.a, self.g, self.d = m.num_attention_heads // t, m.kv_heads // t, d
        self.flash, self.dropout = flash, dropout
        self.qkv = ColumnLinear(par, m.hidden_size, (self.a + 2 * self.g) * d)
        self.o = nn.Linear(self.a * d, m.hidden_size, bias=False, dtype=DTYPE)
        self.par = par

    def core(self, qkv: torch.Tensor, recompute_core: bool = False) -> torch.Tensor:
        """Attention from the QKV GEMM output (s, b, (a + 2g)·d) through the output projection."""
        a, g, d = self.a, self.g, self.d
        s, b = qkv.shape[0], qkv.shape[1]
        q, k, v = qkv.view(s, b, a + 2 * g, d).split([a, g, g], dim=2)
        if self.flash:
            out = _FlashAttention.apply(q, k, v).view(s, b, a * d)
        elif recompute_core:  # Korthikanti's selective recompute: the s^2 part is recomputed from q, k, v
            out = checkpoint(self._unfused, q, k, v, use_reentrant=True)
        else:
            out = self._unfused(q, k, v)
        return self.par.reduce(self.o(out))

    def _unfused(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Megatron CoreAttention: baddbmm on [b*np, s, hn] strided views, fused scale+softmax, dropout, bmm."""
        s, b, a, d = q.shape
        qb, kb, vb = (y.reshape(s, b * y.shape[2], d).transpose(0, 1) for y in (q, k, v))
        probs = torch.softmax(torch.bmm(qb, kb.transpose(1, 2)) * (1 / math.sqrt(d)), -1)
        probs = _dropout(probs) if self.dropout else probs
        return torch.bmm(probs, vb).transpose(0, 1).reshape(s, b, a * d)

    def forward(self, x: torch.Tensor, recompute_core: bool = False) -> torch.Tensor:
        return self.core(self.qkv(x), recompute_core)


class MLAttention(nn.Module):
    """Multi-head latent attention as Megatron-Core trains it (no weight absorption): the down projections and
    their norms are duplicated on every TP rank, the up projections column-parallel; fused attention core."""

    def __init__(self, m: ModelSpec, par: Par):
        super().__init__()
        h, t = m.hidden_size, par.t
        self.a, self.nope, self.rope, self.dv, self.lora = (m.num_attention_heads // t, m.qk_nope_head_dim,
                                                            m.qk_rope_head_dim, m.v_head_dim, m.kv_lora_rank)
        qk = self.nope + self.rope
        self.q_lora = m.q_lora_rank
        if self.q_lora:
            self.q_down = nn.Linear(h, self.q_lora, bias=False, dtype=DTYPE)
            self.q_norm = Norm(self.q_lora, True)
            self.q_up = nn.Linear(self.q_lora, self.a * qk, bias=False, dtype=DTYPE)
        else:
            self.q_up = nn.Linear(h, self.a * qk, bias=False, dtype=DTYPE)
        self.kv_down = nn.Linear(h, self.lora + self.rope, bias=False, dtype=DTYPE)
        self.kv_norm = Norm(self.lora, True)
        self.kv_up = nn.Linear(self.lora, self.a * (self.nope + self.dv), bias=False, dtype=DTYPE)
        self.o = nn.Linear(self.a * self.dv, h, bias=False, dtype=DTYPE)
        self.par = par

    def down(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The duplicated down projections of the (gathered) norm output."""
        x = self.par.gather(x)
        return (self.q_down(x) if self.q_lora else self.q_up(x)), self.kv_down(x)

    def up(self, q_a: torch.Tensor, kv_a: torch.Tensor, discard: bool = False) -> torch.Tensor:
        """Up projections, fused attention core and output projection. `discard`: Megatron's mla_up_proj recompute,
        the per-head q, k, v are not kept for backward (emulated by checkpointing them with the core, which also
        drops the core's fp32 log-sum-exp: 4 bytes per head and token, inside the tests' 2 %)."""
        if discard:
            return self.par.reduce(self.o(checkpoint(self._core, q_a, kv_a, use_reentrant=True)))
        return self.par.reduce(self.o(self._core(q_a, kv_a)))

    def _core(self, q_a: torch.Tensor, kv_a: torch.Tensor) -> torch.Tensor:
        s, b, a = q_a.shape[0], q_a.shape[1], self.a
        q = (self.q_up(self.q_norm(q_a)) if self.q_lora else q_a).view(s, b, a, self.nope + self.rope)
        latent, k_pe = kv_a.split([self.lora, self.rope], dim=-1)
        kv = self.kv_up(self.kv_norm(latent)).view(s, b, a, self.nope + self.dv)
        k_nope, v = kv.split([self.nope, self.dv], dim=-1)
        k = torch.cat([k_nope, k_pe.unsqueeze(2).expand(s, b, a, self.rope)], dim=-1)
        return _FlashAttention.apply(q, k, v).view(s, b, a * self.dv)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(*self.down(x))


def _eager_swiglu(y: torch.Tensor) -> torch.Tensor:
    gate, up = y.chunk(2, -1)
    return F.silu(gate) * up


class MLP(nn.Module):
    """Gated (fused SwiGLU, or eager with `eager_glu`) or plain MLP of one TP rank (width/t)."""

    def __init__(self, m: ModelSpec, par: Par, width: int, selective: bool, column: bool = True,
                 eager_glu: bool = False):
        super().__init__()
        self.gated, self.act, self.selective, self.par = m.gated_mlp, _act(m.hidden_act), selective, par
        self.glu = _eager_swiglu if eager_glu else _FusedSwiGLU.apply
        w = width // par.t
        n_out = 2 * w if self.gated else w
        self.fc1 = (ColumnLinear(par, m.hidden_size, n_out) if column else
                    nn.Linear(m.hidden_size, n_out, bias=False, dtype=DTYPE))
        self.fc2 = nn.Linear(w, m.hidden_size, bias=False, dtype=DTYPE)

    def _tail(self, y: torch.Tensor) -> torch.Tensor:
        return self.par.reduce(self.fc2(self.glu(y) if self.gated else self.act(y)))

    def _weighted_tail(self, y: torch.Tensor, prob: torch.Tensor) -> torch.Tensor:
        return self.fc2(_WeightedSwiGLU.apply(y, prob) if self.gated else self.act(y) * prob)

    def forward(self, x: torch.Tensor, prob: torch.Tensor | None = None) -> torch.Tensor:
        y = self.fc1(x)
        if prob is not None:  # a routed expert: the probability scales the activation (Megatron-Core experts.py)
            return (checkpoint(self._weighted_tail, y, prob, use_reentrant=True) if self.selective
                    else self._weighted_tail(y, prob))
        return checkpoint(self._tail, y, use_reentrant=True) if self.selective else self._tail(y)


class MoE(nn.Module):
    """Megatron token-dispatch MoE of one rank (no TP/EP split of the experts here): router, top-k, permute,
    experts (the router probability applied in their activation), unpermute, plus shared experts."""

    def __init__(self, m: ModelSpec, par: Par, selective: bool, weighted: bool = True, eager_glu: bool = False):
        super().__init__()
        self.k, self.e, self.par, self.weighted = m.num_experts_per_tok, m.num_local_experts, par, weighted
        self.router = nn.Linear(m.hidden_size, self.e, bias=False, dtype=DTYPE)
        self.experts = nn.ModuleList(MLP(m, Par(1, False), m.expert_ffn, selective, column=False,
                                         eager_glu=eager_glu) for _ in range(self.e))
        self.shared = (MLP(m, par, m.expert_ffn * m.n_shared_experts, selective, eager_glu=eager_glu)
                       if m.n_shared_experts else None)

    def forward(self, x: torch.Tensor, norm: nn.Module, selective: bool) -> torch.Tensor:
        """MoE of norm(x); selective discards the norm output (recomputed for the router and shared GEMMs)."""
        shape = x.shape
        n = norm(x)
        flat = n.reshape(-1, shape[-1])
        if selective:
            logits = checkpoint(lambda z: self.router(norm(z)), x, use_reentrant=True).reshape(-1, self.e)
        else:
            logits = self.router(flat)
        scores, top = torch.topk(logits, self.k, dim=-1)
        probs = torch.softmax(scores, -1)
        order = torch.argsort(top.reshape(-1), stable=True)  # slots grouped by expert
        rows = order // self.k
        counts = torch.bincount(top.reshape(-1), minlength=self.e).tolist()
        permuted = flat.index_select(0, rows)
        permuted_probs = probs.reshape(-1).index_select(0, order).unsqueeze(-1)
        if self.weighted:  # Megatron-Core: the probability scales the activation
            outs = torch.cat([expert(chunk, p) for expert, chunk, p in
                              zip(self.experts, permuted.split(counts), permuted_probs.split(counts), strict=True)])
        else:  # Hugging Face / DeepSpeed MoE: the expert output times the probability (the output is kept)
            outs = torch.cat([expert(chunk) for expert, chunk in
                              zip(self.experts, permuted.split(counts), strict=True)]) * permuted_probs
        index = rows.unsqueeze(1).expand(-1, shape[-1])  # Megatron unpermute: scatter_add keeps only the index
        out = torch.zeros_like(flat).scatter_add(0, index, outs).view(shape)
        if self.shared is None:
            return out
        if selective:
            y = checkpoint(lambda z: self.shared.fc1(norm(z)), x, use_reentrant=True)
            return out + checkpoint(self.shared._tail, y, use_reentrant=True)
        return out + self.shared(n)


class Layer(nn.Module):
    """Pre-norm decoder layer of one TP rank: x + attn(norm(x)); x + mlp(norm(x)), dropout after each (GPT)."""

    def __init__(self, m: ModelSpec, t: int = 1, sp: bool = False, recompute: str = "none", moe: bool = False,
                 flash: bool = True, dropout: bool = False, weighted: bool = True, eager_glu: bool = False):
        super().__init__()
        self.par = Par(t, sp)
        rms, sel = m.gated_mlp, recompute == "selective"
        self.recompute, self.dropout, self.flash = recompute, dropout, flash
        self.norm1, self.norm2 = Norm(m.hidden_size, rms), Norm(m.hidden_size, rms)
        self.attn = MLAttention(m, self.par) if m.is_mla else Attention(m, self.par, flash, dropout)
        self.mlp = (MoE(m, self.par, sel, weighted, eager_glu) if moe else
                    MLP(m, self.par, m.intermediate_size, False, eager_glu=eager_glu))

    def _drop(self, y: torch.Tensor) -> torch.Tensor:
        return _dropout(y) if self.dropout else y

    def _attention(self, x: torch.Tensor) -> torch.Tensor:
        sel, attn, norm = self.recompute == "selective", self.attn, self.norm1
        if not sel:
            return attn(norm(x))
        if isinstance(attn, MLAttention):  # norm output discarded: norm + down projections recomputed
            return attn.up(*checkpoint(lambda y: attn.down(norm(y)), x, use_reentrant=True), discard=True)
        if not self.flash:  # Korthikanti et al. 2022 §5: selective recompute = the core attention
            return attn(norm(x), recompute_core=True)
        return attn.core(checkpoint(lambda y: attn.qkv(norm(y)), x, use_reentrant=True))

    def _feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        sel, mlp, norm = self.recompute == "selective" and self.flash, self.mlp, self.norm2
        if isinstance(mlp, MoE):
            return mlp(x, norm, sel)
        if not sel:
            return mlp(norm(x))
        return checkpoint(mlp._tail, checkpoint(lambda z: mlp.fc1(norm(z)), x, use_reentrant=True),
                          use_reentrant=True)

    def _body(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self._drop(self._attention(x))
        return x + self._drop(self._feed_forward(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute == "full":
            return checkpoint(self._body, x, use_reentrant=True)
        return self._body(x)


def saved_bytes(layer: nn.Module, x: torch.Tensor) -> int:
    """Bytes autograd keeps from one forward of `layer` on `x` (x itself included when saved), each storage once,
    parameters excluded."""
    params = {p.untyped_storage().data_ptr() for p in layer.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = layer(x)
    del out
    return sum(seen.values())
