"""Search: enumerate every layout the rules allow, price them all with the cost model, keep the best.

The enumeration is exhaustive, so the top plan is proven best under the cost model unless `time_limit_s` stopped the
pricing early (then `proven_best` is False and the report says so).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from planner.cost.sharding import state_memory_floor_gib
from planner.cost.step import evaluate, memory_peak_gib
from planner.errors import NoFeasiblePlan
from planner.inputs.layout import KNOBS, ExpertTp
from planner.inputs.problem import Problem
from planner.search.rules import MEMORY_RULE, RECOMPUTE_DOMINANCE
from planner.search.space import enumerate_layouts

PRICED_METRICS = ("step_time_s", "tokens_per_s_per_gpu", "mfu", "memory_peak_gib")
CHUNK = 200_000  # candidates priced per vectorised batch (bounded memory on huge spaces)
# Ties (within 0.05%) prefer the simpler layout: less model parallelism, less recompute, lower ZeRO stage.
_SIMPLICITY = ("cp", "pp", "vpp", "tp", "ep", "recompute", "zero", "sp", "schedule", "mbs")


@dataclass
class Plan:
    layout: dict[str, int]
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


def capacity_gib(problem: Problem) -> float:
    return problem.cluster.gpu.memory_gib


def is_tight(problem: Problem, memory_peak_gib: np.ndarray | float) -> np.ndarray | bool:
    """Fits the GPU but leaves less than the problem's memory headroom free."""
    return memory_peak_gib > capacity_gib(problem) * (1.0 - problem.memory_headroom)


def _rank_order(cols: dict[str, np.ndarray], tput: np.ndarray) -> np.ndarray:
    # Quantise throughput so that numerically equal plans tie, then break ties by simplicity, deterministically.
    key_tput = -np.round(tput / np.maximum(tput.max(), 1e-30) * 2000.0)
    keys = [cols[k] for k in reversed(_SIMPLICITY)] + [key_tput]
    return np.lexsort(keys)


def search(problem: Problem, top: int = 5, time_limit_s: float | None = None,
           keep_priced: bool = False) -> SearchResult:
    """Rank every rule-feasible layout that fits; `keep_priced` also returns all of them (SearchResult.priced)."""
    start = time.perf_counter()
    enum = enumerate_layouts(problem)
    pruned = dict(enum.pruned)
    pruned[MEMORY_RULE.name] = 0
    # `keep_priced` shows the memory/throughput trade-off, where more recompute is the leaner point: keep every one
    deadline = None if time_limit_s is None else start + time_limit_s
    cols, fitting, proven = _fitting(problem, enum.cols, pruned, dominate=not keep_priced, deadline=deadline)
    n = len(cols["tp"])
    kept_cols: list[dict[str, np.ndarray]] = []
    kept_metrics: list[dict[str, np.ndarray]] = []
    for lo in range(0, n, CHUNK):
        if deadline is not None and (lo or not proven) and time.perf_counter() > deadline and kept_cols:
            proven = False
            break
        part = {k: v[lo:lo + CHUNK] for k, v in cols.items()}
        met = evaluate(problem, part)
        ok = np.isfinite(met["step_time_s"]) & (met["step_time_s"] > 0)
        kept_cols.append({k: v[ok] for k, v in part.items()})
        kept_metrics.append({k: v[ok] for k, v in met.items()})
    all_cols = {k: np.concatenate([c[k] for c in kept_cols]) if kept_cols else np.array([], int) for k in KNOBS}
    all_met = {k: np.concatenate([m[k] for m in kept_metrics]) for k in kept_metrics[0]} if kept_metrics else {}
    feasible = fitting if proven else len(all_cols["tp"])
    if len(all_cols["tp"]) == 0:
        raise NoFeasiblePlan("no layout satisfies every rule", {"pruned": pruned, "candidates": enum.candidates})
    tput = all_met["tokens_per_s_per_gpu"]
    # plans without headroom rank after every plan with room: they are priced, not trusted
    tight = np.asarray(is_tight(problem, all_met["memory_peak_gib"]), dtype=bool)
    order = np.concatenate([_top_rows(np.flatnonzero(group), all_cols, tput, top) for group in (~tight, tight)])[:top]
    plans = [Plan({k: int(all_cols[k][i]) for k in KNOBS}, {k: float(v[i]) for k, v in all_met.items()})
             for i in order]
    priced = {**all_cols, **{k: all_met[k] for k in PRICED_METRICS}} if keep_priced else None
    return SearchResult(problem, plans, enum.candidates, feasible, pruned, time.perf_counter() - start, proven,
                        priced=priced)


def _fitting(problem: Problem, cols: dict[str, np.ndarray], pruned: dict[str, int], dominate: bool = True,
             deadline: float | None = None) -> tuple[dict[str, np.ndarray], int, bool]:
    """The rows worth pricing in full, and how many fit: a cheap state floor, then the memory model alone; among
    layouts that differ only in recompute (adjacent rows: recompute is enumerated last), only the least recompute
    that fits and the least that fits with headroom can rank (RECOMPUTE_DOMINANCE). Past `deadline` the rows not
    yet checked are dropped and the answer is not proven best."""
    cap = capacity_gib(problem)
    keep = np.ones(len(cols["tp"]), dtype=bool)
    tight = np.zeros(len(cols["tp"]), dtype=bool)
    proven = True
    if problem.enforce_memory:
        for lo in range(0, len(keep), CHUNK):
            if deadline is not None and lo and time.perf_counter() > deadline:
                keep[lo:], proven = False, False
                break
            part = {k: v[lo:lo + CHUNK] for k, v in cols.items()}
            ok = state_memory_floor_gib(problem, part) <= cap  # model states alone already too big
            sub = {k: v[ok] for k, v in part.items()}
            peak = memory_peak_gib(problem, sub) if ok.any() else np.zeros(0)
            fits = np.zeros(len(ok), dtype=bool)
            fits[ok] = peak <= cap
            keep[lo:lo + CHUNK] = fits
            tight_part = np.zeros(len(ok), dtype=bool)
            tight_part[ok] = np.asarray(is_tight(problem, peak), dtype=bool)
            tight[lo:lo + CHUNK] = tight_part
        pruned[MEMORY_RULE.name] += int((~keep).sum())  # (rows left unchecked by the deadline too)
    fitting = int(keep.sum())
    if dominate and "recompute" not in problem.fixed and fitting:
        best = _least_recompute(cols, keep) | _least_recompute(cols, keep & ~tight)
        pruned[RECOMPUTE_DOMINANCE.name] = int((keep & ~best).sum())
        keep &= best
        fitting = int(keep.sum())  # candidates = feasible + pruned: a dominated layout is counted as pruned
    return {k: v[keep] for k, v in cols.items()}, fitting, proven


def _least_recompute(cols: dict[str, np.ndarray], eligible: np.ndarray) -> np.ndarray:
    """Rows that are eligible and carry their sibling group's least eligible recompute level."""
    others = [cols[k] for k in KNOBS if k != "recompute"]
    n = len(eligible)
    start = np.ones(n, dtype=bool)
    for col in others:
        start[1:] &= col[1:] == col[:-1]
    start = ~start
    start[0] = True
    group = np.cumsum(start) - 1
    level = np.where(eligible, cols["recompute"], np.iinfo(np.int32).max).astype(np.int64)
    least = np.minimum.reduceat(level, np.flatnonzero(start))
    return eligible & (level == least[group])


def _top_rows(rows: np.ndarray, cols: dict[str, np.ndarray], tput: np.ndarray, top: int) -> np.ndarray:
    """The best `top` of `rows` by throughput (ties by simplicity); only rows near the top can tie, so a large
    set ranks those, not a million."""
    if len(rows) > 20 * top:
        t = tput[rows]
        kth = np.partition(t, len(rows) - top)[len(rows) - top]
        rows = rows[t >= kth - 2 * t.max() / 2000.0]  # two quantisation buckets of margin
    if len(rows) == 0:
        return rows
    return rows[_rank_order({k: v[rows] for k, v in cols.items()}, tput[rows])[:top]]


def price_layout(problem: Problem, layout: dict[str, int]) -> dict[str, float]:
    """The cost model for one fully specified layout (no rule checks). A layout without `etp` (written before the
    knob existed) gets Megatron's default, tp, or 1 where ep does not divide dp x cp."""
    if "etp" not in layout:
        fits = (layout["dp"] * layout["cp"]) % max(layout["ep"], 1) == 0
        layout = {**layout, "etp": int(ExpertTp.TP if fits else ExpertTp.ONE)}
    cols = {k: np.array([layout[k]], dtype=np.int64) for k in KNOBS}
    return {k: float(v[0]) for k, v in evaluate(problem, cols).items()}

