"""Search: enumerate every layout the rules allow, price them all with the cost model, keep the best.

The enumeration is exhaustive, so the top plan is proven best under the cost model unless `time_limit_s` stopped the
pricing early (then `proven_best` is False and the report says so).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from planner.cost import compute
from planner.cost.bands import tie_width
from planner.cost.fit_check import grouped_fits
from planner.cost.step import (
    ACTIVATION_FREE_KNOBS,
    STATE_FREE_KNOBS,
    ZERO_FREE_KNOBS,
    Shared,
    evaluate,
    step_time_floor,
)
from planner.errors import NoFeasiblePlan
from planner.inputs.layout import KNOBS, Layout, Recompute
from planner.inputs.problem import Problem
from planner.search.lazy import take_rows
from planner.search.preference import RANK_BY, preferred_rows, top_rows, unpriced_features
from planner.search.rules import MEMORY_RULE, RECOMPUTE_DOMINANCE
from planner.search.space import Enumeration, enumerate_layouts, row_groups, select

PRICED_METRICS = ("step_time_s", "tokens_per_s_per_gpu", "mfu", "memory_peak_gib")
CHUNK = 200_000  # candidates priced per vectorised batch (bounded memory on huge spaces)
FLOOR_SLICE = 50_000  # rows per step_time_floor call in _Bounds (see _Bounds._floor)
SAMPLE = 1024  # rows priced first to bound the rest (_price_rankable)


@dataclass
class Plan:
    """One ranked plan: its layout and the cost model's metrics for it (evaluate's keys)."""

    layout: Layout
    metrics: dict[str, float]


@dataclass
class SearchResult:
    problem: Problem
    plans: list[Plan]
    candidates: int
    feasible: int
    pruned: dict[str, int]
    seconds: float
    proven_best: bool = True
    notes: list[str] = field(default_factory=list)
    # Every feasible layout priced (knob columns + PRICED_METRICS), kept only on request (`plan report`'s scatter).
    priced: dict[str, np.ndarray] | None = None
    rank_by: str = "time"  # preference.RANK_BY
    tie_width: float = 0.0  # ln(fastest / other) gap inside which layouts tie (rank_by preference)
    # With rank_by preference, the fastest-priced plan when it is not #1, its rank in `plans` (None: not shown)
    fastest: Plan | None = None
    fastest_rank: int | None = None


def capacity_gib(problem: Problem) -> float:
    return problem.cluster.gpu.memory_gib


def is_tight(problem: Problem, memory_peak_gib: np.ndarray | float) -> np.ndarray | bool:
    """Fits the GPU but leaves less than the problem's memory headroom free."""
    return memory_peak_gib > capacity_gib(problem) * (1.0 - problem.memory_headroom)


def search(problem: Problem, top: int = 5, time_limit_s: float | None = None,
           keep_priced: bool = False, rank_by: str = "preference") -> SearchResult:
    """Rank every rule-feasible layout that fits; `keep_priced` also returns all of them (SearchResult.priced).
    `rank_by` "preference" orders the layouts priced within the tie width of the fastest by what practitioners
    prefer (planner.search.preference), "time" by price alone."""
    if rank_by not in RANK_BY:
        raise ValueError(f"rank_by must be one of {RANK_BY}, not {rank_by!r}")
    tie = tie_width() if rank_by == "preference" else 0.0
    start = time.perf_counter()
    enum = enumerate_layouts(problem, lazy_last=True)
    pruned = dict(enum.pruned)
    pruned[MEMORY_RULE.name] = 0
    # `keep_priced` shows the memory/throughput trade-off, where more recompute is the leaner point: keep every one
    deadline = None if time_limit_s is None else start + time_limit_s
    cols, tight_rows, fitting, proven, by_zero = _fitting(problem, enum, pruned, dominate=not keep_priced,
                                                          deadline=deadline)
    candidates = enum.candidates
    # (a time limit prices rows in table order, as it always did; without the memory pass tightness is unknown here)
    if deadline is None and not keep_priced and problem.enforce_memory:
        all_cols, all_met = _price_rankable(problem, cols, tight_rows, top, by_zero, tie)
    else:
        all_cols, all_met, proven = _price_all(problem, cols, deadline, proven)
    feasible = fitting if proven else len(all_cols["tp"])
    if len(all_cols["tp"]) == 0:
        raise NoFeasiblePlan("no layout satisfies every rule", {"pruned": pruned, "candidates": candidates})
    tput = all_met["tokens_per_s_per_gpu"]
    # plans without headroom rank after every plan with room: they are priced, not trusted
    tight = np.asarray(is_tight(problem, all_met["memory_peak_gib"]), dtype=bool)
    rankable = np.ones(len(tput), dtype=bool)
    if keep_priced and "recompute" not in problem.fixed:  # every recompute level was kept for the scatter
        rankable = _dominance_mask(all_cols, tight)
    groups = [np.flatnonzero(group & rankable) for group in (~tight, tight)]
    if tie > 0:
        order = np.concatenate([preferred_rows(problem, g, all_cols, all_met, top, tie) for g in groups])[:top]
    else:
        order = np.concatenate([top_rows(g, all_cols, tput, top) for g in groups])[:top]

    def plan(i: int) -> Plan:
        return Plan(Layout.from_columns(all_cols, i), {k: float(v[i]) for k, v in all_met.items()})

    plans = [plan(i) for i in order]
    fastest, fastest_rank = None, None
    if tie > 0:  # the raw fastest of the group #1 comes from, when the preference put another first
        lead = groups[0] if len(groups[0]) else groups[1]
        quick = int(top_rows(lead, all_cols, tput, 1)[0])
        if quick != int(order[0]):
            fastest = plan(quick)
            fastest_rank = next((r for r, i in enumerate(order, 1) if int(i) == quick), None)
    priced = {**all_cols, **{k: all_met[k] for k in PRICED_METRICS}} if keep_priced else None
    return SearchResult(problem, plans, candidates, feasible, pruned, time.perf_counter() - start, proven,
                        priced=priced, rank_by=rank_by, tie_width=tie, fastest=fastest, fastest_rank=fastest_rank)


def _fitting(problem: Problem, enum: Enumeration, pruned: dict[str, int], dominate: bool = True,
             deadline: float | None = None) -> tuple[Mapping[str, np.ndarray], np.ndarray, int, bool,
                                                     tuple[np.ndarray, np.ndarray] | None]:
    """The rows worth pricing in full, which of them are tight, how many fit, and (when the enumeration can tell them
    from its indices: Enumeration.groups_free_in) their groups by ZERO_FREE_KNOBS, part by part
    (Enumeration.grouped_parts, whose groups price most memory terms once per group): a cheap state floor, then the
    memory model alone; among layouts that differ only in recompute (one parent: recompute
    is enumerated last), only the least recompute that fits and the least that fits with headroom can rank
    (RECOMPUTE_DOMINANCE). Past `deadline` the rows not yet checked are dropped and the answer is not proven best."""
    dominate = dominate and "recompute" not in problem.fixed
    assert enum.last is not None and enum.last[0] == "recompute" and (np.diff(enum.last[1]) > 0).all(), enum.last
    proven = True
    kept: list[tuple[np.ndarray, np.ndarray]] = []  # (parent, index of the last knob's value) of each part's rows
    kept_tight: list[np.ndarray] = []
    fitting = dominated = unfit = 0
    for parent, pos, (by_state, by_act) in enum.grouped_parts(CHUNK, STATE_FREE_KNOBS, ACTIVATION_FREE_KNOBS):
        if problem.enforce_memory and deadline is not None and kept and time.perf_counter() > deadline:
            proven = False
        fits, tight = _fits(problem, by_state, by_act) if proven else (np.zeros(len(parent), dtype=bool),) * 2
        unfit += len(fits) - int(np.count_nonzero(fits))  # (rows left unchecked by the deadline too)
        fitting += int(np.count_nonzero(fits))
        keep = _undominated(parent, fits, tight, enum.last[1].take(pos)) if dominate else fits
        dominated += int(np.count_nonzero(fits & ~keep))
        rows = np.flatnonzero(keep)
        kept.append((parent.take(rows), pos.take(rows)))
        kept_tight.append(tight.take(rows))
    if problem.enforce_memory:
        pruned[MEMORY_RULE.name] += unfit
    if dominate and fitting:
        pruned[RECOMPUTE_DOMINANCE.name] = dominated
        fitting -= dominated  # candidates = feasible + pruned: a dominated layout is counted as pruned
    if not kept:
        return {k: np.zeros(0, dtype=np.int32) for k in (*KNOBS, *enum.cols)}, np.zeros(0, dtype=bool), fitting, \
            proven, None
    parents, positions = (np.concatenate(x) for x in zip(*kept, strict=True))
    by_zero = enum.groups_free_in(ZERO_FREE_KNOBS, parents, positions)  # (its temporaries gone before the columns)
    # the kept rows' columns are built when read (the pricing reads few of them), not per part and then joined
    return enum.kept(parents, positions), np.concatenate(kept_tight), fitting, proven, by_zero


def has_plan(problem: Problem) -> bool:
    """Whether `search(problem)` finds a plan, without ranking one: the first part of the table
    (Enumeration.grouped_parts) with a layout that fits, survives the recompute dominance and prices to a finite step
    ends it."""
    dominate = "recompute" not in problem.fixed
    enum = enumerate_layouts(problem, lazy_last=True)
    assert enum.last is not None and enum.last[0] == "recompute" and (np.diff(enum.last[1]) > 0).all(), enum.last
    for parent, pos, (by_state, by_act) in enum.grouped_parts(CHUNK, STATE_FREE_KNOBS, ACTIVATION_FREE_KNOBS):
        fits, tight = _fits(problem, by_state, by_act)
        rows = np.flatnonzero(_undominated(parent, fits, tight, enum.last[1].take(pos)) if dominate else fits)
        for lo in range(0, len(rows), SAMPLE):
            batch = rows[lo:lo + SAMPLE]
            if _valid(evaluate(problem, enum.take(parent.take(batch), pos.take(batch)))).any():
                return True
    return False


def _undominated(parent: np.ndarray, fits: np.ndarray, tight: np.ndarray, rc: np.ndarray) -> np.ndarray:
    """Rows that fit and carry their sibling group's (one parent: rows that differ only in recompute, the last knob)
    least recompute that fits, or the least that fits with headroom (RECOMPUTE_DOMINANCE). Offloading (of layers
    or of modules) is not on that ladder (it can beat full recompute or lose to it): it is kept wherever it fits and
    keeping every activation (recompute none) does not fit with headroom, since otherwise it only adds copies to the
    same layout."""
    if not fits.any():
        return fits
    ladder = (rc != Recompute.OFFLOAD) & (rc != Recompute.OFFLOAD_MODULES)
    on = fits & ladder
    keep = on & (_least_recompute(parent, on) | _least_recompute(parent, on & ~tight))
    offload = fits & ~ladder
    if offload.any():
        roomy = np.zeros(int(parent.max()) + 1, dtype=bool)
        roomy[parent[fits & ~tight & (rc == Recompute.NONE)]] = True
        keep |= offload & ~roomy.take(parent)
    return keep


def _dominance_mask(cols: Mapping[str, np.ndarray], tight: np.ndarray) -> np.ndarray:
    """The priced rows RECOMPUTE_DOMINANCE keeps (_undominated), for a search that priced every recompute level
    (`keep_priced`): the table ranks the same rows as without it."""
    others = [cols[k] for k in KNOBS if k != "recompute"]
    order = np.lexsort([cols["recompute"], *others])
    if len(order) == 0:
        return np.zeros(0, dtype=bool)
    new = np.zeros(len(order), dtype=bool)
    new[0] = True
    for col in others:
        c = col.take(order)
        new[1:] |= c[1:] != c[:-1]
    parent = np.cumsum(new) - 1
    keep = np.zeros(len(order), dtype=bool)
    keep[order] = _undominated(parent, np.ones(len(order), dtype=bool), tight.take(order),
                               cols["recompute"].take(order))
    return keep


def _fits(problem: Problem, by_state: Shared, by_act: Shared) -> tuple[np.ndarray, np.ndarray]:
    """(fits, tight) per row of the groups `by_state` (rows that differ only in STATE_FREE_KNOBS) and `by_act`
    (ACTIVATION_FREE_KNOBS): without the memory check, every row fits with room."""
    n = len(by_state.index)
    if not problem.enforce_memory:
        return np.ones(n, dtype=bool), np.zeros(n, dtype=bool)
    # most terms are priced once per group of rows sharing what they read, and summed per row in a cheaper order
    # (exact but within rounding of a line: planner.cost.fit_check)
    cap = capacity_gib(problem)
    return grouped_fits(problem, by_state, by_act, cap, cap * (1.0 - problem.memory_headroom))


def _price_all(problem: Problem, cols: Mapping[str, np.ndarray], deadline: float | None,
               proven: bool) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], bool]:
    """Every row priced, in table order, until `deadline` (then not proven best); rows without a finite step
    time dropped."""
    kept_cols: list[dict[str, np.ndarray]] = []
    kept_metrics: list[dict[str, np.ndarray]] = []
    for lo in range(0, len(cols["tp"]), CHUNK):
        if deadline is not None and (lo or not proven) and time.perf_counter() > deadline and kept_cols:
            proven = False
            break
        part = {k: v[lo:lo + CHUNK] for k, v in cols.items()}
        met = evaluate(problem, part)
        ok = np.isfinite(met["step_time_s"]) & (met["step_time_s"] > 0)
        kept_cols.append(select(part, ok))
        kept_metrics.append(select(met, ok))
    all_cols = {k: np.concatenate([c[k] for c in kept_cols]) if kept_cols else np.array([], int) for k in KNOBS}
    all_met = {k: np.concatenate([m[k] for m in kept_metrics]) for k in kept_metrics[0]} if kept_metrics else {}
    return all_cols, all_met, proven


def _price_rankable(problem: Problem, cols: Mapping[str, np.ndarray], tight: np.ndarray, top: int,
                    by_zero: tuple[np.ndarray, np.ndarray] | None = None, tie: float = 0.0,
                    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Price only rows that can be among the `top` shown; exact, per ranking group (with headroom, tight).

    A throughput bound per row (step_time_floor: first its cheap form for every row, then the full one for rows
    still in the running) orders the pricing: the most promising rows first, in growing rounds. After each round
    kth', the group's top-th best throughput priced so far, is <= the true top-th best kth, and bound_max >= the
    group's true best; a row whose bound is below kth' - 2·bound_max/2000 is slower than kth - 2·max/2000, below the
    two quantisation buckets top_rows keeps, so it ranks after at least `top` rows and is never priced. With a tie
    width (rank_by preference) every row that can be within `tie` of the group's tie reference
    (preference.tie_reference: the fastest row, or the fastest evidenced one) is priced too: the line is then no
    higher than the best evidenced row priced so far x exp(-tie), itself no higher than the true reference's (while
    no evidenced row is priced but one is left, no line; where none is left, the best row's). Rounds end once every
    row above that line is priced. The priced rows come back in table order (ties rank as they would unpruned), rows
    without a finite step time dropped."""
    bounds = _Bounds(problem, cols, by_zero)
    priced = np.zeros(len(tight), dtype=bool)
    plain = unpriced_features(problem, cols) == 0 if tie > 0 else np.zeros(len(tight), dtype=bool)
    picked: list[np.ndarray] = []
    mets: list[dict[str, np.ndarray]] = []
    for group in (~tight, tight):
        left = np.flatnonzero(group)  # rows not yet priced whose bound can still rank
        bound = bounds.of(left)  # (kept in step with `left` while no bound changes)
        margin = 2 * bound.max(initial=0.0) / 2000.0
        best, evidenced = np.zeros(0), np.zeros(0)
        size = max(SAMPLE, 4 * top)
        while len(left):
            if len(left) > size:  # the full bound for the most promising rows, then the best of them
                bounds.refine(_best(left, bound, 4 * size))
                bound = bounds.of(left)
            batch = _best(left, bound, size)
            met = evaluate(problem, take_rows(cols, batch))
            picked.append(batch)
            mets.append(met)
            best = np.concatenate([best, met["tokens_per_s_per_gpu"][_valid(met)]])
            evidenced = np.concatenate([evidenced, met["tokens_per_s_per_gpu"][_valid(met) & plain[batch]]])
            if len(batch) == len(left):
                break
            priced[batch] = True
            unpriced = ~priced[left]
            left, bound = left[unpriced], bound[unpriced]
            if len(best) >= top:
                kth = np.partition(best, len(best) - top)[len(best) - top]
                if tie > 0:  # the tie is measured from the fastest evidenced row (preference.tie_reference)
                    if len(evidenced):
                        kth = min(kth, evidenced.max() * np.exp(-tie))
                    elif plain[left].any():  # one may still come: it could be the slowest, so keep every row
                        kth = 0.0
                    else:
                        kth = min(kth, best.max() * np.exp(-tie))
                left = left[bound >= kth - margin]
                bounds.refine(left)
                bound = bounds.of(left)
                left, bound = left[bound >= kth - margin], bound[bound >= kth - margin]
            size *= 4
    if not picked:
        return {k: v for k, v in take_rows(cols, np.zeros(0, dtype=np.int64)).items() if k in KNOBS}, {}
    index = np.concatenate(picked)
    order = np.argsort(index)
    met = {k: np.concatenate([m[k] for m in mets]).take(order) for k in mets[0]}
    ok = np.flatnonzero(_valid(met))
    rows = take_rows(cols, index.take(order).take(ok))
    return {k: rows[k] for k in KNOBS}, {k: v.take(ok) for k, v in met.items()}


def _best(rows: np.ndarray, bound: np.ndarray, n: int) -> np.ndarray:
    return rows if len(rows) <= n else rows[np.argpartition(-bound, n - 1)[:n]]


class _Bounds:
    """Upper bounds on each row's throughput, kept per group of rows that differ only in ZeRO (the floor reads no
    ZeRO stage): step_time_floor's cheap form for all, the full form once a group is refined; less 1e-9 (the floor
    sums its terms in another order than evaluate); a row the floor cannot bound gets +inf, so it is priced."""

    def __init__(self, problem: Problem, cols: Mapping[str, np.ndarray],
                 by_zero: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """`by_zero`: row_groups(cols, ZERO_FREE_KNOBS), when already known."""
        self.problem = problem
        rep, self.index = by_zero or row_groups(cols, ZERO_FREE_KNOBS)[0]
        self.table = take_rows(cols, rep)
        self.bound = self._floor(self.table, communication=False)
        self.refined = np.zeros(len(self.bound), dtype=bool)

    def _floor(self, table: dict[str, np.ndarray], communication: bool) -> np.ndarray:
        # in slices, so that each slice's temporaries reuse the last one's memory (elementwise: the same bits)
        return np.concatenate([self._floor_slice({k: v[lo:lo + FLOOR_SLICE] for k, v in table.items()}, communication)
                               for lo in range(0, len(table["tp"]), FLOOR_SLICE)] or [np.zeros(0)])

    def _floor_slice(self, table: dict[str, np.ndarray], communication: bool) -> np.ndarray:
        floor = step_time_floor(self.problem, table, communication) * (1.0 - 1e-9)
        bound = compute.throughput_per_gpu(self.problem, floor)
        return np.where(np.isfinite(bound), bound, np.inf)

    def of(self, rows: np.ndarray) -> np.ndarray:
        return self.bound.take(self.index.take(rows))

    def refine(self, rows: np.ndarray) -> None:
        todo = np.zeros(len(self.bound), dtype=bool)
        todo[self.index.take(rows)] = True
        groups = np.flatnonzero(todo & ~self.refined)
        full = self._floor({k: v.take(groups) for k, v in self.table.items()}, communication=True)
        self.bound[groups] = np.minimum(self.bound[groups], full)
        self.refined[groups] = True


def _valid(met: dict[str, np.ndarray]) -> np.ndarray:
    return np.isfinite(met["step_time_s"]) & (met["step_time_s"] > 0)


def _least_recompute(parent: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    """Rows that are eligible and carry their sibling group's (one parent) least eligible recompute level: a parent's
    rows are adjacent and in increasing recompute (Enumeration.grouped_parts keeps the order of the last knob's values,
    checked in _fitting), so that is each parent's first eligible row."""
    rows = np.flatnonzero(eligible)
    owner = parent.take(rows)
    head = np.ones(len(rows), dtype=bool)
    head[1:] = owner[1:] != owner[:-1]
    out = np.zeros(len(eligible), dtype=bool)
    out[rows.take(np.flatnonzero(head))] = True
    return out


def price_layout(problem: Problem, layout: Layout) -> dict[str, float]:
    """The cost model for one layout (no rule checks)."""
    return {k: float(v[0]) for k, v in evaluate(problem, layout.columns()).items()}

