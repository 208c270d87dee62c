"""`plan validate`: score the cost model against measured, published training runs.

For each case every knob the source states is pinned and the rest is searched (a published run is a tuned run); the
best plan's prediction is compared with the measurement. Nothing here is tuned per case.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from planner.cost.bands import tie_width
from planner.cost.profiles import MEMORY_METRIC, profile_for
from planner.errors import NoFeasiblePlan, PlanInputError
from planner.evidence.band_fit import case_regime
from planner.evidence.cases import (
    case_framework,
    case_precision,
    case_problem,
    case_token_drop,
    default_cases_path,
    load_cases,
)
from planner.evidence.recipes import (
    apply_knobs,
    case_knobs,
    codebase_schedules,
    default_recipes_path,
    knob_summary,
    load_recipes,
    recipe_entry,
    recipe_stack,
)
from planner.inputs.problem import Problem
from planner.report.document import layout_dict, sig
from planner.search.preference import CRITERIA, criteria_columns
from planner.search.search import search

# Published peak memory comes from the framework's own log, and stacks log different figures (Megatron: peak
# allocated; torchtitan, NeMo 2: peak reserved): the prediction compared is the one the case's framework profile says
# it prints (FrameworkProfile.memory_reported), or the one the case names (`measured.memory_figure`, or the knob
# file's `memory_figure` for the run, with its source) where its log line is not its priced profile's, never the
# device total the fit check uses.


def memory_figure(case: dict[str, Any], framework: str, entry: dict[str, Any] | None = None) -> str:
    """Which printed memory figure a case's measured memory is: `measured.memory_figure`, else the knob file's
    `memory_figure` for that run, else its profile's."""
    named = (case.get("measured") or {}).get("memory_figure")
    if named is None and isinstance((entry or {}).get("memory_figure"), dict):
        named = entry["memory_figure"].get("value")
    if named is None:
        return profile_for(framework).memory_reported
    if named not in MEMORY_METRIC:
        raise PlanInputError(f"'{named}' is not a memory figure", field="measured.memory_figure",
                             source=str(case.get("id", "?")), fix=f"use one of {', '.join(MEMORY_METRIC)}")
    return str(named)


def _ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas


# Step time and tokens/s/GPU, when a case gives both, must describe the same step: tokens/s/GPU x GPUs x step time
# = global batch x sequence length. Published tables derive one from the other, so a gap above this share means the
# case misstates one of them (the batch, the GPU count or a figure) and no prediction can be scored against it.
CONSISTENCY_TOLERANCE = 0.10


def measurement_conflict(case: dict[str, Any], problem: Problem) -> str | None:
    """Why the case's measured figures contradict its own batch, or None when they agree (or cannot be compared)."""
    meas, tr = case.get("measured") or {}, problem.training
    tps, step = meas.get("tokens_per_s_per_gpu"), meas.get("step_time_s")
    if not (isinstance(tps, int | float) and isinstance(step, int | float) and tps > 0 and step > 0):
        return None
    sequences = tps * problem.num_gpus * step / tr.seq_len
    if abs(sequences / tr.global_batch - 1) <= CONSISTENCY_TOLERANCE:
        return None
    return (f"measured figures disagree: tokens/s/GPU x GPUs x step time = {sequences:,.0f} sequences per step, "
            f"training.global_batch = {tr.global_batch:,}")


def _search_case(problem: Problem, bare: Problem, applied: tuple[str, ...],
                 knobs: dict[str, dict[str, Any]]) -> tuple[Any, str | None] | str:
    """The best plan of a case priced with what its run ran, and a note where it was priced otherwise (over memory,
    or without run knobs that break a rule of the stated layout); a reason string when no layout is left."""
    for prob, note in ((problem, None), (replace(problem, enforce_memory=False),
                                         "predicted to exceed GPU memory; priced anyway")):
        try:
            # by price alone: the residuals this case gives must not depend on the band file they are fitted into
            return search(prob, top=1, rank_by="time"), note
        except NoFeasiblePlan:
            pass
    from planner.search.cpsat import diagnose

    names = ", ".join(r.name for r in diagnose(problem).core) or "memory"
    if applied:  # the run's knobs break a rule of this layout as the planner knows it: price without them
        found = _search_case(bare, bare, (), knobs)
        if isinstance(found, str):  # the stated layout breaks without them too: not the knobs' doing
            return found
        for k in applied:
            knobs[k] = {**knobs[k], "status": "not priced", "reason": f"the stated layout with it breaks: {names}"}
        ran = ", ".join(applied)
        return found[0], "; ".join(n for n in (f"priced without {ran}: with it the layout breaks {names}",
                                                found[1]) if n)
    return f"the stated layout breaks: {names}"


def run_case(case: dict[str, Any], source: str, recipes: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    measured = case.get("measured")
    out: dict[str, Any] = {"id": case.get("id"), "tier": case.get("tier"), "source": short_source(case),
                           "measured": measured if isinstance(measured, dict) else {}}
    entry = recipe_entry(recipes or {}, case)
    stack = recipe_stack(entry, case)
    try:
        bare = case_problem(case, source, stack)
    except PlanInputError as exc:
        return {**out, "layout": None, "predicted": None, "error": None, "reason": exc.one_line()}
    knobs = case_knobs(case, entry, bare)
    problem, applied = apply_knobs(bare, knobs)
    found = _search_case(problem, bare, applied, knobs)
    out["knobs"] = knobs
    if isinstance(found, str):
        return {**out, "layout": None, "predicted": None, "error": None, "reason": found}
    result, note = found
    read = (None if stack else case_framework(case)[1], case_precision(case)[1], case_token_drop(case)[2])
    note = "; ".join(n for n in (*read, note) if n) or None
    plan = result.plans[0]
    mt = plan.metrics
    try:
        figure = memory_figure(case, problem.training.framework, entry)
    except PlanInputError as exc:
        return {**out, "layout": None, "predicted": None, "error": None, "reason": exc.one_line()}
    pred = {"tokens_per_s_per_gpu": sig(mt["tokens_per_s_per_gpu"]), "step_time_s": sig(mt["step_time_s"]),
            "memory_gib": sig(mt[MEMORY_METRIC[figure]], 4), "memory_figure": figure, "mfu": sig(mt["mfu"], 4)}
    meas = {k: v for k, v in out["measured"].items()
            if isinstance(v, int | float) and not isinstance(v, bool) and v > 0}  # unusable figures are skipped
    err: dict[str, float] = {}
    conflict = measurement_conflict(case, problem)
    if conflict:
        meas = {}  # priced, but scored against neither figure
    if meas.get("tokens_per_s_per_gpu"):
        err["throughput"] = sig(_ape(pred["tokens_per_s_per_gpu"], meas["tokens_per_s_per_gpu"]), 4)
    elif meas.get("step_time_s"):
        err["throughput"] = sig(_ape(1 / pred["step_time_s"], 1 / meas["step_time_s"]), 4)
    if meas.get("memory_gib"):
        err["memory"] = sig(_ape(pred["memory_gib"], meas["memory_gib"]), 4)
    residual = _residuals(pred, meas)
    res = {**out, "layout": layout_dict(plan.layout, mt, problem.model.num_hidden_layers,
                                        problem.cluster.nvlink_domain, problem.training.framework,
                                        problem.training.pipeline_layout),
           "predicted": pred, "error": err,
           "regime": case_regime(case, problem, plan.layout, knobs),
           "preference": {k: int(v[0]) for k, v in criteria_columns(
               problem, plan.layout.columns(), np.array([mt["memory_peak_gib"]]),
               codebase_schedules(knobs)).items()}}
    if residual:
        res["residual"] = residual
    if note:
        res["note"] = note
    if conflict:
        res["reason"] = conflict
    return res


def _residuals(pred: dict[str, Any], meas: dict[str, Any]) -> dict[str, float]:
    """ln(measured / predicted) of each scored figure (throughput from tokens/s per GPU, else from the step time):
    the signed misses the uncertainty bands are fitted on (planner.evidence.band_fit)."""
    out = {}
    if meas.get("tokens_per_s_per_gpu"):
        out["throughput"] = sig(math.log(meas["tokens_per_s_per_gpu"] / pred["tokens_per_s_per_gpu"]), 4)
    elif meas.get("step_time_s"):
        out["throughput"] = sig(math.log(pred["step_time_s"] / meas["step_time_s"]), 4)
    if meas.get("memory_gib"):
        out["memory"] = sig(math.log(meas["memory_gib"] / pred["memory_gib"]), 4)
    return out


def short_source(case: dict[str, Any]) -> str:
    src = str(case.get("source", "unknown"))
    head = src.split(" -- ")[0].split(",")[0].strip().strip("'\"")
    return head[:40]


def _stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"cases": 0}
    vals = sorted(values)
    p90 = vals[min(len(vals) - 1, int(round(0.9 * (len(vals) - 1))))]
    return {"cases": len(vals), "median_ape": sig(statistics.median(vals), 4), "p90_ape": sig(p90, 4),
            "within_10pct": sig(sum(v <= 0.10 for v in vals) / len(vals), 4),
            "within_20pct": sig(sum(v <= 0.20 for v in vals) / len(vals), 4)}


def kendall_tau(xs: list[float], ys: list[float]) -> float:
    """Kendall's tau-a over all pairs (ties count as neither concordant nor discordant)."""
    n = len(xs)
    conc = disc = 0
    for i in range(n):
        for j in range(i + 1, n):
            s = (xs[i] - xs[j]) * (ys[i] - ys[j])
            conc += s > 0
            disc += s < 0
    pairs = n * (n - 1) / 2
    return (conc - disc) / pairs if pairs else 0.0


def _layout_signature(case: dict[str, Any]) -> tuple:
    lay = case.get("layout", {})
    return tuple(sorted((k, str(v)) for k, v in lay.items())) + (("mbs", str(case["training"].get("micro_batch"))),)


def ranking_groups(cases: list[dict[str, Any]], results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs of one source, stack, model, cluster, sequence length, batch and precision that differ in layout or
    schedule. `plan` ranks one stack's layouts, so runs of two stacks in one table (Narayanan et al.'s DeepSpeed ZeRO-3
    rows beside Megatron's PTD-P ones) are not one ranking; each is still scored on its own price.

    Repeats of the same stated layout (e.g. one recipe measured on several container releases) are averaged into one
    entry, so a group ranks layouts, not software versions; groups need two or more distinct layouts.
    """
    groups: dict[tuple, dict[tuple, list[int]]] = defaultdict(lambda: defaultdict(list))
    for i, case in enumerate(cases):
        if results[i]["predicted"] is None or "throughput" not in (results[i]["error"] or {}) or not isinstance(
                results[i]["measured"].get("tokens_per_s_per_gpu"), int | float):
            continue
        tr = case.get("training", {})
        key = (short_source(case), case.get("model", {}).get("name"), case.get("cluster"), tr.get("seq_len"),
               tr.get("global_batch"), tr.get("precision"), results[i]["regime"]["stack"])
        groups[key][_layout_signature(case)].append(i)
    out = []
    for key, layouts in sorted(groups.items(), key=lambda kv: str(kv[0])):
        if len(layouts) < 2:
            continue
        members = list(layouts.values())
        meas = [statistics.mean(cases[i]["measured"]["tokens_per_s_per_gpu"] for i in idx) for idx in members]
        pred = [statistics.mean(results[i]["predicted"]["tokens_per_s_per_gpu"] for i in idx) for idx in members]
        prefer = [tuple(results[idx[0]]["preference"][c.name] for c in CRITERIA) for idx in members]
        out.append({"group": f"{key[0]} | {key[1]} | {key[2]} | s={key[3]} gbs={key[4]} {key[5]} | {key[6]}",
                    "cases": [cases[idx[0]]["id"] for idx in members], "kendall_tau": sig(kendall_tau(pred, meas), 3),
                    "regret": sig(regret(pred, meas, prefer, tie_width()), 4),
                    "regret_time": sig(regret(pred, meas), 4)})
    return out


def regret(predicted: list[float], measured: list[float], preference: list[tuple[int, ...]] | None = None,
           tie: float = 0.0) -> float:
    """What trusting the planner costs in a ranking group: 1 - measured throughput of the layout it ranks first /
    the best measured throughput. 0 when its first pick is the measured best. By price alone (no `preference`),
    ties in the prediction count against the planner (the worst of the tied layouts); with each layout's preference
    criteria (planner.search.preference.CRITERIA) the layouts priced within `tie` of the fastest are ordered by them
    first, as `plan` ranks, and only an exact tie of criteria and price counts against the planner."""
    top = max(predicted)
    if preference is None:
        picked = min(m for p, m in zip(predicted, measured, strict=True) if p == top)
        return 1.0 - picked / max(measured)
    tied = [i for i, p in enumerate(predicted) if math.log(top / p) <= tie]
    best = min((preference[i], -predicted[i]) for i in tied)
    picked = min(measured[i] for i in tied if (preference[i], -predicted[i]) == best)
    return 1.0 - picked / max(measured)


def summarize(cases: list[dict[str, Any]], results: list[dict[str, Any]]) -> dict[str, Any]:
    by: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        if not r["error"]:
            continue
        for metric in ("throughput", "memory"):
            if metric in r["error"]:
                by[f"tier:{r['tier']}"][metric].append(r["error"][metric])
                by[f"source:{r['source']}"][metric].append(r["error"][metric])
                by["all"][metric].append(r["error"][metric])
    table = {k: {m: _stats(v[m]) for m in ("throughput", "memory")} for k, v in sorted(by.items())}
    worst = sorted((r for r in results if r["error"] and "throughput" in r["error"]),
                   key=lambda r: -r["error"]["throughput"])[:10]
    groups = ranking_groups(cases, results)
    taus = [g["kendall_tau"] for g in groups]
    regrets = [g["regret"] for g in groups]
    regrets_time = [g["regret_time"] for g in groups]
    worst_regret = max(groups, key=lambda g: g["regret"]) if groups else None
    return {
        "cases": len(results),
        "predicted": sum(r["predicted"] is not None for r in results),
        "not_modelled": [{"id": r["id"], "reason": r["reason"]} for r in results if r["predicted"] is None],
        "not_scored": [{"id": r["id"], "reason": r["reason"]} for r in results
                       if r["predicted"] is not None and r.get("reason")],
        # how a case was read or priced where that is not what it says (another profile, fp16 as bf16, over memory)
        "notes": [{"id": r["id"], "note": r["note"]} for r in results if r.get("note")],
        # what the runs ran beyond their rows: resolved, unresolved, and knobs the model does not price
        "knobs": knob_summary(results),
        "groups": table,
        "worst": [{"id": r["id"], "tier": r["tier"], "throughput_ape": r["error"]["throughput"],
                   "predicted": r["predicted"]["tokens_per_s_per_gpu"],
                   "measured": r["measured"].get("tokens_per_s_per_gpu")} for r in worst],
        "ranking": {"groups": groups, "mean_kendall_tau": sig(statistics.mean(taus), 3) if taus else None,
                    "mean_regret": sig(statistics.mean(regrets), 4) if regrets else None,
                    "mean_regret_time": sig(statistics.mean(regrets_time), 4) if regrets_time else None,
                    "worst_regret": ({"group": worst_regret["group"], "regret": worst_regret["regret"]}
                                     if worst_regret else None)},
    }


def validate(path: str | None = None, recipes_path: str | None = None) -> dict[str, Any]:
    """Every case of the case file priced and scored; the knobs its run ran read from the knob file (`recipes_path`,
    else recipes.default_recipes_path) and the case's own `ran:` block."""
    cases = load_cases(path)
    source = path or str(default_cases_path().name)
    recipes = load_recipes(Path(recipes_path) if recipes_path else default_recipes_path(path))
    results = [run_case(c if isinstance(c, dict) else {}, source, recipes) for c in cases]
    return {"schema_version": 1, "cases": results, "summary": summarize(cases, results)}
