"""Real-step check: train a Llama-style model on one GPU and compare with the planner's prediction.

Not a CI test (it needs a CUDA GPU and takes a few minutes). For each micro-batch size and recompute setting it trains
a few steps in plain PyTorch, records the median step time and the allocator's peaks, prices the same single-GPU
layout with planner.search.search.price_layout, and prints measured vs predicted with % errors (also written as JSON).

The training recipe: fp32 master weights, fp32 gradients and AdamW moments (16 B/param) plus the bf16 weight copies
autocast makes for the GEMMs (2 B/param), bf16 activations, fused (flash) causal attention, fp32 cross-entropy over
the bf16 logits. Usage:

    python bench/real_step.py [--steps 10] [--mbs 1 2] [--recompute none full] [--gpu h100]
                              [--shape llama-1b|llama3-8b-4l|qwen3-30b-a3b-4l] [--seq 4096] [--blocks fused]
                              [--framework generic] [--compile]
                              [--profile profile.yaml] [--out real_step.json]
    python bench/real_step.py --reprice REPORT.json [--framework X] [--profile profile.yaml]   (no GPU)

The code is eager PyTorch (unfused RoPE and SwiGLU, the loss in fp32 through autocast), which is what the planner's
PyTorch-native stacks describe (torchtitan's profile: 12 bytes per logit at an eager loss); `--framework` picks the
stack the prediction is priced for, and the JSON report carries the prediction of every stack in PRICED_STACKS.
`--compile` compiles each block and the loss with torch.compile, as torchtitan's [compile] does.
Besides the step's peaks it records what the allocator holds just before the forward pass (weights and optimizer
states) and just after it (plus everything the forward pass saved for backward), the host's time to issue a step (a
step issued much faster than it runs is GPU-bound), and for the MoE shape how unevenly the router spread the tokens.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

ROOT = Path(__file__).resolve().parents[1]
# The shapes a run can train (Hugging Face config.json keys, so the planner reads exactly what is trained):
# Llama-3.2-1B, and Llama 3 8B's layer shapes with 4 of its 32 layers (its GEMM sizes at a size one GPU can train
# with AdamW; the embedding is tied here, as in the 1B).
SHAPES: dict[str, dict[str, Any]] = {
    "llama-1b": {
        "name": "llama-1b-real-step", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 128256, "hidden_act": "silu",
        "tie_word_embeddings": True, "max_position_embeddings": 131072,
    },
    "llama3-8b-4l": {
        "name": "llama3-8b-4-layers-real-step", "hidden_size": 4096, "num_hidden_layers": 4,
        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
        "hidden_act": "silu", "tie_word_embeddings": True, "max_position_embeddings": 131072,
    },
    # Qwen3-30B-A3B's shapes with 4 of its 48 layers (huggingface.co/Qwen/Qwen3-30B-A3B config.json): 128 experts of
    # width 768, 8 per token, softmax router with renormalised top-k, QK-norm, untied head. Every layer is a MoE layer,
    # run as torchtitan's MoE runs it without expert parallelism (see make_model), so one GPU shows what a small
    # fine-grained MoE layer costs when all of its experts are local: grouped GEMMs at a few hundred tokens per expert
    # and the router's and token shuffle's eager ops.
    "qwen3-30b-a3b-4l": {
        "name": "qwen3-30b-a3b-4-layers-real-step", "model_type": "qwen3_moe", "hidden_size": 2048,
        "intermediate_size": 6144, "num_hidden_layers": 4, "num_attention_heads": 32, "num_key_value_heads": 4,
        "head_dim": 128, "vocab_size": 151936, "hidden_act": "silu", "tie_word_embeddings": False,
        "max_position_embeddings": 40960, "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True,
    },
}
MODEL: dict[str, Any] = SHAPES["llama-1b"]  # the shape this run trains (use_shape)
SEQ_LEN = 4096
RMS_EPS = 1e-5
ROPE_THETA = 500_000.0
RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2}  # planner.inputs.problem.RECOMPUTE indices
# Block layouts: "fused" projects Q, K and V in one GEMM and gate and up in another (Megatron-Core's layout);
# "torchtitan" has torchtitan's Llama modules, wq, wk, wv, wo and w1, w3, w2, whose call order its op-level selective
# checkpointing counts matmuls in (recompute "selective" needs it).
BLOCKS = ("fused", "torchtitan")
# Stacks whose prediction the JSON report carries (the printed table shows --framework's).
PRICED_STACKS = ("generic", "megatron-core", "torchtitan")
GIB = 2.0**30


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10, help="measured steps per configuration (median is kept)")
    ap.add_argument("--warmup", type=int, default=3, help="unmeasured steps first (allocator, cuBLAS heuristics)")
    ap.add_argument("--mbs", type=int, nargs="+", default=[1, 2], help="micro-batch sizes to run")
    ap.add_argument("--recompute", nargs="+", choices=sorted(RECOMPUTE_CODES), default=["none", "full"],
                    help="activation recompute settings to run (full = torch.utils.checkpoint per layer; selective "
                    "= torchtitan's op-level policy, with --blocks torchtitan)")
    ap.add_argument("--blocks", choices=BLOCKS, default="fused", help="the block's projections (see BLOCKS)")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama-1b", help="the model shapes to train")
    ap.add_argument("--seq", type=int, default=SEQ_LEN, help="sequence length (tokens per sample)")
    ap.add_argument("--gpu", default=None, help="catalog GPU key for the prediction (default: detected; h100 if "
                    "the device is not in the catalog)")
    ap.add_argument("--framework", default=None, help="stack the printed prediction is priced for (default: generic, "
                    "or the stored report's with --reprice)")
    ap.add_argument("--reprice", default=None, metavar="REPORT.json",
                    help="price a stored report's measurements again with the planner as it is now (no GPU)")
    ap.add_argument("--compile", action="store_true", help="torch.compile each block and the loss (torchtitan's "
                    "[compile] components model and loss)")
    ap.add_argument("--profile", default=None, help="also predict with this efficiency profile (plan calibrate)")
    ap.add_argument("--out", default=None, help="JSON report path (default real_step.json; with --reprice, only "
                    "where given)")
    args = ap.parse_args(argv)
    args.framework_given, args.out_given = args.framework is not None, args.out is not None
    args.framework = args.framework or "generic"
    args.out = args.out or "real_step.json"
    if args.steps < 1 or args.warmup < 0 or any(m < 1 for m in args.mbs):
        ap.error("--steps and --mbs must be positive, --warmup at least 0")
    if "selective" in args.recompute and args.blocks != "torchtitan" and not args.reprice:
        ap.error("--recompute selective is torchtitan's op-level policy: add --blocks torchtitan")
    return args


def use_shape(name: str, seq_len: int = SEQ_LEN) -> None:
    """Train and price SHAPES[name] at seq_len tokens per sample in this process (one shape per run)."""
    global MODEL, SEQ_LEN
    MODEL, SEQ_LEN = SHAPES[name], seq_len


def _fail(msg: str, code: int = 2) -> NoReturn:
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(code)


# --- the model (plain PyTorch; classes are built once torch is imported, so --help needs no torch) -----------------
def op_sac_context(torch: Any) -> Any:
    """torchtitan's op-level selective checkpointing policy (torchtitan/parallelisms/parallelize_llama.py): keep the
    outputs of the attention kernels and of every other matmul (the 1st, 3rd, ... in the block's call order),
    recompute everything else in backward. A fresh count per checkpointed call, as torchtitan builds it."""
    from collections import defaultdict

    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    save = {aten.mm.default}
    for name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                 "_scaled_dot_product_cudnn_attention"):
        if hasattr(aten, name):
            save.add(getattr(aten, name).default)
    meta: dict[str, int] = defaultdict(int)

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
        if func == aten.mm.default:
            meta[key] += 1
        keep = func in save and not (func == aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def op_sac_context_fn() -> Any:
    """op_sac_context as checkpoint's context_fn: a module-level function, which torch.compile can trace through
    (it refuses a closure)."""
    import torch

    return op_sac_context(torch)


def make_model(torch: Any, recompute: str, compiled: bool = False, blocks: str = "fused") -> Any:
    nn, F = torch.nn, torch.nn.functional
    from torch.utils.checkpoint import checkpoint

    h, layers, heads = MODEL["hidden_size"], MODEL["num_hidden_layers"], MODEL["num_attention_heads"]
    kv_heads, ffn, vocab = MODEL["num_key_value_heads"], MODEL["intermediate_size"], MODEL["vocab_size"]
    d = MODEL.get("head_dim") or h // heads
    qk_norm = str(MODEL.get("model_type", "")).startswith("qwen3")  # Qwen3 norms each head's q and k before RoPE
    tied = MODEL.get("tie_word_embeddings", True)

    class RMSNorm(nn.Module):
        def __init__(self, dim: int = h) -> None:
            super().__init__()
            self.dim = dim
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x: Any) -> Any:
            # Outside autocast: it would run the norm in fp32 and keep fp32 activations, which bf16 stacks do not.
            with torch.autocast("cuda", enabled=False):
                return F.rms_norm(x, (self.dim,), self.weight.to(x.dtype), RMS_EPS)

    def rope(x: Any, cos: Any, sin: Any) -> Any:
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            if blocks == "fused":
                self.qkv = nn.Linear(h, (heads + 2 * kv_heads) * d, bias=False)  # fused QKV, as Megatron-Core
            else:  # torchtitan's wq, wk, wv
                self.wq = nn.Linear(h, heads * d, bias=False)
                self.wk = nn.Linear(h, kv_heads * d, bias=False)
                self.wv = nn.Linear(h, kv_heads * d, bias=False)
            self.out = nn.Linear(heads * d, h, bias=False)
            if qk_norm:
                self.q_norm, self.k_norm = RMSNorm(d), RMSNorm(d)

        def forward(self, x: Any, cos: Any, sin: Any) -> Any:
            b, s, _ = x.shape
            if blocks == "fused":
                q, k, v = self.qkv(x).split([heads * d, kv_heads * d, kv_heads * d], dim=-1)
            else:
                q, k, v = self.wq(x), self.wk(x), self.wv(x)
            q, k = q.view(b, s, heads, d), k.view(b, s, kv_heads, d)
            if qk_norm:
                q, k = self.q_norm(q), self.k_norm(k)
            q = rope(q.transpose(1, 2), cos, sin)
            k = rope(k.transpose(1, 2), cos, sin)
            v = v.view(b, s, kv_heads, d).transpose(1, 2)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # K/V not materialised x4
            return self.out(o.transpose(1, 2).reshape(b, s, heads * d))

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            if blocks == "fused":
                self.fc1 = nn.Linear(h, 2 * ffn, bias=False)  # gate and up in one GEMM
            else:  # torchtitan's FeedForward: w2(silu(w1(x)) * w3(x))
                self.w1 = nn.Linear(h, ffn, bias=False)
                self.w3 = nn.Linear(h, ffn, bias=False)
            self.fc2 = nn.Linear(ffn, h, bias=False)

        def forward(self, x: Any) -> Any:
            if blocks == "fused":
                gate, up = self.fc1(x).chunk(2, dim=-1)
            else:
                gate, up = self.w1(x), self.w3(x)
            return self.fc2(F.silu(gate) * up)

    class MoE(nn.Module):
        """torchtitan's MoE layer without expert parallelism (torchtitan/models/common/moe.py and
        token_dispatcher.py LocalTokenDispatcher at pytorch/torchtitan@b5bcd76c): the router's gate in fp32, softmax
        scores, top-k and their renormalisation, the routing map and per-expert counts (kept on the GPU: no host
        sync), a stable argsort of the expert ids, the gather of token copies, three grouped GEMMs
        (torch._grouped_mm over all experts, bf16, no padding of token groups), the scores applied in fp32 and the
        scatter-add back to the tokens."""

        def __init__(self) -> None:
            super().__init__()
            n, self.k, f = MODEL["num_experts"], MODEL["num_experts_per_tok"], MODEL["moe_intermediate_size"]
            self.gate = nn.Linear(h, n, bias=False)
            self.w1 = nn.Parameter(torch.empty(n, f, h))
            self.w3 = nn.Parameter(torch.empty(n, f, h))
            self.w2 = nn.Parameter(torch.empty(n, h, f))
            for w in (self.w1, self.w2, self.w3):
                nn.init.normal_(w, std=0.02)
            self.register_buffer("tokens_per_expert", torch.zeros(n), persistent=False)

        def forward(self, x: Any) -> Any:
            b, s, _ = x.shape
            x = x.reshape(-1, h)
            with torch.autocast("cuda", enabled=False):  # the gate in fp32 (torchtitan: autocast to float32)
                scores = F.linear(x.float(), self.gate.weight)
            scores = F.softmax(scores, dim=-1)
            _, ids = torch.topk(scores, k=self.k, dim=-1, sorted=False)
            top = scores.gather(dim=-1, index=ids)
            top = top / (top.sum(dim=-1, keepdim=True) + 1e-20)  # norm_topk_prob (torchtitan's route_norm)
            counts = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, ids, True).sum(dim=0)
            with torch.no_grad():
                self.tokens_per_expert.add_(counts)
            order = torch.argsort(ids.view(-1), stable=True)
            top_sorted = top.view(-1)[order]
            token = order // self.k
            xs = x[token].bfloat16()
            offs = torch.cumsum(counts, dim=0, dtype=torch.int32)
            hid = F.silu(torch._grouped_mm(xs, self.w1.bfloat16().transpose(-2, -1), offs=offs))
            hid = hid * torch._grouped_mm(xs, self.w3.bfloat16().transpose(-2, -1), offs=offs)
            ys = torch._grouped_mm(hid, self.w2.bfloat16().transpose(-2, -1), offs=offs).type_as(x)
            ys = (ys.to(torch.float32) * top_sorted.reshape(-1, 1)).to(ys.dtype)
            out = torch.zeros_like(x).scatter_add(0, token.reshape(-1, 1).expand(-1, h), ys)
            return out.view(b, s, h)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.attn, self.norm2 = RMSNorm(), Attention(), RMSNorm()
            self.mlp = MoE() if MODEL.get("num_experts") else MLP()

        def forward(self, x: Any, cos: Any, sin: Any) -> Any:
            x = x + self.attn(self.norm1(x), cos, sin)
            return x + self.mlp(self.norm2(x))

    class Checkpointed(nn.Module):
        """A block under activation checkpointing: the whole block re-run (full) or torchtitan's op policy
        (selective); compiled around the checkpoint, as torchtitan wraps then compiles."""

        def __init__(self, block: Any) -> None:
            super().__init__()
            self.block = block

        def forward(self, x: Any, cos: Any, sin: Any) -> Any:
            if recompute == "selective":
                return checkpoint(self.block, x, cos, sin, use_reentrant=False, context_fn=op_sac_context_fn)
            return checkpoint(self.block, x, cos, sin, use_reentrant=False)

    class Llama(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, h)
            nn.init.normal_(self.embed.weight, std=0.02)  # N(0, 1) through the tied head gives loss ~1e2
            self.layers = nn.ModuleList(Block() if recompute == "none" else Checkpointed(Block())
                                        for _ in range(layers))
            self.norm = RMSNorm()
            if not tied:
                self.head = nn.Linear(h, vocab, bias=False)
            inv = 1.0 / ROPE_THETA ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
            angles = torch.outer(torch.arange(SEQ_LEN, dtype=torch.float32), inv)
            angles = torch.cat((angles, angles), dim=-1)
            self.register_buffer("cos", angles.cos().to(torch.bfloat16), persistent=False)
            self.register_buffer("sin", angles.sin().to(torch.bfloat16), persistent=False)

        def forward(self, ids: Any, labels: Any) -> Any:
            x = self.embed(ids).to(torch.bfloat16)  # bf16 residual stream (autocast leaves embeddings in fp32)
            for layer in self.layers:
                x = layer(x, self.cos, self.sin)
            # tied LM head (Llama-3.2-1B ties embeddings); Qwen3-30B-A3B has its own
            logits = F.linear(self.norm(x), self.embed.weight if tied else self.head.weight)
            return loss_fn(logits, labels)

    def cross_entropy(logits: Any, labels: Any) -> Any:  # in fp32, as autocast runs it and torchtitan casts it
        return F.cross_entropy(logits.view(-1, vocab).float(), labels.reshape(-1))

    loss_fn = torch.compile(cross_entropy) if compiled else cross_entropy
    with torch.device("cuda"):  # initialise on the GPU: 1.2B parameters on the host would take seconds
        model = Llama()
    if compiled:  # per block, as torchtitan compiles (identical blocks share one compiled graph)
        for i, layer in enumerate(model.layers):
            model.layers[i] = torch.compile(layer)
    return model


def measure(torch: Any, mbs: int, recompute: str, steps: int, warmup: int, compiled: bool = False,
            blocks: str = "fused") -> dict[str, Any]:
    """Median step time and allocator peaks for one configuration; {'oom': True} when it does not fit."""
    model = opt = None
    try:
        model = make_model(torch, recompute, compiled, blocks)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)  # fused: no foreach temporaries
        return _time_steps(torch, model, opt, mbs, steps, warmup)
    except torch.cuda.OutOfMemoryError:
        return {"oom": True, "peak_allocated_gib": torch.cuda.max_memory_allocated() / GIB}
    finally:
        model = opt = None  # drop this configuration's weights and optimizer states before the next one starts
        gc.collect()
        torch.cuda.empty_cache()


def _time_steps(torch: Any, model: Any, opt: Any, mbs: int, steps: int, warmup: int) -> dict[str, Any]:
    ids = torch.randint(0, MODEL["vocab_size"], (mbs, SEQ_LEN + 1), device="cuda")
    inputs, labels = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()  # after the weights exist, so the peak covers exactly the training steps

    from torch.nn.attention import SDPBackend, sdpa_kernel

    # Fused attention only: a silent fall-back to the math backend would keep s x s scores and distort the memory.
    fused = [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]

    held: dict[str, float] = {}

    def step() -> None:
        held["before_forward_gib"] = torch.cuda.memory_allocated() / GIB
        with sdpa_kernel(fused):  # covers backward too, where checkpointed layers run their forward again
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(inputs, labels)
            held["after_forward_gib"] = torch.cuda.memory_allocated() / GIB
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    for counts in expert_counts(model):  # MoE layers' routed-token counts: from the measured steps only
        counts.zero_()
    times, issue = [], []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start.record()
        step()
        end.record()
        issue.append(time.perf_counter() - t0)  # the host's time to issue the step, the GPU still running behind
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return {"oom": False, "step_time_s": statistics.median(times), "step_times_s": times,
            "host_issue_s": statistics.median(issue), **memory_readings(torch), **held,
            "params": sum(p.numel() for p in model.parameters()), **expert_load(model)}


def expert_counts(model: Any) -> list[Any]:
    """Each MoE layer's routed-token counts per expert (MoE.tokens_per_expert); none for a dense model."""
    return [buf for name, buf in model.named_buffers() if name.endswith("tokens_per_expert")]


def expert_load(model: Any) -> dict[str, float]:
    """How unevenly the router spread the measured steps' tokens: the busiest expert's count over the mean, per MoE
    layer (their median and maximum); nothing for a dense model."""
    ratios = [float(c.max() / c.mean()) for c in expert_counts(model) if float(c.mean()) > 0]
    if not ratios:
        return {}
    return {"busiest_expert_over_mean_median": statistics.median(ratios), "busiest_expert_over_mean_max": max(ratios)}


def memory_readings(torch: Any) -> dict[str, float]:
    """The three memory figures the planner predicts, as torch reports them since the last peak reset: peak of
    live tensors (memory_allocated_gib), the caching allocator's peak pool (memory_reserved_gib) and everything on
    the device, CUDA context and NCCL included (memory_peak_gib; other processes too, so run on an idle GPU)."""
    free, total = torch.cuda.mem_get_info()
    return {"peak_allocated_gib": torch.cuda.max_memory_allocated() / GIB,
            "peak_reserved_gib": torch.cuda.max_memory_reserved() / GIB,
            "device_used_gib": (total - free) / GIB}


# --- the planner's side ------------------------------------------------------------------------------------------
def predict(gpu_key: str, mbs: int, recompute: str, profile: Any = None, framework: str = "generic",
            compiled: bool = False) -> dict[str, float]:
    from planner.inputs.catalog import load_cluster, model_from_mapping
    from planner.inputs.layout import KNOBS, Layout
    from planner.inputs.problem import Problem
    from planner.inputs.profile import apply_profile
    from planner.inputs.specs import TrainingSpec
    from planner.search.search import price_layout

    model = model_from_mapping(MODEL, "bench/real_step.py")
    cluster = load_cluster(f"{gpu_key}x1")
    if profile is not None:
        cluster = cluster.model_copy(update={"gpu": apply_profile(cluster.gpu, profile)})
    from planner.cost.profiles import plan_compiles_loss, profile_for

    # torch_compile is a PyTorch-native stack's knob; stacks without a compile switch are priced as they run
    has_switch = profile_for(framework).compile_speedup != 1.0
    training = TrainingSpec(seq_len=SEQ_LEN, global_batch=mbs, framework=framework,
                            torch_compile=compiled if has_switch else None)
    layout = dict.fromkeys(KNOBS, 0)  # knobs not named here (categoricals) take their first value
    layout.update(tp=1, pp=1, dp=1, cp=1, ep=1, vpp=1, mbs=mbs, zero=0, recompute=RECOMPUTE_CODES[recompute], sp=0,
                  schedule=0)
    # a compiled run compiles its loss too (torchtitan's [compile] components), as `plan` prices it
    problem = Problem(model, cluster, training, compiled_loss=plan_compiles_loss(training))
    out = price_layout(problem, Layout.from_dict(layout))
    # Like for like (planner.cost.memory_terms): each figure torch reports against the prediction of that figure.
    out["peak_allocated_gib"] = out["memory_allocated_gib"]
    out["peak_reserved_gib"] = out["memory_reserved_gib"]
    out["device_used_gib"] = out["memory_peak_gib"]
    return out


COMPARED = (("step_time_s", "step time (s)"), ("peak_allocated_gib", "peak allocated (GiB)"),
            ("peak_reserved_gib", "peak reserved (GiB)"), ("device_used_gib", "device used (GiB)"))


def error_pct(predicted: float, measured: float) -> float | None:
    return None if not measured else 100.0 * (predicted - measured) / measured


def report(rows: list[dict[str, Any]], with_profile: bool) -> str:
    head = f"{'config':22s} {'metric':22s} {'measured':>10s} {'predicted':>10s} {'error':>8s}"
    if with_profile:
        head += f" {'w/ profile':>10s} {'error':>8s}"
    lines = [head, "-" * len(head)]
    for row in rows:
        name = f"mbs={row['mbs']} recompute={row['recompute']}"
        if row["measured"]["oom"]:
            lines.append(f"{name:22s} out of memory (predicted peak {row['predicted']['memory_peak_gib']:.1f} GiB)")
            continue
        for key, label in COMPARED:
            meas, pred = row["measured"][key], row["predicted"][key]
            line = f"{name:22s} {label:22s} {meas:10.3f} {pred:10.3f} {row['error_pct'][key]:+7.1f}%"
            if with_profile:
                line += f" {row['predicted_profile'][key]:10.3f} {row['error_pct_profile'][key]:+7.1f}%"
            lines.append(line)
            name = ""
        if "host_issue_s" in row["measured"]:  # recorded since the MoE shape; older reports lack it
            lines.append(f"{'':22s} {'host issue time (s)':22s} {row['measured']['host_issue_s']:10.3f}")
        if "busiest_expert_over_mean_median" in row["measured"]:
            lines.append(f"{'':22s} {'busiest expert / mean':22s} "
                         f"{row['measured']['busiest_expert_over_mean_median']:10.2f}")
    return "\n".join(lines)


def price_row(row: dict[str, Any], gpu_key: str, framework: str, compiled: bool, profile: Any) -> dict[str, Any]:
    """One measured configuration with the planner's predictions (the chosen stack's, every PRICED_STACKS stack's,
    and with the efficiency profile where one is given) and the % errors against the measurement."""
    mbs, recompute = row["mbs"], row["recompute"]
    out = {"mbs": mbs, "recompute": recompute, "measured": row["measured"],
           "predicted": predict(gpu_key, mbs, recompute, None, framework, compiled),
           "predicted_by_stack": {fw: predict(gpu_key, mbs, recompute, None, fw, compiled) for fw in PRICED_STACKS}}
    if profile is not None:
        out["predicted_profile"] = predict(gpu_key, mbs, recompute, profile, framework, compiled)
    if not out["measured"]["oom"]:
        for suffix in ("", "_profile"):
            if "predicted" + suffix in out:
                out["error_pct" + suffix] = {k: error_pct(out["predicted" + suffix][k], out["measured"][k])
                                             for k, _ in COMPARED}
    return out


def print_report(doc: dict[str, Any]) -> None:
    print(f"{doc['device']}; predicted as {doc['gpu_key']}x1, framework {doc['framework']}, seq {doc['seq_len']}"
          f"{', compiled' if doc['compile'] else ''}")
    print(report(doc["runs"], any("predicted_profile" in r for r in doc["runs"])))


def reprice(path: str, profile: Any, profile_path: str | None, framework: str | None) -> dict[str, Any]:
    """A stored report's measurements priced again by the planner as it is now (no GPU needed): what the
    results under bench/results/ are quoted from after the cost model changes."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        _fail(f"--reprice: cannot read {path} ({exc})")
    shape = next((name for name, spec in SHAPES.items() if spec == doc.get("model")), None)
    if shape is None or not isinstance(doc.get("seq_len"), int):
        _fail(f"--reprice: {path} measured another model than this script trains")
    use_shape(shape, doc["seq_len"])
    doc["framework"] = framework or doc.get("framework", "generic")
    doc["profile"] = profile_path
    doc["runs"] = [price_row(r, doc["gpu_key"], doc["framework"], bool(doc.get("compile")), profile)
                   for r in doc["runs"]]
    return doc


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.seq < 16 or args.seq % 16:
        _fail(f"--seq: {args.seq} is not a positive multiple of 16 (fix: e.g. --seq 4096)")
    use_shape(args.shape, args.seq)
    if str(ROOT) not in sys.path:  # run as `python bench/real_step.py` from a checkout without installing
        sys.path.insert(0, str(ROOT))
    from planner.errors import PlanInputError
    from planner.evidence.calibrate import detect_gpu_key
    from planner.inputs.catalog import gpu_catalog
    from planner.inputs.profile import load_profile

    try:
        profile = load_profile(args.profile) if args.profile else None
    except PlanInputError as exc:
        _fail(exc.one_line())
    if args.reprice:
        doc = reprice(args.reprice, profile, args.profile, args.framework if args.framework_given else None)
        print_report(doc)
        if args.out_given:
            _write(doc, args.out)
        return
    from planner.cost.profiles import PROFILE_NAMES

    if args.framework not in PROFILE_NAMES:
        _fail(f"--framework: unknown stack '{args.framework}' (fix: use one of {', '.join(PROFILE_NAMES)})")
    if args.gpu and args.gpu not in gpu_catalog():
        _fail(f"--gpu: unknown GPU '{args.gpu}' (fix: use one of {', '.join(gpu_catalog())})")
    try:
        import torch
    except (ImportError, OSError):
        _fail("bench/real_step.py needs PyTorch with CUDA, and torch cannot be imported here "
              "(fix: run it on a GPU machine with torch installed)")
    if not torch.cuda.is_available():
        _fail(f"bench/real_step.py needs PyTorch with CUDA, and torch {torch.__version__} sees no CUDA device "
              "(fix: run it on a GPU machine)")
    device = torch.cuda.get_device_name(0)
    gpu_key = args.gpu or detect_gpu_key(device)
    if gpu_key is None:
        print(f"warning: '{device}' is not in the GPU catalog; predicting with h100 figures (use --gpu)",
              file=sys.stderr)
        gpu_key = "h100"

    rows = []
    for recompute in args.recompute:
        for mbs in args.mbs:
            print(f"running mbs={mbs} recompute={recompute} ...", file=sys.stderr, flush=True)
            measured = measure(torch, mbs, recompute, args.steps, args.warmup, args.compile, args.blocks)
            rows.append(price_row({"mbs": mbs, "recompute": recompute, "measured": measured}, gpu_key,
                                  args.framework, args.compile, profile))

    doc = {"schema_version": 1, "device": device, "torch": torch.__version__, "gpu_key": gpu_key,
           "profile": args.profile, "framework": args.framework, "compile": args.compile, "blocks": args.blocks,
           "model": MODEL,
           "seq_len": SEQ_LEN, "steps": args.steps, "warmup": args.warmup,
           "runs": rows}
    print_report(doc)
    _write(doc, args.out)


def _write(doc: dict[str, Any], out: str) -> None:
    try:
        Path(out).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    except OSError as exc:
        _fail(f"--out: cannot write {out} ({exc.strerror})")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
