"""Collectives over the cluster's tiers (NVLink domain, network), with the `--compress` what-if applied.

Model (nccl-tests doc/PERFORMANCE.md): t = latency + S * c(n) / busbw, with c = 2(n-1)/n for all-reduce and
(n-1)/n for all-gather, reduce-scatter and all-to-all. A group that spans NVLink domains runs hierarchically
(intra-domain phase on NVLink, then the inter-domain phase on the network with each GPU driving its own NIC;
stas00/ml-engineering network/README.md), which is what NCCL's tree/ring hybrids achieve for large messages.
Group geometry (who is `stride` apart, how many share a domain) lives in planner.cost.groups.

Compressed collectives (`--compress dp=4,tp=1.5`): each parallel dimension's traffic shrinks by its compression
ratio, and the codec adds its own time: encoding reads the full tensor and writes the compressed one, decoding reads
the compressed one and writes the full tensor. GPU codecs for collectives are memory-bound kernels (hybrid GPU-based
compression for LLM training, e.g. Wang et al. 2023 "ZeRO++" quantised weights/gradients at 2-4x, and the
error-feedback gradient compressors it builds on), so the codec costs HBM traffic 2·S·(1 + 1/r) per collective of
uncompressed size S, on the critical path.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from planner.cost.groups import peers_within
from planner.inputs.hardware import COLLECTIVE_SMS
from planner.inputs.problem import COMPRESS_DIMENSIONS
from planner.inputs.specs import ClusterSpec

# Achievable fraction of the per-direction link rate for large messages:
NVLINK_EFFICIENCY = 0.80  # nccl-tests #212: ring busbw ~370 of 450 GB/s on 8xH100 ("~20% protocol overhead")
NETWORK_EFFICIENCY = 0.92  # nccl-tests #290: 46-48 GB/s per 400 Gb/s NDR NIC with NCCL_ALGO=RING
# Latency terms from NCCL src/graph/tuning.cc (Simple/LL128 protocols): base ~8.4 us, ~2 us per NVLink hop,
# ~4 us per network hop; a tree over nodes needs log2(nodes) network hops each way.
BASE_LATENCY_S = 8.4e-6
NVLINK_HOP_S = 1.9e-6
NETWORK_HOP_S = 4.0e-6

DIMENSIONS = COMPRESS_DIMENSIONS  # parallel dimensions `--compress` can name (parsed once, in inputs/problem.py)


def collective_sm_share(cluster: ClusterSpec) -> float:
    """Share of the GPU's SMs a running collective takes from the compute it overlaps: COLLECTIVE_SMS / SMs
    (24/108 = 22 % on A100, 24/132 = 18 % on H100); 0 when the catalog gives no SM count."""
    return sm_share(cluster, COLLECTIVE_SMS)


def sm_share(cluster: ClusterSpec, sms_taken: int) -> float:
    """Share of the GPU's SMs that `sms_taken` of them are (0 when the catalog gives no SM count)."""
    sms = cluster.gpu.sm_count
    return min(sms_taken / sms, 1.0) if sms else 0.0


def overlapped_exposed(comm: np.ndarray | float, window: np.ndarray | float, share: float) -> np.ndarray:
    """Time a collective of `comm` seconds adds to `window` seconds of compute it runs beside: max(T - w, s·min(T, w)).

    While the collective runs, the compute has 1 - s of the SMs (`collective_sm_share`), so the part of the window
    it overlaps stretches by s of its length; a collective longer than the window leaves T - w exposed instead,
    whichever is larger. s = 0 gives the old free overlap, max(T - w, 0).
    E.g. T = 10 ms beside w = 30 ms on A100: 24/108 x 10 = 2.2 ms, not 0."""
    comm = np.asarray(comm, dtype=float)
    return np.maximum(comm - window, share * np.minimum(comm, window))


def _bandwidths(cluster: ClusterSpec) -> tuple[float, float]:
    nvlink = cluster.gpu.nvlink_gbps * 1e9 * NVLINK_EFFICIENCY
    network = cluster.network_gbps * 1e9 * NETWORK_EFFICIENCY / cluster.oversubscription
    return nvlink, network


def _latency(size: np.ndarray, local: np.ndarray) -> np.ndarray:
    nodes = np.maximum(size // np.maximum(local, 1), 1)
    return np.where(size > 1, BASE_LATENCY_S + 2 * np.log2(np.maximum(local, 1)) * NVLINK_HOP_S
                    + 2 * np.log2(nodes) * NETWORK_HOP_S, 0.0)


Geometry = tuple[np.ndarray, np.ndarray]  # (peers per NVLink domain g, latency) of one (size, stride) group


def geometry(size: np.ndarray, stride: np.ndarray, cluster: ClusterSpec) -> Geometry:
    """(g, latency) of a group of `size` ranks `stride` apart: peers sharing a domain, and the tree latency."""
    size = np.asarray(size)
    g = peers_within(cluster.nvlink_domain, stride, size)
    return g, _latency(size, g)


def all_reduce_time(nbytes: np.ndarray, size: np.ndarray, stride: np.ndarray, cluster: ClusterSpec,
                    geo: Geometry | None = None) -> np.ndarray:
    """Hierarchical all-reduce: reduce-scatter + all-gather inside the domain, all-reduce of 1/g across domains:
    2(g-1)/g·S/nvlink + 2(k-1)/k·(S/g)/network + latency, g peers per domain, k = n/g domains."""
    nvlink, network = _bandwidths(cluster)
    size = np.asarray(size)
    g, lat = geo if geo is not None else geometry(size, stride, cluster)
    k = np.maximum(size // g, 1)
    intra = 2.0 * (g - 1) / np.maximum(g, 1) * nbytes / nvlink
    inter = 2.0 * (k - 1) / np.maximum(k, 1) * (nbytes / g) / network
    return np.where(size > 1, intra + inter + lat, 0.0)


def all_gather_time(nbytes: np.ndarray, size: np.ndarray, stride: np.ndarray, cluster: ClusterSpec,
                    geo: Geometry | None = None) -> np.ndarray:
    """All-gather (or reduce-scatter) of a buffer whose full, gathered size is `nbytes`: half an all-reduce's
    bandwidth term, with the whole latency."""
    geo = geo if geo is not None else geometry(size, stride, cluster)
    return np.where(np.asarray(size) > 1, 0.5 * all_reduce_time(nbytes, size, stride, cluster, geo)
                    + 0.5 * geo[1], 0.0)


def all_to_all_time(nbytes: np.ndarray, size: np.ndarray, stride: np.ndarray, cluster: ClusterSpec,
                    geo: Geometry | None = None) -> np.ndarray:
    """All-to-all where each rank holds `nbytes` and keeps 1/n: the off-domain share goes over the NIC,
    max(S(g-1)/n / nvlink, S(n-g)/n / network) + latency."""
    nvlink, network = _bandwidths(cluster)
    size = np.asarray(size)
    g, lat = geo if geo is not None else geometry(size, stride, cluster)
    n = np.maximum(size, 1)
    intra_bytes = nbytes * (g - 1) / n
    inter_bytes = nbytes * (n - g) / n
    t = np.maximum(intra_bytes / nvlink, inter_bytes / network)
    return np.where(size > 1, t + lat, 0.0)


def routed_all_to_all_time(copies_bytes: np.ndarray, remote_bytes: np.ndarray, size: np.ndarray,
                           stride: np.ndarray, cluster: ClusterSpec) -> np.ndarray:
    """Node-deduplicated token dispatch (DeepEP normal kernels; DeepSeek-V3 report §3.2.2): a token crosses the
    network once per remote NVLink domain it is routed to (to the same-index GPU there), then NVLink forwards its
    copies to the experts' GPUs: max(copies·(g-1)/g / nvlink, remote / network) + latency.
    `copies_bytes`: all k routed copies of the rank's tokens; `remote_bytes`: one copy per remote domain reached."""
    nvlink, network = _bandwidths(cluster)
    size = np.asarray(size)
    g = peers_within(cluster.nvlink_domain, stride, size)
    intra = copies_bytes * (g - 1) / np.maximum(g, 1)
    t = np.maximum(intra / nvlink, remote_bytes / network)
    return np.where(size > 1, t + _latency(size, g), 0.0)


def p2p_time(nbytes: np.ndarray, crosses_domain: np.ndarray, cluster: ClusterSpec) -> np.ndarray:
    """Point-to-point send: base latency + S / bandwidth of the tier it crosses."""
    nvlink, network = _bandwidths(cluster)
    bw = np.where(crosses_domain, network, nvlink)
    return BASE_LATENCY_S + nbytes / bw


_KINDS = {"all_reduce": all_reduce_time, "all_gather": all_gather_time, "reduce_scatter": all_gather_time,
          "all_to_all": all_to_all_time}


class Squeezer:
    """Applies per-dimension compression ratios to collective sizes and prices the codec."""

    def __init__(self, ratios: Mapping[str, float], hbm_bytes_per_s: float) -> None:
        self.ratios = {k: float(v) for k, v in ratios.items() if float(v) != 1.0}
        self.hbm = hbm_bytes_per_s

    def wire(self, dim: str, nbytes: np.ndarray | float) -> np.ndarray | float:
        """Bytes that actually cross the link: S / r."""
        return nbytes / self.ratios.get(dim, 1.0)

    def codec(self, dim: str, nbytes: np.ndarray | float) -> np.ndarray | float:
        """Encode + decode time for one collective of uncompressed size `nbytes`: 2·S·(1 + 1/r) / HBM (0 without
        compression)."""
        r = self.ratios.get(dim)
        if r is None:
            return 0.0
        return 2.0 * nbytes * (1.0 + 1.0 / r) / self.hbm


class Fabric:
    """The cluster's links as the cost model sees them: every collective of a parallel dimension, compressed or not."""

    def __init__(self, cluster: ClusterSpec, ratios: Mapping[str, float], hbm_bytes_per_s: float) -> None:
        self.cluster = cluster
        self.squeeze = Squeezer(ratios, hbm_bytes_per_s)
        self._geo: dict[tuple[int, int], tuple[object, object, Geometry]] = {}

    def collective(self, kind: str, nbytes: np.ndarray | float, size: np.ndarray, stride: np.ndarray,
                   dim: str) -> np.ndarray:
        """Time of one collective `kind` (all_reduce, all_gather, reduce_scatter, all_to_all) of uncompressed size
        `nbytes` over `size` ranks `stride` apart, for parallel dimension `dim`: t(S / r) + codec(S). A group of one
        rank sends nothing, so it encodes nothing either: compressing a dimension of size 1 changes nothing."""
        sq = self.squeeze
        codec = np.where(np.asarray(size) > 1, sq.codec(dim, nbytes), 0.0)
        return _KINDS[kind](sq.wire(dim, nbytes), size, stride, self.cluster, self._geometry(size, stride)) + codec

    def _geometry(self, size: np.ndarray, stride: np.ndarray) -> Geometry:
        """Group geometry, computed once per (size, stride) pair of arrays: the same group columns are priced by
        several collectives. Keyed by identity, with the arrays kept alive so that an id is never reused."""
        key = (id(size), id(stride))
        hit = self._geo.get(key)
        if hit is None:
            hit = (size, stride, geometry(size, stride, self.cluster))
            self._geo[key] = hit
        return hit[2]

    def routed_all_to_all(self, copies_bytes: np.ndarray, remote_bytes: np.ndarray, size: np.ndarray,
                          stride: np.ndarray, dim: str) -> np.ndarray:
        """Node-deduplicated dispatch/combine (`routed_all_to_all_time`), compressed like any collective."""
        sq = self.squeeze
        return (routed_all_to_all_time(sq.wire(dim, copies_bytes), sq.wire(dim, remote_bytes), size, stride,
                                       self.cluster) + sq.codec(dim, copies_bytes))

    def send(self, nbytes: np.ndarray | float, crosses_domain: np.ndarray, dim: str) -> np.ndarray:
        """Point-to-point hand-off of uncompressed size `nbytes`: p2p(S / r) + codec(S)."""
        sq = self.squeeze
        return p2p_time(sq.wire(dim, nbytes), crosses_domain, self.cluster) + sq.codec(dim, nbytes)
