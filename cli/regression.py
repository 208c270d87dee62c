"""`plan check` (the CI regression gate) and `plan diff` (two plan files side by side). See docs/ci-gate.md.

Wired into the app by cli/main.py: `from cli.regression import register; register(app)`.
Exit codes: check 0 = unchanged within tolerance, 1 = changed (the readable diff is on stdout), 2 = bad baseline
(a PlanInputError, printed as one line by cli.main.run); diff 0 (2 on a bad file).
"""

from __future__ import annotations

import json
import math
import sys
from typing import Annotated

import typer

from planner.errors import PlanInputError

FORMATS = ("text", "json")


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise PlanInputError(f"unknown format '{fmt}'", field="--format", fix=f"use one of {', '.join(FORMATS)}")


def _dump(data: dict) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")


def check(
    baseline: Annotated[str, typer.Option("--baseline", "-b", help="a plan document recorded with "
                                          "'plan ... --format json > baseline.json'")],
    tolerance: Annotated[float, typer.Option("--tolerance", "-t", help="largest relative change of rank-1 "
                                             "tokens/s/GPU that still passes (0.01 = 1%)")] = 0.01,
    fmt: Annotated[str, typer.Option("--format", "-f", help="text | json")] = "text",
) -> None:
    """Re-plan the problem recorded in a baseline; exit 1 when the rank-1 layout or tokens/s/GPU moved."""
    from planner.report.compare import check_document
    from planner.report.compare_text import check_ok_line, format_comparison
    from planner.report.plan_doc import read_plan_document

    _check_format(fmt)
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise PlanInputError(f"must be a non-negative number (got {tolerance})", field="--tolerance",
                             fix="e.g. --tolerance 0.01 for 1%")
    doc = read_plan_document(baseline)
    cmp = check_document(doc, tolerance, source=baseline)
    cmp.old_label, cmp.new_label = "baseline", "now"
    if fmt == "json":
        _dump({"baseline": baseline, **cmp.to_dict()})
    if cmp.passed:
        print(check_ok_line(cmp, baseline), file=sys.stderr)
        return
    if fmt == "text":
        sys.stdout.write(format_comparison(cmp, title=f"plan check --baseline {baseline}"))
    raise typer.Exit(1)


def diff(
    a: Annotated[str, typer.Argument(metavar="A.json", help="plan document A (JSON or YAML from "
                                     "'plan --format json|yaml')")],
    b: Annotated[str, typer.Argument(metavar="B.json", help="plan document B")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="text | json")] = "text",
) -> None:
    """Two plan files side by side: inputs that differ, rank-by-rank layout changes, metric deltas."""
    from planner.report.compare import diff_data
    from planner.report.compare_text import diff_documents
    from planner.report.plan_doc import read_plan_document

    _check_format(fmt)
    doc_a = read_plan_document(a).raw
    doc_b = read_plan_document(b).raw
    if fmt == "json":
        _dump(diff_data(doc_a, doc_b, a, b))
    else:
        sys.stdout.write(diff_documents(doc_a, doc_b, a, b))


def register(app: typer.Typer) -> None:
    """Add `check` and `diff` to the `plan` app."""
    app.command("check")(check)
    app.command("diff")(diff)
