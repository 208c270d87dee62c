"""`plan diff`: two plan files side by side (docs/ci-gate.md); exit OK, or BAD_INPUT on a bad file."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from cli.commands.check import FORMATS
from cli.options import check_format


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

    check_format(fmt, FORMATS)
    doc_a = read_plan_document(a).raw
    doc_b = read_plan_document(b).raw
    if fmt == "json":
        sys.stdout.write(json.dumps(diff_data(doc_a, doc_b, a, b), indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(diff_documents(doc_a, doc_b, a, b))


def register(app: typer.Typer) -> None:
    """Add `plan diff` to `app`."""
    app.command("diff")(diff)
