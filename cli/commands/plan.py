"""`plan` with no subcommand: its options are PlanOptions' (cli/plan_options.py; typer reads them here, cli/quick.py
without typer); cli/plan_run.py does the work."""

from __future__ import annotations

import typer

from cli.option_types import plan_command
from cli.plan_options import PlanOptions
from cli.plan_run import run_plan


@plan_command("plan")
def main(ctx: typer.Context, options: PlanOptions) -> None:
    """Plan the best parallel layouts for MODEL on CLUSTER (run with no subcommand)."""
    if ctx.invoked_subcommand is not None:
        return
    run_plan(options)
