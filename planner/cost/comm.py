"""Collective communication times, on the tier each group crosses.

Model (nccl-tests doc/PERFORMANCE.md): t = latency + S * c(n) / busbw, with c = 2(n-1)/n for all-reduce and
(n-1)/n for all-gather, reduce-scatter and all-to-all. A group that spans NVLink domains runs hierarchically
(intra-domain phase on NVLink, then the inter-domain phase on the network with each GPU driving its own NIC;
stas00/ml-engineering network/README.md), which is what NCCL's tree/ring hybrids achieve for large messages.

Groups follow Megatron-Core's default rank order tp-cp-ep-dp-pp (parallel_state.py): TP ranks are adjacent,
CP and DP groups are strided by tp, PP neighbours are world/pp ranks apart.
"""

from __future__ import annotations

import numpy as np

from planner.inputs.specs import ClusterSpec

# Achievable fraction of the per-direction link rate for large messages:
NVLINK_EFFICIENCY = 0.80  # nccl-tests #212: ring busbw ~370 of 450 GB/s on 8xH100 ("~20% protocol overhead")
NETWORK_EFFICIENCY = 0.92  # nccl-tests #290: 46-48 GB/s per 400 Gb/s NDR NIC with NCCL_ALGO=RING
# Latency terms from NCCL src/graph/tuning.cc (Simple/LL128 protocols): base ~8.4 us, ~2 us per NVLink hop,
# ~4 us per network hop; a tree over nodes needs log2(nodes) network hops each way.
BASE_LATENCY_S = 8.4e-6
NVLINK_HOP_S = 1.9e-6
NETWORK_HOP_S = 4.0e-6


def peers_within(domain: int, stride: np.ndarray, size: np.ndarray) -> np.ndarray:
    """How many members of a group (ranks `stride` apart) share one NVLink domain with a given member."""
    per = np.maximum(domain // np.maximum(stride, 1), 1)
    return np.minimum(per, size)


def domain_group(domain: int, stride: np.ndarray | int, size: np.ndarray | int) -> np.ndarray:
    """Largest sub-group of a group (ranks `stride` apart) that tiles the group and never straddles an NVLink
    domain: gcd(size, domain // stride). Sharding and hierarchical sizes must divide the group (HSDP, hybrid CP)."""
    per = np.maximum(domain // np.maximum(np.asarray(stride, dtype=np.int64), 1), 1)
    return np.gcd(np.asarray(size, dtype=np.int64), per)


def _bandwidths(cluster: ClusterSpec) -> tuple[float, float]:
    nvlink = cluster.gpu.nvlink_gbps * 1e9 * NVLINK_EFFICIENCY
    network = cluster.network_gbps * 1e9 * NETWORK_EFFICIENCY / cluster.oversubscription
    return nvlink, network


def _latency(size: np.ndarray, local: np.ndarray) -> np.ndarray:
    nodes = np.maximum(size // np.maximum(local, 1), 1)
    return np.where(size > 1, BASE_LATENCY_S + 2 * np.log2(np.maximum(local, 1)) * NVLINK_HOP_S
                    + 2 * np.log2(nodes) * NETWORK_HOP_S, 0.0)


def all_reduce_time(nbytes: np.ndarray, size: np.ndarray, stride: np.ndarray, cluster: ClusterSpec) -> np.ndarray:
    """Hierarchical all-reduce: reduce-scatter + all-gather inside the domain, all-reduce of 1/g across domains."""
    nvlink, network = _bandwidths(cluster)
    size = np.asarray(size)
    g = peers_within(cluster.nvlink_domain, stride, size)
    k = np.maximum(size // g, 1)
    intra = 2.0 * (g - 1) / np.maximum(g, 1) * nbytes / nvlink
    inter = 2.0 * (k - 1) / np.maximum(k, 1) * (nbytes / g) / network
    return np.where(size > 1, intra + inter + _latency(size, g), 0.0)


def all_gather_time(nbytes: np.ndarray, size: np.ndarray, stride: np.ndarray, cluster: ClusterSpec) -> np.ndarray:
    """All-gather (or reduce-scatter) of a buffer whose full, gathered size is `nbytes`: half an all-reduce."""
    return np.where(np.asarray(size) > 1, 0.5 * all_reduce_time(nbytes, size, stride, cluster)
                    + 0.5 * _latency(np.asarray(size), peers_within(cluster.nvlink_domain, stride, size)), 0.0)


def all_to_all_time(nbytes: np.ndarray, size: np.ndarray, stride: np.ndarray, cluster: ClusterSpec) -> np.ndarray:
    """All-to-all where each rank holds `nbytes` and keeps 1/n: the off-domain share goes over the NIC."""
    nvlink, network = _bandwidths(cluster)
    size = np.asarray(size)
    g = peers_within(cluster.nvlink_domain, stride, size)
    n = np.maximum(size, 1)
    intra_bytes = nbytes * (g - 1) / n
    inter_bytes = nbytes * (n - g) / n
    t = np.maximum(intra_bytes / nvlink, inter_bytes / network)
    return np.where(size > 1, t + _latency(size, g), 0.0)


def p2p_time(nbytes: np.ndarray, crosses_domain: np.ndarray, cluster: ClusterSpec) -> np.ndarray:
    nvlink, network = _bandwidths(cluster)
    bw = np.where(crosses_domain, network, nvlink)
    return BASE_LATENCY_S + nbytes / bw
