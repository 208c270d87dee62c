"""The per-stage memory sum: what each priced pipeline stage's GPU allocates, by kind, and its total.

    total = weights + grads + optimizer     model states of its layers and model ends (memory.state_bytes)
          + activations                     kept per layer x its layers x micro-batches in flight at its rank
                                            + the recompute working set (memory.layer_activation_bytes)
          + logits                          on the last stage, and on the only one without a pipeline
          + buffers                         ZeRO-3 gathers + pipeline hand-offs + fp8 scaling metadata
added in that order, less the layers whose activations recompute=offload moves to the host
(activation_offload.offloaded_layers). The formulas are in planner.cost.memory; the device total over this is
planner.cost.device_memory's. `stage_memories` is the one sum: evaluate (planner.cost.step), explain's stages and
the report's every rank (planner.cost.stages) and the search's shortcuts (planner.cost.fit_check) all call it.

Which GPUs: evaluate prices the first, second and last stage (PRICED: the ones that can be the busiest; an uneven
split can make the second the busiest); the report walks every rank (every_rank). Each stage holds its own layer
count (the launched split, memory.stage_layer_counts) x copies (DualPipe holds two stages per rank), the embedding
and LM head on the ends (sharding.stage_params), routed experts' states sharded over the expert data-parallel group.

Model states read neither the micro-batch size nor recompute, activations no ZeRO stage, expert or context-parallel
layout (planner.cost.step.STATE_FREE_KNOBS, ACTIVATION_FREE_KNOBS), so the search prices the two sides per group
of rows (StateSide, ActivationSide on a group table) and `stage_memories` spreads them to the rows (`spread_s`,
`spread_z`): every term is elementwise and each row adds the same terms in the same order, so it gets the bits it
would get alone (tests/test_search_speed.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from planner.cost import activation_offload, compute, device_memory, expert, host, memory, pipeline
from planner.cost.profiles import stack_profile
from planner.cost.sharding import expert_shard_group, sharding, split_state_bytes, stage_params
from planner.inputs.layout import Schedule
from planner.inputs.problem import Problem

# Layers a combined-1F1B pair holds beyond one micro-batch without a pipeline: the forward's newest layer before the
# backward frees its counterpart (pipeline.inflight_microbatches).
PAIR_LAYERS = 1.0


@dataclass(frozen=True)
class Place:
    """Where a priced GPU sits in the pipeline."""

    layers: str  # "first", "middle" or "last": which of memory.stage_layer_counts' counts its stage holds
    rank: int  # its pipeline rank, for the micro-batches in flight: min(rank, pp - 1), or pp + rank if negative
    end: str  # the model end whose parameters it holds (sharding.stage_params): "first", "last" or "" (none)
    logits: str  # whether it keeps the logits: "yes", "no", or "alone" (only without a pipeline, pp = 1)


# The first, second and last stage: what evaluate prices. The second has the middle stages' ceil(L/pp) layers and no
# model end; without a pipeline all three are the one stage (its first end holds the head too).
PRICED = (Place("first", 0, "first", "alone"), Place("middle", 1, "", "alone"), Place("last", -1, "last", "yes"))


def every_rank(pp: int) -> tuple[Place, ...]:
    """Each rank of a `pp`-stage pipeline, first to last."""
    if pp == 1:
        return (Place("first", 0, "first", "yes"),)
    middle = tuple(Place("middle", r, "", "no") for r in range(1, pp - 1))
    return (Place("first", 0, "first", "no"), *middle, Place("last", pp - 1, "last", "yes"))


def memory_knobs(c: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The knobs the memory reads: group sizes, vpp and mbs as floats; recompute, sp and schedule as codes."""
    out = {k: c[k].astype(float) for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "mbs")}
    out.update(rc=c["recompute"], sp=c["sp"], sched=c["schedule"])
    return out


@dataclass(frozen=True)
class ActivationSide:
    """What the activation side of a table reads: memory_knobs, tokens per GPU per micro-batch, micro-batches."""

    k: Mapping[str, np.ndarray]
    tok: np.ndarray
    micro: np.ndarray


def activation_side(problem: Problem, c: Mapping[str, np.ndarray]) -> ActivationSide:
    k = memory_knobs(c)
    micro = pipeline.microbatches(problem.training.global_batch, k["mbs"], k["dp"])
    return ActivationSide(k, compute.tokens_per_gpu(k["mbs"], float(problem.training.seq_len), k["cp"]), micro)


@dataclass(frozen=True)
class StateSide:
    """The model-state side of a table: its ZeRO stage and shard group (sharding.sharding), parameters per stage
    (sharding.stage_params), and each place's held layers and weights, grads and optimizer bytes."""

    table: Mapping[str, np.ndarray]
    zero: np.ndarray
    shard_group: np.ndarray
    params: dict[str, np.ndarray]
    held: list[np.ndarray]
    states: list[dict[str, np.ndarray]]


def state_side(problem: Problem, c: Mapping[str, np.ndarray], places: Sequence[Place] = PRICED,
               priced: tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]] | None = None) -> StateSide:
    """`priced`: (zero, shard group, stage_params) of `c`, when already known."""
    if priced is None:
        zero, _, shard_group = sharding(problem, c)
        priced = (zero, shard_group, stage_params(problem, c))
    zero, shard_group, params = priced
    held, states = stage_state_bytes(problem, c, zero, shard_group, params, places)
    return StateSide(c, zero, shard_group, params, held, states)


def stage_state_bytes(problem: Problem, c: Mapping[str, np.ndarray], zero: np.ndarray, shard: np.ndarray,
                      params: dict[str, np.ndarray], places: Sequence[Place] = PRICED
                      ) -> tuple[list[np.ndarray], list[dict[str, np.ndarray]]]:
    """The layers each place's GPU holds, and their weights, grads and optimizer bytes: its own layer count x copies,
    plus its model end's parameters (stage_params prices ceil(L/pp) layers with the ends; the end is what is left
    when those layers are taken away); expert states shard over the expert data-parallel group."""
    fp8 = compute.is_fp8(problem)
    counts = dict(zip(("first", "middle", "last"), memory.stage_layer_counts(
        problem.model.num_hidden_layers, *(c[x].astype(float) for x in ("pp", "vpp")),
        problem.training.pipeline_layout), strict=True))
    per_layer = params["per_layer"]
    copies = params["held_layers"] / params["layers_per_stage"]
    ends = {"first": params["first"] - params["held_layers"] * per_layer, "": 0.0 * per_layer,
            "last": params["last"] - params["held_layers"] * per_layer}
    expert_shard = expert_shard_group(c, shard)
    held = [counts[place.layers] * copies for place in places]
    return held, [split_state_bytes(ends[place.end] + h * per_layer, h * params["layer_expert_part"], zero, shard,
                                    expert_shard, stack_profile(problem.training), fp8,
                                    problem.training.optimizer_offload, memory.fp8_param_gather(problem))
                  for h, place in zip(held, places, strict=True)]


@dataclass(frozen=True)
class StageParts:
    """Each place's allocations before they are added up, each on the table it is priced on: model states, ZeRO-3
    buffers and fp8 metadata per state row (StateSide), activations, logits and hand-off buffers per activation row
    (ActivationSide)."""

    states: list[dict[str, np.ndarray]]
    fsdp: np.ndarray
    meta: list[np.ndarray]
    p2p: np.ndarray
    acts: list[np.ndarray]
    logits: list[np.ndarray]
    per_layer_act: np.ndarray  # what one layer keeps per micro-batch (activation offloading moves whole layers)
    first_layers: np.ndarray  # the first stage's layer count


def stage_parts(problem: Problem, act: ActivationSide, st: StateSide, places: Sequence[Place] = PRICED) -> StageParts:
    """Each place's allocations (`places`: those `st` was priced for)."""
    prof = stack_profile(problem.training)
    fp8 = compute.is_fp8(problem)
    k, tok = act.k, act.tok
    tp, pp, sp = k["tp"], k["pp"], k["sp"]
    per_layer_act, working = memory.layer_activation_bytes(problem, tok, tp, sp, k["rc"])
    counts = dict(zip(("first", "middle", "last"), memory.stage_layer_counts(
        problem.model.num_hidden_layers, pp, k["vpp"], problem.training.pipeline_layout), strict=True))
    logits = memory.logits_bytes(tok, problem.model, tp, memory.loss_bytes_per_logit(problem, prof))
    alone = np.where(pp == 1, logits, 0.0)  # logits live on the last stage, and on the first without a pipeline
    stage_logits = [logits if place.logits == "yes" else alone if place.logits == "alone" else 0.0 * logits
                    for place in places]
    inflight = _inflight(k["sched"], pp, k["vpp"], np.floor(act.micro), [place.rank for place in places])
    layers = [counts[place.layers] for place in places]
    deepep = expert.dispatcher_profile(prof, problem.training).deepep
    held = per_layer_act + host.graph_buffer_bytes(problem, tok, tp, sp, deepep)  # and per-layer CUDA graphs' buffers
    # a combined-1F1B pair without a pipeline holds one layer beyond its micro-batch (pipeline.inflight_microbatches)
    pair = held * np.where((k["sched"] == Schedule.COMBINED_1F1B) & (pp == 1), PAIR_LAYERS, 0.0)
    acts = [held * n * in_flight + pair + working for n, in_flight in zip(layers, inflight, strict=True)]
    off = memory.offloaded_module_bytes(problem, tok, tp, k["rc"])
    if np.any(off):  # offloaded tensors the host cannot hold stay on the device (a finite total the fit check refuses)
        acts = [a + activation_offload.host_bytes_over(problem, off, n, in_flight)
                for a, n, in_flight in zip(acts, layers, inflight, strict=True)]
    # FSDP2 roots one unit per pipeline stage; without a pipeline the root holds the embedding and the head
    root = np.where(st.table["pp"] == 1, st.params["embedding"] + st.params["head"], 0.0)
    return StageParts(st.states, memory.fsdp_buffer_bytes(st.zero, st.params["per_layer"], prof, root),
                      [memory.fp8_meta_bytes(held, problem.model.mlp_matrices + 4, fp8) for held in st.held],
                      memory.p2p_buffer_bytes(tok, problem.model.hidden_size, tp, sp, pp),
                      acts, stage_logits, per_layer_act, counts["first"])


def _inflight(sched: np.ndarray, pp: np.ndarray, vpp: np.ndarray, m: np.ndarray,
              ranks: Sequence[int]) -> list[np.ndarray]:
    """Micro-batches in flight at each of `ranks` (Place.rank) (pipeline.inflight_microbatches), computed once per
    distinct (schedule, pp, vpp, m): a table has few of them."""
    keys = [np.ravel(np.broadcast_to(x, np.shape(m))) for x in (sched, pp, vpp, m)]
    order = np.lexsort(keys)
    ordered = [x.take(order) for x in keys]
    new = np.ones(len(order), dtype=bool)
    for x in ordered:
        new[1:] &= x[1:] == x[:-1]  # (NaN != NaN: such rows get a group each)
    new = ~new
    new[:1] = True
    index = np.empty(len(order), dtype=np.int64)
    index[order] = np.cumsum(new, dtype=np.int64) - 1
    s, p, v, mm = (x.take(order[new]) for x in keys)
    at = [0 if rank == 0 else np.minimum(rank, p - 1) if rank > 0 else p + rank for rank in ranks]
    return [pipeline.inflight_microbatches(s, p, v, mm, rank).take(index).reshape(np.shape(m)) for rank in at]


@dataclass(frozen=True)
class StageMemory:
    """Allocations of one priced stage's GPU, bytes."""

    states: dict[str, np.ndarray]  # weights, grads, optimizer (memory.state_bytes); grouped: their sum, as "all"
    activations: np.ndarray
    logits: np.ndarray
    buffers: np.ndarray  # ZeRO-3 gather/reduce buffers, pipeline send/recv buffers, fp8 scaling metadata
    total: np.ndarray  # states + activations + logits + buffers
    offloaded: np.ndarray  # layers whose activations live in host memory (recompute=offload)


def _whole(x: np.ndarray) -> np.ndarray:
    return x


def stage_memories(problem: Problem, act: ActivationSide, st: StateSide, places: Sequence[Place] = PRICED,
                   spread_s: Callable[[np.ndarray], np.ndarray] = _whole,
                   spread_z: Callable[[np.ndarray], np.ndarray] = _whole) -> list[StageMemory]:
    """Each place's allocations and total (the module docstring's sum), bytes.

    Grouped (the search's shortcuts): `st` is priced per state group and `spread_s` spreads it to the rows, `act` per
    activation group, spread by `spread_z`; the states are then kept only as their sum (the peak reads totals).
    recompute=offload runs with pp = 1 (rule offload_needs_one_stage), so every place is its one stage: each keeps
    the offloaded layers' activations fewer."""
    x = stage_parts(problem, act, st, places)
    grouped = spread_s is not _whole
    shared = spread_s(x.fsdp) + spread_z(x.p2p)
    stages = []
    for states, meta, acts, logits in zip(x.states, x.meta, map(spread_z, x.acts), map(spread_z, x.logits),
                                          strict=True):
        buffers = shared + spread_s(meta)
        # (grouped: the states' sum is never -0.0, so 0 + it, as the ungrouped sum starts, is itself)
        held_states = spread_s(sum(states.values()))
        total = held_states + acts + logits + buffers
        stages.append(StageMemory({"all": held_states} if grouped else states, acts, logits, buffers, total, None))
    per_layer = spread_z(x.per_layer_act)
    outside = spread_s(device_memory.outside_allocator_bytes(device_memory.table_groups(st.table)))
    off = activation_offload.offloaded_layers(problem, spread_z(act.k["rc"]), spread_z(x.first_layers), per_layer,
                                              stages[0].total, outside)
    if not np.any(off):
        return [replace(stage, offloaded=off) for stage in stages]
    return [replace(stage, activations=stage.activations - off * per_layer, total=stage.total - off * per_layer,
                    offloaded=off) for stage in stages]
