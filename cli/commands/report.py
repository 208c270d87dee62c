"""`plan report`: the main search written as one self-contained HTML page of tables and charts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from cli.option_types import (
    ClusterOpt,
    Fp8RecipeOpt,
    GbsOpt,
    ModelOpt,
    MoeCapacityOpt,
    MoePadOpt,
    OptMomentsOpt,
    OptOffloadOpt,
    PrecOpt,
    RankByOpt,
    SeqOpt,
)
from cli.options import build_problem, check_rank_by, stderr
from planner.errors import NoFeasiblePlan, PlanInputError
from planner.inputs.frameworks import DEFAULT_FRAMEWORK

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


def report(
    model: ModelOpt,
    cluster: ClusterOpt,
    output: OutOpt,
    seq_len: SeqOpt = 8192,
    global_batch: GbsOpt = 512,
    precision: PrecOpt = "bf16",
    framework: Annotated[str, typer.Option(
        "--framework", help="training stack to plan for, as in plan: its capabilities limit the search and its "
        "behaviour prices it")] = DEFAULT_FRAMEWORK,
    fix: Annotated[list[str] | None, typer.Option("--fix", help="pin a knob, KEY=VALUE (repeatable): tp pp dp cp "
                                                  "ep etp vpp mbs zero recompute sp schedule cp_comm")] = None,
    top: Annotated[int, typer.Option("--top", min=1, max=1000, help="how many plans to rank")] = 10,
    allow_tp_across_nodes: Annotated[bool, typer.Option("--allow-tp-across-nodes",
                                                        help="let tensor parallelism leave the NVLink domain")] = False,
    time_limit: Annotated[float | None, typer.Option("--time-limit", min=0.01, help="cap the search (seconds)")] = None,
    compress: Annotated[list[str] | None, typer.Option(
        "--compress", help="what-if: compress each dimension's traffic by a ratio, e.g. dp=4,tp=1.5")] = None,
    optimizer_offload: OptOffloadOpt = 0.0,
    optimizer_moments: OptMomentsOpt = "fp32",
    fp8_recipe: Fp8RecipeOpt = "tensorwise",
    moe_capacity_factor: MoeCapacityOpt = None,
    moe_pad_to_capacity: MoePadOpt = False,
    rank_by: RankByOpt = "preference",
) -> None:
    """Plan MODEL on CLUSTER and write an HTML report: inputs, ranked plans, every feasible layout (throughput vs
    memory, Pareto front), time breakdown, memory per pipeline stage and the simulated pipeline timeline."""
    from planner.report.html import render_report
    from planner.search.search import search

    check_rank_by(rank_by)
    out = writable_path(output, "--output", ".html")
    problem = build_problem(model, cluster, seq_len, global_batch, precision, framework, fix,
                            allow_tp_across_nodes, compress=compress, optimizer_offload=optimizer_offload,
                            optimizer_moments=optimizer_moments, fp8_recipe=fp8_recipe,
                            moe_capacity_factor=moe_capacity_factor, moe_pad_to_capacity=moe_pad_to_capacity)
    try:
        result = search(problem, top=top, time_limit_s=time_limit, keep_priced=True, rank_by=rank_by)
    except NoFeasiblePlan as exc:
        from planner.search.diagnosis import explain_infeasible

        exc.diagnosis.update(explain_infeasible(problem))
        raise
    options = {"fix": {k: v for k, v in sorted(problem.fixed.items())}, "top": top,
               "allow_tp_across_nodes": allow_tp_across_nodes, "time_limit": time_limit,
               "compress": dict(sorted(problem.compress.items())), "rank_by": rank_by}
    write_text(out, render_report(result, options), "--output")
    stderr().print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): {len(result.plans)} plans, "
                   f"{result.feasible:,} feasible layouts")
