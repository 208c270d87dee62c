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

from planner.cost.fabric import Fabric
from planner.inputs.specs import ModelSpec


def kv_width(m: ModelSpec) -> int:
    """Per-token K+V width exchanged: 2·kv_heads·d_head, or MLA's compressed latent + RoPE key."""
    return (m.kv_lora_rank + m.qk_rope_head_dim) if m.is_mla else 2 * m.kv_heads * m.d_head


def ring_exposed(m: ModelSpec, fab: Fabric, tok: np.ndarray, tp: np.ndarray, u: np.ndarray, r: np.ndarray,
                 attn_f: np.ndarray, attn_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(forward + backward, forward) ring time not hidden by attention: the r KV chunks that pass through a GPU,
    max(ring - attn_f, 0) forward and max(2·ring - attn_b, 0) backward."""
    ring_bytes = r * tok * kv_width(m) * 2.0 / tp
    ring = fab.collective("all_to_all", ring_bytes, r, tp * u, "cp")
    ring_f = np.maximum(ring - attn_f, 0.0)
    return ring_f + np.maximum(2 * ring - attn_b, 0.0), ring_f


def ulysses_time(m: ModelSpec, fab: Fabric, tok: np.ndarray, tp: np.ndarray, u: np.ndarray) -> np.ndarray:
    """One direction's all-to-alls among the u Ulysses ranks: QKV before attention, the output after."""
    kv = kv_width(m)
    q_width = m.num_attention_heads * (m.v_head_dim if m.is_mla else m.d_head)
    qkv_bytes = tok * (q_width + (kv if not m.is_mla else 2 * m.num_attention_heads * m.d_head)) * 2.0 / tp
    out_bytes = tok * q_width * 2.0 / tp
    return sum(fab.collective("all_to_all", b, u, tp, "cp") for b in (qkv_bytes, out_bytes))


def cp_exposed(m: ModelSpec, fab: Fabric, tok: np.ndarray, tp: np.ndarray, u: np.ndarray, r: np.ndarray,
               attn_f: np.ndarray, attn_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(forward + backward, forward) exposed CP time per layer: ring part + Ulysses all-to-alls (twice: fwd, bwd)."""
    ring_all, ring_f = ring_exposed(m, fab, tok, tp, u, r, attn_f, attn_b)
    a2a_cp = ulysses_time(m, fab, tok, tp, u)
    return ring_all + 2 * a2a_cp, ring_f + a2a_cp
