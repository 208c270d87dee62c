"""Context-parallel exchange of one layer: ring attention, DeepSpeed-Ulysses all-to-all, or both (hybrid).

Ring CP (Megatron, --cp-comm-type p2p): KV chunks circulate, overlapped with the attention of the previous
chunk (Liu et al. 2023, ring attention). All-to-all CP (DeepSpeed-Ulysses, --cp-comm-type a2a): QKV are
re-sharded from sequence to heads before attention and back after, 2 all-to-alls each way, not overlapped
(Jacobs et al. 2023, arXiv 2309.14509 §3).
Hybrid (USP; Megatron --cp-comm-type a2a+p2p with hierarchical sizes): all-to-all among the u CP ranks inside
one NVLink domain, ring among the cp/u domains (Fang & Zhao 2024, arXiv 2405.07719).
"""

from __future__ import annotations

import numpy as np

from planner.cost.fabric import Fabric, collective_sm_share, overlapped_exposed, span_tier
from planner.inputs.hardware import KERNEL_OVERHEAD_S
from planner.inputs.specs import ModelSpec

# Each ring step launches its own attention kernel, the online-softmax correction that merges it into the running
# output, and the send/receive of the next KV block (Transformer Engine AttnFuncWithCPAndKVP2P: per step a
# flash-attention call, a correction kernel, and a P2P exchange; context_parallel.py :1698-1860). Priced at the
# planner's per-kernel launch cost.
RING_STEP_KERNELS = 3


def kv_width(m: ModelSpec) -> int:
    """Per-token K+V width exchanged: 2·kv_heads·d_head, or MLA's compressed latent + RoPE key."""
    return (m.kv_lora_rank + m.qk_rope_head_dim) if m.is_mla else 2 * m.kv_heads * m.d_head


def ring_block_bytes(m: ModelSpec, tok: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """Bytes of the KV block one ring step sends forward: tok·kv_width·2/tp (the backward sends KV and dKV, twice)."""
    return tok * kv_width(m) * 2.0 / tp


def ulysses_bytes(m: ModelSpec, tok: np.ndarray, tp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(QKV, output) bytes each rank exchanges in one direction's Ulysses all-to-alls."""
    kv = kv_width(m)
    q_width = m.num_attention_heads * (m.v_head_dim if m.is_mla else m.d_head)
    qkv_bytes = tok * (q_width + (kv if not m.is_mla else 2 * m.num_attention_heads * m.d_head)) * 2.0 / tp
    return qkv_bytes, tok * q_width * 2.0 / tp


def ring_exposed(m: ModelSpec, fab: Fabric, tok: np.ndarray, tp: np.ndarray, u: np.ndarray, r: np.ndarray,
                 attn_f: np.ndarray, attn_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(forward + backward, forward) ring-attention time that attention does not hide, per layer.

    The ring runs r steps (Transformer Engine p2p CP): each sends this rank's KV block (tok·kv_width·2/tp bytes) to
    the next rank while the attention of the block in hand computes; with the load-balanced causal split every step
    does 1/r of the attention. The backward circulates KV and dKV together, twice the bytes (context_parallel.py
    :2397). All ranks step together, so a ring that leaves a domain runs every step at the speed of the outermost
    tier its r·tp·u ranks span (fabric.span_tier).
    Exposed per direction: (r - 1)·E(t_send, t_attn / r) + r·step kernel launches, E = fabric.overlapped_exposed
    (the send's copy kernel holds SMs while the attention runs, as a collective does).
    """
    block = ring_block_bytes(m, tok, tp)
    crosses = span_tier(r * tp * u, fab.cluster)
    steps = np.maximum(r - 1, 0.0)
    launches = np.where(r > 1, r * RING_STEP_KERNELS * KERNEL_OVERHEAD_S, 0.0)
    send_f = fab.send(block, crosses, "cp")
    send_b = fab.send(2 * block, crosses, "cp")
    share = collective_sm_share(fab.cluster)
    ring_f = steps * overlapped_exposed(send_f, attn_f / np.maximum(r, 1), share) + launches
    ring_b = steps * overlapped_exposed(send_b, attn_b / np.maximum(r, 1), share) + launches
    return ring_f + ring_b, ring_f


def ulysses_time(m: ModelSpec, fab: Fabric, tok: np.ndarray, tp: np.ndarray, u: np.ndarray) -> np.ndarray:
    """One direction's all-to-alls among the u Ulysses ranks: QKV before attention, the output after."""
    return sum(fab.collective("all_to_all", b, u, tp, "cp") for b in ulysses_bytes(m, tok, tp))


def cp_exposed(m: ModelSpec, fab: Fabric, tok: np.ndarray, tp: np.ndarray, u: np.ndarray, r: np.ndarray,
               attn_f: np.ndarray, attn_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(forward + backward, forward) exposed CP time per layer: ring part + Ulysses all-to-alls (twice: fwd, bwd)."""
    ring_all, ring_f = ring_exposed(m, fab, tok, tp, u, r, attn_f, attn_b)
    a2a_cp = ulysses_time(m, fab, tok, tp, u)
    return ring_all + 2 * a2a_cp, ring_f + a2a_cp


def cp_comm_time(micro: np.ndarray, layers: np.ndarray, per_layer: np.ndarray) -> np.ndarray:
    """cp_comm_s: exposed CP per step on the busiest stage, m·L·(cp_exposed's forward + backward per layer: ring
    passes' exposed KV sends + 2·Ulysses all-to-alls) (Liu et al. 2023; Jacobs et al. 2023)."""
    return micro * layers * per_layer
