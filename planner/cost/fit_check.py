"""The search's memory shortcuts: cheaper ways to the plain memory formula's answers, each tested against it.

The plain formula is memory_terms.peak_gib over allocations.stage_memories (memory_terms.memory_peak_gib for a
table). A search asks it about hundreds of thousands of rows; three shortcuts answer faster, each checked against
it row by row on whole search tables (tests/test_search_speed.py):

- states floor (state_memory_floor_gib): the busiest priced stage's model states alone. A stage's total adds
  non-negative terms to its states, and the device total non-negative terms to that, and adding a non-negative
  number never rounds below where it started, so the floor never exceeds the peak: the search drops rows above
  capacity before pricing the rest of them. Test: floor <= peak on every row.
- grouped peak (grouped_memory_peak_gib): the same sum, its two sides priced once per group of rows (rows that differ
  only in step.STATE_FREE_KNOBS share model states, only in step.ACTIVATION_FREE_KNOBS activations) and spread to
  the rows: each row adds the same terms in the same order, so it gets the plain peak bit for bit. Test: equal.
- grouped fit test (grouped_fits): the peak adds each row's stage allocations term by term, about forty operations
  on every row. A stage's total is a sum of non-negative terms, half priced per state group and half per
  activation group, so each side can be summed once per group and a row needs one addition per stage and a max.
  The device total, device_memory.device_bytes(a, f) = a + 0.05·a + f, is under a capacity C exactly when
  a + f/1.05 <= C/1.05, so the fixed bytes f/1.05 join the state side and the line is C/1.05. That is the same
  sum in another order: it differs from the peak's by a few rounding units (each of at most ten non-negative terms
  adds one; 1e-15 relative), so every row farther than SLACK (relative) from the capacity and headroom lines gets
  the answer the peak gives; the rest, every group with a term that is negative or not a number, and every layout
  that offloads activations (the layers it moves depend on the peak: not a sum), get the peak itself.
  Test: the answers equal the peak's, with lines also put exactly on rows' peaks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from planner.cost import device_memory
from planner.cost.allocations import (
    ActivationSide,
    StateSide,
    activation_side,
    stage_memories,
    stage_parts,
    state_side,
)
from planner.cost.memory import GIB
from planner.cost.memory_terms import busiest, peak_gib
from planner.cost.step import Shared
from planner.inputs.layout import Recompute
from planner.inputs.problem import Problem

# Far above the reordered sum's rounding (~1e-15 relative), far below any gap the search cares about: about one row
# in a million lands within it of a line and is priced exactly.
SLACK = 1e-6


def state_memory_floor_gib(problem: Problem, c: Mapping[str, np.ndarray]) -> np.ndarray:
    """A cheap lower bound on memory_peak_gib: model states alone (no activations, no reserve), with the layout's
    ZeRO sharding, on the busiest of the stages the memory model prices (allocations.PRICED)."""
    return states_floor_gib(state_side(problem, c))


def states_floor_gib(st: StateSide) -> np.ndarray:
    """GiB of the busiest priced stage's model states: state_memory_floor_gib of an already priced state side."""
    first, second, last = (sum(states.values()) for states in st.states)
    return np.maximum(np.maximum(first, second), last) / GIB


def grouped_memory_peak_gib(problem: Problem, by_state: Shared, by_act: Shared,
                            cap: float | None = None) -> np.ndarray:
    """memory_peak_gib of the rows `by_state` (rows that differ only in STATE_FREE_KNOBS) and `by_act` (only in
    ACTIVATION_FREE_KNOBS, or a subset of them) group. With `cap`, rows whose busiest stage's model states alone need
    more GiB (states_floor_gib) are NaN, not priced; the states are priced once for the floor and the peak."""
    st = state_side(problem, by_state.table)
    act = activation_side(problem, by_act.table)
    if cap is None:
        return _peak(problem, act, st, by_state.spread, by_act.spread)
    rows = np.flatnonzero(by_state.spread(states_floor_gib(st) <= cap))
    peak = np.full(len(by_state.index), np.nan)
    if len(rows):
        peak[rows] = _peak(problem, act, st, by_state.subset(rows).spread, by_act.subset(rows).spread)
    return peak


def _peak(problem: Problem, act: ActivationSide, st: StateSide, spread_s: Callable[[np.ndarray], np.ndarray],
          spread_z: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    stages = stage_memories(problem, act, st, spread_s=spread_s, spread_z=spread_z)
    outside = spread_s(device_memory.outside_allocator_bytes(device_memory.table_groups(st.table)))
    return peak_gib(busiest(stages, outside=outside))


def grouped_fits(problem: Problem, by_state: Shared, by_act: Shared, capacity_gib: float,
                 room_gib: float) -> tuple[np.ndarray, np.ndarray]:
    """(fits, tight) per row of the groups `by_state` and `by_act` (grouped_memory_peak_gib's): memory_peak_gib <=
    capacity_gib, and, among rows that fit, memory_peak_gib > room_gib (rows that do not fit are never tight)."""
    n = len(by_state.index)
    fits, tight = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    st = state_side(problem, by_state.table)
    if (states_floor_gib(st) > capacity_gib * (1.0 + SLACK)).all():  # (a peak adds terms >= 0 to these)
        return fits, tight  # no state group's model states fit: the rest is never priced
    parts = stage_parts(problem, activation_side(problem, by_act.table), st)
    fixed = device_memory.outside_allocator_bytes(device_memory.table_groups(by_state.table))
    terms = [*(v for states in parts.states for v in states.values()), parts.fsdp, *parts.meta, fixed, parts.p2p,
             *parts.acts, *parts.logits]
    if not all(bool(np.all(np.asarray(x) >= 0)) for x in terms):  # a negative or NaN term: no promise
        unsure = np.arange(n)
    else:
        scale = 1.0 + device_memory.FRAGMENTATION  # device_bytes(a, f) <= C  <=>  a + f/scale <= C/scale
        cap_line, room_line = capacity_gib * GIB / scale, room_gib * GIB / scale
        state_sums = [sum(states.values()) + parts.fsdp + meta + fixed / scale
                      for states, meta in zip(parts.states, parts.meta, strict=True)]
        # a state group whose states alone are over the line fits in none of its rows: those rows are never summed
        over = np.maximum(np.maximum(state_sums[0], state_sums[1]), state_sums[2]) > cap_line * (1.0 + SLACK)
        rows = np.flatnonzero(~by_state.spread(over)) if over.any() else np.arange(n)
        at_s, at_z = by_state.index.take(rows), by_act.index.take(rows)
        total = None
        for side, acts, logits in zip(state_sums, parts.acts, parts.logits, strict=True):
            stage = side.take(at_s) + (acts + logits + parts.p2p).take(at_z)
            total = stage if total is None else np.maximum(total, stage, out=total)
        fits[rows] = fit = total <= cap_line
        tight[rows] = fit & (total > room_line)
        near = _between(total, cap_line) | _between(total, room_line)
        # activation offloading moves as many layers to the host as the peak needs (allocations.stage_memories):
        # not a sum, so those rows get the peak itself
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
