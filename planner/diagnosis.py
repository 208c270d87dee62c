"""When nothing is feasible: which constraints bind, and the smallest change that would help."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .cost.step import evaluate
from .cpsat import diagnose
from .errors import NoFeasiblePlan
from .problem import RECOMPUTE, Problem
from .search import search
from .space import enumerate_layouts


def _fits(problem: Problem) -> bool:
    try:
        search(problem, top=1)
    except NoFeasiblePlan:
        return False
    return True


def explain_infeasible(problem: Problem) -> dict:
    core = diagnose(problem)
    if not core.feasible:
        return {
            "binding": [r.name for r in core.core],
            "reasons": [f"{r.name}: {r.message} (fix: {r.fix})" for r in core.core],
            "suggestions": [r.fix for r in core.core],
        }
    # Every rule can hold; memory is what binds. Report the closest candidate and try single changes.
    enum = enumerate_layouts(problem)
    met = evaluate(problem, enum.cols)
    best = float(np.min(met["memory_peak_gib"])) if len(enum.cols["tp"]) else float("nan")
    cap = problem.cluster.gpu.memory_gib
    out = {
        "binding": ["memory_fits"],
        "reasons": [f"memory_fits: the leanest layout needs {best:.1f} GiB per GPU; the GPU has {cap:.0f} GiB"],
        "suggestions": [],
    }
    tried: list[tuple[str, Problem]] = []
    fixed = dict(problem.fixed)
    if fixed.get("recompute", RECOMPUTE.index("full")) != RECOMPUTE.index("full"):
        tried.append(("recompute=full (unpin recompute)", replace(problem, fixed={**fixed, "recompute": 2})))
    for key in ("zero", "mbs", "tp", "pp", "cp"):
        if key in fixed:
            rest = {k: v for k, v in fixed.items() if k != key}
            tried.append((f"leave {key} free (drop --fix {key})", replace(problem, fixed=rest)))
    if problem.training.precision == "bf16":
        tried.append(("--precision fp8", replace(problem, training=problem.training.model_copy(
            update={"precision": "fp8"}))))
    for factor in (2, 4, 8):
        cl = problem.cluster.model_copy(update={"num_gpus": problem.num_gpus * factor,
                                                "name": f"{problem.cluster.gpu.key}x{problem.num_gpus * factor}"})
        tried.append((f"{factor}x the GPUs ({cl.num_gpus})", replace(problem, cluster=cl)))
    if problem.training.seq_len >= 2048:
        half = problem.training.model_copy(update={"seq_len": problem.training.seq_len // 2})
        tried.append((f"--seq-len {half.seq_len}", replace(problem, training=half)))
    seen_gpu_fix = False
    for label, candidate in tried:
        if "the GPUs" in label and seen_gpu_fix:
            continue
        if _fits(candidate):
            out["suggestions"].append(label)
            seen_gpu_fix = seen_gpu_fix or "the GPUs" in label
    if not out["suggestions"]:
        out["suggestions"].append("a GPU with more memory, or a smaller model")
    return out
