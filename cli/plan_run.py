"""What `plan` with no subcommand does once its options are read (by typer, cli/commands/plan.py, or by
cli/quick.py): search and report the best layouts (table, JSON/YAML, or launcher text). Typer-free."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from cli.options import FORMATS_PLAN, build_problem, check_format, check_rank_by, framework_for, table_console
from planner.errors import NoFeasiblePlan, PlanInputError

if TYPE_CHECKING:
    from planner.inputs.problem import Problem
    from planner.search.search import SearchResult


def run_plan(model: str | None = None, cluster: str | None = None, seq_len: int = 8192, global_batch: int = 512,
             precision: str = "bf16", framework: str | None = None, fix: list[str] | None = None, top: int = 5,
             fmt: str = "table", rank: int = 1, allow_tp_across_nodes: bool = False,
             time_limit: float | None = None, compress: list[str] | None = None, memory_headroom: float = 0.05,
             optimizer_offload: float = 0.0, optimizer_moments: str = "fp32", fp8_recipe: str = "tensorwise",
             timings: bool = False, moe_capacity_factor: float | None = None,
             moe_pad_to_capacity: bool = False, rank_by: str = "preference") -> None:
    """Plan the best parallel layouts for `model` on `cluster` and write them to stdout in `fmt`."""
    if model is None or cluster is None:
        missing = "--model" if model is None else "--cluster"
        raise PlanInputError("is required", field=missing, fix="e.g. plan --model llama70b --cluster h100x512")
    check_format(fmt, FORMATS_PLAN)
    check_rank_by(rank_by)
    framework = framework_for(framework, fmt)
    from planner.report import document
    from planner.search.search import search

    problem = build_problem(model, cluster, seq_len, global_batch, precision, framework, fix, allow_tp_across_nodes,
                            compress=compress, memory_headroom=memory_headroom, optimizer_offload=optimizer_offload,
                            optimizer_moments=optimizer_moments, fp8_recipe=fp8_recipe,
                            moe_capacity_factor=moe_capacity_factor, moe_pad_to_capacity=moe_pad_to_capacity)
    try:
        result = search(problem, top=max(top, rank), time_limit_s=time_limit, rank_by=rank_by)
    except NoFeasiblePlan as exc:
        from planner.search.diagnosis import explain_infeasible

        exc.diagnosis.update(explain_infeasible(problem))
        raise
    options = {"fix": {k: v for k, v in sorted(problem.fixed.items())}, "top": top,
               "allow_tp_across_nodes": allow_tp_across_nodes, "time_limit": time_limit,
               "compress": dict(sorted(problem.compress.items())), "memory_headroom": memory_headroom,
               "rank_by": rank_by}
    if time_limit is None:  # a capped search gets no second search
        _note_smaller_job(problem, result)
    doc = document.build(result, options)
    doc["search"]["seconds"] = round(result.seconds, 3) if timings else None
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
