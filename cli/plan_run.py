"""What `plan` with no subcommand does once its options are read (by typer, cli/commands/plan.py, or by
cli/quick.py): search and report the best layouts (table, JSON/YAML, or launcher text). Typer-free."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import TYPE_CHECKING

from cli.options import build_problem, check_format, check_rank_by, framework_for, table_console
from cli.plan_options import FORMATS_PLAN
from planner.errors import NoFeasiblePlan, PlanInputError

if TYPE_CHECKING:
    from cli.plan_options import PlanOptions
    from planner.inputs.problem import Problem
    from planner.search.search import SearchResult


def run_plan(options: PlanOptions) -> None:
    """Plan the best parallel layouts for `options.model` on `options.cluster` and write them to stdout in
    `options.fmt`."""
    if options.model is None or options.cluster is None:
        missing = "--model" if options.model is None else "--cluster"
        raise PlanInputError("is required", field=missing, fix="e.g. plan --model llama70b --cluster h100x512")
    check_format(options.fmt, FORMATS_PLAN)
    check_rank_by(options.rank_by)
    options = replace(options, framework=framework_for(options.framework, options.fmt))
    from planner.report import document
    from planner.search.search import search

    problem = build_problem(options)
    top, rank, time_limit, fmt = options.top, options.rank, options.time_limit, options.fmt
    try:
        result = search(problem, top=max(top, rank), time_limit_s=time_limit, rank_by=options.rank_by)
    except NoFeasiblePlan as exc:
        from planner.search.diagnosis import explain_infeasible

        exc.diagnosis.update(explain_infeasible(problem))
        raise
    recorded = {"fix": {k: v for k, v in sorted(problem.fixed.items())}, "top": top,
                "allow_tp_across_nodes": options.allow_tp_across_nodes, "time_limit": time_limit,
                "compress": dict(sorted(problem.compress.items())), "memory_headroom": options.memory_headroom,
                "rank_by": options.rank_by}
    if time_limit is None:  # a capped search gets no second search
        _note_smaller_job(problem, result)
    doc = document.build(result, recorded)
    doc["search"]["seconds"] = round(result.seconds, 3) if options.timings else None
    if fmt == "table":
        from planner.report.table import render

        render(result, table_console())
    elif fmt in ("json", "yaml"):
        sys.stdout.write(document.dumps(doc, fmt))
    else:
        from planner.report.launchers import render as render_launcher

        sys.stdout.write(render_launcher(doc, fmt, rank))


def _note_smaller_job(problem: Problem, result: SearchResult) -> None:
    """One stderr line where whole nodes left idle would train faster in all (planner.search.subset)."""
    from planner.search.subset import smaller_job

    note = smaller_job(problem, float(result.plans[0].metrics["tokens_per_s_per_gpu"]))
    if note is not None:
        print(f"note: {note.text(problem.num_gpus, problem.training.global_batch)}", file=sys.stderr)
