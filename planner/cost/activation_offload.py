"""Activations kept in host memory instead of recomputed (recompute=offload): how many layers leave the GPU, and
what the copies cost.

Megatron-Core's layer-level CPU offloading (`--cpu-offloading-num-layers k`, through Transformer Engine's
get_cpu_offload_context) copies the saved activations of a stage's first k layers to pinned host memory on a side
stream as the forward makes them, and reloads them in the backward. Transformer Engine's documentation
(docs/features/other_optimizations/cpu_offloading, @d0067d0) states the schedule this module prices:
  - at most L - k layers' activations are on the GPU at any time, so the stage keeps k layers fewer;
  - compute waits when a copy falls behind: in the forward a layer may not start while L - k sets are resident, in
    the backward a layer waits for its reload;
  - k <= L - 2 keeps copies and compute overlapping (L - 1 leaves one set on the GPU and serialises them).
Megatron-Core allows it only with pp = 1 and without recomputation (transformer_config.py), and the default schedule
assumes each micro-batch's forward then its backward, so no paired schedule either (rule offload_needs_one_stage):
the stage is the whole model and one micro-batch is in flight.

The planner chooses k: the fewest layers that bring the layout under the memory budget (capacity x (1 - headroom)),
at most L - 2 and at most what host memory holds ([HOST] in clusters/gpus.yaml); a layout that still does not fit is
refused by the memory check like any other.

Time per micro-batch, with a one layer's activations, tau = a / B its copy over the host link (B per direction,
[PCIE]/[C2C], at HOST_COPY_EFFICIENCY) and t_f, t_b one layer's forward and backward: the copies run back to back
on one stream, so the k-th copy ends k·tau after the first layer, while the layer that must wait for it starts
(L - 2)·t later:
  forward stall   max(0, k·tau - (L - 2)·t_f)
  backward stall  max(0, k·tau - (L - 2)·t_b)
  HBM             2·k·a / HBM bandwidth (each copy reads or writes the activations once beside the compute; Transformer
                  Engine's documentation warns that offloading competes for HBM bandwidth)
On x86 hosts the GPU reaches host memory over its one PCIe x16 link, which also carries its NIC's GPUDirect RDMA
traffic (DGX H100 pairs each GPU with one ConnectX-7, User Guide §1.2.3, whose integrated PCIe switch sits between
the GPU and the CPU in NVIDIA's DGX H100 block diagram, GTC 2022 technical follow-up), so while ZeRO-3
gathers cross the network the copies get what the NIC leaves: B = host link - NIC rate x the share of the pass its
collectives run (nic_busy), and likewise while the expert all-to-alls of an EP group wider than one NVLink domain
do (their bytes over the NIC at its line rate, expert.nic_bytes_per_pass). Grace parts reach host memory over
NVLink-C2C, apart from the NIC's PCIe path. Other network traffic during the passes (ring attention across nodes,
pipeline hand-offs) is not charged here.

recompute=offload-modules (Megatron-Core's fine-grained offloading; which tensors: planner.cost.module_offload) shares
the host link, its NIC contention and the HBM term: modules_stall prices its copies layer by layer, host_bytes_over
bounds its host memory.
"""

from __future__ import annotations

import numpy as np

from planner.cost.device_memory import allocation_budget
from planner.cost.groups import peers_within
from planner.cost.memory import GIB
from planner.inputs.hardware import HOST_COPY_EFFICIENCY
from planner.inputs.layout import Recompute, Zero
from planner.inputs.problem import Problem

# Layers left on the GPU at the most: below two, copies and compute cannot overlap (Transformer Engine docs, above).
MIN_RESIDENT_LAYERS = 2


def budget_bytes(problem: Problem) -> float:
    """The device total a layout aims under: capacity x (1 - memory headroom), bytes (the fit check's bound for
    a layout that is not tight)."""
    return problem.cluster.gpu.memory_gib * (1.0 - problem.memory_headroom) * GIB


def offloaded_layers(problem: Problem, rc: np.ndarray, layers: np.ndarray, per_layer_act: np.ndarray,
                     allocated: np.ndarray, outside: np.ndarray) -> np.ndarray:
    """k per row (0 where rc is not offload): the fewest layers whose activations, moved to the host, bring the
    device total (device_memory.device_bytes of `allocated`, `outside` the allocator) under budget_bytes:
        k = ceil((allocated - allocation_budget(budget, outside)) / a), a one layer's activations,
    at least 1, at most L - MIN_RESIDENT_LAYERS and what host memory holds."""
    k = np.zeros(np.shape(rc))
    rows = np.flatnonzero(np.ravel(rc) == Recompute.OFFLOAD)
    if not len(rows):
        return k

    def at_rows(x: np.ndarray) -> np.ndarray:
        return np.broadcast_to(x, np.shape(rc)).ravel().take(rows)

    a = np.maximum(at_rows(per_layer_act), 1.0)
    need = np.ceil((at_rows(allocated) - allocation_budget(budget_bytes(problem), at_rows(outside))) / a)
    host = np.floor(problem.cluster.gpu.host_memory_gib * GIB / a)
    most = np.minimum(at_rows(layers) - MIN_RESIDENT_LAYERS, host)
    k.ravel()[rows] = np.maximum(np.minimum(np.maximum(need, 1.0), most), 0.0)
    return k


# The copies keep at least this share of the host link while the NIC is busy (nothing in a PCIe link's arbitration
# starves one requester; a floor keeps the price finite where the NIC's line rate exceeds the link's).
MIN_LINK_SHARE = 0.05


def nic_busy(problem: Problem, zero: np.ndarray, shard_group: np.ndarray, tp: np.ndarray, ag: np.ndarray,
             rs: np.ndarray, t_f: np.ndarray, t_b: np.ndarray,
             outer: tuple[np.ndarray, np.ndarray] | None = None,
             expert_nic_s: np.ndarray | float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) share of a layer's pass during which the NIC runs, where the GPU's host link also carries
    its traffic (0 elsewhere): ZeRO-3 collectives that leave the NVLink domain (their gathers `ag` beside t_f,
    gathers and reduce-scatters `rs` beside t_b; seconds from sharding.fsdp_collectives) plus `expert_nic_s`, the
    seconds an average layer's expert all-to-alls keep the NIC at line rate in each pass
    (expert.nic_bytes_per_pass / the NIC's rate); at most all of the pass. `outer`: the shard group's outer factor
    when data parallelism is outermost (planner.cost.groups.Placement)."""
    if not problem.cluster.gpu.nic_shares_host_link:
        return np.zeros_like(t_f), np.zeros_like(t_b)
    domain = problem.cluster.nvlink_domain
    inside = peers_within(domain, tp, shard_group) if outer is None else (
        peers_within(domain, tp, outer[0]) * peers_within(domain, outer[1], shard_group // outer[0]))
    crosses = (zero == Zero.PARAMETERS) & (inside < shard_group)
    z3_f, z3_b = np.where(crosses, ag, 0.0), np.where(crosses, ag + rs, 0.0)
    return (np.minimum((z3_f + expert_nic_s) / np.maximum(t_f, 1e-12), 1.0),
            np.minimum((z3_b + expert_nic_s) / np.maximum(t_b, 1e-12), 1.0))


def offload_stall(problem: Problem, k: np.ndarray, per_layer_act: np.ndarray, layers: np.ndarray,
                  t_f: np.ndarray, t_b: np.ndarray, hbm: float, busy_f: np.ndarray | float = 0.0,
                  busy_b: np.ndarray | float = 0.0) -> np.ndarray:
    """Seconds one micro-batch loses to the copies of k offloaded layers (module docstring): the forward and
    backward stalls plus the HBM traffic of the copies; `busy_f`/`busy_b` (nic_busy) take the NIC's share of a
    shared host link."""
    overlap = np.maximum(layers - MIN_RESIDENT_LAYERS, 0.0)
    stall = (np.maximum(k * copy_time(problem, per_layer_act, busy_f) - overlap * t_f, 0.0)
             + np.maximum(k * copy_time(problem, per_layer_act, busy_b) - overlap * t_b, 0.0))
    return np.where(k > 0, stall + 2.0 * k * per_layer_act / hbm, 0.0)


def copy_time(problem: Problem, nbytes: np.ndarray, busy: np.ndarray | float = 0.0) -> np.ndarray:
    """Seconds to move `nbytes` one way over the GPU's host link: nbytes / max(B - NIC rate x busy, floor), B the
    link per direction at HOST_COPY_EFFICIENCY (module docstring)."""
    link = problem.cluster.gpu.host_link_gbps * 1e9 * HOST_COPY_EFFICIENCY
    nic = problem.cluster.network_gbps * 1e9
    return nbytes / np.maximum(link - nic * busy, MIN_LINK_SHARE * link)


def modules_stall(problem: Problem, offloaded: np.ndarray, layers: np.ndarray, t_f: np.ndarray, t_b: np.ndarray,
                  hbm: float, busy_f: np.ndarray | float = 0.0, busy_b: np.ndarray | float = 0.0) -> np.ndarray:
    """Seconds one micro-batch loses on a stage of `layers` layers to recompute=offload-modules, with `offloaded`
    bytes per layer (memory.offloaded_module_bytes):
        layers x [max(0, copy(o, busy_f) - t_f) + max(0, copy(o, busy_b) - t_b) + 2·o / HBM bandwidth]
    Megatron-Core starts a module's copy to the host when the module's forward ends and reloads the next module's
    tensors while the current one runs its backward (fine_grained_activation_offload.py: on_group_commit_forward,
    bulk_reload), so each layer's copies, one stream per direction, hide behind that layer's own compute; what they
    do not hide is lost (in the forward a lagging copy holds the memory it should free, in the backward the reload
    is waited for). The HBM term and the NIC's share of a PCIe host link (nic_busy) are priced as for layer
    offloading."""
    stall = (np.maximum(copy_time(problem, offloaded, busy_f) - t_f, 0.0)
             + np.maximum(copy_time(problem, offloaded, busy_b) - t_b, 0.0))
    return np.where(offloaded > 0, layers * (stall + 2.0 * offloaded / hbm), 0.0)


def offload_step_time(micro: np.ndarray, stalls: np.ndarray) -> np.ndarray:
    """offload_s: m·(what one micro-batch loses to host copies: offload_stall for recompute=offload's k layers,
    modules_stall for offload-modules) (Transformer Engine CPU offloading; Megatron-Core fine-grained offloading)."""
    return micro * stalls


def host_bytes_over(problem: Problem, offloaded: np.ndarray, layers: np.ndarray,
                    inflight: np.ndarray) -> np.ndarray:
    """Bytes of recompute=offload-modules' tensors beyond the GPU's share of host memory ([HOST]), 0 where they fit:
    every in-flight micro-batch's offloaded tensors of every layer on the stage sit there (offloaded x layers x
    in-flight)."""
    return np.maximum(offloaded * layers * inflight - problem.cluster.gpu.host_memory_gib * GIB, 0.0)
