"""What each kind of allocation costs, in bytes per GPU: model states per ZeRO stage, activations (Korthikanti et
al. 2022), logits, and the transient buffers (ZeRO-3 gathers, pipeline hand-offs, fp8 scaling metadata).

The memory side, one job per module:
    memory.py         the formulas: bytes of each allocation kind (this module)
    allocations.py    the per-stage sum: each priced pipeline stage's allocations and total
    device_memory.py  the device total: allocations + fragmentation + CUDA context + NCCL buffers
    memory_terms.py   the printed memory numbers, one function each
    stages.py         every pipeline rank's memory, for the report
    fit_check.py      the search's shortcuts (grouped sums, floors), each tested against the plain sum
"""

from __future__ import annotations

import numpy as np

from planner.cost import expert, flops, module_offload
from planner.cost.profiles import FrameworkProfile, compiled, fused_attention, profile_for
from planner.inputs.frameworks import capabilities_for
from planner.inputs.layout import Recompute, Zero, chunk_layers, rank_layers, uneven_stage_layers
from planner.inputs.problem import Problem
from planner.inputs.specs import ModelSpec

GIB = 2.0**30
MIB = 2.0**20

# Transformer Engine delayed scaling keeps an fp32 amax history (default length 1024) and scale for each fp8 GEMM
# operand (input, weight, grad output) (transformer_engine/common/recipe DelayedScaling amax_history_len).
FP8_AMAX_HISTORY = 1024
FP8_OPERANDS_PER_GEMM = 3
# fp8 parameters (Megatron-Core --fp8-param-gather; every Megatron-Bridge fp8 preset sets fp8_param_gather,
# training/mixed_precision.py): the weights are Transformer Engine fp8 tensors, 1-byte row-wise data plus the 1-byte
# column-wise (transposed) copy the backward GEMMs read ("memory consumption is similar to bf16",
# NVIDIA/TransformerEngine#2168); the fp32 master copy is in the distributed optimizer's shard (optimizer_bytes).
FP8_PARAM_BYTES = 2.0
# A compiled cross-entropy (torch.compile of `cross_entropy(logits.float())`) fuses the fp32 upcast, log-softmax and
# nll into kernels that keep the bf16 logits for backward and write a bf16 gradient: 2 + 2 bytes per logit, where the
# eager loss holds three fp32 tensors at the start of backward (FrameworkProfile.loss_bytes_per_logit, 12). A
# judgement from what the fused kernels must read and write, not a fit; the torchtitan runs are consistent with it:
# its 8B FSDP + compile + Float8 row read 61.8 GiB with the loss eager (benchmarks/llama3_h100_202412_torchtitan.md
# Table 3, pytorch/torchtitan@b5bcd76c6#L46) and 47.0 GiB in 2025 with it compiled (TT-032), 8 x 16,384 x 128,256
# bytes = 15.7 GiB apart.
COMPILED_LOSS_BYTES = 4.0
# A gated activation written as eager PyTorch ops, silu(gate) * up, keeps silu(gate) (bf16, 2 bytes per value) for
# the product's gradient beside the gate|up output the fused kernels keep (Megatron's bias_swiglu recomputes silu in
# backward; so does torch.compile's min-cut partitioner, which re-makes cheap pointwise ops instead of saving them).
# Counted tensor by tensor in tests/test_activation_memory.py and measured on one H100 (bench/real_step.py,
# bench/results/h100-2026-11-27): a Llama 3.2 1B layer kept 8.0·h bytes per token more eager than compiled
# (47.6·h against 39.6·h), and 2 x intermediate_size = 8·h.
EAGER_GLU_BYTES = 2.0


def state_bytes(params: np.ndarray, zero: np.ndarray, shard: np.ndarray, prof: FrameworkProfile,
                fp8: bool, offload: float = 0.0, fp8_params: bool = False) -> dict[str, np.ndarray]:
    """Weights, gradients and optimizer states (Rajbhandari et al. 2020, ZeRO §5): stage k shards the first k of
    (optimizer, gradients, parameters) over `shard` data-parallel ranks. Transformer Engine keeps an extra fp8 copy of
    GEMM weights (1 byte/param) in fp8 training. `fp8_params` (fp8_param_gather, with a sharded optimizer): the model
    weights are fp8 tensors and no bf16 copy exists (FP8_PARAM_BYTES). `offload`: share of the optimizer states kept
    in CPU memory (planner.cost.offload). A profile whose parameters live in host memory (`params_in_host`, DeepSpeed
    offload_param) holds no persistent ZeRO-3 weight partition on the GPU (the gathered layers are transient buffers).
    """
    shard = np.maximum(shard, 1)
    per_weight = prof.weight_bytes + (1.0 if fp8 else 0.0)
    if fp8_params:
        per_weight = np.where(zero >= Zero.OPTIMIZER, FP8_PARAM_BYTES, per_weight)
    weights = params * per_weight
    grads = params * prof.grad_bytes
    optim = params * prof.optimizer_bytes * (1.0 - offload)
    return {
        "weights": np.where(zero >= Zero.PARAMETERS, 0.0 if prof.params_in_host else weights / shard, weights),
        "grads": np.where(zero >= Zero.GRADIENTS, grads / shard, grads),
        "optimizer": np.where(zero >= Zero.OPTIMIZER, optim / shard, optim),
    }


def layer_activation_terms(m: ModelSpec, tp: np.ndarray, sp: np.ndarray, moe: bool, dropout: bool,
                           fp8: bool = False, weighted: bool = True, act_store_fp8: bool = False,
                           routed_load: float = 1.0, eager_glu: bool = False) -> dict[str, np.ndarray]:
    """Bytes per token one layer saves for backward, by term, with fused kernels (Megatron-Core + Transformer Engine).

    Korthikanti et al. 2022 §4.1 count 34·h bytes/token for a GPT layer plus 5·a·s for the s^2 softmax terms; fused
    attention keeps only Q, K, V, the output and a fp32 log-sum-exp per head (Dao et al. 2022), so the s^2 term goes.
    Generalised, and checked tensor by tensor against PyTorch's saved tensors (tests/test_activation_memory.py):
    - "replicated": the two norm inputs, the two GEMM inputs after them (QKV and fc1) and two 1-byte dropout masks
      stay whole on every TP rank without sequence parallelism (Korthikanti eq. 2: the 10·sbh term), /tp with it;
    - "attention": Q, K, V, output, LSE, /tp. MLA trains without weight absorption, so the per-head K (nope + rope)
      and the kv up-projection output (K nope, V) are kept, and its down-projection latents and their norm outputs
      are duplicated on every TP rank (Megatron-Core MLA, linear_q/kv_down_proj "duplicated");
    - "mlp": gated: fc1's gate|up output (kept by the fused bias-SwiGLU, megatron/core/fusions/fused_bias_swiglu.py)
      and the fc2 input; plain: activation input and fc2 input;
    - MoE per routed copy (Megatron token dispatcher, moe_utils.permute/unpermute): the permuted expert input, the
      expert MLP, the permuted probability and two int64 index vectors (gather rows, probability order); per token
      the router's int64 top-k indices and softmax over the k scores; shared experts as a dense MLP. `weighted`:
      Megatron-Core applies the probability inside the experts' activation (experts.py activation_func_with_probs,
      the weighted SwiGLU keeps its input and the probability) and unpermutes without it; other stacks keep one
      more h-wide tensor per copy for the probability's gradient (Hugging Face / DeepSpeed MoE blocks the expert
      output they multiply, torchtitan the unscaled input it scales).
    In fp8 training Transformer Engine saves the fp8 cast of each GEMM input for the weight gradient, so those cost
    1 byte instead of 2 (transformer_engine/pytorch/module/linear.py saves `inputmat`). `act_store_fp8`: the gated
    MLP's SwiGLU input is kept in fp8 too (FrameworkProfile.fp8_activation_store), 1 byte per gate|up value.
    `eager_glu`: the gated activation runs as eager PyTorch ops, silu(gate) * up (torchtitan's FeedForward and
    GroupedExperts, Hugging Face's LlamaMLP, without torch.compile): the product keeps silu(gate) beside the
    gate|up output, EAGER_GLU_BYTES per value more (see that constant).
    """
    h, a = m.hidden_size, m.num_attention_heads
    gemm_in = 1 if fp8 else 2  # bytes per saved GEMM input element
    glu_in = 2 if (fp8 and act_store_fp8) else 4  # bytes per gate|up pair of the gated MLP's activation input
    replicated = 2 * h + 2 * h + gemm_in * 2 * h + (2 * h if dropout else 0)
    latent = 0.0
    if m.is_mla:
        qk, dv = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
        attn = 2 * a * qk + 2 * a * qk + 2 * a * (m.qk_nope_head_dim + dv) + 2 * a * dv + 4 * a
        latent = (4 * m.q_lora_rank if m.q_lora_rank else 0) + 2 * (m.kv_lora_rank + m.qk_rope_head_dim) \
            + 2 * m.kv_lora_rank
    else:
        q, kv = a * m.d_head, m.kv_heads * m.d_head
        attn = 2 * (q + 2 * kv) + 2 * q + 4 * a  # Q, K, V, attention output, fp32 LSE
    act_in = (glu_in + (EAGER_GLU_BYTES if eager_glu else 0)) if m.gated_mlp else 2  # per activation output value
    if moe:
        k, width = m.num_experts_per_tok, m.expert_ffn
        per_copy = (gemm_in * h + act_in * width + gemm_in * width + 2 + 16
                    + (0 if weighted else 2 * h))
        mlp = routed_load * k * per_copy + 8 * k + 2 * k  # routed_load: padded capacity (expert.routed_memory_load)
        if m.n_shared_experts:
            mlp += (act_in + gemm_in) * width * m.n_shared_experts
    else:
        f = m.intermediate_size
        mlp = act_in * f + gemm_in * f
    tp = np.maximum(tp, 1)
    return {"replicated": np.where(sp == 1, replicated / tp, float(replicated)), "latent": latent + 0 * tp,
            "attention": attn / tp, "mlp": mlp / tp}


def layer_activation_bytes_per_token(m: ModelSpec, tp: np.ndarray, sp: np.ndarray, moe: bool,
                                     dropout: bool, fp8: bool = False, weighted: bool = True,
                                     act_store_fp8: bool = False, routed_load: float = 1.0,
                                     eager_glu: bool = False) -> np.ndarray:
    """Sum of layer_activation_terms: bytes per token one layer saves for backward without recompute."""
    return sum(layer_activation_terms(m, tp, sp, moe, dropout, fp8, weighted, act_store_fp8, routed_load,
                                      eager_glu).values())


def runs_eager_glu(prof: FrameworkProfile, training: object) -> bool:
    """Whether the run's gated activations are eager PyTorch ops: a PyTorch-native stack (one with a torch.compile
    switch) running without torch.compile. The other stacks run fused activation kernels."""
    return prof.compile_speedup > 1.0 and not compiled(prof, training)


def loss_bytes_per_logit(problem: Problem, prof: FrameworkProfile) -> float:
    """Bytes per logit the stack holds at the loss: its profile's, or a compiled loss's where the run compiled it."""
    if problem.compiled_loss:
        return min(prof.loss_bytes_per_logit, COMPILED_LOSS_BYTES)
    return prof.loss_bytes_per_logit


def logits_bytes(tokens: np.ndarray, m: ModelSpec, tp: np.ndarray, per_logit: float = 6.0) -> np.ndarray:
    """Vocabulary-parallel logits on the last stage, `per_logit` bytes each (FrameworkProfile.loss_bytes_per_logit):
    Megatron's bf16 logits + fp32 copy for the cross-entropy, 6 (Korthikanti §4.3, Megatron
    theoretical_memory_usage.py keeps 4·s·b·V/t for the loss); an eager fp32 cross-entropy, 12."""
    return tokens * m.vocab_size * per_logit / np.maximum(tp, 1)


def p2p_buffer_bytes(tok: np.ndarray, h: int, tp: np.ndarray, sp: np.ndarray, pp: np.ndarray) -> np.ndarray:
    """Pipeline send/recv buffers: one micro-batch's hidden states received and one being sent (Megatron
    p2p_communication.py allocates the receive tensor per transfer), /tp with sequence parallelism."""
    per = tok * h * 2.0 / np.where(sp == 1, np.maximum(tp, 1), 1)
    return np.where(pp > 1, 2.0 * per, 0.0)


def fp8_meta_bytes(layers: np.ndarray, gemms_per_layer: int, fp8: bool) -> np.ndarray:
    """fp8 amax histories and scales: fp32 per operand per GEMM (FP8_AMAX_HISTORY + 1 scale)."""
    per_gemm = FP8_OPERANDS_PER_GEMM * (FP8_AMAX_HISTORY + 1) * 4.0
    return layers * gemms_per_layer * per_gemm if fp8 else 0.0 * layers


def activation_bytes_per_token(problem: Problem, tp: np.ndarray, sp: np.ndarray, rc: np.ndarray) -> np.ndarray:
    """Bytes one average layer saves per token, with the recompute mode's adjustments (full is applied later).

    Dense and MoE layers mixed by their share; GPT-style models (GeLU, no gate) train with dropout.
    """
    m, s = problem.model, float(problem.training.seq_len)
    prof = profile_for(problem.training.framework)
    fp8 = problem.training.precision in ("fp8", "fp4")
    frac_moe = m.moe_layers / m.num_hidden_layers
    dropout = m.hidden_act.lower().startswith("gelu") and not m.gated_mlp  # GPT-style models train with dropout
    store = prof.fp8_activation_store
    eager_glu = runs_eager_glu(prof, problem.training)
    dense_act = layer_activation_bytes_per_token(m, tp, sp, False, dropout, fp8, act_store_fp8=store,
                                                 eager_glu=eager_glu)
    routed_load = expert.routed_memory_load(problem.training)
    moe_act = (layer_activation_bytes_per_token(m, tp, sp, True, dropout, fp8, prof.moe_weighted_activation, store,
                                                routed_load, eager_glu) if m.is_moe else dense_act)
    act_per_token = (1 - frac_moe) * dense_act + frac_moe * moe_act
    act_per_token = act_per_token + layer_kind_bytes_per_token(m, fp8) / np.maximum(tp, 1)
    if not fused_attention(problem.training):  # softmax output, dropout mask, output: 5·a·s B/token (Korthikanti eq. 1)
        act_per_token = act_per_token + np.where(rc == Recompute.SELECTIVE, 0.0, 5.0 * m.num_attention_heads * s / tp)
    else:  # selective drops the norm outputs (QKV and fc1 inputs) and the activation output (fc2 input), and
        # with MLA the up-projection outputs (Megatron-Core --recompute-modules layernorm moe_act mla_up_proj);
        # dense layers only where the stack re-makes them (Capabilities.selective_dense: not Megatron-Core's)
        gemm_in = 1.0 if fp8 else 2.0
        # recomputing the activation also re-makes the eager silu(gate) the product kept
        act_out = gemm_in + (EAGER_GLU_BYTES if eager_glu and m.gated_mlp else 0.0)
        norms = np.where(sp == 1, 2 * gemm_in * m.hidden_size / tp, 2 * gemm_in * m.hidden_size)
        dense_share = (1 - frac_moe) * float(capabilities_for(problem.training.framework).selective_dense)
        saved = dense_share * (norms + act_out * m.intermediate_size / tp)
        if m.is_moe:
            copies = routed_load * m.num_experts_per_tok + m.n_shared_experts
            saved = saved + frac_moe * (norms + act_out * m.expert_ffn * copies / tp)
        if m.is_mla:  # mla_up_proj: the latent norms, up projections and per-head q, k, v are re-made
            a, qk = m.num_attention_heads, m.qk_nope_head_dim + m.qk_rope_head_dim
            saved = saved + (2 * a * qk + 2 * a * qk + 2 * a * (m.qk_nope_head_dim + m.v_head_dim)) / tp \
                + 2 * (m.q_lora_rank + m.kv_lora_rank)
        act_per_token = act_per_token - np.where(rc == Recompute.SELECTIVE, saved, 0.0)
        if prof.selective_saves == "alternate-mm" and not m.is_mla:  # dense layers keep what op-level SAC saves
            dense_selective = dense_act - (norms + act_out * m.intermediate_size / tp)
            act_per_token = act_per_token + np.where(
                rc == Recompute.SELECTIVE, (1 - frac_moe) * (alternate_mm_bytes_per_token(m, tp, sp) - dense_selective),
                0.0)
    return act_per_token


def alternate_mm_bytes_per_token(m: ModelSpec, tp: np.ndarray, sp: np.ndarray) -> np.ndarray:
    """Bytes per token a dense layer keeps under op-level selective checkpointing that saves every other matmul's
    output (FrameworkProfile.selective_saves "alternate-mm", torchtitan): the block input, the 1st, 3rd, ... matmul
    outputs in call order (Q, V, the MLP's first projection and its output projection for a gated MLP), the SDPA
    output and fp32 log-sum-exp, and with sequence parallelism the two reduce-scatter outputs. Column-parallel
    outputs are /tp; a row-parallel matmul's output is a full-width partial sum before its reduce-scatter."""
    h, a = m.hidden_size, m.num_attention_heads
    q = a * m.d_head
    tp = np.maximum(tp, 1)
    parallel = sp == 1
    saved = 2.0 * h / np.where(parallel, tp, 1) + (2.0 * q + 4.0 * a) / tp  # block input, SDPA output and LSE
    for i, (_, width, row_parallel) in enumerate(flops.block_matmuls(m), start=1):
        if i % 2 == 1:
            saved = saved + 2.0 * width / (1 if row_parallel else tp)
    return saved + np.where(parallel & (tp > 1), 2 * 2.0 * h / tp, 0.0)


def layer_activation_bytes(problem: Problem, tok: np.ndarray, tp: np.ndarray, sp: np.ndarray,
                           rc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(kept per layer per micro-batch, recompute working set) in bytes.

    Full recompute keeps only each layer's input (2·h bytes per token, /tp with SP) and needs one layer's full
    activations while that layer is recomputed; otherwise each layer keeps its activations and nothing extra.
    """
    h = problem.model.hidden_size
    act_per_token = activation_bytes_per_token(problem, tp, sp, rc)
    layer_input = np.where(sp == 1, 2.0 * h / tp, 2.0 * h)
    off = offloaded_module_bytes(problem, tok, tp, rc)
    per_layer_act = np.where(rc == Recompute.FULL, layer_input, act_per_token) * tok - off
    # offload-modules reloads one module group ahead of the backward: about one layer's share is back on the GPU
    working = np.where(rc == Recompute.FULL, act_per_token * tok, 0.0) + off
    if profile_for(problem.training.framework).selective_saves == "alternate-mm":
        # op-level SAC re-makes a block's unsaved tensors from its input when that block's backward starts
        whole = activation_bytes_per_token(problem, tp, sp, np.full(np.shape(rc), int(Recompute.NONE)))
        working = working + np.where(rc == Recompute.SELECTIVE, np.maximum(whole - act_per_token, 0.0) * tok, 0.0)
    return per_layer_act, working


def offloaded_module_bytes(problem: Problem, tok: np.ndarray, tp: np.ndarray, rc: np.ndarray) -> np.ndarray:
    """Bytes per layer and micro-batch that recompute=offload-modules keeps in host memory
    (module_offload.offloaded_bytes_per_token on layer_activation_terms' attention term); 0 in other modes."""
    on = rc == Recompute.OFFLOAD_MODULES
    if not np.any(on):
        return np.zeros(np.broadcast(tok, tp, rc).shape)
    fp8 = problem.training.precision in ("fp8", "fp4")
    attention = layer_activation_terms(problem.model, tp, tp * 0, False, False, fp8)["attention"]
    per_token = module_offload.offloaded_bytes_per_token(problem.model, attention, tp, fp8,
                                                         expert.routed_memory_load(problem.training))
    return np.where(on, per_token * tok, 0.0)


def stage_layer_counts(layers: int, pp: np.ndarray, vpp: np.ndarray,
                       stated: tuple[int, ...] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first, middle, last) stage layer counts of the split a layout runs with: ceil(L/pp) on the middle stages,
    the rest shared by the first and last (planner.inputs.layout.uneven_stage_layers, Megatron
    --decoder-first/last-pipeline-num-layers, or under interleaving the embedding/loss-as-layer split); ceil(L/pp)
    everywhere when the split is even. Pricing always takes the embedding/loss split where the layers do not divide
    over pp x vpp model chunks but L + 2 does: it is the only split that runs such a layout (Megatron-Core
    --account-for-embedding/loss-in-pipeline-split; the Zero Bubble runs of Qi et al. 2024 count the embedding and
    head as layers the same way, 22 + 2 on 8 stages); otherwise an interleaved split that does not divide runs the
    custom pipeline layout planner.inputs.layout.chunk_layers states, ceil(L/pp) on every rank but the last ones.
    Whether a framework can launch it is the stage_split_launchable rule's business, so the search never walks a
    split its framework cannot state. `stated`: the layout a run states (TrainingSpec.pipeline_layout), taken on
    the rows with as many model chunks."""
    middle = np.ceil(layers / np.maximum(pp, 1))
    pairs, index = distinct_pairs(pp, vpp)
    splits = [_stated_edges(stated, int(p), int(v)) or uneven_stage_layers(layers, int(p), int(v), embedding_loss=True)
              or _layout_edges(layers, int(p), int(v)) for p, v in pairs]
    if not any(splits):
        return middle.copy(), middle, middle.copy()
    uneven = np.array([s is not None for s in splits])[index].reshape(np.shape(middle))
    first = np.array([s[0] if s else 0 for s in splits], dtype=float)[index].reshape(np.shape(middle))
    last = np.array([s[1] if s else 0 for s in splits], dtype=float)[index].reshape(np.shape(middle))
    return np.where(uneven, first, middle), middle, np.where(uneven, last, middle)


def busiest_rank_layers(layers: int, pp: np.ndarray, vpp: np.ndarray,
                        stated: tuple[int, ...] | None = None) -> np.ndarray:
    """Layers on the pipeline rank that holds the most: ceil(L/pp) for every split the planner makes (even, first/last
    counts, the embedding/loss split, chunk_layers), and the fullest rank of a stated layout where it has more
    (Megatron-Bridge's DeepSeek-V3 layout for pp 2 x vpp 8 puts 32 of 61 layers on rank 0)."""
    ceil = np.ceil(layers / np.maximum(pp, 1))
    if stated is None:
        return ceil
    pairs, index = distinct_pairs(pp, vpp)
    most = np.array([max(rank_layers(stated, p)) if p > 1 and len(stated) == p * v else 0
                     for p, v in pairs], dtype=float)[index].reshape(np.shape(ceil))
    return np.maximum(ceil, most)


def _layout_edges(layers: int, pp: int, vpp: int) -> tuple[int, int] | None:
    """(first rank's, last rank's) layers under the custom pipeline layout chunk_layers states, or None."""
    return _stated_edges(chunk_layers(layers, pp, vpp), pp, vpp)


def _stated_edges(chunks: tuple[int, ...] | None, pp: int, vpp: int) -> tuple[int, int] | None:
    """(first rank's, last rank's) layers of a layout of pp x vpp chunks (chunk s on rank s % pp), or None."""
    ranks = rank_layers(chunks, pp) if chunks is not None and pp >= 2 and len(chunks) == pp * vpp else None
    return None if ranks is None else (ranks[0], ranks[-1])


def distinct_pairs(a: np.ndarray, b: np.ndarray) -> tuple[list[tuple[int, int]], np.ndarray]:
    """The distinct (a, b) integer pairs of two equal-shape arrays and each element's pair (flattened), by a dense
    key (the values are small knob values) instead of a sort."""
    ai, bi = np.ravel(a).astype(np.int64), np.ravel(b).astype(np.int64)
    if ai.size == 0:
        return [], np.zeros(0, dtype=np.int64)
    if min(ai.min(), bi.min()) < 0:
        found, index = np.unique(np.stack([ai, bi]), axis=1, return_inverse=True)
        return [(int(x), int(y)) for x, y in found.T], index.reshape(-1)
    radix = int(bi.max()) + 1
    key = ai * radix + bi
    present = np.flatnonzero(np.bincount(key))
    slot = np.zeros(int(present[-1]) + 1, dtype=np.int64)
    slot[present] = np.arange(len(present))
    return [(int(k) // radix, int(k) % radix) for k in present], slot[key]


def fsdp_buffer_bytes(zero: np.ndarray, per_layer_p: np.ndarray, prof: FrameworkProfile,
                      root_p: np.ndarray | float = 0.0) -> np.ndarray:
    """ZeRO-3 working buffers: two gathered bf16 layers (running + prefetched) and one layer's unsharded grads, and
    where the stack keeps its FSDP root gathered through the loss (FrameworkProfile.fsdp_root_gathered) the root's
    `root_p` parameters in bf16."""
    root = 2.0 * root_p if prof.fsdp_root_gathered else 0.0
    return np.where(zero == Zero.PARAMETERS, 2 * per_layer_p * 2.0 + per_layer_p * prof.grad_reduce_bytes + root, 0.0)


def fp8_param_gather(problem: Problem) -> bool:
    """Whether the stack keeps fp8 model weights in fp8 training (Capabilities.fp8_param_gather; not fp4: the
    NVFP4 preset gathers bf16 parameters; not Muon, which runs without the distributed optimizer that
    --fp8-param-gather needs, Megatron-LM arguments.py)."""
    return (problem.training.precision == "fp8" and problem.training.optimizer != "muon"
            and capabilities_for(problem.training.framework).fp8_param_gather)


def layer_kind_bytes_per_token(m: ModelSpec, fp8: bool = False) -> float:
    """Mean per-layer change, in TP-sharded bytes per token, from layers that differ from the uniform layer priced by
    layer_activation_bytes_per_token: no-op mixers or MLPs (Nemotron-H blocks, block_configs), per-layer MLP widths,
    and linear-time mixers whose saved tensors replace attention's Q, K, V, output and LSE.

    Gated DeltaNet keeps its projection outputs (q, k, v, gate z, beta, decay), the conv outputs, the core output
    and the gated-norm output (HF Qwen3NextGatedDeltaNet; fla recomputes the chunk states in backward). Mamba-2
    keeps the in_proj output (z, x, B, C, dt), the conv output, the scan output and the gated-norm output
    (mamba_ssm mamba_chunk_scan_combined saves its inputs, not the states). Mamba-1 keeps x and z, the conv output,
    x_proj's output (Δ rank, B, C), Δ and the scan output (selective_scan_fn saves its inputs). LFM2's short conv keeps
    in_proj's B, C and x, B*x, the conv output and the gated out_proj input (HF Lfm2ShortConv slow_forward). 2 bytes
    each; GEMM inputs 1 in fp8.
    """
    gemm_in = 1 if fp8 else 2
    one = np.array([1])
    terms = layer_activation_terms(m, one, one * 0, False, False, fp8)
    attn = float(terms["attention"][0] + terms["latent"][0])  # what an attention layer keeps, as priced above
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
        elif mix == "mamba1":
            inner = m.mamba_expand * m.hidden_size
            total += 2 * 2 * inner + 2 * inner + 2 * (m.mamba_dt_rank + 2 * m.ssm_state_size) + 2 * 2 * inner
            total += gemm_in * inner - attn
        elif mix == "conv":
            total += 2 * 3 * m.hidden_size + 2 * 2 * m.hidden_size + gemm_in * m.hidden_size - attn
        if mlp in ("none", "linear"):
            total -= per_width * m.intermediate_size
        elif mlp == "dense":
            total += per_width * (m.layer_ffn(i) - m.intermediate_size)
    return total / m.num_hidden_layers
