"""Whether grouped layouts fit the GPU (and with headroom), decided from a cheaper sum of the same terms.

grouped_memory_peak_gib adds each row's stage allocations term by term: about forty operations on every row of a
search's table. A stage's total is a sum of non-negative terms, half priced per state group and half per
activation group, so each side can be summed once per group (with the device's fixed bytes folded into the state
side) and a row needs one addition per stage and a max. That total is the same sum in another order: it differs
from grouped_memory_peak_gib's by a few rounding units (each of at most ten non-negative terms adds one; 1e-15
relative), so every row farther than SLACK (relative) from the capacity and headroom lines gets the answer the peak
gives; the rest, and every group with a term that is negative or not a number, get the peak itself.
tests/test_search_speed.py checks the answers against memory_peak_gib row by row.
"""

from __future__ import annotations

import numpy as np

from planner.cost import compute, memory, pipeline
from planner.cost.sharding import sharding, stage_params
from planner.cost.step import Shared, StageParts, _knobs, grouped_memory_peak_gib, stage_parts
from planner.inputs.problem import Problem

# Far above the reordered sum's rounding (~1e-15 relative), far below any gap the search cares about: about one row
# in a million lands within it of a line and is priced exactly.
SLACK = 1e-6


def grouped_fits(problem: Problem, by_state: Shared, by_act: Shared, capacity_gib: float,
                 room_gib: float) -> tuple[np.ndarray, np.ndarray]:
    """(fits, tight) per row of the groups `by_state` and `by_act` (grouped_memory_peak_gib's): memory_peak_gib <=
    capacity_gib, and, among rows that fit, memory_peak_gib > room_gib (rows that do not fit are never tight)."""
    parts, fixed = grouped_stage_parts(problem, by_state, by_act)
    n = len(by_state.index)
    terms = [*(v for states in parts.states for v in states.values()), parts.fsdp, *parts.meta, fixed, parts.p2p,
             *parts.acts, *parts.logits]
    if not all(bool(np.all(np.asarray(x) >= 0)) for x in terms):  # a negative or NaN term: the reorder promises nothing
        fits, tight, unsure = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), np.arange(n)
    else:
        scale = 1.0 + memory.FRAGMENTATION  # memory._device_gib: (total + FRAGMENTATION x total + fixed) / GIB
        total = None
        for states, meta, acts, logits in zip(parts.states, parts.meta, parts.acts, parts.logits, strict=True):
            stage = (by_state.spread(sum(states.values()) + parts.fsdp + meta + fixed / scale)
                     + by_act.spread(acts + logits + parts.p2p))
            total = stage if total is None else np.maximum(total, stage, out=total)
        cap_line, room_line = capacity_gib * memory.GIB / scale, room_gib * memory.GIB / scale
        fits = total <= cap_line
        tight = fits & (total > room_line)
        unsure = np.flatnonzero((np.abs(total - cap_line) <= SLACK * cap_line)
                                | (np.abs(total - room_line) <= SLACK * room_line))
    if len(unsure):
        peak = grouped_memory_peak_gib(problem, by_state.subset(unsure), by_act.subset(unsure), cap=capacity_gib)
        fits[unsure] = peak <= capacity_gib
        tight[unsure] = fits[unsure] & (peak > room_gib)
    return fits, tight


def grouped_stage_parts(problem: Problem, by_state: Shared, by_act: Shared) -> tuple[StageParts, np.ndarray]:
    """step.stage_parts of the groups `by_state` and `by_act`, priced as grouped_memory_peak_gib prices them, and
    the bytes each state group's GPU holds outside the allocator (memory.device_fixed_bytes)."""
    cs, k = by_state.table, _knobs(by_act.table, expert=False)
    zero, _, shard_group = sharding(problem, cs)
    micro = pipeline.microbatches(problem.training.global_batch, k["mbs"], k["dp"])
    tok = compute.tokens_per_gpu(k["mbs"], float(problem.training.seq_len), k["cp"])
    parts = stage_parts(problem, k, tok, micro, cs, zero, shard_group, stage_params(problem, cs))
    active = memory.active_groups(*(cs[x].astype(float) for x in ("tp", "pp", "dp", "cp", "ep")))
    return parts, memory.device_fixed_bytes(active)
