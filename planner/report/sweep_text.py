"""`plan sweep` for humans: one row per (GPU kind, count) that fits the terminal, the frontier starred, a legend."""

from __future__ import annotations

from rich.console import Console

from planner.report.sweep import SweepPoint, SweepSpec, frontier_axis
from planner.report.table import compact_layout, fitted_table, legend


def _amount(x: float) -> str:
    """1234567 -> '1.23M': GPU-hours and dollars of a training run span 1e3..1e9."""
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:.3g}"


def _row(p: SweepPoint) -> dict[str, str]:
    mark = "*" if p.frontier else " "
    if p.layout is None or p.metrics is None or p.days is None or p.gpu_hours is None:
        return {"cluster": f"{mark}{p.cluster}", "layout": "none fits: " + (", ".join(p.binding) or "see JSON")}
    return {
        "cluster": f"{mark}{p.cluster}", "layout": compact_layout(p.layout)[0], "days": f"{p.days:.1f}",
        "goodput": "-" if p.goodput is None else f"{p.goodput['goodput']:.1%}",
        "no-fail d": "-" if p.days_without_failures is None else f"{p.days_without_failures:.1f}",
        "GPU-h": _amount(p.gpu_hours), "cost": "-" if p.cost_usd is None else "$" + _amount(p.cost_usd),
        "MFU": f"{p.metrics['mfu']:.1%}", "step s": f"{p.metrics['step_time_s']:.2f}", "batch": str(p.global_batch),
        "tok/s/GPU": f"{p.metrics['tokens_per_s_per_gpu']:,.0f}",
    }


def render_sweep(spec: SweepSpec, points: list[SweepPoint], console: Console) -> None:
    """Header, table (cluster, layout, days, goodput, GPU-hours[, cost]; days without failures, MFU, step, batch,
    tok/s/GPU as width allows), legend."""
    m = spec.model
    console.print(f"[bold]sweep[/]    {m.name}, {spec.train_tokens / 1e12:g}T tokens, seq_len {spec.seq_len}, "
                  f"~{spec.tokens_per_batch / 1e6:.3g}M tokens/batch, {spec.precision}, {spec.framework}")
    priced = any(p.cost_usd is not None for p in points)
    if spec.prices:
        console.print("[bold]prices[/]   " + ", ".join(f"{k} ${v:g}/GPU-hour" for k, v in sorted(spec.prices.items())))
    rows = [_row(p) for p in points]
    heads = ["cluster", "layout", "days", "GPU-h"] + (["cost"] if priced else [])
    optional = ["goodput", "no-fail d", "MFU", "step s", "batch", "tok/s/GPU"]
    columns = [(h, "left" if h in ("cluster", "layout") else "right", [r.get(h, "") for r in rows])
               for h in heads + optional]
    console.print(fitted_table(columns, optional=len(optional), width=console.width))
    used = set().union(*(compact_layout(p.layout)[1] for p in points if p.layout is not None))
    axis = "dollars" if frontier_axis(points) == "cost_usd" else "GPU-hours"
    console.print(f"* frontier: no other point trains in fewer days for fewer {axis}", highlight=False)
    kept = [f"{p.cluster} {p.goodput['goodput']:.1%}" for p in points if p.goodput is not None]
    if kept:
        console.print("goodput (days, GPU-h and cost are the steps' time / goodput; no-fail d = days if nothing "
                      "failed): " + ", ".join(kept), highlight=False)
    if used:
        console.print(legend(used), style="dim", highlight=False)
