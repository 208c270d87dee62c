"""What the ranking under uncertainty says about a plan: its band (planner.cost.bands) as the document stores it and
the text prints it, and why #1 was preferred to a faster-priced plan (planner.search.preference)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from planner.cost import bands
from planner.inputs.layout import Layout
from planner.inputs.problem import Problem
from planner.search.preference import deciding_criterion
from planner.search.search import SearchResult


def _sig(x: float) -> float:
    return float(f"{x:.4g}")


def band_dict(problem: Problem, layout: Layout, metrics: Mapping[str, float]) -> dict[str, Any]:
    """The plan document's `band`: [low, high] of step time, tokens/s per GPU and peak memory that the bands'
    coverage of published runs of the plan's regime landed in, the regime, its case count and any back-off."""
    tput, mem = bands.throughput_band(problem, layout.as_dict()), bands.memory_band(problem.training.framework)
    t_lo, t_hi = tput.ratio()
    s_lo, s_hi = tput.inverse()
    m_lo, m_hi = mem.ratio()
    return {
        "coverage": bands.table().coverage,
        "tokens_per_s_per_gpu": [_sig(metrics["tokens_per_s_per_gpu"] * t_lo),
                                 _sig(metrics["tokens_per_s_per_gpu"] * t_hi)],
        "step_time_s": [_sig(metrics["step_time_s"] * s_lo), _sig(metrics["step_time_s"] * s_hi)],
        "memory_peak_gib": [_sig(metrics["memory_peak_gib"] * m_lo), _sig(metrics["memory_peak_gib"] * m_hi)],
        "regime": tput.regime, "cases": tput.cases, "memory_regime": mem.regime, "memory_cases": mem.cases,
        "notes": [*tput.notes, *mem.notes],
    }


def relative_text(problem: Problem, layout: Layout) -> str:
    """The throughput band as the table's column prints it: '-4/+27%'."""
    lo, hi = bands.throughput_band(problem, layout.as_dict()).ratio()
    return f"{100 * (lo - 1):+.0f}/{100 * (hi - 1):+.0f}%"


def band_line(problem: Problem, layout: Layout, metrics: Mapping[str, float]) -> str:
    """One line: #1's throughput band, its regime and the coverage."""
    b = bands.throughput_band(problem, layout.as_dict())
    lo, hi = (metrics["tokens_per_s_per_gpu"] * r for r in b.ratio())
    notes = f"; {'; '.join(b.notes)}" if b.notes else ""
    return (f"band: #1 {lo:,.0f}-{hi:,.0f} tok/s/GPU, where {bands.table().coverage:.0%} of published runs of its "
            f"regime landed ({b.regime}{notes})")


def why_first(result: SearchResult, short: Any) -> str | None:
    """Why #1 was ranked above the fastest-priced plan, in one line (None when #1 is the fastest). `short` writes a
    layout compactly (planner.report.table.compact_layout's text)."""
    fastest = result.fastest
    if fastest is None or not result.plans:
        return None
    first = result.plans[0]
    behind = first.metrics["step_time_s"] / fastest.metrics["step_time_s"] - 1
    where = f"#{result.fastest_rank}" if result.fastest_rank else "not shown"
    crit = deciding_criterion(result.problem, first.layout, first.metrics["memory_peak_gib"], fastest.layout,
                              fastest.metrics["memory_peak_gib"])
    reason = f"preferred for {crit.prefers}" if crit else "preferred for a simpler layout"
    unpriced = _wide_used(result.problem, fastest.layout, first.layout)
    if crit is not None and crit.name == "wide":
        reason += f" (the fastest uses {', '.join(unpriced)})"
    if math.log1p(behind) > result.tie_width + 1e-9 and unpriced:  # outside the tie: see preference.tie_reference
        return (f"why #1: priced {behind:.1%} slower than the fastest, {short(fastest.layout)} ({where}), whose "
                f"{', '.join(unpriced)} no published run prices, so the tie is measured from the fastest layout "
                f"without such a feature: #1 is inside the {math.expm1(result.tie_width):.1%} the model cannot tell "
                f"apart from it; {reason}")
    return (f"why #1: priced {behind:.1%} slower than the fastest, {short(fastest.layout)} ({where}), inside the "
            f"{math.expm1(result.tie_width):.1%} the model cannot tell apart; {reason}")


def _wide_used(problem: Problem, fastest: Layout, first: Layout) -> list[str]:
    """The features without published cases that `fastest` uses and `first` does not."""
    tr = problem.training
    sharded = bands.shards_experts_as_feature(tr.framework, problem.model.is_moe)
    wide = bands.wide_features(tr.framework)

    def used(layout: Layout) -> set[str]:
        return {f for f in bands.layout_features(layout.as_dict(), tr.precision, sharded) if f in wide}

    return sorted(used(fastest) - used(first))
