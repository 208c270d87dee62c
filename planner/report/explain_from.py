"""`plan explain --from FILE`: the configuration a launch file runs, priced in full (planner.report.explain), and
the best layouts the search finds for the same problem, each with the knob changes that get there (the layout
changes of planner.report.changes, as `plan diff` lists them) and what they gain."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from planner.errors import NoFeasiblePlan
from planner.inputs.launch_readers import LaunchConfig
from planner.inputs.layout import Knobs
from planner.inputs.problem import Problem
from planner.report.changes import changes, fmt
from planner.report.document import layout_dict, metrics_dict, sig
from planner.report.explain import complete_layout, explain
from planner.report.table import compact_layout, legend
from planner.search.search import search

# Layout keys that follow from the others (micro-batch count, stage split, shard group): a diff names the knobs a
# user sets, not their consequences.
_DERIVED = {"num_microbatches", "first_stage_layers", "last_stage_layers", "fsdp_shard_group", "cp_hierarchy",
            "pipeline_layout"}


def _knobs(layout: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in layout.items() if k not in _DERIVED}


def _follows(change_key: str, new: dict[str, Any]) -> bool:
    """A change that only follows from another one: no virtual stages or schedule without a pipeline, no
    sequence parallelism without TP, no CP exchange without CP."""
    return ((change_key in ("vpp", "schedule") and new["pp"] == 1) or (change_key == "sequence_parallel"
            and new["tp"] == 1) or (change_key == "cp_comm" and new["cp"] == 1))


# Rules that keep the search's layouts canonical rather than say what a framework refuses: a file that breaks one
# still runs. ZeRO over a single data-parallel rank shards nothing (Megatron's distributed optimizer, DeepSpeed's
# ZeRO and FSDP all run it as plain data parallelism, and it is priced as such), so Megatron-LM's own examples that
# pass --use-distributed-optimizer on one data-parallel rank (examples/gptoss/02_train.sh) are not refused for it.
_RUNS_ANYWAY = {"sharding_needs_replicas": "ZeRO stage over one data-parallel rank, which shards nothing (run as "
                "plain data parallelism)"}


def explain_from(problem: Problem, given: Knobs, cfg: LaunchConfig, top: int = 3) -> dict[str, Any]:
    """The file's layout priced, and up to `top` better (or equal) layouts with their changes and gains."""
    yours = explain(problem, given)
    runs_anyway = {**_RUNS_ANYWAY, **cfg.runs_anyway}
    met = [r for r in yours["broken_rules"] if r["rule"] in runs_anyway]
    if met:  # the file states what the planner's own launcher could not (a custom stage split, trainer recompute)
        yours["broken_rules"] = [r for r in yours["broken_rules"] if r["rule"] not in runs_anyway]
        yours["feasible"] = not yours["broken_rules"]
        yours["met_by_file"] = [{"rule": r["rule"], "by": runs_anyway[r["rule"]]} for r in met]
    mine = _knobs(yours["layout"])
    mfu, step = yours["metrics"]["mfu"], yours["metrics"]["step_time_s"]
    alternatives: list[dict[str, Any]] = []
    note = None
    try:
        result = search(problem, top=top + 1)
    except NoFeasiblePlan as exc:
        result = None
        note = exc.message if exc.message.startswith("no layout") else f"no layout satisfies every rule ({exc.message})"
    cap = problem.cluster.gpu.memory_gib
    complete = complete_layout(problem, given)
    compact, used = compact_layout(complete)
    yours_rank = None
    for rank, plan in enumerate(result.plans if result else [], 1):
        lay = layout_dict(plan.layout, plan.metrics, problem.model.num_hidden_layers, problem.cluster.nvlink_domain,
                          problem.training.framework, problem.training.pipeline_layout)
        moved = changes(mine, _knobs(lay), layout=True)
        if not moved:
            yours_rank = rank
        if not moved or len(alternatives) == top:
            continue
        text, keys = compact_layout(plan.layout)
        used |= keys
        alternatives.append({
            "rank": rank, "layout": lay, "compact": text, "metrics": metrics_dict(plan.metrics, cap),
            "mfu_gain": sig(plan.metrics["mfu"] - mfu, 4), "speedup": sig(step / plan.metrics["step_time_s"], 4),
            "changes": [c.to_dict() for c in moved if not _follows(c.key, lay)],
        })
    return {
        "from": {"file": cfg.source, "dialect": cfg.dialect, "ignored": list(cfg.ignored)},
        "yours": {**yours, "compact": compact},
        "yours_rank": yours_rank, "alternatives": alternatives, "note": note, "legend": legend(used),
    }


def _by(alt: dict[str, Any]) -> str:
    return ", ".join(f"{c['key']} {fmt(c['old'])}->{fmt(c['new'])}" for c in alt["changes"])


def render_from(out: dict[str, Any], console: Console) -> None:
    """The comparison for humans: yours, then each alternative with its gain and the knobs it changes."""
    yours, mt = out["yours"], out["yours"]["metrics"]
    fits = "satisfies every rule" if yours["feasible"] else "breaks " + ", ".join(
        r["rule"] for r in yours["broken_rules"])
    console.print(f"[bold]from[/]  {out['from']['file']} ({out['from']['dialect']})", highlight=False)
    console.print(f"[bold]yours[/] {yours['compact']}: {mt['mfu']:.1%} MFU, step {mt['step_time_s']:.2f} s, "
                  f"{mt['memory_peak_gib']:.1f}/{mt['memory_capacity_gib']:g} GiB; {fits}", highlight=False)
    for rule in yours["broken_rules"]:
        console.print(f"  breaks {rule['rule']}: {rule['message']} (fix: {rule['fix']})", highlight=False)
    for rule in yours.get("met_by_file", []):
        console.print(f"  {rule['rule']}: met by the file's {rule['by']}", highlight=False)
    if out["yours_rank"]:
        console.print(f"yours is #{out['yours_rank']} of the search's ranking", highlight=False)
    for alt in out["alternatives"]:
        label = "best" if alt["rank"] == 1 else f"#{alt['rank']}"
        gain = alt["mfu_gain"] * 100
        console.print(f"[bold]{label}[/]  {alt['compact']}: {alt['metrics']['mfu']:.1%} MFU ({gain:+.1f} points, "
                      f"{alt['speedup']:.2f}x the speed) by {_by(alt)}", highlight=False)
    if not out["alternatives"]:
        console.print(out["note"] or "no other layout is faster: yours is the best the search finds",
                      highlight=False)
    console.print(out["legend"], style="dim", highlight=False)

