"""Each priced pipeline stage's allocations before they are added up (planner.cost.step adds them per row; the
search's fit test, planner.cost.fit_check, adds them per group first): model states, ZeRO-3 buffers and fp8
metadata per state group, activations, logits and hand-off buffers per activation group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from planner.cost import activation_offload, compute, host, memory, pipeline
from planner.cost.profiles import stack_profile
from planner.cost.sharding import stage_state_bytes
from planner.inputs.problem import Problem


@dataclass(frozen=True)
class StageParts:
    """The first, second and last stage's allocations before they are added up, each on the table it is priced
    on: model states, ZeRO-3 buffers and fp8 metadata per state group (`cs`), activations, logits and hand-off
    buffers per activation group (`k`)."""

    states: list[dict[str, np.ndarray]]
    fsdp: np.ndarray
    meta: list[np.ndarray]
    p2p: np.ndarray
    acts: list[np.ndarray]
    logits: list[np.ndarray]  # the first and second stage's are one array
    per_layer_act: np.ndarray  # what one layer keeps per micro-batch (activation offloading moves whole layers)
    first_layers: np.ndarray  # the first stage's layer count


def stage_parts(problem: Problem, k: dict[str, np.ndarray], tok: np.ndarray, micro: np.ndarray,
                 cs: Mapping[str, np.ndarray], zero: np.ndarray, shard_group: np.ndarray,
                 params: dict[str, np.ndarray],
                 state_bytes: tuple[list[np.ndarray], list[dict[str, np.ndarray]]] | None = None) -> StageParts:
    """Each stage holds its own layer count (the launched split) times the micro-batches in flight at its rank;
    expert states shard over the expert data-parallel group."""
    prof = stack_profile(problem.training)
    fp8 = compute.is_fp8(problem)
    tp, pp, sp = k["tp"], k["pp"], k["sp"]
    per_layer_act, working = memory.layer_activation_bytes(problem, tok, tp, sp, k["rc"])
    counts = memory.stage_layer_counts(problem.model.num_hidden_layers, pp, k["vpp"])
    logits = memory.logits_bytes(tok, problem.model, tp)
    held_s, states_s = state_bytes or stage_state_bytes(problem, cs, zero, shard_group, params)
    inflight = _inflight(k["sched"], pp, k["vpp"], np.floor(micro))
    # logits live on the last stage, and on the first (= second) too without a pipeline
    first_logits = np.where(pp == 1, logits, 0.0)
    held = per_layer_act + host.graph_buffer_bytes(problem, tok, tp, sp)  # and per-layer CUDA graphs' static buffers
    acts = [held * n * in_flight + working for n, in_flight in zip(counts, inflight, strict=True)]
    off = memory.offloaded_module_bytes(problem, tok, tp, k["rc"])
    if np.any(off):  # offloaded tensors the host cannot hold stay on the device (a finite total the fit check refuses)
        acts = [a + activation_offload.host_bytes_over(problem, off, n, in_flight)
                for a, n, in_flight in zip(acts, counts, inflight, strict=True)]
    return StageParts(states_s, memory.fsdp_buffer_bytes(zero, params["per_layer"], prof),
                      [memory.fp8_meta_bytes(held, problem.model.mlp_matrices + 4, fp8) for held in held_s],
                      memory.p2p_buffer_bytes(tok, problem.model.hidden_size, tp, sp, pp),
                      acts,
                      [first_logits, first_logits, logits], per_layer_act, counts[0])


def _inflight(sched: np.ndarray, pp: np.ndarray, vpp: np.ndarray, m: np.ndarray) -> list[np.ndarray]:
    """Micro-batches in flight at the first, second and last stage's rank (pipeline.inflight_microbatches), computed
    once per distinct (schedule, pp, vpp, m): a table has few of them."""
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
    ranks = (0, np.minimum(1, p - 1), p - 1)
    return [pipeline.inflight_microbatches(s, p, v, mm, rank).take(index).reshape(np.shape(m)) for rank in ranks]
