"""`plan clusters`: the GPU catalog."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from cli.options import check_format, stdout


def clusters(fmt: Annotated[str, typer.Option("--format", "-f", help="table | json")] = "table") -> None:
    """List the GPU catalog; any {gpu}x{count} is a cluster."""
    check_format(fmt, ("table", "json"))
    from planner.inputs.catalog import gpu_catalog

    cat = gpu_catalog()
    if fmt == "json":
        sys.stdout.write(json.dumps(cat, indent=2, sort_keys=True) + "\n")
        return
    from planner.report.table import render_clusters

    render_clusters(cat, stdout())
