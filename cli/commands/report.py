"""`plan report`: the main search written as one self-contained HTML page of tables and charts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from cli.option_types import plan_command
from cli.options import build_problem, check_rank_by, stderr
from cli.plan_options import PlanOptions
from planner.errors import NoFeasiblePlan, PlanInputError

OutOpt = Annotated[str, typer.Option("--output", "-o", help="HTML file to write (self-contained: inline SVG, no "
                                     "network needed to view it)")]


def writable_path(path: str, option: str, suffix: str) -> Path:
    """The output path, checked before any work: a file whose folder exists and can be written."""
    out = Path(path)
    fix = f"pass a writable file path, e.g. {option} plan{suffix}"
    if out.is_dir():
        raise PlanInputError(f"'{path}' is a directory", field=option, fix=fix)
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise PlanInputError(f"folder '{folder}' does not exist", field=option, fix=fix)
    if not os.access(folder, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise PlanInputError(f"cannot write '{path}' (permission denied)", field=option, fix=fix)
    return out


def write_text(out: Path, text: str, option: str) -> None:
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise PlanInputError(f"cannot write '{out}': {exc.strerror or exc}", field=option,
                             fix="pass a writable file path") from None


@plan_command("report", after="cluster")
def report(output: OutOpt, options: PlanOptions) -> None:
    """Plan MODEL on CLUSTER and write an HTML report: inputs, ranked plans, every feasible layout (throughput vs
    memory, Pareto front), time breakdown, memory per pipeline stage and the simulated pipeline timeline."""
    from planner.report.html import render_report
    from planner.search.search import search

    out = writable_path(output, "--output", ".html")
    check_rank_by(options.rank_by)
    problem = build_problem(options)
    try:
        result = search(problem, top=options.top, time_limit_s=options.time_limit, keep_priced=True,
                        rank_by=options.rank_by)
    except NoFeasiblePlan as exc:
        from planner.search.diagnosis import explain_infeasible

        exc.diagnosis.update(explain_infeasible(problem))
        raise
    recorded = {"fix": {k: v for k, v in sorted(problem.fixed.items())}, "top": options.top,
                "allow_tp_across_nodes": options.allow_tp_across_nodes, "time_limit": options.time_limit,
                "compress": dict(sorted(problem.compress.items())), "rank_by": options.rank_by}
    write_text(out, render_report(result, recorded), "--output")
    stderr().print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): {len(result.plans)} plans, "
                   f"{result.feasible:,} feasible layouts")
