"""`plan explain`: one layout priced in full."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.commands.report import writable_path, write_text
from cli.exit_codes import ExitCode
from cli.options import (
    ClusterOpt,
    FwOpt,
    GbsOpt,
    ModelOpt,
    PrecOpt,
    SeqOpt,
    build_problem,
    check_format,
    stderr,
    stdout,
)

if TYPE_CHECKING:
    from planner.inputs.problem import Problem


def explain(
    model: ModelOpt,
    cluster: ClusterOpt,
    layout: Annotated[str, typer.Option("--layout", "-l", help="knobs as 'tp=8,pp=4,vpp=5,mbs=1,zero=1,"
                                        "recompute=selective'; the rest take defaults")],
    seq_len: SeqOpt = 8192,
    global_batch: GbsOpt = 512,
    precision: PrecOpt = "bf16",
    framework: FwOpt = "generic",
    fmt: Annotated[str, typer.Option("--format", "-f", help="table | json | yaml")] = "table",
    osdp: Annotated[bool, typer.Option("--osdp", help="also solve per-layer sharded vs replicated parameters "
                                       "(OSDP, CP-SAT knapsack) for this data-parallel layout")] = False,
    partition: Annotated[bool, typer.Option("--partition", help="also balance layers (and recompute) per "
                                            "pipeline stage with CP-SAT")] = False,
    svg: Annotated[str | None, typer.Option("--svg", help="also write this layout's simulated pipeline timeline "
                                            "and memory per stage as an SVG file")] = None,
) -> None:
    """Price one layout in full: time and memory breakdown, schedule timeline, every rule it breaks."""
    from planner.inputs.layout import parse_pairs
    from planner.report import document
    from planner.report.explain import explain as run_explain
    from planner.report.explain import explain_extras, render

    check_format(fmt, ("table", "json", "yaml"))
    svg_path = writable_path(svg, "--svg", ".svg") if svg is not None else None
    problem = build_problem(model, cluster, seq_len, global_batch, precision, framework, None)
    given = parse_pairs([layout], "--layout")
    out = run_explain(problem, given)
    if svg_path is not None:
        write_svg(problem, given, svg_path)
    extras = explain_extras(problem, given, osdp, partition)
    if fmt != "table":
        out.update({k: v for k, v in extras.items() if k != "text"})
        out = {"schema_version": document.SCHEMA_VERSION, "inputs": document.inputs_dict(problem, {}), **out}
        sys.stdout.write(document.dumps(out, fmt))
        raise typer.Exit(ExitCode.OK if out["feasible"] else ExitCode.NOTHING_FEASIBLE_OR_CHANGED)
    if not render(out, extras.get("text", []), stdout()):
        raise typer.Exit(ExitCode.NOTHING_FEASIBLE_OR_CHANGED)


def write_svg(problem: Problem, given: dict[str, int], path: Path) -> None:
    """The layout's timeline and memory chart, priced as `explain` prices it (even when it breaks a rule)."""
    from planner.report.explain import complete_layout
    from planner.report.html import layout_svg
    from planner.search.search import price_layout

    lay = complete_layout(problem, given)
    write_text(path, layout_svg(problem, lay, price_layout(problem, lay)), "--svg")
    stderr().print(f"wrote {path}")
