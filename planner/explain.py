"""`plan explain`: one layout in full, the rules it breaks, and its prediction even when it does not fit."""

from __future__ import annotations

from typing import Any

import numpy as np

from .document import breakdown_dict, layout_dict, metrics_dict
from .problem import SCHEDULES, Problem
from .rules import MEMORY_RULE, RULES
from .search import price_layout


def complete_layout(problem: Problem, given: dict[str, int]) -> dict[str, int]:
    """Fill the knobs a user left out with the defaults documented in README (dp from the GPU count)."""
    lay = dict(given)
    lay.setdefault("tp", 1)
    lay.setdefault("pp", 1)
    lay.setdefault("cp", 1)
    lay.setdefault("ep", 1)
    lay.setdefault("vpp", 1)
    lay.setdefault("mbs", 1)
    lay.setdefault("zero", 1 if problem.num_gpus > lay["tp"] * lay["pp"] else 0)
    lay.setdefault("recompute", 0)
    lay.setdefault("sp", 1 if lay["tp"] > 1 else 0)
    lay.setdefault("schedule", SCHEDULES.index("interleaved") if lay["vpp"] > 1 else 0)
    lay.setdefault("cp_comm", 0)
    if "dp" not in lay:
        denom = lay["tp"] * lay["pp"] * lay["cp"]
        lay["dp"] = max(problem.num_gpus // denom, 1)
    return lay


def explain(problem: Problem, given: dict[str, int]) -> dict[str, Any]:
    lay = complete_layout(problem, given)
    cols = {k: np.array([v], dtype=np.int64) for k, v in lay.items()}
    broken = [r for r in RULES if not bool(r.check(cols, problem)[0])]
    metrics = price_layout(problem, lay)
    cap = problem.cluster.gpu.memory_gib
    if metrics["memory_peak_gib"] > cap:
        broken.append(MEMORY_RULE)
    return {
        "layout": layout_dict(lay, metrics, problem.model.num_hidden_layers, problem.cluster.nvlink_domain),
        "feasible": not broken,
        "broken_rules": [{"rule": r.name, "message": r.message, "fix": r.fix, "source": r.source} for r in broken],
        "metrics": metrics_dict(metrics, cap),
        "breakdown": breakdown_dict(metrics),
        "stages": {
            "first": {"memory_gib": round(metrics["mem_first_stage_gib"], 3)},
            "last": {"memory_gib": round(metrics["mem_last_stage_gib"], 3)},
        },
    }
