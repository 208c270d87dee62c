"""ZeRO / FSDP / HSDP: what each GPU holds of the parameters and what sharded layers exchange.

Rajbhandari et al. 2020 (ZeRO §5): stage k shards the first k of (optimizer, gradients, parameters) over the data
ranks; stage 3 gathers each layer's weights before use and reduce-scatters its gradients after.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from planner.cost import compute, flops, memory
from planner.cost.fabric import Fabric, collective_sm_share, overlapped_exposed
from planner.cost.groups import expert_data_ranks, expert_tp, hsdp_shard_group
from planner.cost.memory import busiest_rank_layers
from planner.cost.profiles import FrameworkProfile, stack_profile
from planner.inputs.hardware import HOST_COPY_EFFICIENCY
from planner.inputs.layout import Schedule, Zero
from planner.inputs.problem import Problem


def stage_params(problem: Problem, c: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Parameters one GPU of the busiest pipeline stage holds (before any ZeRO sharding).

    The busiest stage holds ceil(L/pp) layers (uneven splits via first/last-stage counts or a pipeline layout), or
    a stated layout's fullest rank where it holds more (memory.busiest_rank_layers);
    the first stage adds the embedding, the last the LM head (and the tied embedding's copy) and any MTP modules.
    DualPipe keeps two stages on every rank, one per direction (2x parameters, DeepSeek-V3 report Table 2):
    `copies` = 2.
    """
    m = problem.model
    tp, pp, ep = (c[k].astype(float) for k in ("tp", "pp", "ep"))
    etp = expert_tp(c)
    frac_moe = m.moe_layers / m.num_hidden_layers
    experts_p = flops.expert_params(m) / (etp * ep) if m.is_moe else 0.0
    vpp = c["vpp"].astype(float) if "vpp" in c else np.ones_like(pp)
    layers_per_stage = busiest_rank_layers(m.num_hidden_layers, pp, vpp, problem.training.pipeline_layout)
    copies = np.where(c["schedule"] == Schedule.DUALPIPE, 2.0, 1.0) if "schedule" in c else 1.0
    held = layers_per_stage * copies
    per_layer_p = compute.local_layer_weights(problem, tp, ep, etp)
    emb_p = flops.embedding_params(m) / tp
    mtp_p, mtp_experts = flops.mtp_params(m)  # MTP modules live with the LM head (Megatron-Core: last stage)
    head_p = flops.lm_head_params(m) / tp + mtp_p / tp + mtp_experts / (etp * ep)
    # DualPipe's second copy is the mirror stage: rank 0 also holds the last stage (LM head), so both edges count.
    dual = copies > 1
    first_p = held * per_layer_p + emb_p + np.where((pp == 1) | dual, head_p, 0.0)
    last_p = held * per_layer_p + np.where(pp == 1, emb_p, head_p + np.where(
        dual | m.tie_word_embeddings, emb_p, 0.0))
    return {"per_layer": per_layer_p, "layer_expert_part": frac_moe * experts_p, "first": first_p, "last": last_p,
            "stage": np.maximum(first_p, last_p), "embedding": emb_p, "head": head_p,
            "layers_per_stage": layers_per_stage, "held_layers": held}


def sharding(problem: Problem, c: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(effective ZeRO stage 0-3, HSDP flag, shard group size) of each layout.

    HSDP (PyTorch HYBRID_SHARD; FSDP2 2-D mesh) is ZeRO-3 whose shard group is the data ranks tiling one NVLink
    domain; a profile whose stack always shards optimizer states runs "zero 0" as ZeRO-1.
    """
    prof = stack_profile(problem.training)
    hsdp = c["zero"] == Zero.HSDP
    zero = np.where(hsdp, Zero.PARAMETERS, c["zero"])
    if prof.optimizer_always_sharded:
        zero = np.maximum(zero, Zero.OPTIMIZER)
    data_ranks = (c["dp"] * c["cp"]).astype(float)
    shard = np.where(hsdp, hsdp_shard_group(problem.cluster.nvlink_domain, c), data_ranks)
    return zero, hsdp, shard


def expert_shard_group(c: Mapping[str, np.ndarray], shard: np.ndarray) -> np.ndarray:
    """Ranks that shard one expert's states: the expert data-parallel group, dp·cp·tp/(etp·ep) (Megatron-Core builds a
    separate optimizer for expert parameters over `get_expert_data_parallel_group`, optimizer/__init__.py; torchtitan's
    efsdp = dp_shard·cp·tp/ep), capped by the dense shard group (HSDP shards inside one NVLink domain)."""
    tp, dp, cp, ep = (c[k].astype(float) for k in ("tp", "dp", "cp", "ep"))
    return np.minimum(expert_data_ranks(dp, cp, tp, expert_tp(c), ep), np.maximum(shard, 1))


def split_state_bytes(params: np.ndarray, expert_params: np.ndarray, zero: np.ndarray, shard: np.ndarray,
                      expert_shard: np.ndarray, prof: FrameworkProfile, fp8: bool,
                      offload: float = 0.0, fp8_params: bool = False) -> dict[str, np.ndarray]:
    """Weights, grads and optimizer states of a GPU holding `params` of which `expert_params` are routed experts:
    dense states shard over the data ranks, expert states over the (smaller) expert data-parallel group."""
    dense = memory.state_bytes(params - expert_params, zero, shard, prof, fp8, offload, fp8_params)
    experts = memory.state_bytes(expert_params, zero, expert_shard, prof, fp8, offload, fp8_params)
    return {key: dense[key] + experts[key] for key in dense}


def stage_expert_params(params: Mapping[str, np.ndarray]) -> np.ndarray:
    """Routed-expert parameters one GPU of a stage holds: layers it holds x the expert share of a layer."""
    return params["held_layers"] * params["layer_expert_part"]


def fsdp_bytes(params: np.ndarray, prof: FrameworkProfile) -> tuple[np.ndarray, np.ndarray]:
    """(gathered, reduce-scattered) bytes of one ZeRO-3 layer's collectives: its bf16 weights, its gradients in the
    stack's reduction dtype (FrameworkProfile.grad_reduce_bytes)."""
    return params * 2.0, params * prof.grad_reduce_bytes


def fsdp_collectives(fab: Fabric, prof: FrameworkProfile, per_layer_p: np.ndarray, shard_group: np.ndarray,
                     tp: np.ndarray, experts: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
                     outer: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(all-gather, reduce-scatter) seconds of one layer's ZeRO-3 collectives: its bf16 weights gathered, its
    gradients reduce-scattered, dense over `shard_group` (ranks tp apart; `outer`: its outer factor when data
    parallelism is outermost, planner.cost.groups.Placement) and routed experts over theirs (`experts`, as
    fsdp_exposed)."""
    dense_p, exp_p, exp_group, exp_stride = per_layer_p, 0.0, shard_group, tp
    if experts is not None:
        exp_p, exp_group, exp_stride = experts
        dense_p = per_layer_p - exp_p

    def gather_and_reduce(params: np.ndarray, group: np.ndarray, stride: np.ndarray,
                          far: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
        gathered, reduced = fsdp_bytes(params, prof)
        ag = fab.collective("all_gather", gathered, group, stride, "dp", far)
        if prof.params_in_host:  # the rank's bf16 partition comes in over the host link first (host_fetch_time)
            ag = ag + host_fetch_time(gathered / np.maximum(group, 1), fab.cluster.gpu.host_link_gbps)
        rs = fab.collective("reduce_scatter", reduced, group, stride, "dp", far)
        return ag, rs

    ag_d, rs_d = gather_and_reduce(dense_p, shard_group, tp, outer)
    ag_e, rs_e = gather_and_reduce(exp_p, exp_group, exp_stride)
    return ag_d + np.where(exp_p > 0, ag_e, 0.0), rs_d + np.where(exp_p > 0, rs_e, 0.0)


def host_fetch_time(nbytes: np.ndarray, host_link_gbps: float) -> np.ndarray:
    """A parameter partition copied from pinned host memory before its all-gather (DeepSpeed ZeRO-3 offload_param:
    the partitioned parameters live on the CPU and are moved to the GPU per module before it is gathered, ZeRO-Infinity
    §5): bytes / (host link x the copy engines' achieved share, HOST_COPY_EFFICIENCY)."""
    return nbytes / (host_link_gbps * 1e9 * HOST_COPY_EFFICIENCY)


def fsdp_exposed(fab: Fabric, prof: FrameworkProfile, zero: np.ndarray, per_layer_p: np.ndarray,
                 shard_group: np.ndarray, tp: np.ndarray, layer_f: np.ndarray, layer_b: np.ndarray,
                 experts: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) ZeRO-3 time per layer and micro-batch not hidden by the layer's compute.

    Forward: gather the layer's bf16 weights beside t_f; backward: gather again and reduce-scatter the grads beside
    t_b; each adds fabric.overlapped_exposed (what it leaves exposed, or the SMs it takes from the overlapped GEMMs).
    HSDP: per-layer gathers stay inside the shard group (one NVLink domain); only a per-step all-reduce of the
    sharded gradients crosses domains (planner.cost.data).
    `experts` = (routed-expert part of `per_layer_p`, its shard group, that group's rank stride): expert weights are
    sharded over the expert data-parallel group, whose ranks sit etp·ep apart (Megatron-FSDP / torchtitan efsdp), so
    with EP inside an 8-GPU board every expert gather and reduce-scatter crosses the network, where the dense ones
    (data ranks tp apart) mostly stay on NVLink. Dense and expert collectives run one after the other.
    """
    ag, rs = fsdp_collectives(fab, prof, per_layer_p, shard_group, tp, experts)
    return fsdp_exposed_from(fab, zero, ag, rs, layer_f, layer_b)


def fsdp_exposed_from(fab: Fabric, zero: np.ndarray, ag: np.ndarray, rs: np.ndarray, layer_f: np.ndarray,
                      layer_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """fsdp_exposed of already priced collectives (fsdp_collectives' all-gather and reduce-scatter seconds)."""
    z3 = zero == Zero.PARAMETERS
    share = collective_sm_share(fab.cluster)
    return (np.where(z3, overlapped_exposed(ag, layer_f, share), 0.0),
            np.where(z3, overlapped_exposed(ag + rs, layer_b, share), 0.0))


def fsdp_comm_time(micro: np.ndarray, layers: np.ndarray, fsdp_f: np.ndarray, fsdp_b: np.ndarray) -> np.ndarray:
    """fsdp_comm_s: exposed ZeRO-3 per step on the busiest stage, m·L·(forward + backward exposed per layer,
    fsdp_exposed: E(gather, t_f) + E(gather + reduce-scatter, t_b)) (Rajbhandari et al. 2020)."""
    return micro * layers * (fsdp_f + fsdp_b)
