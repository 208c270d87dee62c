"""Step time, throughput, MFU and peak memory for a table of layouts (vectorised): the cost terms composed.

Per pipeline stage and micro-batch, each layer's kernels (planner.cost.compute) plus what its TP, CP, EP and ZeRO-3
communication leaves exposed (tensor, context, expert, sharding); the stage's micro-batches, bubble and hand-offs
(pipeline); the data-parallel reduction and optimizer (data); memory per stage (allocations' per-stage sum, read
out by memory_terms). Every number returned is named, with its formula, source and the one function that returns
it, in planner.cost.terms.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from planner.cost import (
    activation_offload,
    allocations,
    bands,
    compute,
    context,
    data,
    device_memory,
    expert,
    fabric,
    flops,
    groups,
    links,
    memory,
    memory_terms,
    pipeline,
    sharding,
    tensor,
)
from planner.cost.fabric import Fabric, overlapped_exposed
from planner.cost.profiles import FrameworkProfile, stack_profile, tp_mode
from planner.cost.sharding import (
    expert_shard_group,
    fsdp_collectives,
    fsdp_exposed_from,
    split_state_bytes,
    stage_expert_params,
    stage_params,
)
from planner.inputs.layout import Schedule, Zero
from planner.inputs.problem import Problem

__all__ = ["evaluate", "layer_terms", "step_time_floor"]


def _knobs(c: Mapping[str, np.ndarray], expert: bool = True) -> dict[str, np.ndarray]:
    out = allocations.memory_knobs(c)
    return {**out, "etp": groups.expert_tp(c)} if expert else out


@dataclass(frozen=True)
class _Layer:
    """One average layer of a layout table, per micro-batch: the terms both `evaluate` and `layer_terms` build on."""

    k: dict[str, np.ndarray]
    prof: FrameworkProfile
    zero: np.ndarray
    hsdp: np.ndarray
    shard_group: np.ndarray
    micro: np.ndarray
    rates: compute.Rates
    fab: Fabric
    tok: np.ndarray
    lt: compute.LayerTimes
    recompute_b: np.ndarray
    head_f: np.ndarray
    params: dict[str, np.ndarray]
    act_bytes: np.ndarray
    lc: pipeline.LayerComm
    fsdp_collectives: tuple[np.ndarray, np.ndarray]  # one layer's ZeRO-3 all-gather and reduce-scatter seconds
    place: groups.Placement  # where the groups lie under each row's rank order


def _layer(problem: Problem, c: Mapping[str, np.ndarray]) -> _Layer:
    tr = problem.training
    prof = stack_profile(tr)
    k = _knobs(c)
    tp, dp, cp, ep, sp, rc = (k[x] for x in ("tp", "dp", "cp", "ep", "sp", "rc"))
    zero, hsdp, shard_group = sharding.sharding(problem, c)
    micro = pipeline.microbatches(tr.global_batch, k["mbs"], dp)
    rates = compute.rates(problem)
    fab = Fabric(problem.cluster, problem.compress, rates.hbm)
    tok = compute.tokens_per_gpu(k["mbs"], float(tr.seq_len), cp)
    u, r = groups.hybrid_cp_sizes(problem.cluster.nvlink_domain, c, cp)
    lt = compute.layer_times(problem, rates, tok, tp, sp, ep, ring=r, etp=k["etp"], sched=k["sched"])
    recompute_b = compute.recompute_time(problem, rc, lt, tok, tp)
    head_f = compute.head_time(problem, rates, tok, tp)
    params = stage_params(problem, c)

    act_bytes, tp_cp_ep = _layer_comm(problem, k, prof, fab, tok, micro, lt, u, r, rates)
    place = groups.Placement(c, float(problem.num_gpus), k["etp"])
    experts = (params["layer_expert_part"], expert_shard_group(c, shard_group), place.expert_stride)
    outer = place.data_outer(shard_group)
    ag, rs = fsdp_collectives(fab, prof, params["per_layer"], shard_group, tp, experts, outer)
    z3_f, z3_b = fsdp_exposed_from(fab, zero, ag, rs, lt.fwd, lt.bwd)
    alone = pipeline.LayerComm(*tp_cp_ep, z3_f, z3_b)
    tr = problem.training
    # ZeRO-2's per-micro-batch reduce-scatter is priced per step (planner.cost.data.zero2_exposed); its layer's share
    # of what it exposes is time the layer already takes
    z2_rs = np.where(zero == Zero.GRADIENTS, overlapped_exposed(rs, prof.dp_overlap * lt.bwd,
                                                                 fabric.collective_sm_share(problem.cluster)), 0.0)
    nic = links.layer_contention(
        problem.model, fab, expert.dispatcher_profile(prof, tr),
        links.Sharded(zero, params["per_layer"] - experts[0], shard_group, tp, outer, experts),
        links.Routed(tok, tp, ep, k["etp"], compute.is_fp8(problem), expert.busiest_rank_load(tr, ep)), (u, r),
        lt.fwd + lt.bwd + recompute_b + alone.total() + z2_rs)
    lc = pipeline.LayerComm(*tp_cp_ep, z3_f, z3_b, nic)
    return _Layer(k, prof, zero, hsdp, shard_group, micro, rates, fab, tok, lt, recompute_b, head_f, params,
                  act_bytes, lc, (ag, rs), place)


def _layer_comm(problem: Problem, k: dict[str, np.ndarray], prof: FrameworkProfile, fab: Fabric, tok: np.ndarray,
                micro: np.ndarray, lt: compute.LayerTimes, u: np.ndarray, r: np.ndarray,
                rates: compute.Rates) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """(activation bytes, exposed TP, CP and EP time per layer: total and forward share of each): the layer's
    communication that no ZeRO stage changes (`evaluate` and step_time_floor)."""
    m, tp, ep, etp, rc = problem.model, k["tp"], k["ep"], k["etp"], k["rc"]
    act_bytes = tensor.activation_bytes(tok, m.hidden_size)
    f_moe = m.moe_layers / m.num_hidden_layers if m.is_moe else 0.0
    tr = problem.training
    dispatcher, load = expert.dispatcher_profile(prof, tr), expert.busiest_rank_load(tr, ep)
    moe_mlp = f_moe * tensor.moe_tp_passes(m, etp, dispatcher.deepep, load)
    gemm_f = lt.fwd - lt.attn_f - lt.elem_f - lt.launch_f
    gemms = tensor.block_gemms(m, tok, tp, rates.peak * rates.eff, gemm_f, lt.wgrad)
    shares = (fabric.collective_sm_share(problem.cluster), fabric.sm_share(problem.cluster, tensor.UB_COMM_SMS))
    mode = tp_mode(prof)
    tp_all, tp_f = tensor.tp_exposed(fab, mode, act_bytes, tp, k["sp"], rc, gemms, moe_mlp, shares,
                                     dense_mlp=1.0 - f_moe)
    if mode != "none" and tensor.ep_overlap_serialises_tp(bands.generation(problem.cluster.gpu.key)):
        combined = k["sched"] == Schedule.COMBINED_1F1B
        if np.any(combined):
            none_all, none_f = tensor.tp_exposed(fab, "none", act_bytes, tp, k["sp"], rc, gemms, moe_mlp, shares,
                                                 dense_mlp=1.0 - f_moe)
            tp_all, tp_f = np.where(combined, none_all, tp_all), np.where(combined, none_f, tp_f)
    cp_all, cp_f = context.cp_exposed(m, fab, tok, tp, u, r, lt.attn_f, lt.attn_b)
    share = expert.overlapped_share(k["sched"], micro, k["pp"], k["vpp"])
    ep_all, ep_f = expert.dispatch_exposed(m, fab, dispatcher, tok, tp, ep, etp,
                                           compute.is_fp8(problem), share, lt.fwd + lt.bwd, load,
                                           (k["sched"] == Schedule.COMBINED_1F1B, lt.fwd, lt.bwd, lt.moe_f))
    return act_bytes, (tp_all, tp_f, cp_all, cp_f, ep_all, ep_f)


def evaluate(problem: Problem, c: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    x = _layer(problem, c)
    k, prof, zero, shard_group, micro, lt, lc = x.k, x.prof, x.zero, x.shard_group, x.micro, x.lt, x.lc
    tp, pp, dp, cp, ep, etp, sp = (k[n] for n in ("tp", "pp", "dp", "cp", "ep", "etp", "sp"))
    params, recompute_b, head_f = x.params, x.recompute_b, x.head_f
    layers = params["layers_per_stage"]

    first, _, last = memory.stage_layer_counts(problem.model.num_hidden_layers, pp, k["vpp"],
                                             problem.training.pipeline_layout)  # the launched split
    st = pipeline.stage_times(layers, lt, recompute_b, lc, head_f, (first, last), k["sched"])
    p2p = pipeline.hand_off_time(x.fab, x.act_bytes, tp, sp, pp, float(problem.num_gpus), x.place.pp_stride)
    p2p_exposed = pipeline.hand_offs_exposed(p2p, k["vpp"], k["sched"])
    bubble = pipeline.bubble_time(k["sched"], pp, k["vpp"], st.fwd + p2p, st.bwd + p2p, st.wgrad, m=micro)
    t_mb = pipeline.microbatch_time(st, p2p_exposed, k["sched"], lt, layers)

    ranks = (groups.data_ranks(dp, cp), groups.expert_data_ranks(dp, cp, tp, etp, ep))
    muon = problem.training.optimizer == "muon"
    # (Muon's layer-wise optimizer gathers the parameters after the step, data.muon_gather_time: its profile hides
    # no gather behind the next forward)
    dp_exposed = data.reduction_exposed(x.fab, prof, params, zero, x.hsdp, shard_group, ranks, tp, etp, ep, micro,
                                        st.fwd, st.bwd, x.place)
    expert_shard = expert_shard_group(c, shard_group)
    optim_time = data.optimizer_update_time(params["stage"], zero, shard_group, x.rates.hbm,
                                            stage_expert_params(params), expert_shard, prof,
                                            problem.training.optimizer_offload, problem.cluster.gpu.host_link_gbps,
                                            muon)
    if muon:
        local_experts = problem.model.num_local_experts / ep if problem.model.is_moe else 0.0 * ep
        optim_time = optim_time + data.muon_time(
            flops.muon_layer_flops(problem.model, tp, etp), params["held_layers"], local_experts, zero, shard_group,
            expert_shard, x.rates.bf16_peak * x.rates.bf16_eff)
        dp_exposed = dp_exposed + data.muon_gather_time(x.fab, params, zero, ranks, tp, x.place, etp, ep)
    stages = allocations.stage_memories(problem, allocations.ActivationSide(k, x.tok, micro),
                                        allocations.state_side(problem, c, priced=(zero, shard_group, params)))
    offloaded = stages[0].offloaded
    offload_mb = _offload_stalls(problem, x, offloaded, layers, np.shape(t_mb))
    step = pipeline.step_time(micro, t_mb + offload_mb, bubble, dp_exposed, optim_time)

    mem = memory_terms.report(stages, device_memory.active_groups(tp, pp, dp, cp, ep))
    # the rank compute_s prices, whose layers every per-step term counts
    busy = pipeline.binding_rank_layers(layers, lt.fwd + lt.bwd + recompute_b, 3 * head_f, (first, last), k["sched"])
    return {
        "step_time_s": step,
        "tokens_per_s_per_gpu": compute.throughput_per_gpu(problem, step),
        "mfu": compute.mfu(problem, step, x.rates),
        "memory_peak_gib": mem["memory_peak_gib"],
        "memory_allocated_gib": mem["memory_allocated_gib"],
        "memory_reserved_gib": mem["memory_reserved_gib"],
        "num_microbatches": micro,
        "compute_s": pipeline.compute_time(micro, layers, lt, recompute_b, head_f, (first, last), k["sched"]),
        "exposed_comm_s": pipeline.exposed_comm_time(micro, p2p_exposed, busy, lc, dp_exposed),
        "bubble_s": bubble,
        "stage_fwd_s": st.fwd,  # one micro-batch through the busiest stage (for the timeline in `explain`)
        "first_stage_mb_s": pipeline.first_stage_microbatch_time(pp, layers, st),  # for `explain`
        "last_stage_mb_s": pipeline.last_stage_microbatch_time(st),
        "stage_bwd_s": st.bwd,
        "stage_wgrad_s": st.wgrad,
        "p2p_s": p2p,
        "optimizer_s": optim_time,
        "tp_comm_s": tensor.tp_comm_time(micro, busy, lc.tp),
        "cp_comm_s": context.cp_comm_time(micro, busy, lc.cp),
        "ep_comm_s": expert.ep_comm_time(micro, busy, lc.ep),
        "fsdp_comm_s": sharding.fsdp_comm_time(micro, busy, lc.fsdp_f, lc.fsdp_b),
        "nic_comm_s": links.nic_comm_time(micro, busy, lc.nic),
        "pp_comm_s": pipeline.pp_comm_time(micro, p2p_exposed),
        "dp_comm_s": dp_exposed,
        "recompute_s": compute.recompute_step_time(micro, busy, recompute_b),
        "offload_s": activation_offload.offload_step_time(micro, offload_mb),
        "offloaded_layers": np.broadcast_to(offloaded, np.shape(step)).astype(float),
        **{key: v for key, v in mem.items() if key.startswith("mem_")},
    }


def _offload_stalls(problem: Problem, x: _Layer, offloaded: np.ndarray, layers: np.ndarray,
                    shape: tuple[int, ...]) -> np.ndarray:
    """Seconds one micro-batch loses to host copies: recompute=offload's `offloaded` layers
    (activation_offload.offload_stall) or offload-modules' module inputs (activation_offload.modules_stall)."""
    tp, rc, lt = x.k["tp"], x.k["rc"], x.lt
    moved = memory.offloaded_module_bytes(problem, x.tok, tp, rc)
    out = np.zeros(shape)
    if not (np.any(offloaded) or np.any(moved)):
        return out
    m, tr = problem.model, problem.training
    expert_nic = 0.0
    if m.is_moe:
        nbytes = expert.nic_bytes_per_pass(m, x.fab, expert.dispatcher_profile(x.prof, tr), x.tok, tp, x.k["ep"],
                                           x.k["etp"], compute.is_fp8(problem), expert.busiest_rank_load(tr))
        expert_nic = m.moe_layers / m.num_hidden_layers * nbytes / (problem.cluster.network_gbps * 1e9)
    busy = activation_offload.nic_busy(problem, x.zero, x.shard_group, tp, *x.fsdp_collectives, lt.fwd, lt.bwd,
                                       x.place.data_outer(x.shard_group), expert_nic)
    if np.any(offloaded):
        per_layer_act, _ = memory.layer_activation_bytes(problem, x.tok, tp, x.k["sp"], rc)
        out = out + activation_offload.offload_stall(problem, offloaded, per_layer_act, layers, lt.fwd, lt.bwd,
                                                     x.rates.hbm, *busy)
    return out + activation_offload.modules_stall(problem, moved, layers, lt.fwd, lt.bwd, x.rates.hbm, *busy)


def step_time_floor(problem: Problem, c: Mapping[str, np.ndarray], communication: bool = True) -> np.ndarray:
    """A lower bound on `evaluate`'s step_time_s: the same step without what ZeRO adds (ZeRO-3 gathers and
    reduce-scatters, the DP reduction, the optimizer update), so it reads no ZeRO stage. Every term left out is
    non-negative and enters the step through sums, max() and bubble formulas non-decreasing in t_f and t_b
    (pipeline.stage_times, bubble_time, step_time), so a search can skip layouts whose floor is already slower than
    its N-th best (tests/test_search_speed.py checks floor <= step on whole problems). With `communication` False,
    cheaper and looser: no exposed TP, CP or EP communication and no hand-offs either (all non-negative too)."""
    m, tr, k = problem.model, problem.training, _knobs(c, expert=communication)
    tp, pp, cp, ep, sp, rc = (k[x] for x in ("tp", "pp", "cp", "ep", "sp", "rc"))
    prof, rates = stack_profile(tr), compute.rates(problem)
    fab = Fabric(problem.cluster, problem.compress, rates.hbm)
    micro = pipeline.microbatches(tr.global_batch, k["mbs"], k["dp"])
    tok = compute.tokens_per_gpu(k["mbs"], float(tr.seq_len), cp)
    u, r = groups.hybrid_cp_sizes(problem.cluster.nvlink_domain, c, cp)
    # the layout's expert tp in both variants: a pass bound by its host keeps its time whatever its weights, and a
    # zero-bubble schedule's W (wgrad) must then be the one `evaluate` prices, or the floor's bubble could exceed it
    lt = compute.layer_times(problem, rates, tok, tp, sp, ep, ring=r, etp=groups.expert_tp(c), sched=k["sched"])
    layers = memory.busiest_rank_layers(m.num_hidden_layers, pp, k["vpp"], problem.training.pipeline_layout)
    # (sharding.stage_params' layers_per_stage)
    none = np.zeros_like(tp)
    lc: pipeline.LayerComm | None = None
    if communication:
        act_bytes, tp_cp_ep = _layer_comm(problem, k, prof, fab, tok, micro, lt, u, r, rates)
        lc = pipeline.LayerComm(*tp_cp_ep, none, none)
        stride = groups.Placement(c, float(problem.num_gpus), k["etp"]).pp_stride
        p2p = pipeline.hand_off_time(fab, act_bytes, tp, sp, pp, float(problem.num_gpus), stride)
    first, _, last = memory.stage_layer_counts(m.num_hidden_layers, pp, k["vpp"],
                                             problem.training.pipeline_layout)  # the launched split
    st = pipeline.stage_times(layers, lt, compute.recompute_time(problem, rc, lt, tok, tp), lc,
                              compute.head_time(problem, rates, tok, tp), (first, last), k["sched"])
    if lc is None:  # no hand-offs: adding their zeros changes no value, so the cheap form skips those adds
        bubble = pipeline.bubble_time(k["sched"], pp, k["vpp"], st.fwd, st.bwd, st.wgrad, m=micro)
        return micro * pipeline.microbatch_time(st, 0.0, k["sched"], lt, layers) + bubble
    p2p_exposed = pipeline.hand_offs_exposed(p2p, k["vpp"], k["sched"])
    bubble = pipeline.bubble_time(k["sched"], pp, k["vpp"], st.fwd + p2p, st.bwd + p2p, st.wgrad, m=micro)
    t_mb = pipeline.microbatch_time(st, p2p_exposed, k["sched"], lt, layers)
    return pipeline.step_time(micro, t_mb, bubble, none, none)


@dataclass(frozen=True)
class Shared:
    """Rows grouped by the knobs some terms read: `table` holds one representative layout per group, `index` each
    row's group. Those terms are computed once per representative and spread to the rows; every term is elementwise,
    so each row gets the bits it would get row by row (tests/test_search_speed.py checks)."""

    table: dict[str, np.ndarray]
    index: np.ndarray

    def spread(self, x: np.ndarray) -> np.ndarray:
        return x.take(self.index) if isinstance(x, np.ndarray) and x.ndim else x

    def subset(self, rows: np.ndarray) -> Shared:
        """The groups of the rows at positions `rows`."""
        return Shared(self.table, self.index.take(rows))

    def only(self, rows: np.ndarray) -> Shared:
        """The groups of the rows at positions `rows`, the table cut to those groups: a term priced per group is
        elementwise, so each row gets the bits `subset` gives it, for the groups it needs instead of all of them."""
        ids = self.index.take(rows)
        used = np.zeros(len(self.table["tp"]), dtype=bool)
        used[ids] = True
        kept = np.flatnonzero(used)
        return Shared({k: v.take(kept) for k, v in self.table.items()},
                      (np.cumsum(used, dtype=np.int64) - 1).take(ids))


# What the grouped terms read: model states, their buffers, stage layer counts and communicators read neither the
# micro-batch size nor recompute; activations, logits, hand-off buffers, the micro-batches in flight and
# step_time_floor read no ZeRO stage (ZeRO enters the step only through communication and the optimizer). The
# memory's activation side (allocations.ActivationSide: activations, logits, hand-off buffers, micro-batches in flight)
# reads no expert or context-parallel layout or rank order either (ep, etp, cp_comm, order enter time and states, not
# activations), so memory groups those rows coarser than step_time_floor can.
STATE_FREE_KNOBS = ("mbs", "recompute")
ZERO_FREE_KNOBS = ("zero",)
ACTIVATION_FREE_KNOBS = ("cp_comm", "ep", "etp", "order", "zero")


def layer_terms(problem: Problem, c: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per-layer terms of `evaluate` for one average transformer layer, one micro-batch, one GPU (seconds, bytes).

    fwd_s/bwd_s: kernels without recomputation or exposed communication; comm_s: exposed TP + CP + EP; fsdp_s:
    exposed ZeRO-3; recompute_s: in the layout's mode; head_s: LM head + loss, forward + backward (3 x forward);
    params: per GPU before sharding; state_bytes/edge_state_bytes: weights + grads + optimizer of one layer / of the
    embedding and LM head; act_bytes: kept per layer and micro-batch; working_bytes: full recompute's working set;
    logits_bytes: the last stage's logits.
    """
    x = _layer(problem, c)
    fp8 = compute.is_fp8(problem)
    per_layer_act, working = memory.layer_activation_bytes(problem, x.tok, x.k["tp"], x.k["sp"], x.k["rc"])

    expert_shard = expert_shard_group(c, x.shard_group)

    def states(params: np.ndarray, expert_params: np.ndarray | float = 0.0) -> np.ndarray:
        return sum(split_state_bytes(params, expert_params, x.zero, x.shard_group, expert_shard, x.prof,
                                     fp8, problem.training.optimizer_offload,
                                     memory.fp8_param_gather(problem)).values())

    return {"micro_batches": x.micro, "fwd_s": x.lt.fwd, "bwd_s": x.lt.bwd, "comm_s": x.lc.tp + x.lc.cp + x.lc.ep,
            "tp_comm_s": x.lc.tp, "fsdp_s": x.lc.fsdp_f + x.lc.fsdp_b, "recompute_s": x.recompute_b,
            "head_s": 3 * x.head_f, "params": x.params["per_layer"],
            "state_bytes": states(x.params["per_layer"], x.params["layer_expert_part"]),
            "edge_state_bytes": states(x.params["embedding"] + x.params["head"]), "act_bytes": per_layer_act,
            "working_bytes": working, "logits_bytes": memory.logits_bytes(x.tok, problem.model, x.k["tp"],
                                                                     memory.loss_bytes_per_logit(problem, x.prof))}
