"""Group geometry: which ranks form each parallel group and how much of it fits in one NVLink domain.

Groups follow Megatron-Core's default rank order tp-cp-ep-dp-pp (parallel_state.py): TP ranks are adjacent,
CP and DP groups are strided by tp, PP neighbours are world/pp ranks apart.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from planner.inputs.layout import CpComm, ExpertTp


def peers_within(domain: int, stride: np.ndarray, size: np.ndarray) -> np.ndarray:
    """How many members of a group (ranks `stride` apart) share one NVLink domain with a given member:
    min(max(domain // stride, 1), size)."""
    per = np.maximum(domain // np.maximum(stride, 1), 1)
    return np.minimum(per, size)


def domain_group(domain: int, stride: np.ndarray | int, size: np.ndarray | int) -> np.ndarray:
    """Largest sub-group of a group (ranks `stride` apart) that tiles the group and never straddles an NVLink
    domain: gcd(size, domain // stride). Sharding and hierarchical sizes must divide the group (HSDP, hybrid CP)."""
    per = np.maximum(domain // np.maximum(np.asarray(stride, dtype=np.int64), 1), 1)
    return np.gcd(np.asarray(size, dtype=np.int64), per)


def expert_tp(c: Mapping[str, np.ndarray]) -> np.ndarray:
    """Expert tensor-parallel size: the `etp` knob, tp or 1 (MoE parallel folding). A table without the knob gets
    planner.inputs.layout.default_expert_tp, column-wise: tp where EP fits the data ranks, else 1."""
    tp, dp, cp, ep = (c[k].astype(float) for k in ("tp", "dp", "cp", "ep"))
    if "etp" in c:
        return np.where(c["etp"] == ExpertTp.ONE, 1.0, tp)
    return np.where((dp * cp) % ep == 0, tp, 1.0)


def hsdp_shard_group(domain: int, c: Mapping[str, np.ndarray]) -> np.ndarray:
    """HSDP's shard group: the data ranks (dp x cp, strided by tp) tiling one NVLink domain (PyTorch HYBRID_SHARD)."""
    return domain_group(domain, c["tp"], c["dp"] * c["cp"])


def data_ranks(dp: np.ndarray, cp: np.ndarray) -> np.ndarray:
    """Megatron reduces dense grads over the dp x cp group."""
    return dp * cp


def expert_data_ranks(dp: np.ndarray, cp: np.ndarray, tp: np.ndarray, etp: np.ndarray,
                      ep: np.ndarray) -> np.ndarray:
    """Ranks holding the same experts: max(dp·cp·tp / (etp·ep), 1) (Megatron-Core expert data-parallel group)."""
    return np.maximum(data_ranks(dp, cp) * tp / (etp * ep), 1)


def hybrid_cp_sizes(domain: int, c: Mapping[str, np.ndarray], cp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(u, r): the all-to-all size u and ring length r = cp / u of the context-parallel exchange.

    Ring: u = 1; all-to-all (Ulysses): u = cp; hybrid (USP, Megatron --cp-comm-type a2a+p2p): u = the CP ranks
    inside one NVLink domain, ring over the cp/u domains (Fang & Zhao 2024, arXiv 2405.07719).
    """
    cp_mode = c["cp_comm"] if "cp_comm" in c else np.zeros_like(c["tp"])
    u = np.where(cp_mode == CpComm.HYBRID, domain_group(domain, c["tp"], c["cp"]),
                 np.where(cp_mode == CpComm.A2A, cp, 1.0))
    return u, cp / u
