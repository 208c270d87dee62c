"""Step time, throughput, MFU and peak memory for a table of layouts (vectorised): the cost terms composed.

Per pipeline stage and micro-batch, each layer's kernels (planner.cost.compute) plus what its TP, CP, EP and ZeRO-3
communication leaves exposed (tensor, context, expert, sharding); the stage's micro-batches, bubble and hand-offs
(pipeline); the data-parallel reduction and optimizer (data); memory per stage (memory). Every number returned is
named, with its formula and source, in planner.cost.terms.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from planner.cost import compute, context, data, expert, groups, memory, offload, pipeline, tensor
from planner.cost.fabric import Fabric
from planner.cost.profiles import FrameworkProfile, stack_profile
from planner.cost.sharding import (
    expert_shard_group,
    fsdp_exposed,
    sharding,
    split_state_bytes,
    stage_expert_params,
    stage_params,
)
from planner.inputs.problem import Problem

__all__ = ["evaluate", "layer_terms", "memory_peak_gib"]


def _knobs(c: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {k: c[k].astype(float) for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "mbs")}
    return {**out, "rc": c["recompute"], "sp": c["sp"], "sched": c["schedule"], "etp": groups.expert_tp(c)}


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


def _layer(problem: Problem, c: Mapping[str, np.ndarray]) -> _Layer:
    m, tr = problem.model, problem.training
    prof = stack_profile(tr)
    k = _knobs(c)
    tp, dp, cp, ep, etp, sp, rc = (k[x] for x in ("tp", "dp", "cp", "ep", "etp", "sp", "rc"))
    zero, hsdp, shard_group = sharding(problem, c)
    micro = pipeline.microbatches(tr.global_batch, k["mbs"], dp)
    rates = compute.rates(problem)
    fab = Fabric(problem.cluster, problem.compress, rates.hbm)
    tok = compute.tokens_per_gpu(k["mbs"], float(tr.seq_len), cp)
    u, r = groups.hybrid_cp_sizes(problem.cluster.nvlink_domain, c, cp)
    lt = compute.layer_times(problem, rates, tok, tp, sp, ep, attn_len=float(tr.seq_len) / r)
    recompute_b = compute.recompute_time(problem, rc, lt, tok, tp)
    head_f = compute.head_time(problem, rates, tok, tp)
    params = stage_params(problem, c)

    act_bytes = tensor.activation_bytes(tok, m.hidden_size)
    whole_experts = m.moe_layers / m.num_hidden_layers if (m.is_moe and not m.n_shared_experts) else 0.0
    tp_all, tp_f = tensor.tp_exposed(fab, prof, act_bytes, tp, rc, 1.0 - whole_experts * (etp == 1))
    cp_all, cp_f = context.cp_exposed(m, fab, tok, tp, u, r, lt.attn_f, lt.attn_b, problem.cluster.nvlink_domain)
    share = expert.overlapped_share(k["sched"], micro, k["pp"], k["vpp"])
    ep_all, ep_f = expert.dispatch_exposed(m, fab, prof, tok, tp, ep, etp, compute.is_fp8(problem), share,
                                           lt.fwd + lt.bwd)
    experts = (params["layer_expert_part"], expert_shard_group(c, shard_group), etp * ep)
    z3_f, z3_b = fsdp_exposed(fab, prof, zero, params["per_layer"], shard_group, tp, lt.fwd, lt.bwd, experts)
    lc = pipeline.LayerComm(tp_all, tp_f, cp_all, cp_f, ep_all, ep_f, z3_f, z3_b)
    return _Layer(k, prof, zero, hsdp, shard_group, micro, rates, fab, tok, lt, recompute_b, head_f, params,
                  act_bytes, lc)


def evaluate(problem: Problem, c: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    x = _layer(problem, c)
    k, prof, zero, shard_group, micro, lt, lc = x.k, x.prof, x.zero, x.shard_group, x.micro, x.lt, x.lc
    tp, pp, dp, cp, ep, etp, sp = (k[n] for n in ("tp", "pp", "dp", "cp", "ep", "etp", "sp"))
    params, recompute_b, head_f = x.params, x.recompute_b, x.head_f
    layers = params["layers_per_stage"]

    first, _, last = memory.stage_layer_counts(problem.model.num_hidden_layers, pp, k["vpp"],
                                    memory.split_counts_embedding_loss(problem))  # the launched split
    st = pipeline.stage_times(layers, lt, recompute_b, lc, head_f, (first, last), k["sched"])
    p2p = pipeline.hand_off_time(x.fab, x.act_bytes, tp, sp, pp, float(problem.num_gpus))
    p2p_exposed = pipeline.hand_offs_exposed(p2p, k["vpp"], k["sched"])
    bubble = pipeline.bubble_time(k["sched"], pp, k["vpp"], st.fwd + p2p, st.bwd + p2p, st.wgrad, m=micro)
    t_mb = pipeline.microbatch_time(st, p2p_exposed, k["sched"], lt, layers)

    ranks = (groups.data_ranks(dp, cp), groups.expert_data_ranks(dp, cp, tp, etp, ep))
    dp_exposed = data.reduction_exposed(x.fab, prof, params, zero, x.hsdp, shard_group, ranks, tp, etp, ep, micro,
                                        st.fwd, st.bwd)
    optim_time = data.optimizer_time(params["stage"], zero, shard_group, x.rates.hbm, stage_expert_params(params),
                                     expert_shard_group(c, shard_group)) + offload.offload_time(
        params["stage"], zero, shard_group, prof, problem.training.optimizer_offload,
        problem.cluster.gpu.host_link_gbps)
    step = pipeline.step_time(micro, t_mb, bubble, dp_exposed, optim_time)

    mem = _memory(problem, c, k, x.tok, micro, zero, shard_group, params)
    first_mb, last_mb = pipeline.stage_microbatch_times(pp, layers, st)
    per_step = micro * layers
    return {
        "step_time_s": step,
        "tokens_per_s_per_gpu": compute.throughput_per_gpu(problem, step),
        "mfu": compute.mfu(problem, step, x.rates),
        "memory_peak_gib": mem["memory_peak_gib"],
        "memory_allocated_gib": mem["memory_allocated_gib"],
        "memory_reserved_gib": mem["memory_reserved_gib"],
        "num_microbatches": micro,
        "compute_s": compute.compute_time(micro, layers, lt, recompute_b, head_f),
        "exposed_comm_s": pipeline.exposed_comm_time(micro, p2p_exposed, layers, lc, dp_exposed),
        "bubble_s": bubble,
        "stage_fwd_s": st.fwd,  # one micro-batch through the busiest stage (for the timeline in `explain`)
        "first_stage_mb_s": first_mb,  # forward + backward of one micro-batch per stage, for `explain`
        "last_stage_mb_s": last_mb,
        "stage_bwd_s": st.bwd,
        "stage_wgrad_s": st.wgrad,
        "p2p_s": p2p,
        "optimizer_s": optim_time,
        "tp_comm_s": per_step * lc.tp,
        "cp_comm_s": per_step * lc.cp,
        "ep_comm_s": per_step * lc.ep,
        "fsdp_comm_s": per_step * (lc.fsdp_f + lc.fsdp_b),
        "pp_comm_s": micro * p2p_exposed,
        "dp_comm_s": dp_exposed,
        "recompute_s": per_step * recompute_b,
        **{key: v for key, v in mem.items() if key.startswith("mem_")},
    }


def memory_peak_gib(problem: Problem, c: Mapping[str, np.ndarray]) -> np.ndarray:
    """`evaluate`'s memory_peak_gib alone (no time terms), so that a search can drop what does not fit, or what a
    leaner sibling dominates, before pricing time."""
    k = _knobs(c)
    zero, _, shard_group = sharding(problem, c)
    micro = pipeline.microbatches(problem.training.global_batch, k["mbs"], k["dp"])
    tok = compute.tokens_per_gpu(k["mbs"], float(problem.training.seq_len), k["cp"])
    return _memory(problem, c, k, tok, micro, zero, shard_group, stage_params(problem, c))["memory_peak_gib"]


def _memory(problem: Problem, c: Mapping[str, np.ndarray], k: dict[str, np.ndarray], tok: np.ndarray,
            micro: np.ndarray, zero: np.ndarray, shard_group: np.ndarray,
            params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Memory of the busiest pipeline's stages (planner.cost.memory.report), as GiB."""
    stages = _stages(problem, c, k, tok, micro, zero, shard_group, params)
    return memory.report(*stages, memory.active_groups(k["tp"], k["pp"], k["dp"], k["cp"], k["ep"]))


def memory_stages(problem: Problem, c: Mapping[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """Each priced stage's allocations by kind, GiB (`plan explain`): first, second (rank 1) and last stage."""
    x = _layer(problem, c)
    out = {}
    for name, st in zip(("first", "second", "last"), _stages(problem, c, x.k, x.tok, x.micro, x.zero, x.shard_group,
                                                               x.params), strict=True):
        kinds = {**st.states, "activations": st.activations, "logits": st.logits, "buffers": st.buffers,
                 "allocated": st.total}
        out[name] = {kind: v / memory.GIB for kind, v in kinds.items()}
    return out


def _stages(problem: Problem, c: Mapping[str, np.ndarray], k: dict[str, np.ndarray], tok: np.ndarray,
            micro: np.ndarray, zero: np.ndarray, shard_group: np.ndarray,
            params: dict[str, np.ndarray]) -> list[memory.StageMemory]:
    """First, second and last stage allocations: each stage holds its own layer count (the launched split) times
    the micro-batches in flight at its rank; expert states shard over the expert data-parallel group."""
    prof = stack_profile(problem.training)
    fp8 = compute.is_fp8(problem)
    tp, pp, sp, per_layer = k["tp"], k["pp"], k["sp"], params["per_layer"]
    per_layer_act, working = memory.layer_activation_bytes(problem, tok, tp, sp, k["rc"])
    m = np.floor(micro)
    counts = memory.stage_layer_counts(problem.model.num_hidden_layers, pp, k["vpp"],
                                    memory.split_counts_embedding_loss(problem))
    ranks = (0, np.minimum(1, pp - 1), pp - 1)
    logits = memory.logits_bytes(tok, problem.model, tp)
    shared = memory.fsdp_buffer_bytes(zero, per_layer, prof) + memory.p2p_buffer_bytes(
        tok, problem.model.hidden_size, tp, sp, pp)
    # the embedding/head parameters sit on the first/last stage; sharding.stage_params prices ceil(L/pp) layers
    # (x copies: DualPipe holds two stages per rank)
    copies = params["held_layers"] / params["layers_per_stage"]
    base = (params["first"] - params["held_layers"] * per_layer, 0.0 * per_layer,
            params["last"] - params["held_layers"] * per_layer)
    expert_shard = expert_shard_group(c, shard_group)
    stages = []
    for i, (n, rank, edge) in enumerate(zip(counts, ranks, base, strict=True)):
        inflight = pipeline.inflight_microbatches(k["sched"], pp, k["vpp"], m, rank)
        acts = per_layer_act * n * inflight + working
        held = n * copies
        states = split_state_bytes(edge + held * per_layer, held * params["layer_expert_part"], zero, shard_group,
                                   expert_shard, prof, fp8, problem.training.optimizer_offload,
                                   memory.fp8_param_gather(problem))
        buffers = shared + memory.fp8_meta_bytes(held, problem.model.mlp_matrices + 4, fp8)
        stage_logits = logits if i == 2 else np.where(pp == 1, logits, 0.0)
        stages.append(memory.stage_memory(states, acts, stage_logits, buffers))
    return stages


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
            "working_bytes": working, "logits_bytes": memory.logits_bytes(x.tok, problem.model, x.k["tp"])}
