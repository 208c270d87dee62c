"""Host time of a layer: the CPU work of launching its kernels in eager PyTorch, which a GPU faster than its host
waits for, and the share of it CUDA graphs remove.

An eager training step issues every kernel from Python: the interpreter, autograd, ATen's dispatcher and the driver
cost a few microseconds of CPU per op whatever the op's size, and Transformer Engine modules add their own Python
(quantizer set-up, workspace and scale handling). While the host runs ahead of the GPU that costs nothing; a layer
whose kernels finish faster than the host can issue them runs at the host's pace. So each pass of a layer takes
max(GPU time, host time) (planner.cost.compute.layer_times). A dropless MoE dispatcher copies the per-expert token
counts to the host every forward pass (Megatron-Core MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize; DeepEP's
dispatch returns them as a host list), so the host cannot run ahead across that point: the GPU idles while the host
issues the first op after it (`SYNC_BUBBLE_OPS`).

What is counted, per layer kind and forward pass, read from Megatron-Core with Transformer Engine at
NVIDIA/Megatron-LM@3bec9aa97 (the code of the NeMo 26.02-26.04 containers' Megatron-Bridge releases):
- eager ops (`ops`): one PyTorch op each, at the fitted CPU time per op (fitted.yaml moe.host_op_s), times
  GRACE_HOST_SLOWDOWN on a Grace host;
- Transformer Engine module calls (`te`): TE_MODULE_OPS eager ops each;
- per local expert (`per_expert`): TE's GroupedLinear splits its input and allocates each expert's outputs before
  each GEMM launch (TransformerEngine issue #1499: torch.split and 2 x num_gemms torch.empty calls), counted as one
  eager op per expert and GroupedLinear.
A stack that runs each expert matrix as one grouped GEMM over all local experts (FrameworkProfile.grouped_expert_gemm:
torchtitan's torch._grouped_mm, AutoModel's grouped_gemm with DeepEP) has no per-expert ops: its experts are
EXPERTS_GROUPED (torchtitan's count), the rest is counted as above.
The backward pass runs each op's gradient through autograd, two GEMMs for each forward one: BACKWARD_OVER_FORWARD
times the forward's host work, the same ratio the GPU-side launch count uses (planner.inputs.hardware).

CUDA graphs replay captured kernels with one launch: a captured module costs no host time (Megatron-LM
docs/user-guide/features/cuda_graph.md). Per-layer capture (`--cuda-graph-impl transformer_engine|local`) takes the
whole layer of a dense model or of a MoE model whose experts run padded to capacity, and only the attention, router
and dispatch preprocessing of a dropless MoE layer (`--cuda-graph-modules attn moe_router moe_preprocess`: "MoE expert
dispatch involves dynamic shapes and cannot be captured"), unless the run names its modules
(TrainingSpec.cuda_graph_modules: Qwen3-30B-A3B's Blackwell presets capture only moe_router and moe_preprocess and
run the attention eagerly; `captured`); full-iteration capture (`--cuda-graph-impl full_iteration`) takes
everything. Graphs are off unless the recipe turns them on: Megatron-Core's TransformerConfig defaults to
cuda_graph_impl "none", and so do Megatron-Bridge's model recipes (recipes/qwen/qwen3_moe.py, gpt_oss/gpt_oss.py,
deepseek/deepseek_v3.py set cuda_graph_impl = "none").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cost import fitted
from planner.cost.profiles import profile_for
from planner.inputs.problem import Problem

# The CPU time of one eager op on an x86 host is fitted (fitted.yaml moe.host_op_s: between a bare torch.nn.Linear
# forward, 13.48 us on a DGX H100's Xeon Platinum 8480C, and a Megatron-Core ColumnParallelLinear forward, 74 us).
# A Grace host (GH200, GB200, GB300) takes GRACE_HOST_SLOWDOWN times as long per op. TransformerEngine issue #2053
# (2025-08-11) measured torch.nn.Linear's forward at 37.08 us of CPU on a GB200 against 13.48 us on the DGX H100,
# 2.75x, before TE's Grace CPU-overhead fixes (PR #2146, which Megatron-LM's DeepSeek-V3 GB200 reproduce guide asks
# for). The Grace rows' runs postdate them, and three measured fp8/bf16 pairs of one layout on Grace nodes bound the
# ratio from above, since a host-bound layer gains nothing from faster GEMMs: Nemotron-4 340B on 256 GB200 (1.48x),
# Llama 4 Maverick on 128 GB200 (1.28x, DGX Cloud) and DeepSeek-V3 on 256 GB300 (1.13x, Megatron-Bridge 25.11)
# are all priced within 10 % up to 1.5x and not at 2x or 2.75x (tests/test_moe_anchors.py). x86 covers the HGX/DGX
# nodes of A100, H100, H200, B200 and B300 (Intel Xeon, AMD EPYC) and MI300X platforms (clusters/gpus.yaml [CPU]).
GRACE_HOST_SLOWDOWN = 1.5
# A Transformer Engine module's forward costs this many eager ops on the same host: te.Linear 99.66 us against
# torch.nn.Linear's 37.08 us on GB200 (same issue and measurement).
TE_MODULE_OPS = 99.66 / 37.08
BACKWARD_OVER_FORWARD = 2.0
# After a host sync the GPU idles until the host has issued the next op.
SYNC_BUBBLE_OPS = 1.0

GRAPH_SCOPES = ("none", "per-layer", "full-iteration")


@dataclass(frozen=True)
class Ops:
    """Host work of one forward pass of a module: eager ops that launch a kernel each, eager ops that launch none of
    their own (views, or GEMMs whose launches expert.moe_launch_time counts), Transformer Engine module calls, eager
    ops per local expert."""

    ops: float = 0.0
    te: float = 0.0
    per_expert: float = 0.0
    no_kernel: float = 0.0

    def cost(self, local_experts: np.ndarray | float) -> np.ndarray | float:
        """In eager-op equivalents."""
        return self.ops + self.no_kernel + self.te * TE_MODULE_OPS + self.per_expert * local_experts


# Attention block (transformer_layer.py _forward_attention with the TE spec): linear_qkv (norm fused), core_attention,
# linear_proj; rotary embedding on q and k (fused_apply_rotary_pos_emb, one op each) and bias-dropout-add.
ATTENTION = Ops(ops=3, te=3)
# Multi-head latent attention (multi_latent_attention.py MLASelfAttention): q down/up and kv down/up projections (the
# up projections fuse the latent norms), core_attention, linear_proj; rotary on the rope parts of q and k, the
# split and the two concatenations of nope and rope parts, bias-dropout-add.
MLA_ATTENTION = Ops(ops=6, te=6)
# Dense MLP (_forward_mlp, mlp.py): linear_fc1 (pre-MLP norm fused), linear_fc2, the fused bias-activation and
# bias-dropout-add.
DENSE_MLP = Ops(ops=2, te=2)
# MoE layer, outside router and dispatcher: the pre-MLP norm (a TE module of its own in the MoE spec) and
# bias-dropout-add.
MOE_FRAME = Ops(ops=1, te=1)
# Router (router.py TopKRouter.forward, moe_utils.py) unfused, as Megatron-Bridge's MoE model recipes run it
# (moe_router_fusion = False; its performance scripts turn it on, `router_fused`): the fp32 gating GEMM and its input
# cast (router_gating_linear), top-k, softmax and its cast, the scatter of probabilities and routing map (zeros,
# scatter twice), the aux-loss scores (softmax, top-k, a zeros/int/scatter/bool map), the load-balancing loss (two
# sums, two products), its autograd scaler, the token count and its reduction, the tracker update: 22 ops. Fused
# (--moe-router-fusion, TE fused_topk_with_score_function, fused_compute_score_for_moe_aux_loss, fused_moe_aux_loss):
# gating 2, the three fused kernels, count, reduction, scaler, tracker: 9.
ROUTER = Ops(ops=22)
ROUTER_FUSED = Ops(ops=9)
# Token dispatcher, dropless all-to-all (token_dispatcher.py MoEAlltoAllTokenDispatcher), split where per-layer CUDA
# graphs split it (`moe_preprocess` captures dispatch_preprocess): preprocessing = the per-expert counts, their EP
# all-gather, the splits' four reductions and a contiguous copy, the four counts copied to the host on a side stream,
# the fused permute (2 ops); the rest = the tokens' and probabilities' all-to-all, the fused chunk sort of both, and
# the combine (chunk sort, all-to-all, fused unpermute). Padded to capacity (drop_and_pad): no counts (torch.full on
# the host), a padded permute (4), the all-to-alls, transposes (3), unpermute (2). Flex (DeepEP / HybridEP,
# MoEFlexTokenDispatcher): routing metadata (4); fused dispatch and its handle, permute, unpermute, combine and its
# handle (6).
DISPATCH_ALLTOALL = (Ops(ops=14), Ops(ops=7))
DISPATCH_PADDED = (Ops(ops=6), Ops(ops=9))
DISPATCH_FLEX = (Ops(ops=4), Ops(ops=6))
# Experts (experts.py TEGroupedMLP.forward): the token counts to a list, linear_fc1 and linear_fc2 (TE GroupedLinear,
# one eager op per local expert each, see the module docstring), the fused weighted activation; fp8/fp4 add the
# padding of tokens and probabilities to the quantisation tile and the unpadding (Fp8Padding / Fp8Unpadding, 4 ops).
EXPERTS = Ops(ops=2, te=2, per_expert=2)
# Experts as one grouped GEMM per matrix (FrameworkProfile.grouped_expert_gemm; torchtitan's GroupedExperts.forward,
# torchtitan/models/common/moe.py at pytorch/torchtitan@b5bcd76c): the offsets' cumsum, each weight's bf16 cast,
# transpose and torch._grouped_mm (3 x 3), the activation, the product and the output cast: 13 eager ops whatever
# the number of local experts, of which the 3 transposes (views) and the 3 GEMMs (their launches are
# expert.moe_launch_time's) launch no kernel of their own. A stack that runs them so also adds its per-expert bias
# by indexing, not per expert.
EXPERTS_GROUPED = Ops(ops=7, no_kernel=6)
EXPERTS_LOW_PRECISION_EXTRA = Ops(ops=4)
# Biased experts (gpt-oss): the fc2 bias is added per expert on the unpadded output (TEGroupedMLP._apply_bias: two
# splits, a product and a sum per local expert, the concatenation and its cast).
EXPERT_BIAS = Ops(ops=4, per_expert=2)
# A clamped gated activation (gpt-oss's swiglu_limit) before Megatron-Core's fused bias-GeGLU
# (weighted_bias_quick_geglu_impl at NVIDIA/Megatron-LM@3bec9aa97, megatron/core/fusions/fused_bias_geglu.py
# L424-L434): the chunk, two clamps and the concatenation, and the GLU's linear offset made a device tensor from a
# Python float (torch.tensor(..., device=input.device)): 5 ops. That tensor is copied to the GPU with
# non_blocking=False, which PyTorch completes with cudaStreamSynchronize (at::cuda::memcpy_and_sync), so the host
# also waits for the GPU there: a second host sync in the layer's forward (CLAMPED_GLU_SYNCS).
CLAMPED_GLU = Ops(ops=5)
CLAMPED_GLU_SYNCS = 1.0
# Megatron-Core's EP overlap (combined 1F1B) runs each layer as schedule nodes (pipeline_parallel/utils.py
# ScheduleNode; models/common/model_chunk_schedule_plan.py): attn, moe_dispatch, mlp and moe_combine forward, and
# moe_combine, mlp, mlp_dw, moe_dispatch, attn and attn_dw backward, each a separate call with its own autograd
# entry. Each call costs: the stream-acquire event wait and record, the NVTX range push and pop, the stream switch,
# the detach and requires_grad of its input, make_viewless of its output, record_stream and the storage release of
# the freed input: 8 ops.
COMBINED_NODE_OPS = 8.0
COMBINED_NODES_FWD = 4.0
COMBINED_NODES_BWD = 6.0
# A shared expert (shared_experts.py SharedExpertMLP): linear_fc1, linear_fc2, the activation and the sum with the
# routed output.
SHARED_EXPERT = Ops(ops=2, te=2)


@dataclass(frozen=True)
class LayerHost:
    """One average layer per micro-batch: host seconds of its forward and backward, and the GPU's idle seconds after
    the forward's host syncs."""

    fwd: np.ndarray
    bwd: np.ndarray
    sync_bubble: np.ndarray


def _add(*parts: Ops) -> Ops:
    return Ops(sum(p.ops for p in parts), sum(p.te for p in parts), sum(p.per_expert for p in parts),
               sum(p.no_kernel for p in parts))


def router_fused(problem: Problem) -> bool:
    """Whether the MoE router runs fused: the run's own switch (TrainingSpec.moe_router_fusion) where it says, else
    what the stack's recipes ship (FrameworkProfile.moe_router_fusion)."""
    said = problem.training.moe_router_fusion
    return profile_for(problem.training.framework).moe_router_fusion if said is None else said


def dropless(problem: Problem) -> bool:
    """A dropless dispatcher needs the per-expert counts on the host; padded to capacity the splits are known there."""
    tr = problem.training
    return not (tr.moe_capacity_factor is not None and tr.moe_pad_to_capacity)


def _dispatch(problem: Problem, deepep: bool) -> tuple[Ops, Ops]:
    """(before, after the expert computation) ops of the token dispatcher the run uses."""
    return (DISPATCH_FLEX if deepep else DISPATCH_ALLTOALL) if dropless(problem) else DISPATCH_PADDED


def _routed_expert_ops(problem: Problem) -> Ops:
    """The routed experts' eager ops, with the low-precision casts and the per-expert bias where the run has them;
    none per local expert where the stack runs one grouped GEMM per matrix (EXPERTS_GROUPED)."""
    grouped = profile_for(problem.training.framework).grouped_expert_gemm
    experts = EXPERTS_GROUPED if grouped else EXPERTS
    if problem.training.precision in ("fp8", "fp4"):
        experts = _add(experts, EXPERTS_LOW_PRECISION_EXTRA)
    if problem.model.mlp_bias:
        experts = _add(experts, Ops(ops=EXPERT_BIAS.ops) if grouped else EXPERT_BIAS)
    if problem.model.swiglu_limit:
        experts = _add(experts, CLAMPED_GLU)
    return experts


def captured(problem: Problem, module: str) -> bool:
    """Whether per-layer CUDA graphs capture `module` (Megatron-Core's CudaGraphModule names): the run's list
    (TrainingSpec.cuda_graph_modules) where it names one; else the whole layer where its shapes are static, and a
    dropless MoE layer's attention, router and dispatch preprocessing (moe_router, moe_preprocess), the scope
    Megatron-Bridge's MoE recipes set ("MoE expert dispatch involves dynamic shapes and cannot be captured")."""
    tr = problem.training
    if tr.cuda_graphs != "per-layer":
        return False
    if tr.cuda_graph_modules is not None:
        return module in tr.cuda_graph_modules
    return module != "moe" or not dropless(problem)


def moe_layer_ops(problem: Problem, router_fused: bool, deepep: bool) -> Ops:
    """Host work of a MoE layer's forward left after the recipe's CUDA graphs (module docstring): `moe` takes the
    whole layer (drop-and-pad only), `moe_router` the pre-MLP norm and the router, `moe_preprocess` the dispatcher's
    preprocessing."""
    m = problem.model
    if captured(problem, "moe"):
        return Ops()
    pre, rest = _dispatch(problem, deepep)
    experts = _routed_expert_ops(problem)
    if m.n_shared_experts or m.shared_expert_intermediate_size:
        experts = _add(experts, SHARED_EXPERT)
    router = Ops() if captured(problem, "moe_router") else _add(MOE_FRAME, ROUTER_FUSED if router_fused else ROUTER)
    return _add(router, Ops() if captured(problem, "moe_preprocess") else pre, rest, experts)


def moe_extra_kernels(problem: Problem, router_fused: bool, deepep: bool) -> float:
    """Kernels a MoE layer's forward launches beyond a dense layer's (KERNELS_PER_LAYER_FWD, planner.inputs.hardware)
    and its per-expert GEMMs: the router, the dispatcher and the experts' eager ops, one kernel each. CUDA graphs
    replay them without the host but the GPU still runs them, so they are counted whatever the capture."""
    pre, rest = _dispatch(problem, deepep)
    parts = _add(MOE_FRAME, ROUTER_FUSED if router_fused else ROUTER, pre, rest, _routed_expert_ops(problem))
    return parts.ops


def layer_host_time(problem: Problem, ep: np.ndarray, router_fused: bool, deepep: bool,
                    combined: np.ndarray | bool = False) -> LayerHost:
    """Host seconds of an average layer's forward and backward per micro-batch, with what the recipe's CUDA graphs
    capture removed, and the GPU idle time after the forward's host syncs (module docstring). `combined`: the rows
    that run Megatron-Core's EP overlap, whose MoE layers are issued as schedule nodes (COMBINED_NODE_OPS each)."""
    m, scope = problem.model, problem.training.cuda_graphs
    op_s = fitted.current().host_op_s * (GRACE_HOST_SLOWDOWN if problem.cluster.gpu.host_cpu == "grace" else 1.0)
    ep = np.asarray(ep, dtype=float)
    zero = np.zeros_like(ep)
    if scope == "full-iteration":
        return LayerHost(zero, zero, zero)
    local = m.num_local_experts / np.maximum(ep, 1.0) if m.is_moe else zero
    attention = 0.0 if captured(problem, "attn") else (MLA_ATTENTION if m.is_mla else ATTENTION).cost(local)
    dense = 0.0 if captured(problem, "mlp") else DENSE_MLP.cost(local)
    f_moe = m.moe_layers / m.num_hidden_layers
    moe = moe_layer_ops(problem, router_fused, deepep).cost(local) if m.is_moe else zero
    syncs = f_moe * SYNC_BUBBLE_OPS if (m.is_moe and dropless(problem)) else 0.0
    if m.is_moe and m.swiglu_limit and not captured(problem, "moe"):  # the activation runs eagerly
        syncs = syncs + f_moe * CLAMPED_GLU_SYNCS * SYNC_BUBBLE_OPS
    per_pass = op_s * (attention + (1.0 - f_moe) * dense + f_moe * moe) + zero
    nodes = np.where(combined, f_moe * COMBINED_NODE_OPS * op_s, 0.0)
    return LayerHost(per_pass + COMBINED_NODES_FWD * nodes,
                     BACKWARD_OVER_FORWARD * per_pass + COMBINED_NODES_BWD * nodes, op_s * syncs + zero)


def graph_buffer_bytes(problem: Problem, tok: np.ndarray, tp: np.ndarray, sp: np.ndarray,
                       deepep: bool = False) -> np.ndarray:
    """Bytes per layer and micro-batch in flight that per-layer CUDA graphs keep resident: Transformer Engine's
    make_graphed_callables captures each (layer, micro-batch) and keeps its static input and output surfaces and
    their gradient buffers for replay (transformer_engine/pytorch/graph.py), so a captured module holds its input,
    its output and both gradients: 4 hidden-sized tensors of the rank's tokens (tok/tp under sequence parallelism).
    moe_preprocess's output is what the dispatcher's dispatch_preprocess returns: with the all-to-all dispatcher the
    k permuted copies (it permutes before the exchange), twice more with its gradient; with the flex dispatcher
    (`deepep`: DeepEP / HybridEP) the tokens as they came in, reshaped, since it permutes after the exchange
    (NVIDIA/Megatron-LM@3bec9aa97 megatron/core/transformer/moe/token_dispatcher.py: MoEAlltoAllTokenDispatcher
    dispatch_preprocess returns permutated_local_input_tokens, L592-L645; MoEFlexTokenDispatcher's returns
    hidden_states, L1404-L1428), which the hidden-sized surfaces already count. Megatron-Bridge's CUDA graph
    guide puts the total at "a few GB", over 10 GB with pipeline parallelism (docs/training/cuda-graphs.md). A
    full-iteration graph allocates the step's own tensors from its private pool: the same peak the model already
    prices, plus the batch's token ids (nothing counted)."""
    m, tr = problem.model, problem.training
    if tr.cuda_graphs != "per-layer":
        return np.zeros_like(np.asarray(tok, dtype=float))
    rows = tok / np.where(sp == 1, tp, 1.0)
    per_module = 4.0 * rows * m.hidden_size * 2.0
    f_moe = m.moe_layers / m.num_hidden_layers if m.is_moe else 0.0
    permuted = 0.0 if deepep else 2.0 * rows * m.num_experts_per_tok * m.hidden_size * 2.0
    if tr.cuda_graph_modules is None:
        if not m.is_moe or not dropless(problem):
            return per_module  # the whole layer is one captured module
        return per_module + f_moe * (per_module + permuted)  # attn; moe_router + moe_preprocess
    mixer = per_module * captured(problem, "attn")
    mlp = (1.0 - f_moe) * per_module * captured(problem, "mlp")
    moe = f_moe * np.where(captured(problem, "moe"), per_module,
                           (per_module + permuted * captured(problem, "moe_preprocess"))
                           * captured(problem, "moe_router"))
    return mixer + mlp + moe
