"""`plan explain`: one layout priced in full."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cli.exit_codes import ExitCode
from cli.options import ClusterOpt, FwOpt, GbsOpt, ModelOpt, PrecOpt, SeqOpt, build_problem, check_format, stdout


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
) -> None:
    """Price one layout in full: time and memory breakdown, schedule timeline, every rule it breaks."""
    from planner.inputs.layout import parse_pairs
    from planner.report import document
    from planner.report.explain import explain as run_explain
    from planner.report.explain import explain_extras, render

    check_format(fmt, ("table", "json", "yaml"))
    problem = build_problem(model, cluster, seq_len, global_batch, precision, framework, None)
    given = parse_pairs([layout], "--layout")
    out = run_explain(problem, given)
    extras = explain_extras(problem, given, osdp, partition)
    if fmt != "table":
        out.update({k: v for k, v in extras.items() if k != "text"})
        out = {"schema_version": document.SCHEMA_VERSION, "inputs": document.inputs_dict(problem, {}), **out}
        sys.stdout.write(document.dumps(out, fmt))
        raise typer.Exit(ExitCode.OK if out["feasible"] else ExitCode.NOTHING_FEASIBLE_OR_CHANGED)
    if not render(out, extras.get("text", []), stdout()):
        raise typer.Exit(ExitCode.NOTHING_FEASIBLE_OR_CHANGED)
