"""When nothing is feasible: which constraints bind, and the smallest change that would help."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from planner.cost.fit_check import grouped_memory_peak_gib
from planner.cost.step import ACTIVATION_FREE_KNOBS, STATE_FREE_KNOBS
from planner.inputs.catalog import gpu_catalog, load_gpu
from planner.inputs.frameworks import Capabilities, capabilities_for, precision_refusal
from planner.inputs.layout import Recompute
from planner.inputs.problem import Problem
from planner.search.core import shape_conflict
from planner.search.rules import Rule
from planner.search.search import has_plan
from planner.search.space import enumerate_layouts

BATCH_RULES = {"global_batch_divisible", "interleaved_microbatches", "dualpipe_shape"}  # rules that read the batch


def _fits(problem: Problem) -> bool:
    return has_plan(problem)  # (search(problem) finds a plan; without ranking it)


# Capability rules whose fix would name a knob the framework has no value for at all (DeepSpeed's ds_config has no CP,
# TP/PP/EP or recompute): suggesting them sends the user in a loop, so they become one "other framework" hint.
_NO_SUCH_KNOB = {
    "framework_context_parallel": ("context parallelism", lambda c: not c.cp_comm),
    "framework_model_parallel": ("tensor/pipeline/expert parallelism",
                                 lambda c: not (c.tensor_parallel or c.pipeline_parallel or c.expert_parallel)),
    "framework_recompute": ("activation recomputation", lambda c: c.recompute == (Recompute.NONE,)),
}


def _conflict_core(problem: Problem) -> list[Rule] | None:
    """The rules that conflict: on the shape knobs first (planner.search.core: numpy, milliseconds), else from the
    whole CP-SAT model; None where every rule can hold together."""
    core = shape_conflict(problem)
    if core is not None:
        return core
    from planner.search.cpsat import diagnose  # (ortools loads only here: no conflict among the shape rules)

    found = diagnose(problem)
    return None if found.feasible else found.core  # [] when undecided within the time limit


def _nearest(problem: Problem, core: list[Rule]) -> list[tuple[str, str]]:
    """(suggestion, what to type) for the nearest batch and the most GPUs with a plan, where the conflict is theirs."""
    from planner.search.nearest import nearest_batch, nearest_count

    names = {r.name for r in core}
    out = []
    if names & BATCH_RULES:
        batch = nearest_batch(problem)
        if batch is not None:
            out.append((f"--global-batch {batch} (the nearest batch with a plan)", f"--global-batch {batch}"))
    if "world_size" in names and "dp" not in problem.fixed:
        count = nearest_count(problem)
        if count is not None:
            cluster = f"{problem.cluster.gpu.key}x{count}"
            out.append((f"{count:,} of the {problem.num_gpus:,} GPUs (--cluster {cluster}: the most with a plan)",
                        f"--cluster {cluster}"))
    return out


def _rules_conflict(problem: Problem) -> dict | None:
    """The binding rules and their fixes when no layout satisfies every rule, else None; with the nearest problems
    that have a plan (planner.search.nearest)."""
    core = _conflict_core(problem)
    if core is None:
        return None
    caps = capabilities_for(problem.training.framework)
    absent = [r for r in core if r.name in _NO_SUCH_KNOB and _NO_SUCH_KNOB[r.name][1](caps)]
    suggestions = [r.fix for r in core if r not in absent]
    if absent:
        what = " or ".join(_NO_SUCH_KNOB[r.name][0] for r in absent)
        suggestions.append(f"{caps.name} runs no {what}; for those plan with --format megatron or torchtitan")
    near = _nearest(problem, core) if core else []
    undecided = [] if core else ["which rules conflict was not found within the time limit (plan explain --layout "
                                 "names the rules a layout breaks)"]
    return {
        "binding": [r.name for r in core],
        "reasons": [f"{r.name}: {r.message}" + ("" if r in absent else f" (fix: {r.fix})") for r in core] + undecided,
        "suggestions": suggestions + [text for text, _ in near],
        "nearest": [typed for _, typed in near],
    }


def _other_stacks(problem: Problem, caps: Capabilities) -> list[tuple[str, None]]:
    """Where the framework itself is what binds (a ds_config switches on no recomputation and no model
    parallelism): the launchers whose stacks have the missing knobs and fit the problem, as one checked suggestion."""
    lacks = [what for what, missing in (("activation recomputation", Recompute.FULL not in caps.recompute),
                                        ("tensor parallelism", not caps.tensor_parallel),
                                        ("pipeline parallelism", not caps.pipeline_parallel)) if missing]
    if not lacks:
        return []
    fits = [f"--format {fmt}" for fmt, stack in (("megatron", "megatron-core"), ("torchtitan", "torchtitan"))
            if stack != problem.training.framework and _fits(replace(problem, training=problem.training.model_copy(
                update={"framework": stack})))]
    if not fits:
        return []
    return [(f"{' or '.join(fits)} ({caps.name} runs no {', '.join(lacks)})", None)]


def _optimizer_states(problem: Problem, caps: Capabilities) -> list[tuple[str, Problem]]:
    """Leaner optimizer states the framework can keep: bf16 Adam moments (Megatron-Core's precision-aware optimizer;
    no slower), then the whole optimizer in CPU memory (its step and copies go over the host link), then the ZeRO-3
    parameters as well where the framework offloads them."""
    tr, out = problem.training, []
    if tr.optimizer_moments == "fp32" and caps.bf16_moments:
        out.append(("--optimizer-moments bf16", replace(problem, training=tr.model_copy(
            update={"optimizer_moments": "bf16"}))))
    if tr.optimizer_offload < 1.0 and caps.optimizer_offload in ("fraction", "all"):
        out.append(("--optimizer-offload 1", replace(problem, training=tr.model_copy(
            update={"optimizer_offload": 1.0}))))
    if not tr.param_offload and caps.param_offload:  # ZeRO-3 partitions in host memory (DeepSpeed offload_param)
        out.append(("--param-offload --optimizer-offload 1", replace(problem, training=tr.model_copy(
            update={"param_offload": True, "optimizer_offload": 1.0 if caps.optimizer_offload != "none" else 0.0}))))
    return out


def explain_infeasible(problem: Problem) -> dict:
    enum = enumerate_layouts(problem, lazy_last=True)
    parts = [groups for parent, _, groups in enum.grouped_parts(200_000, STATE_FREE_KNOBS, ACTIVATION_FREE_KNOBS)
             if len(parent)]
    conflict = _rules_conflict(problem) if not parts else None
    if conflict is not None:
        return conflict
    # Every rule can hold; memory is what binds. Report the leanest candidate and try single changes.
    best = float("nan")
    for by_state, by_act in parts:
        low = float(np.min(grouped_memory_peak_gib(problem, by_state, by_act)))
        best = low if best != best else min(best, low)
    cap = problem.cluster.gpu.memory_gib
    out = {
        "binding": ["memory_fits"],
        "reasons": [f"memory_fits: the leanest layout needs {best:.1f} GiB per GPU; the GPU has {cap:.0f} GiB"],
        "suggestions": [],
    }
    tried: list[tuple[str, Problem]] = []
    fixed = dict(problem.fixed)
    # Only knobs the framework runs: suggesting recompute or cp to a ds_config plan would send the user in a loop.
    caps = capabilities_for(problem.training.framework)
    if fixed.get("recompute", Recompute.FULL) != Recompute.FULL and Recompute.FULL in caps.recompute:
        unpinned = replace(problem, fixed={**fixed, "recompute": Recompute.FULL})
        tried.append(("recompute=full (unpin recompute)", unpinned))
    runs = {"tp": caps.tensor_parallel, "pp": caps.pipeline_parallel, "cp": bool(caps.cp_comm)}
    for key in ("zero", "mbs", "tp", "pp", "cp"):
        if key in fixed and runs.get(key, True):
            rest = {k: v for k, v in fixed.items() if k != key}
            tried.append((f"leave {key} free (drop --fix {key})", replace(problem, fixed=rest)))
    if problem.training.precision == "bf16" and not precision_refusal(problem.training.framework, "fp8",
                                                                       problem.model.is_moe):
        tried.append(("--precision fp8", replace(problem, training=problem.training.model_copy(
            update={"precision": "fp8"}))))
    tried += _optimizer_states(problem, caps)
    for factor in (2, 4, 8):
        cl = problem.cluster.model_copy(update={"num_gpus": problem.num_gpus * factor,
                                                "name": f"{problem.cluster.gpu.key}x{problem.num_gpus * factor}"})
        tried.append((f"{factor}x the GPUs ({cl.num_gpus})", replace(problem, cluster=cl)))
    if problem.training.seq_len >= 2048:
        half = problem.training.model_copy(update={"seq_len": problem.training.seq_len // 2})
        tried.append((f"--seq-len {half.seq_len}", replace(problem, training=half)))
    tried += _other_stacks(problem, caps)
    bigger = sorted(((g["memory_gib"], key) for key, g in gpu_catalog().items()
                     if g["memory_gib"] > problem.cluster.gpu.memory_gib), key=lambda x: (x[0], x[1]))
    for mem, key in bigger:
        gpu = load_gpu(key, "diagnosis")
        cl = problem.cluster.model_copy(update={"gpu": gpu, "name": f"{key}x{problem.num_gpus}"})
        if _fits(replace(problem, cluster=cl)):
            tried.append((f"GPUs with more memory: {key} ({mem:g} GiB) x {problem.num_gpus}", None))
            break
    seen_gpu_fix = False
    for label, candidate in tried:
        if candidate is None:  # already checked
            out["suggestions"].append(label)
            continue
        if "the GPUs" in label and seen_gpu_fix:
            continue
        if _fits(candidate):
            out["suggestions"].append(label)
            seen_gpu_fix = seen_gpu_fix or "the GPUs" in label
    out["nearest"] = out["suggestions"][:1]  # each was checked to have a plan; the list runs from the least change
    if not out["suggestions"]:
        out["suggestions"].append("a GPU with more memory, or a smaller model")
    return out
