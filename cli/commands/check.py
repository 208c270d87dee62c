"""`plan check`: the CI regression gate (docs/ci-gate.md).

Exit codes: OK when the baseline still holds; NOTHING_FEASIBLE_OR_CHANGED when the rank-1 layout or tokens/s/GPU moved
(the readable diff is on stdout); BAD_INPUT for a bad baseline (a PlanInputError, printed as one line by cli.main.run).
"""

from __future__ import annotations

import json
import math
import sys
from typing import Annotated

import typer

from cli.exit_codes import ExitCode
from cli.options import check_format
from planner.errors import PlanInputError

FORMATS = ("text", "json")


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

    check_format(fmt, FORMATS)
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise PlanInputError(f"must be a non-negative number (got {tolerance})", field="--tolerance",
                             fix="e.g. --tolerance 0.01 for 1%")
    doc = read_plan_document(baseline)
    cmp = check_document(doc, tolerance, source=baseline)
    cmp.old_label, cmp.new_label = "baseline", "now"
    if fmt == "json":
        sys.stdout.write(json.dumps({"baseline": baseline, **cmp.to_dict()}, indent=2, sort_keys=True) + "\n")
    if cmp.passed:
        print(check_ok_line(cmp, baseline), file=sys.stderr)
        return
    if fmt == "text":
        sys.stdout.write(format_comparison(cmp, title=f"plan check --baseline {baseline}"))
    raise typer.Exit(ExitCode.NOTHING_FEASIBLE_OR_CHANGED)


def register(app: typer.Typer) -> None:
    """Add `plan check` to `app`."""
    app.command("check")(check)
