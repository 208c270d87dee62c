"""Which network tiers each parallel group of one layout spans: what the table, explain, the report and the plan
document show as the layout's placement. The same geometry the collectives are priced with (planner.cost.groups
Placement, planner.cost.fabric.spans), for one layout."""

from __future__ import annotations

import numpy as np

from planner.cost.fabric import levels, spans
from planner.cost.groups import Placement, expert_tp
from planner.inputs.layout import Layout
from planner.inputs.problem import Problem


def group_spans(problem: Problem, layout: Layout) -> dict[str, tuple[int, ...]]:
    """For each parallel dimension of more than one rank (tp, cp, ep, pp, dp, in that order): its members per domain
    of each tier, innermost first (the last is the group's size). dp is the data-parallel group alone (the
    gradient reduction runs over dp x cp, whose span is both's)."""
    c = layout.columns()
    lv = levels(problem.cluster)
    etp = expert_tp(c)
    place = Placement(c, float(problem.num_gpus), etp)
    tp, pp, dp, cp, ep = (c[k].astype(float) for k in ("tp", "pp", "dp", "cp", "ep"))
    one = np.ones(1)
    dp_stride = tp * cp if place.dp_outer is None else np.where(place.dp_outer, tp * cp * pp, tp * cp)
    groups = {"tp": (tp, one), "cp": (cp, tp), "ep": (ep, etp), "pp": (pp, place.pp_stride), "dp": (dp, dp_stride)}
    return {name: tuple(int(g[0]) for g in spans(size, stride, lv))
            for name, (size, stride) in groups.items() if size[0] > 1}


def placement_dict(problem: Problem, layout: Layout) -> dict[str, dict[str, object]]:
    """Per parallel dimension: the innermost tier whose one domain holds the whole group (`within`) and its members
    per domain of each tier up to there (`per_domain`)."""
    names = levels(problem.cluster).names
    out: dict[str, dict[str, object]] = {}
    for dim, g in group_spans(problem, layout).items():
        size = g[-1]
        inner = next(i for i, members in enumerate(g) if members >= size)
        out[dim] = {"within": names[inner], "per_domain": dict(zip(names[:inner + 1], g[:inner + 1], strict=True))}
    return out


def placement_text(problem: Problem, layout: Layout) -> str:
    """'order tp-cp-ep-pp-dp: tp 8 in one nvlink; pp 16 in one pod (2 per rack); dp 128 across cluster (24 per
    pod)': where each group sits, in words."""
    parts = []
    for dim, info in placement_dict(problem, layout).items():
        per = list(info["per_domain"].items())  # type: ignore[union-attr]
        size = per[-1][1]
        inside = [f"{n} per {tier}" for tier, n in per[:-1] if 1 < n < size]
        last = per[-1][0]
        where = f"in one {last}" if len(per) == 1 or last != levels(problem.cluster).names[-1] else f"across {last}"
        parts.append(f"{dim} {size} {where}" + (f" ({', '.join(inside[-2:])})" if inside else ""))
    return f"order {layout.order.label}: " + ("; ".join(parts) if parts else "one GPU")
