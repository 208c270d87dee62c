"""Tensor-parallel collectives of one layer and what the GEMMs beside them hide (Megatron TP: Narayanan et al. 2021
§3.2; sequence parallelism: Korthikanti et al. 2022 §4.2.2).

Each of a layer's two TP blocks (attention, MLP) is a column-parallel GEMM A (QKV, fc1) then a row-parallel GEMM B
(output projection, fc2). With sequence parallelism (SP) the block runs, per pass and with C one all-gather or
reduce-scatter of the activation (tokens x hidden) over the tp ranks:

  forward   all-gather -> A,  B -> reduce-scatter                                                          2C
  backward  all-gather of B's output gradient -> B's dgrad; A's dgrad -> reduce-scatter of A's input gradient  2C
            Megatron's SP keeps A's input sharded (Korthikanti §4.2.2), so it re-gathers it for A's wgrad: +C
            (PyTorch autograd in torchtitan and DeepSpeed keeps the gathered input instead)
Without SP: one all-reduce after B forward, one of A's input gradient backward (2C each).

What hides them is the stack's TP overlap mode (TP_MODES):
- "none": every collective blocks (DeepSpeed AutoTP, torchtitan's plain TP, Megatron-LM 2021).
- "backward": the backward's collectives that have an independent GEMM beside them run on a side stream: the
  re-gather beside A's dgrad, the input-gradient reduce beside A's wgrad (Transformer Engine Linear/LayerNormLinear
  backward without userbuffers: `gather_along_first_dim(..., async_op=True)` "Overlap input AG with dgrad" and
  `reduce_scatter_along_first_dim(dgrad, async_op=True)` "Overlap dgrad-RS/AR with wgrad"; Megatron-Core's default).
  "sp-backward" is the same with SP and "none" without (Megatron-LM as published: the 2021 code all-reduces the input
  gradient synchronously, mpu/mappings.py; the 2022 SP code overlaps its backward collectives, Korthikanti §4.2.2).
- "userbuffers": Transformer Engine comm+GEMM overlap (Megatron `--tp-comm-overlap`, NeMo/Megatron-Bridge
  `tp_comm_overlap`; needs SP), with the methods of TE's initialize_ub (NVIDIA/TransformerEngine
  transformer_engine/pytorch/module/base.py, `methods`): ring exchange for the all-gathers feeding QKV/fc1 forward
  and proj/fc2 dgrad (the GEMM split in tp chunks, each computed while the next chunk arrives over peer-to-peer copy
  engines: `use_ce`, 1 SM); pipelined for the reduce-scatters after proj/fc2 forward (the GEMM in 4 chunks on the
  SMs the communication leaves, `set_sm_margin`, each chunk's reduce-scatter beside the next chunk's GEMM, the last
  one exposed); bulk for the backward's re-gather (beside QKV/fc1 dgrad) and input-gradient reduce-scatter (beside
  QKV/fc1 wgrad), sharing the SMs.
- "async-tp": PyTorch's micro-pipelined TP (torchtitan `enable_async_tensor_parallel`, needs torch.compile and SP):
  every all-gather -> matmul and matmul -> reduce-scatter, forward and backward, is decomposed into peer-to-peer
  steps on copy engines (torch/distributed/_symmetric_memory fused_all_gather_matmul / fused_matmul_reduce_scatter),
  ring-exchange-like.
SP moves the bytes of no SP; it hides no less of them where every collective blocks ("none") or pairs with its
GEMM ("async-tp"), and there it also shards the norms and holds less, so the search drops sp = 0 under those modes
(`sp_never_slower`). Where the backward overlaps ("backward", "userbuffers"), SP's exposed output-gradient gather
can make sp = 0 faster on small layers, and the search prices both.
Without SP, "userbuffers" runs as "backward" and "async-tp" as "none" (both need SP: Megatron-LM arguments.py asserts
it; torchtitan's async TP rewrites SP's all-gathers). MoE layers' expert MLPs (grouped GEMMs, no userbuffers) keep
their TP collectives exposed in every mode.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cost import mixers
from planner.cost.fabric import Fabric, overlapped_exposed
from planner.inputs.layout import Recompute
from planner.inputs.specs import ModelSpec

TP_MODES = ("none", "sp-backward", "backward", "userbuffers", "async-tp")

# Transformer Engine initialize_ub defaults (base.py get_default_config): pipelined and bulk overlaps run their
# communication kernel on 16 SMs (`num_sm` 16, cga_size 2) and split a pipelined GEMM in 4 (`num_splits` 4); ring
# exchange uses copy engines (`use_ce`, num_sm 1). Megatron-Bridge's tuned H100 config for Llama 3 70B at tp 4
# (training/comm_overlap.py userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192) gives the pipelined proj/fc2
# reduce-scatters 24/16 SMs and the bulk ones 2-24 (mean 8.5): the defaults are the same order.
UB_COMM_SMS = 16
UB_PIPELINE_SPLITS = 4


# On Hopper and older GPUs a communication kernel overlaps the GEMM beside it only when the GPU runs kernels in the
# host's issue order, which one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1) enforces: Megatron-LM asserts it with
# TP or CP > 1 below compute capability 10 (megatron/training/arguments.py), and Megatron-Bridge sets it there "to
# schedule a communication kernel before the overlapping persistent GEMM kernel. Otherwise, communication kernel will
# be pushed to the end of the GEMM kernel, failing to overlap the kernels" (NVIDIA-NeMo/Megatron-Bridge@0fbfe7d3e
# scripts/performance/perf_plugins.py _set_num_cuda_device_max_connections). EP overlap needs several queues
# (Megatron-Core moe/README.md: CUDA_DEVICE_MAX_CONNECTIONS > 1; arguments.py only warns "For Hopper and before, try
# not to use tensor model parallelism or context parallelism with overlap_moe_expert_parallel_comm"), and Bridge's
# plugin gives a run with it 8 queues (32 with DeepEP/HybridEP) on Hopper too. So on these generations a layout with
# EP overlap (combined 1F1B) runs its TP collectives unhidden (`ep_overlap_serialises_tp`); Blackwell keeps its
# overlaps with 32 queues (the same plugin).
SINGLE_QUEUE_GENERATIONS = ("ampere", "hopper")


def ep_overlap_serialises_tp(generation: str) -> bool:
    """Whether EP overlap leaves TP's collectives unhidden on a GPU of `generation` (planner.cost.bands.generation):
    SINGLE_QUEUE_GENERATIONS."""
    return generation in SINGLE_QUEUE_GENERATIONS


def activation_bytes(tok: np.ndarray, hidden: int) -> np.ndarray:
    """One bf16 activation tensor of the micro-batch's tokens: tok·h·2."""
    return tok * hidden * 2.0


@dataclass(frozen=True)
class BlockGemms:
    """Forward seconds of one TP block's GEMMs per micro-batch: the column-parallel A and the row-parallel B (their
    dgrad takes as long; their wgrad the same share of the layer's weight-gradient time)."""

    a: np.ndarray
    b: np.ndarray
    a_wgrad: np.ndarray


def gemm_shares(m: ModelSpec) -> tuple[float, float, float, float]:
    """Forward GEMM FLOPs per token of a dense layer's QKV, output projection, fc1 and fc2 (attention: the output
    projection is heads x v-width x h, the rest of the projections are the column-parallel QKV; a gated MLP's fc1
    holds gate and up)."""
    h = m.hidden_size
    proj = m.num_attention_heads * (m.v_head_dim if m.is_mla else mixers.attention_shape(m, "full_attention").d_v) * h
    qkv = max(mixers.attention_params(m) - proj, 0)
    fc2 = h * m.intermediate_size
    return 2.0 * qkv, 2.0 * proj, 2.0 * (m.mlp_matrices - 1) * fc2, 2.0 * fc2


def block_gemms(m: ModelSpec, tok: np.ndarray, tp: np.ndarray, rate: float, gemm_f: np.ndarray,
                wgrad: np.ndarray) -> tuple[BlockGemms, BlockGemms]:
    """(attention, MLP) blocks' GEMM seconds at the achieved GEMM `rate` (FLOP/s); the wgrad shares split the layer's
    weight-gradient time (`wgrad`, forward GEMMs `gemm_f`) by each A's share of the forward GEMM FLOPs."""
    qkv, proj, fc1, fc2 = gemm_shares(m)
    per = tok / tp / rate
    share = wgrad / np.maximum(gemm_f, 1e-30) * per
    return BlockGemms(per * qkv, per * proj, share * qkv), BlockGemms(per * fc1, per * fc2, share * fc1)


def ring_exposed(comm: np.ndarray, gemm: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """A collective split in tp - 1 peer-to-peer steps, each beside 1/tp of its GEMM (ring exchange; the first
    chunk is local): (tp - 1)·max(0, C/(tp - 1) - G/tp) = max(0, C - G·(tp - 1)/tp). Copy engines carry it: no SMs."""
    return np.maximum(comm - gemm * (tp - 1) / np.maximum(tp, 1), 0.0)


def pipeline_exposed(comm: np.ndarray, gemm: np.ndarray, sm_share: float) -> np.ndarray:
    """GEMM -> reduce-scatter pipelined in k chunks, the GEMM on the SMs the communication leaves (1 - s of them):
    G' = G/(1 - s); the step ends at max(G' + C/k, G'/k + C) (the last chunk's reduce-scatter, or the
    communication itself when it is the longer), so it adds that less G."""
    slowed = gemm / max(1.0 - sm_share, 0.1)
    k = UB_PIPELINE_SPLITS
    return np.maximum(slowed + comm / k, slowed / k + comm) - gemm


# The mode each overlap mode runs with SP and without it (module docstring).
_BY_SP = {"none": ("none", "none"), "sp-backward": ("backward", "none"), "backward": ("backward", "backward"),
          "userbuffers": ("userbuffers", "backward"), "async-tp": ("async-tp", "none")}


def _block_in(name: str, c: np.ndarray, ar: np.ndarray, g: BlockGemms, tp: np.ndarray, sp_on: bool,
              nccl: float, ub: float) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) exposed seconds of one dense TP block run in mode `name`, with SP or without."""
    if name == "userbuffers":
        return (ring_exposed(c, g.a, tp) + pipeline_exposed(c, g.b, ub),
                ring_exposed(c, g.b, tp) + overlapped_exposed(c, g.a, ub) + overlapped_exposed(c, g.a_wgrad, ub))
    if name == "async-tp":
        return (ring_exposed(c, g.a, tp) + ring_exposed(c, g.b, tp),
                ring_exposed(c, g.b, tp) + ring_exposed(c, g.a, tp))
    if not sp_on:
        return ar, overlapped_exposed(ar, g.a_wgrad, nccl) if name == "backward" else ar
    if name == "backward":
        return 2 * c, c + overlapped_exposed(c, g.a, nccl) + overlapped_exposed(c, g.a_wgrad, nccl)
    return 2 * c, 2 * c


def _block(mode: str, c: np.ndarray, ar: np.ndarray, g: BlockGemms, tp: np.ndarray, sp: np.ndarray,
           nccl: float, ub: float) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) exposed seconds of one dense TP block in `mode`, per layout (SP on or off)."""
    with_sp, without = _BY_SP[mode]
    f1, b1 = _block_in(with_sp, c, ar, g, tp, True, nccl, ub)
    f0, b0 = _block_in(without, c, ar, g, tp, False, nccl, ub)
    on = sp == 1
    return np.where(on, f1, f0), np.where(on, b1, b0)


def tp_exposed(fab: Fabric, mode: str, act_bytes: np.ndarray, tp: np.ndarray, sp: np.ndarray, rc: np.ndarray,
               gemms: tuple[BlockGemms, BlockGemms], moe_mlp: np.ndarray | float, sm_shares: tuple[float, float],
               dense_mlp: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(forward + backward, forward) exposed TP seconds per layer and micro-batch: the attention block and the share
    `dense_mlp` of layers with a dense MLP in `mode`, plus `moe_mlp`: the MoE layers' share times their TP passes
    (`moe_tp_passes`), each exposed, 2C or one all-reduce each way; full recompute repeats the forward's.
    `sm_shares`: the SMs a running NCCL collective and a userbuffers kernel take, as a share of the GPU's."""
    ar = fab.collective("all_reduce", act_bytes, tp, np.ones_like(tp), "tp")
    c = 0.5 * ar  # a ring all-reduce runs as a reduce-scatter then an all-gather (NCCL): each is half of it
    nccl, ub = sm_shares
    attn_f, attn_b = _block(mode, c, ar, gemms[0], tp, sp, nccl, ub)
    mlp_f, mlp_b = _block(mode, c, ar, gemms[1], tp, sp, nccl, ub)
    exposed_pass = np.where(sp == 1, 2 * c, ar)
    fwd = attn_f + dense_mlp * mlp_f + moe_mlp * exposed_pass
    bwd = attn_b + dense_mlp * mlp_b + moe_mlp * exposed_pass
    return fwd + bwd + np.where(rc == Recompute.FULL, fwd, 0.0), fwd


def moe_tp_passes(m: ModelSpec, etp: np.ndarray, deepep: bool, load: np.ndarray | float) -> np.ndarray:
    """TP collective passes (an all-gather and a reduce-scatter of the layer's hidden states, or one all-reduce, each
    way) per MoE layer, in units of the dense MLP's: a TP-split shared expert gathers and scatters the layer's tokens
    once (its own sequence-parallel linears), and experts split over an expert-TP group (etp > 1) gather the routed
    copies over that group after the all-to-all and reduce-scatter them before the combine. Those are k routed copies
    per token, at `load` times the even share on the busiest rank (capacity buffers whole when padded), so the
    routed part moves k·load times the dense MLP's bytes: Megatron-Core's MoEAlltoAllTokenDispatcher calls
    gather_from_sequence_parallel_region on global_input_tokens, the all-to-all's output, and
    reduce_scatter_to_sequence_parallel_region before the combine's all-to-all (NVIDIA/Megatron-LM@core_v0.9.0
    megatron/core/transformer/moe/token_dispatcher.py#L533-L538 and #L578-L584; the same at 3bec9aa97 L691-L700 and
    L774-L782, on the expert-TP group). The flex dispatcher (DeepEP, HybridEP) instead sends each token to every
    expert-TP shard in its one exchange over the TP x EP group (MoEFlexTokenDispatcher, topk x tp): its TP share
    stays one pass here and its dispatch volume is the exchange's. Whole experts (etp 1) and no shared expert: no
    TP collective at all."""
    shared = 1.0 if m.shared_ffn else 0.0
    routed = 1.0 if deepep else m.num_experts_per_tok * load
    return shared + np.where(np.asarray(etp) > 1, routed, 0.0)


def sp_never_slower(mode: str) -> bool:
    """Whether sequence parallelism exposes no more TP time than its absence in `mode` (module docstring)."""
    return mode in ("none", "async-tp")


def tp_comm_time(micro: np.ndarray, layers: np.ndarray, per_layer: np.ndarray) -> np.ndarray:
    """tp_comm_s: exposed TP per step on the busiest stage, m·L·(tp_exposed's forward + backward per layer): per
    block 2 all-gathers/reduce-scatters forward and 3 backward under SP (one all-reduce each way without), less what
    the paired GEMMs hide in the stack's overlap mode (Narayanan et al. 2021 §3.2; Korthikanti et al. 2022 §4.2.2;
    Transformer Engine userbuffers)."""
    return micro * layers * per_layer
