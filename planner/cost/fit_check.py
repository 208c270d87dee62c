"""Whether grouped layouts fit the GPU (and with headroom), decided from a cheaper sum of the same terms.

grouped_memory_peak_gib adds each row's stage allocations term by term: about forty operations on every row of a
search's table. A stage's total is a sum of non-negative terms, half priced per state group and half per
activation group, so each side can be summed once per group (with the device's fixed bytes folded into the state
side) and a row needs one addition per stage and a max. That total is the same sum in another order: it differs
from grouped_memory_peak_gib's by a few rounding units (each of at most ten non-negative terms adds one; 1e-15
relative), so every row farther than SLACK (relative) from the capacity and headroom lines gets the answer the peak
gives; the rest, every group with a term that is negative or not a number, and every layout that offloads
activations (the layers it moves depend on the peak: not a sum), get the peak itself.
tests/test_search_speed.py checks the answers against memory_peak_gib row by row.
"""

from __future__ import annotations

import numpy as np

from planner.cost import compute, memory, pipeline
from planner.cost.allocations import StageParts, stage_parts
from planner.cost.sharding import sharding, stage_params, stage_state_bytes, states_floor_gib
from planner.cost.step import Shared, _knobs, grouped_memory_peak_gib
from planner.inputs.layout import Recompute
from planner.inputs.problem import Problem

# Far above the reordered sum's rounding (~1e-15 relative), far below any gap the search cares about: about one row
# in a million lands within it of a line and is priced exactly.
SLACK = 1e-6


def grouped_fits(problem: Problem, by_state: Shared, by_act: Shared, capacity_gib: float,
                 room_gib: float) -> tuple[np.ndarray, np.ndarray]:
    """(fits, tight) per row of the groups `by_state` and `by_act` (grouped_memory_peak_gib's): memory_peak_gib <=
    capacity_gib, and, among rows that fit, memory_peak_gib > room_gib (rows that do not fit are never tight)."""
    n = len(by_state.index)
    fits, tight = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    cs = by_state.table
    zero, _, shard_group = sharding(problem, cs)
    params = stage_params(problem, cs)
    state = (zero, shard_group, params, stage_state_bytes(problem, cs, zero, shard_group, params))
    if (states_floor_gib(state[3][1]) > capacity_gib * (1.0 + SLACK)).all():  # (a peak adds terms >= 0 to these)
        return fits, tight  # no state group's model states fit: the rest is never priced
    parts, fixed = grouped_stage_parts(problem, by_state, by_act, state)
    terms = [*(v for states in parts.states for v in states.values()), parts.fsdp, *parts.meta, fixed, parts.p2p,
             *parts.acts, *parts.logits]
    if not all(bool(np.all(np.asarray(x) >= 0)) for x in terms):  # a negative or NaN term: no promise
        unsure = np.arange(n)
    else:
        scale = 1.0 + memory.FRAGMENTATION  # memory._device_gib: (total + FRAGMENTATION x total + fixed) / GIB
        cap_line, room_line = capacity_gib * memory.GIB / scale, room_gib * memory.GIB / scale
        state_side = [sum(states.values()) + parts.fsdp + meta + fixed / scale
                      for states, meta in zip(parts.states, parts.meta, strict=True)]
        # a state group whose states alone are over the line fits in none of its rows: those rows are never summed
        over = np.maximum(np.maximum(state_side[0], state_side[1]), state_side[2]) > cap_line * (1.0 + SLACK)
        rows = np.flatnonzero(~by_state.spread(over)) if over.any() else np.arange(n)
        at_s, at_z = by_state.index.take(rows), by_act.index.take(rows)
        total = None
        for side, acts, logits in zip(state_side, parts.acts, parts.logits, strict=True):
            stage = side.take(at_s) + (acts + logits + parts.p2p).take(at_z)
            total = stage if total is None else np.maximum(total, stage, out=total)
        fits[rows] = fit = total <= cap_line
        tight[rows] = fit & (total > room_line)
        near = _between(total, cap_line) | _between(total, room_line)
        # activation offloading moves as many layers to the host as the peak needs (step._stages): not a sum, so
        # those rows get the peak itself
        offload = by_act.table["recompute"] == Recompute.OFFLOAD
        if offload.any():
            near |= offload.take(at_z)
        unsure = rows.take(np.flatnonzero(near))
    if len(unsure):
        # (the groups these rows use: a part's other groups were priced above, and pricing them again cost as much)
        peak = grouped_memory_peak_gib(problem, by_state.only(unsure), by_act.only(unsure), cap=capacity_gib)
        fits[unsure] = peak <= capacity_gib
        tight[unsure] = fits[unsure] & (peak > room_gib)
    return fits, tight


def _between(total: np.ndarray, line: float) -> np.ndarray:
    """Rows within SLACK (relative) of `line`: two comparisons (a third of abs(total - line) <= SLACK x line's
    passes over the rows; either way a row outside is ~1e9 rounding units from the line)."""
    return (total >= line * (1.0 - SLACK)) & (total <= line * (1.0 + SLACK))


def grouped_stage_parts(problem: Problem, by_state: Shared, by_act: Shared,
                        state: tuple) -> tuple[StageParts, np.ndarray]:
    """step.stage_parts of the groups `by_state` and `by_act`, priced as grouped_memory_peak_gib prices them
    (`state`: by_state's zero, shard group, stage_params and stage_state_bytes), and the bytes each state group's GPU
    holds outside the allocator (memory.device_fixed_bytes)."""
    cs, k = by_state.table, _knobs(by_act.table, expert=False)
    zero, shard_group, params, state_bytes = state
    micro = pipeline.microbatches(problem.training.global_batch, k["mbs"], k["dp"])
    tok = compute.tokens_per_gpu(k["mbs"], float(problem.training.seq_len), k["cp"])
    parts = stage_parts(problem, k, tok, micro, cs, zero, shard_group, params, state_bytes)
    active = memory.active_groups(*(cs[x].astype(float) for x in ("tp", "pp", "dp", "cp", "ep")))
    return parts, memory.device_fixed_bytes(active)
