"""An OSDP decision (planner.strategies.osdp) as text for `plan explain --osdp`."""

from __future__ import annotations

import math
from collections.abc import Sequence

from planner.strategies.osdp import ItemDecision, OsdpPlan


def _runs(decisions: Sequence[ItemDecision]) -> list[tuple[str, str]]:
    """Group consecutive layers with the same decision: [("layers 0-17", "replicated"), ...]."""
    out: list[tuple[str, str]] = []
    start = None
    for i, d in enumerate(decisions):
        nxt = decisions[i + 1] if i + 1 < len(decisions) else None
        is_layer = d.name.startswith("layer ")
        if is_layer and start is None:
            start = d.name.split()[1]
        same_next = nxt is not None and is_layer and nxt.name.startswith("layer ") and nxt.label == d.label
        if is_layer and same_next:
            continue
        if is_layer:
            end = d.name.split()[1]
            out.append((f"layers {start}-{end}" if start != end else f"layer {start}", d.label))
            start = None
        else:
            out.append((d.name, d.label))
    return out


def render_osdp(plan: OsdpPlan) -> str:
    lay = plan.layout
    lines = [f"OSDP (Jiang et al., IJCAI 2023) for tp{lay.tp} dp{lay.dp} mbs{lay.mbs} "
             f"recompute={lay.recompute.label}, budget {plan.capacity_gib:g} GiB per GPU"]
    for u in (plan.zero1, plan.zero3):
        fit = "fits" if u.fits else "does not fit"
        lines.append(f"  {u.name:<24} step {u.step_time_s:8.3f} s  memory {u.memory_gib:7.2f} GiB  ({fit}; "
                     f"cost model {u.cost_model_step_s:.3f} s, {u.cost_model_memory_gib:.2f} GiB)")
    lines.append(f"  {'OSDP':<24} step {plan.step_time_s:8.3f} s  memory {plan.memory_gib:7.2f} GiB  "
                 f"(gathers exposed {plan.exposed_gather_s:.3f} s, DP reduce exposed {plan.dp_exposed_s:.3f} s"
                 f"{'' if plan.optimal else '; time limit hit, not proven optimal'})")
    if math.isinf(plan.speedup_vs_best_uniform):
        lines.append("  neither uniform strategy fits; OSDP does")
    else:
        lines.append(f"  speedup vs best uniform that fits: {plan.speedup_vs_best_uniform:.3f}x")
    fracs = [d.sharded_fraction for d in plan.decisions if d.name.startswith("layer ")]
    lines.append(f"  layers: {sum(f >= 1 for f in fracs)} sharded, {sum(0 < f < 1 for f in fracs)} partly sharded, "
                 f"{sum(f == 0 for f in fracs)} replicated")
    for where, label in _runs(plan.decisions):
        lines.append(f"    {where:<28} {label}")
    return "\n".join(lines)
