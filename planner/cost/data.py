"""Data parallelism: the per-step gradient reduction and the optimizer update."""

from __future__ import annotations

import numpy as np

from planner.cost import offload
from planner.cost.fabric import Fabric, collective_sm_share, overlapped_exposed
from planner.cost.groups import Placement
from planner.cost.profiles import FrameworkProfile
from planner.inputs.layout import Zero

# Adam step touches fp32 master, two moments (read+write, 24 B), reads the fp32 grad (4 B), writes bf16 params (2 B).
OPTIMIZER_BYTES_PER_PARAM = 30.0
# Muon's elementwise work: fp32 master and one momentum buffer read and written (16 B), the fp32 grad read (4 B),
# the bf16 params written (2 B) (Megatron-Core muon.py keeps one momentum_buffer per parameter); the
# orthogonalisation is GEMMs (muon_time).
MUON_BYTES_PER_PARAM = 22.0


def grad_reduction_time(fab: Fabric, prof: FrameworkProfile, params: dict[str, np.ndarray], zero: np.ndarray,
                        hsdp: np.ndarray, shard_group: np.ndarray, ranks: tuple[np.ndarray, np.ndarray],
                        tp: np.ndarray, etp: np.ndarray, ep: np.ndarray, place: Placement | None = None) -> np.ndarray:
    """Per-step gradient reduction of the busiest stage.

    Dense grads all-reduce over the dp x cp ranks (strided by tp; with dp outermost, cp ranks strided by tp and dp
    blocks by tp·cp·pp: `place`, planner.cost.groups.Placement), expert grads over the expert data ranks (strided
    by etp·ep, or etp·ep·pp); ZeRO-3 reduce-scatters per layer instead (planner.cost.sharding), and HSDP all-reduces
    the sharded grads across the replicas of its shard group. `params` is sharding.stage_params; `ranks` (data,
    expert data).
    """
    data_ranks, expert_ranks = ranks
    stage_p, layers, layer_expert_part = params["stage"], params["held_layers"], params["layer_expert_part"]
    dense_local = stage_p - layers * layer_expert_part
    expert_local = layers * layer_expert_part
    dense_grads, expert_grads = dense_local * prof.grad_reduce_bytes, expert_local * prof.grad_reduce_bytes
    outer, expert_stride = (None, etp * ep) if place is None else (place.data_outer(data_ranks), place.expert_stride)
    reduce_dense = fab.collective("all_reduce", dense_grads, data_ranks, tp, "dp", outer)
    # dense models launch no expert all-reduce (a zero-byte one would still cost its latency)
    reduce_exp = np.where(expert_local > 0, fab.collective("all_reduce", expert_grads, expert_ranks, expert_stride,
                                                           "dp"), 0.0)
    replicas = data_ranks / shard_group
    shard_grads = stage_p * prof.grad_reduce_bytes / shard_group
    hsdp_reduce = fab.collective("all_reduce", shard_grads, replicas, tp * shard_group, "dp")
    return np.where(hsdp, hsdp_reduce, np.where(zero == Zero.PARAMETERS, 0.0, reduce_dense + reduce_exp))


def dp_exposed(prof: FrameworkProfile, dp_time: np.ndarray, zero: np.ndarray, stage_f: np.ndarray,
               stage_b: np.ndarray, share: float = 0.0) -> np.ndarray:
    """Reduction not hidden behind the last micro-batch, w = overlap·(t_b [+ t_f with ZeRO >= 1, where the
    parameter gather hides behind the next forward]): fabric.overlapped_exposed(t_dp, w, share),
    max(t_dp - w, share·min(t_dp, w)); `share` of the SMs the reduction takes from the compute it hides behind
    (fabric.collective_sm_share)."""
    gathers_behind = (zero >= Zero.OPTIMIZER) & prof.param_gather_overlap
    window = prof.dp_overlap * (stage_b + np.where(gathers_behind, stage_f, 0.0))
    return overlapped_exposed(dp_time, window, share)


def zero2_exposed(fab: Fabric, prof: FrameworkProfile, params: dict[str, np.ndarray],
                  ranks: tuple[np.ndarray, np.ndarray], tp: np.ndarray, etp: np.ndarray, ep: np.ndarray,
                  micro: np.ndarray, stage_f: np.ndarray, stage_b: np.ndarray,
                  groups: tuple[object, np.ndarray] | None = None) -> np.ndarray:
    """ZeRO-2 exposed data-parallel time per step: gradients are sharded, so each micro-batch's backward
    reduce-scatters its gradients (DeepSpeed stage_1_and_2.py reduces every micro-step once gradients are partitioned,
    :1767; FSDP2 without resharding and Megatron-FSDP optim_grads likewise), hidden behind that micro-batch's
    backward; after the update each rank all-gathers the bf16 parameters it owns, behind the next forward.
    Exposed: m·E(RS, overlap·t_b) + E(AG, overlap·t_f), E = fabric.overlapped_exposed (what the window does not hide,
    or the SMs the collective takes from it). `groups`: the data ranks' outer factor and the expert stride
    (planner.cost.groups.Placement; None: the default rank order)."""
    data_ranks, expert_ranks = ranks
    outer, expert_stride = groups if groups is not None else (None, etp * ep)
    stage_p, layers, layer_expert_part = params["stage"], params["held_layers"], params["layer_expert_part"]
    expert_local = layers * layer_expert_part
    dense_local = stage_p - expert_local
    moe = expert_local > 0  # dense models launch no expert collectives
    rs = (fab.collective("reduce_scatter", dense_local * prof.grad_reduce_bytes, data_ranks, tp, "dp", outer)
          + np.where(moe, fab.collective("reduce_scatter", expert_local * prof.grad_reduce_bytes, expert_ranks,
                                         expert_stride, "dp"), 0.0))
    ag = (fab.collective("all_gather", dense_local * 2.0, data_ranks, tp, "dp", outer)
          + np.where(moe, fab.collective("all_gather", expert_local * 2.0, expert_ranks, expert_stride, "dp"), 0.0))
    share = collective_sm_share(fab.cluster)
    per_microbatch = overlapped_exposed(rs, prof.dp_overlap * stage_b, share)
    return micro * per_microbatch + overlapped_exposed(ag, prof.dp_overlap * stage_f, share)


def reduction_exposed(fab: Fabric, prof: FrameworkProfile, params: dict[str, np.ndarray], zero: np.ndarray,
                      hsdp: np.ndarray, shard_group: np.ndarray, ranks: tuple[np.ndarray, np.ndarray], tp: np.ndarray,
                      etp: np.ndarray, ep: np.ndarray, micro: np.ndarray, stage_f: np.ndarray,
                      stage_b: np.ndarray, place: Placement | None = None) -> np.ndarray:
    """Exposed data-parallel time per step for each ZeRO stage: ZeRO-2 reduces every micro-batch
    (`zero2_exposed`); the others reduce once per step behind the last micro-batch (`dp_exposed`). `place`: where
    the groups lie under each row's rank order (None: the default order)."""
    dp_time = grad_reduction_time(fab, prof, params, zero, hsdp, shard_group, ranks, tp, etp, ep, place)
    out = dp_exposed(prof, dp_time, zero, stage_f, stage_b, collective_sm_share(fab.cluster))
    z2 = np.asarray(zero == Zero.GRADIENTS)
    if z2.any():  # priced on the ZeRO-2 rows only (a search table holds every stage)

        def rows(a):  # noqa: ANN001, ANN202 - arrays shaped like the table, scalars as they are
            return a[z2] if isinstance(a, np.ndarray) and a.shape == z2.shape else a
        out = np.array(out, dtype=float, copy=True)
        groups = None
        if place is not None:
            outer = place.data_outer(ranks[0])
            groups = (None if outer is None else (rows(outer[0]), rows(outer[1])), rows(place.expert_stride))
        out[z2] = zero2_exposed(fab, prof, {k: rows(v) for k, v in params.items()}, tuple(rows(r) for r in ranks),
                                rows(tp), rows(etp), rows(ep), rows(micro), rows(stage_f), rows(stage_b), groups)
    return out


def optimizer_time(stage_p: np.ndarray, zero: np.ndarray, shard_group: np.ndarray, hbm: float,
                   expert_p: np.ndarray | float = 0.0, expert_shard: np.ndarray | float = 1.0,
                   bytes_per_param: float = OPTIMIZER_BYTES_PER_PARAM) -> np.ndarray:
    """Adam update, memory-bound: OPTIMIZER_BYTES_PER_PARAM·(dense/shard + experts/expert shard) / HBM; the shards
    apply with ZeRO >= 1 (expert states shard over the expert data-parallel group). Muon's elementwise part moves
    MUON_BYTES_PER_PARAM."""
    sharded = zero >= Zero.OPTIMIZER
    dense = (stage_p - expert_p) / np.where(sharded, shard_group, 1.0)
    experts = expert_p / np.where(sharded, expert_shard, 1.0)
    return bytes_per_param * (dense + experts) / hbm


def optimizer_update_time(stage_p: np.ndarray, zero: np.ndarray, shard_group: np.ndarray, hbm: float,
                          expert_p: np.ndarray, expert_shard: np.ndarray, prof: FrameworkProfile,
                          offloaded: float, host_link_gbps: float, muon: bool = False) -> np.ndarray:
    """optimizer_s: the update on the GPU (optimizer_time: OPTIMIZER_BYTES_PER_PARAM·params / shard / HBM, Muon's
    MUON_BYTES_PER_PARAM; its orthogonalisation is muon_time) + the offloaded share's gradients down and weights up
    over the host link (offload.offload_time; ZeRO-Offload, Ren et al. 2021)."""
    per_param = MUON_BYTES_PER_PARAM if muon else OPTIMIZER_BYTES_PER_PARAM
    return optimizer_time(stage_p, zero, shard_group, hbm, expert_p, expert_shard, per_param) + offload.offload_time(
        stage_p, zero, shard_group, prof, offloaded, host_link_gbps)


def muon_time(ns_flops: tuple[np.ndarray, np.ndarray], layers: np.ndarray, local_experts: np.ndarray,
              zero: np.ndarray, shard_group: np.ndarray, expert_shard: np.ndarray, rate: float) -> np.ndarray:
    """Muon's Newton-Schulz orthogonalisation of the busiest stage's matrices (planner.cost.flops.muon_layer_flops:
    per layer, the non-expert matrices and one routed expert's) at the GPU's bf16 GEMM rate (Megatron-Core runs it
    in fp32 with matmul precision "medium", bf16 tensor cores): layers·(dense/shard + experts·expert/expert shard).
    Megatron-Core's layer-wise distributed Muon (LayerWiseDistributedOptimizer) gives each data rank whole matrices
    to update, so with ZeRO >= 1 each rank orthogonalises its share (matrix granularity taken as even)."""
    dense, expert = ns_flops
    sharded = zero >= Zero.OPTIMIZER
    per_rank = layers * (dense / np.where(sharded, shard_group, 1.0)
                         + local_experts * expert / np.where(sharded, expert_shard, 1.0))
    return per_rank / rate


def muon_gather_time(fab: Fabric, params: dict[str, np.ndarray], zero: np.ndarray,
                     ranks: tuple[np.ndarray, np.ndarray], tp: np.ndarray, place: Placement | None,
                     etp: np.ndarray, ep: np.ndarray) -> np.ndarray:
    """The layer-wise distributed Muon's all-gather of the updated bf16 parameters after the step
    (LayerWiseDistributedOptimizer step 6), exposed: Megatron-Bridge's Muon recipes turn overlap_param_gather off
    (recipes/kimi/h100/kimi_k2.py _apply_kimi_k2_optimizer)."""
    data_ranks, expert_ranks = ranks
    stage_p, expert_local = params["stage"], params["held_layers"] * params["layer_expert_part"]
    outer, stride = (None, etp * ep) if place is None else (place.data_outer(data_ranks), place.expert_stride)
    gather = (fab.collective("all_gather", (stage_p - expert_local) * 2.0, data_ranks, tp, "dp", outer)
              + np.where(expert_local > 0, fab.collective("all_gather", expert_local * 2.0, expert_ranks, stride,
                                                          "dp"), 0.0))
    return np.where(zero >= Zero.OPTIMIZER, gather, 0.0)
