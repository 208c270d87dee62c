"""Collectives over the cluster's network tiers (planner.inputs.network), with the `--compress` what-if applied.

Model (nccl-tests doc/PERFORMANCE.md): t = latency + S * c(n) / busbw, with c = 2(n-1)/n for all-reduce and
(n-1)/n for all-gather, reduce-scatter and all-to-all. A group whose members span domains runs hierarchically, tier
by tier: with g_t members per tier-t domain (g_-1 = 1, the outermost g = n) and k_t = g_t / g_(t-1) lower domains
per tier-t domain, an all-reduce reduce-scatters inside the innermost domain, then across each tier on the shard it
holds, and all-gathers back, so tier t carries 2(k_t - 1)/k_t x S/g_(t-1) per GPU at that tier's per-GPU bandwidth
(each GPU driving its own NIC; stas00/ml-engineering network/README.md). NCCL's rings give every tier the same bytes
with one channel per GPU of a lower domain (each channel's ring crosses each domain boundary once), and its trees the
log-depth latency priced here. A tier's bandwidth is divided by its oversubscription: in a data-parallel reduction
every GPU of a domain sends out of it at once. Group geometry (who is `stride` apart, how many share a domain) lives in
planner.cost.groups; with two tiers (NVLink domain, network) every formula is the two-level one it always was.

Compressed collectives (`--compress dp=4,tp=1.5`): each parallel dimension's traffic shrinks by its compression
ratio, and the codec adds its own time: encoding reads the full tensor and writes the compressed one, decoding reads
the compressed one and writes the full tensor. GPU codecs for collectives are memory-bound kernels (hybrid GPU-based
compression for LLM training, e.g. Wang et al. 2023 "ZeRO++" quantised weights/gradients at 2-4x, and the
error-feedback gradient compressors it builds on), so the codec costs HBM traffic 2·S·(1 + 1/r) per collective of
uncompressed size S, on the critical path.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

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


class Levels:
    """The tiers as the fabric prices them, innermost first: domain sizes, per-GPU bytes/s (achievable share of the
    link, divided by the oversubscription), one hop's latency, and which network tiers are rail-optimised."""

    __slots__ = ("names", "sizes", "bw", "hop", "rails", "extra_hop")

    def __init__(self, cluster: ClusterSpec) -> None:
        tiers = cluster.network_tiers()
        self.names = tuple(t.name for t in tiers)
        self.sizes = tuple(t.size for t in tiers)
        bw, hop, extra = [], [], []
        for i, t in enumerate(tiers):
            gbps = t.gbps if t.gbps is not None else cluster.gpu.nvlink_gbps
            bw.append(gbps * 1e9 * (NETWORK_EFFICIENCY if i else NVLINK_EFFICIENCY) / t.oversubscription)
            default = NETWORK_HOP_S if i else NVLINK_HOP_S
            hop.append(default if t.latency_us is None else t.latency_us * 1e-6)
            extra.append(max(hop[-1] - default, 0.0))
        self.bw, self.hop, self.extra_hop = tuple(bw), tuple(hop), np.array(extra)
        self.rails = any(t.rails for t in tiers[1:])

    def tier_bandwidths(self) -> np.ndarray:
        return np.array(self.bw)


@lru_cache(maxsize=16)
def levels(cluster: ClusterSpec) -> Levels:
    """The cluster's Levels, built once per cluster."""
    return Levels(cluster)


# A group spread over the tiers: its members per tier-t domain, innermost first (the last is the group's size).
Spans = tuple[np.ndarray, ...]
Geometry = tuple[Spans, np.ndarray]  # (spans, latency) of one group
Outer = tuple[np.ndarray, np.ndarray] | None  # (inner count, outer stride): see spans()


def spans(size: np.ndarray, stride: np.ndarray, lv: Levels, outer: Outer = None) -> Spans:
    """Members of a group sharing a tier-t domain with a given member, per tier. The group is `size` ranks `stride`
    apart, or with `outer` = (inner, outer_stride): `inner` ranks `stride` apart, repeated size/inner times
    `outer_stride` apart (a group whose dimensions are not adjacent in the rank order, planner.cost.groups)."""
    size = np.asarray(size)
    out = []
    for domain in lv.sizes[:-1]:
        if outer is None:
            out.append(peers_within(domain, stride, size))
        else:
            inner, far = outer
            out.append(peers_within(domain, stride, inner) * peers_within(domain, far, size // inner))
    out.append(size)
    return tuple(out)


def _per_tier(g: Spans) -> list[np.ndarray]:
    """k_t: the lower domains (or, innermost, the members) a group joins inside one domain of each tier."""
    return [g[0]] + [np.maximum(g[t] // np.maximum(g[t - 1], 1), 1) for t in range(1, len(g))]


def _latency(size: np.ndarray, g: Spans, lv: Levels) -> np.ndarray:
    """Tree latency: a base plus 2·log2(k_t) hops at each tier (NCCL tuning.cc; hops of the tier's latency)."""
    lat = BASE_LATENCY_S + 2 * np.log2(np.maximum(g[0], 1)) * lv.hop[0]
    for t, k in enumerate(_per_tier(g)[1:], start=1):
        lat = lat + 2 * np.log2(k) * lv.hop[t]
    return np.where(size > 1, lat, 0.0)


def geometry(size: np.ndarray, stride: np.ndarray, cluster: ClusterSpec, outer: Outer = None) -> Geometry:
    """(spans, latency) of a group of `size` ranks `stride` apart (`outer`: see spans)."""
    lv = levels(cluster)
    size = np.asarray(size)
    g = spans(size, stride, lv, outer)
    return g, _latency(size, g, lv)


def all_reduce_tier_times(nbytes: np.ndarray, g: Spans, lv: Levels) -> list[np.ndarray]:
    """Seconds each tier's links carry a hierarchical all-reduce of `nbytes` (no latency): 2(k_t - 1)/k_t x
    (S / g_(t-1)) / bw_t, tier 0 the NVLink domain (module docstring)."""
    k = _per_tier(g)
    times = [2.0 * (k[0] - 1) / np.maximum(k[0], 1) * nbytes / lv.bw[0]]
    for t in range(1, len(g)):
        times.append(2.0 * (k[t] - 1) / np.maximum(k[t], 1) * (nbytes / g[t - 1]) / lv.bw[t])
    return times


def all_reduce_time(nbytes: np.ndarray, size: np.ndarray, stride: np.ndarray, cluster: ClusterSpec,
                    geo: Geometry | None = None) -> np.ndarray:
    """Hierarchical all-reduce, tier by tier: sum over tiers of 2(k_t - 1)/k_t x (S / g_(t-1)) / bw_t, plus the
    latency (module docstring). Two tiers: 2(g-1)/g·S/nvlink + 2(k-1)/k·(S/g)/network + latency."""
    size = np.asarray(size)
    g, lat = geo if geo is not None else geometry(size, stride, cluster)
    times = all_reduce_tier_times(nbytes, g, levels(cluster))
    total = times[0]
    for t in times[1:]:
        total = total + t
    return np.where(size > 1, total + lat, 0.0)


def all_gather_time(nbytes: np.ndarray, size: np.ndarray, stride: np.ndarray, cluster: ClusterSpec,
                    geo: Geometry | None = None) -> np.ndarray:
    """All-gather (or reduce-scatter) of a buffer whose full, gathered size is `nbytes`: half an all-reduce's
    bandwidth term, with the whole latency."""
    geo = geo if geo is not None else geometry(size, stride, cluster)
    return np.where(np.asarray(size) > 1, 0.5 * all_reduce_time(nbytes, size, stride, cluster, geo)
                    + 0.5 * geo[1], 0.0)


def _pxn_bytes(nbytes: np.ndarray, g0: np.ndarray, n: np.ndarray, lv: Levels) -> np.ndarray | float:
    """On a rail-optimised network, the bytes leaving the NVLink domain that first cross NVLink to the GPU on the
    destination's rail (NCCL PXN, NCCL 2.12+): all but the 1/g0 already on it. 0 without rails."""
    if not lv.rails:
        return 0.0
    return nbytes * (n - g0) / n * (g0 - 1) / np.maximum(g0, 1)


def all_to_all_time(nbytes: np.ndarray, size: np.ndarray, stride: np.ndarray, cluster: ClusterSpec,
                    geo: Geometry | None = None) -> np.ndarray:
    """All-to-all where each rank holds `nbytes` and keeps 1/n: every tier's links carry the share addressed
    outside the domain below it, S(n - g_(t-1))/n (NVLink: the share inside the domain, S(g0 - 1)/n, plus PXN's
    rail moves), and the slowest tier sets the time: max_t bytes_t / bw_t + latency."""
    size = np.asarray(size)
    g, lat = geo if geo is not None else geometry(size, stride, cluster)
    times = all_to_all_tier_times(nbytes, g, size, levels(cluster))
    t_max = times[0]
    for t in times[1:]:
        t_max = np.maximum(t_max, t)
    return np.where(size > 1, t_max + lat, 0.0)


def all_to_all_tier_times(nbytes: np.ndarray, g: Spans, size: np.ndarray, lv: Levels) -> list[np.ndarray]:
    """Seconds each tier's links carry an all-to-all of `nbytes` per rank (no latency): NVLink the share inside the
    domain plus PXN's rail moves, each network tier the share addressed outside the domain below it,
    S(n - g_(t-1))/n / bw_t (all_to_all_time)."""
    n = np.maximum(size, 1)
    times = [(nbytes * (g[0] - 1) / n + _pxn_bytes(nbytes, g[0], n, lv)) / lv.bw[0]]
    for t in range(1, len(g)):
        times.append(nbytes * (n - g[t - 1]) / n / lv.bw[t])
    return times


def routed_all_to_all_time(copies_bytes: np.ndarray, remote_bytes: np.ndarray, size: np.ndarray,
                           stride: np.ndarray, cluster: ClusterSpec) -> np.ndarray:
    """Node-deduplicated token dispatch (DeepEP normal kernels; DeepSeek-V3 report §3.2.2): a token crosses the
    network once per remote NVLink domain it is routed to (to the same-index GPU there), then NVLink forwards its
    copies to the experts' GPUs: max(copies·(g-1)/g / nvlink, remote / network) + latency. Past the first network
    tier, the share of the remote domains outside the tier below, (n - g_(t-1))/(n - g0), crosses each tier.
    `copies_bytes`: all k routed copies of the rank's tokens; `remote_bytes`: one copy per remote domain reached."""
    lv = levels(cluster)
    size = np.asarray(size)
    g = spans(size, stride, lv)
    intra = copies_bytes * (g[0] - 1) / np.maximum(g[0], 1)
    t = np.maximum(intra / lv.bw[0], remote_bytes / lv.bw[1])
    for i in range(2, len(g)):
        share = (size - g[i - 1]) / np.maximum(size - g[0], 1)
        t = np.maximum(t, remote_bytes * share / lv.bw[i])
    return np.where(size > 1, t + _latency(size, g, lv), 0.0)


def p2p_time(nbytes: np.ndarray, tier: np.ndarray, cluster: ClusterSpec) -> np.ndarray:
    """Point-to-point send: base latency + S / bandwidth of the outermost tier it crosses (`tier`: its index, or
    False/True for the NVLink domain / the first network tier). NCCL's base latency holds its default hop; a tier
    given a slower hop (latency_us) adds the difference."""
    lv = levels(cluster)
    index = np.asarray(tier).astype(np.intp)
    bw = lv.tier_bandwidths().take(index)
    if not lv.extra_hop.any():
        return BASE_LATENCY_S + nbytes / bw
    return BASE_LATENCY_S + lv.extra_hop.take(index) + nbytes / bw


def span_tier(ranks: np.ndarray, cluster: ClusterSpec) -> np.ndarray:
    """Index of the outermost tier a block of `ranks` consecutive ranks crosses: the tiers whose domain it
    exceeds (0: inside one NVLink domain)."""
    return sum((np.asarray(ranks) > d).astype(np.intp) for d in levels(cluster).sizes[:-1])


def group_tier(g: Spans, size: np.ndarray) -> np.ndarray:
    """Index of the outermost tier a group's neighbours cross somewhere: the tiers whose domain does not hold the
    whole group (its slowest hop; 0: all inside one NVLink domain)."""
    return sum((gt < size).astype(np.intp) for gt in g[:-1])


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
        self.levels = levels(cluster)
        self._geo: dict[tuple[int, int, int], tuple[object, object, object, Geometry]] = {}

    def collective(self, kind: str, nbytes: np.ndarray | float, size: np.ndarray, stride: np.ndarray,
                   dim: str, outer: Outer = None) -> np.ndarray:
        """Time of one collective `kind` (all_reduce, all_gather, reduce_scatter, all_to_all) of uncompressed size
        `nbytes` over `size` ranks `stride` apart (`outer`: see spans), for parallel dimension `dim`:
        t(S / r) + codec(S). A group of one rank sends nothing, so it encodes nothing either: compressing a
        dimension of size 1 changes nothing."""
        sq = self.squeeze
        codec = np.where(np.asarray(size) > 1, sq.codec(dim, nbytes), 0.0)
        geo = self.geometry(size, stride, outer)
        return _KINDS[kind](sq.wire(dim, nbytes), size, stride, self.cluster, geo) + codec

    def geometry(self, size: np.ndarray, stride: np.ndarray, outer: Outer = None) -> Geometry:
        """Group geometry, computed once per (size, stride, outer) of arrays: the same group columns are priced by
        several collectives. Keyed by identity, with the arrays kept alive so that an id is never reused."""
        key = (id(size), id(stride), id(outer))
        hit = self._geo.get(key)
        if hit is None:
            hit = (size, stride, outer, geometry(size, stride, self.cluster, outer))
            self._geo[key] = hit
        return hit[3]

    def routed_all_to_all(self, copies_bytes: np.ndarray, remote_bytes: np.ndarray, size: np.ndarray,
                          stride: np.ndarray, dim: str) -> np.ndarray:
        """Node-deduplicated dispatch/combine (`routed_all_to_all_time`), compressed like any collective."""
        sq = self.squeeze
        return (routed_all_to_all_time(sq.wire(dim, copies_bytes), sq.wire(dim, remote_bytes), size, stride,
                                       self.cluster) + sq.codec(dim, copies_bytes))

    def send(self, nbytes: np.ndarray | float, tier: np.ndarray, dim: str) -> np.ndarray:
        """Point-to-point hand-off of uncompressed size `nbytes` across tier `tier` (p2p_time): p2p(S / r) +
        codec(S)."""
        sq = self.squeeze
        return p2p_time(sq.wire(dim, nbytes), tier, self.cluster) + sq.codec(dim, nbytes)
