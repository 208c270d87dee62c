"""`plan models`: the model catalog."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from cli.options import check_format, stdout


def models(fmt: Annotated[str, typer.Option("--format", "-f", help="table | json")] = "table") -> None:
    """List the model catalog."""
    check_format(fmt, ("table", "json"))
    from planner.cost.flops import active_params, total_params
    from planner.inputs.catalog import load_model, model_catalog

    rows = []
    for name, doc in sorted(model_catalog().items()):
        spec = load_model(name)
        rows.append({"name": name, "aliases": doc.get("aliases", []), "params": total_params(spec),
                     "active_params": active_params(spec), "layers": spec.num_hidden_layers,
                     "hidden_size": spec.hidden_size, "experts": spec.num_local_experts})
    if fmt == "json":
        sys.stdout.write(json.dumps(rows, indent=2, sort_keys=True) + "\n")
        return
    from planner.report.table import render_models

    render_models(rows, stdout())
