"""One NIC, several dimensions: the network time a layer's collectives need together, against the time it takes.

Every other term prices one parallel dimension's collectives against the compute they hide behind, as if each had
the GPU's network links to itself. They do not: a ZeRO-3 layer gathers its weights and reduce-scatters its gradients
through the same NIC that carries its expert all-to-all and its context-parallel ring, and a link moves one byte at
a time whoever sends it. So beside the per-dimension exposures, one layer's pass can take no less time than its
busiest network tier needs for all of that traffic together (the link roofline of Williams et al. 2009, applied to
the NIC as to HBM):

    contention = max(0, max_t sum_d busy_(d,t) - (t_f + t_b + recompute + exposed TP, CP, EP, ZeRO-2 and ZeRO-3))

busy_(d,t): seconds tier t's links carry dimension d's traffic of one layer and micro-batch (forward and backward),
from the bytes each collective puts on that tier per GPU (planner.cost.fabric: hierarchical all-gather and
reduce-scatter, all-to-all, node-deduplicated dispatch, ring sends). Counted per layer: the ZeRO-3 gathers (forward,
backward), the gradient reduce-scatter ZeRO-2 and -3 run every micro-batch, the MoE dispatch and combine both ways, the
CP ring's KV blocks and Ulysses all-to-alls. Not counted: the per-micro-batch pipeline hand-offs and ZeRO-0/1's
once-a-step data-parallel reduction (a layer's share of either is small against these), and tensor parallelism, which
stays in the NVLink domain unless --allow-tp-across-nodes. The NVLink tier itself is left out: it carries 8-18x a
NIC's bandwidth per GPU (450-900 GB/s against 50-100), and the TP collectives that load it most are priced blocking or
beside their own GEMMs (planner.cost.tensor), so the NIC is the link two hidden dimensions can overfill.

A single dimension never adds anything here: its own exposure already leaves the layer at least as long as its
traffic (a collective longer than its window is exposed by the difference; combined 1F1B's pair is at least its
communication stream). Two dimensions on one link can: each hides under the same compute on its own, and together
they need longer than the compute.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from planner.cost import expert
from planner.cost.context import ring_block_bytes, ulysses_bytes
from planner.cost.fabric import Fabric, Outer, all_reduce_tier_times, all_to_all_tier_times, span_tier
from planner.cost.profiles import FrameworkProfile
from planner.cost.sharding import fsdp_bytes
from planner.inputs.layout import Zero
from planner.inputs.specs import ModelSpec

Busy = tuple[np.ndarray, ...]  # seconds per network tier (tier 1 = the NIC onwards), one layer and micro-batch


def _tiers(fab: Fabric) -> range:
    return range(1, len(fab.levels.sizes))


def gather_busy(fab: Fabric, nbytes: np.ndarray, size: np.ndarray, stride: np.ndarray, outer: Outer = None) -> Busy:
    """Per network tier, seconds one all-gather (or reduce-scatter) of gathered size `nbytes` keeps its links busy:
    half the all-reduce's tier times (fabric.all_gather_time's bandwidth terms, without the latency)."""
    g, _ = fab.geometry(size, stride, outer)
    times = all_reduce_tier_times(fab.squeeze.wire("dp", nbytes), g, fab.levels)
    return tuple(np.where(np.asarray(size) > 1, 0.5 * times[t], 0.0) for t in _tiers(fab))


def all_to_all_busy(fab: Fabric, nbytes: np.ndarray, size: np.ndarray, stride: np.ndarray, dim: str) -> Busy:
    """Per network tier, seconds a plain all-to-all of `nbytes` per rank keeps its links busy (fabric.
    all_to_all_time's network terms, without the latency)."""
    g, _ = fab.geometry(size, stride)
    times = all_to_all_tier_times(fab.squeeze.wire(dim, nbytes), g, np.asarray(size, dtype=float), fab.levels)
    return tuple(times[t] for t in _tiers(fab))


def send_busy(fab: Fabric, nbytes: np.ndarray, crosses: np.ndarray) -> Busy:
    """Per network tier, seconds a point-to-point send that crosses tier `crosses` (fabric.span_tier) keeps it and
    every network tier below it busy."""
    lv = fab.levels
    wire = fab.squeeze.wire("cp", nbytes)
    return tuple(np.where(np.asarray(crosses) >= t, wire / lv.bw[t], 0.0) for t in _tiers(fab))


def _add(*parts: Busy) -> Busy:
    return tuple(sum(tier) for tier in zip(*parts, strict=True))


def _scale(part: Busy, factor: np.ndarray | float) -> Busy:
    return tuple(t * factor for t in part)


def fsdp_busy(fab: Fabric, prof: FrameworkProfile, zero: np.ndarray, dense_p: np.ndarray, shard_group: np.ndarray,
              tp: np.ndarray, outer: Outer, experts: tuple[np.ndarray, np.ndarray, np.ndarray]) -> Busy:
    """Sharded data parallelism's traffic of one layer and micro-batch: ZeRO-3 gathers the bf16 weights for the
    forward and again for the backward (planner.cost.sharding.fsdp_exposed), and ZeRO-2 and -3 reduce-scatter the
    gradients every micro-batch (planner.cost.data.zero2_exposed), dense over the data ranks and routed experts over
    their expert data-parallel group (`experts`: their parameters, group and stride). ZeRO-1 reduces once a step,
    behind the last micro-batch only (not counted, module docstring)."""
    exp_p, exp_group, exp_stride = experts
    z3 = zero == Zero.PARAMETERS
    per_microbatch = zero >= Zero.GRADIENTS

    def one(params: np.ndarray, group: np.ndarray, stride: np.ndarray, far: Outer) -> tuple[Busy, Busy]:
        gathered, reduced = fsdp_bytes(params, prof)
        twice = _scale(gather_busy(fab, gathered, group, stride, far), 2.0)  # forward and backward
        return twice, gather_busy(fab, reduced, group, stride, far)

    (dense_ag, dense_rs), (exp_ag, exp_rs) = one(dense_p, shard_group, tp, outer), one(exp_p, exp_group, exp_stride,
                                                                                       None)
    return tuple(np.where(z3, ag, 0.0) + np.where(per_microbatch, rs, 0.0)
                 for ag, rs in zip(_add(dense_ag, exp_ag), _add(dense_rs, exp_rs), strict=True))


def ep_busy(m: ModelSpec, fab: Fabric, prof: FrameworkProfile, tok: np.ndarray, tp: np.ndarray, ep: np.ndarray,
            etp: np.ndarray, fp8: bool, load: np.ndarray | float) -> Busy:
    """The MoE layers' dispatch and combine of one average layer and micro-batch, forward and backward: the bytes each
    pass puts on the NIC (expert.nic_bytes_per_pass: the routed copies bound outside the NVLink domain, or one per
    remote domain reached with DeepEP), and past the first network tier the share of them addressed outside the
    tier below, (n - g_(t-1)) / (n - g_0) (fabric.all_to_all_time, fabric.routed_all_to_all_time)."""
    if not m.is_moe:
        return tuple(np.zeros_like(np.asarray(tp, dtype=float)) for _ in _tiers(fab))
    f_moe = m.moe_layers / m.num_hidden_layers
    nic = fab.squeeze.wire("ep", expert.nic_bytes_per_pass(m, fab, prof, tok, tp, ep, etp, fp8, load))
    g, _ = fab.geometry(ep, etp)
    size = np.asarray(ep, dtype=float)
    out = []
    for t in _tiers(fab):
        share = 1.0 if t == 1 else (size - g[t - 1]) / np.maximum(size - g[0], 1)
        out.append(2.0 * f_moe * nic * share / fab.levels.bw[t])
    return tuple(out)


def cp_busy(m: ModelSpec, fab: Fabric, tok: np.ndarray, tp: np.ndarray, u: np.ndarray, r: np.ndarray) -> Busy:
    """Context parallelism's traffic of one layer and micro-batch (planner.cost.context): the ring's r - 1 KV blocks
    forward and twice that backward (KV and dKV), and the Ulysses all-to-alls, twice each way."""
    block = ring_block_bytes(m, tok, tp)
    ring = send_busy(fab, 3.0 * np.maximum(r - 1, 0.0) * block, span_tier(r * tp * u, fab.cluster))
    qkv, out = ulysses_bytes(m, tok, tp)
    return _add(ring, all_to_all_busy(fab, 2.0 * (qkv + out), u, tp, "cp"))


def contention(busy: Busy, elapsed: np.ndarray) -> np.ndarray:
    """Seconds one layer's pass takes beyond `elapsed` (its kernels and the exposures each dimension priced alone)
    because its busiest network tier needs longer for all the traffic: max(0, max_t busy_t - elapsed)."""
    need = np.max(np.stack(np.broadcast_arrays(*busy)), axis=0) if busy else 0.0
    return np.maximum(need - elapsed, 0.0)


class Sharded(NamedTuple):
    """What a layer's sharded data parallelism sends (fsdp_busy): the ZeRO stage, the dense parameters of one layer,
    the shard group, its rank stride (tp) and outer factor, and the routed experts' (parameters, group, stride)."""

    zero: np.ndarray
    dense_params: np.ndarray
    shard_group: np.ndarray
    stride: np.ndarray
    outer: Outer
    experts: tuple[np.ndarray, np.ndarray, np.ndarray]


class Routed(NamedTuple):
    """What a layer's MoE dispatch sends (ep_busy): tokens per micro-batch, tp, ep, expert tp, whether tokens travel
    in fp8, and the busiest rank's load."""

    tokens: np.ndarray
    tp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray
    fp8: bool
    load: np.ndarray | float


def layer_contention(m: ModelSpec, fab: Fabric, prof: FrameworkProfile, sharded: Sharded, routed: Routed,
                     cp_sizes: tuple[np.ndarray, np.ndarray], elapsed: np.ndarray) -> np.ndarray:
    """`contention` of one average layer and micro-batch from its ZeRO-2/3 (`sharded`), EP (`routed`) and CP
    (`cp_sizes`: the Ulysses and ring sizes) traffic, against the `elapsed` seconds the layer already takes."""
    u, r = cp_sizes
    busy = _add(fsdp_busy(fab, prof, sharded.zero, sharded.dense_params, sharded.shard_group, sharded.stride,
                          sharded.outer, sharded.experts),
                ep_busy(m, fab, prof, routed.tokens, routed.tp, routed.ep, routed.etp, routed.fp8, routed.load),
                cp_busy(m, fab, routed.tokens, routed.tp, u, r))
    return contention(busy, elapsed)


def nic_comm_time(micro: np.ndarray, layers: np.ndarray, per_layer: np.ndarray | float) -> np.ndarray:
    """nic_comm_s: what shared network links add per step on the busiest stage, m·L·(`layer_contention` per layer)."""
    return micro * layers * per_layer


__all__ = ["Routed", "Sharded", "contention", "layer_contention", "nic_comm_time"]
