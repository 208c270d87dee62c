"""`plan validate`: the cost model against published runs."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cli.options import check_format, stdout


def validate(
    cases: Annotated[str | None, typer.Option("--cases", help="case file (schema_version 1); default: the "
                                              "published runs shipped with plan")] = None,
    recipes: Annotated[str | None, typer.Option("--recipes", help="knob file: what each run ran beyond its row "
                                                "(default: case_recipes.yaml beside the case file, else the one "
                                                "shipped with plan)")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table | json")] = "table",
) -> None:
    """Score the cost model against measured, published training runs."""
    from planner.evidence.validate import validate as run_validate
    from planner.report import document

    check_format(fmt, ("table", "json", "yaml"))
    report = run_validate(cases, recipes)
    if fmt == "table":
        from planner.report.table import render_validation

        render_validation(report, stdout())
    else:
        sys.stdout.write(document.dumps(report, fmt))
