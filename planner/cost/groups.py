"""Group geometry: which ranks form each parallel group and how much of it fits in one domain of each tier.

Groups follow the layout's rank order (planner.inputs.layout.RankOrder), as Megatron-Core's RankGenerator builds
them (parallel_state.py): TP ranks are adjacent and CP groups strided by tp in both orders. With tp-cp-ep-dp-pp
(the default) the data ranks (dp x cp) are one block strided by tp and pipeline neighbours world/pp ranks apart;
with tp-cp-ep-pp-dp pipeline neighbours are tp·cp apart and the data ranks are cp ranks strided by tp repeated
dp times tp·cp·pp apart (an outer factor, planner.cost.fabric.spans). The expert grid (etp-ep-edp-pp, or
etp-ep-pp-edp) strides the expert data ranks by etp·ep, or etp·ep·pp.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from planner.inputs.layout import CpComm, ExpertTp, RankOrder


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


class Placement:
    """Where a table's groups lie under each row's rank order: the outer factor of its data-parallel groups (None
    when no row puts dp outermost), the expert data ranks' stride and the pipeline neighbours' distance."""

    __slots__ = ("dp_outer", "expert_stride", "pp_stride", "_c")

    def __init__(self, c: Mapping[str, np.ndarray], n_gpus: float, etp: np.ndarray) -> None:
        tp, pp, cp, ep = (c[k].astype(float) for k in ("tp", "pp", "cp", "ep"))
        rows = c["order"] == RankOrder.DP_OUTER if "order" in c else None
        self.dp_outer = rows if rows is not None and rows.any() else None
        self._c = (tp, pp, cp)
        self.expert_stride = etp * ep if self.dp_outer is None else np.where(self.dp_outer, etp * ep * pp, etp * ep)
        self.pp_stride = n_gpus / pp if self.dp_outer is None else np.where(self.dp_outer, tp * cp, n_gpus / pp)

    def data_outer(self, size: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """fabric.spans' outer factor of a group of the data ranks (dp x cp, or a ZeRO-3 shard group equal to
        them) of `size` members: cp ranks tp apart, then blocks tp·cp·pp apart on the rows with dp outermost; one
        factor (inner = size) on the others."""
        if self.dp_outer is None:
            return None
        tp, pp, cp = self._c
        return np.where(self.dp_outer, cp, size), np.where(self.dp_outer, tp * cp * pp, 1.0)
