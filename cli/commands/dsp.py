"""`plan dsp`: dynamic sequence parallelism for multi-dimensional sequences."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cli.option_types import ClusterOpt
from cli.options import stdout
from planner.errors import PlanInputError


def dsp(
    dims: Annotated[str, typer.Option("--dims", help="sequence dimensions, e.g. T=16,S=4096")],
    hidden: Annotated[int, typer.Option("--hidden", min=1, help="hidden size")],
    heads: Annotated[int, typer.Option("--heads", min=1, help="attention heads")],
    blocks: Annotated[int, typer.Option("--blocks", min=1, help="transformer blocks")],
    sp: Annotated[int, typer.Option("--sp", min=1, help="sequence-parallel degree (GPUs)")],
    cluster: ClusterOpt = "h100x8",
    pattern: Annotated[str | None, typer.Option("--pattern", help="dimension each block attends over, e.g. TSTS "
                                                "or T,S,T,S (default: cycle through --dims)")] = None,
    batch: Annotated[int, typer.Option("--batch", min=1, help="sequences per GPU")] = 1,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table | json")] = "table",
) -> None:
    """Multi-dimensional sequences (video): DSP's dimension switching vs Ulysses / ring in every attention."""
    import dataclasses
    import json

    from planner.inputs.catalog import load_cluster
    from planner.report.document import jsonable
    from planner.strategies.dsp import MultiDimSequence, compare, parse_dims, render_dsp

    if fmt not in ("table", "json"):
        raise PlanInputError(f"unknown format '{fmt}'", field="--format", fix="use table or json")
    names = parse_dims(dims)
    pat = None
    if pattern:
        pat = tuple(p for p in pattern.split(",")) if "," in pattern else tuple(pattern)
    spec = MultiDimSequence(dims=names, hidden=hidden, heads=heads, blocks=blocks, pattern=pat, batch=batch)
    result = compare(spec, sp, load_cluster(cluster))
    if fmt == "json":
        sys.stdout.write(json.dumps(jsonable(dataclasses.asdict(result)), indent=2, sort_keys=True) + "\n")
    else:
        stdout().print(render_dsp(result), highlight=False, markup=False)
