"""`plan` with no subcommand: its options (typer; cli/quick.py reads the common ones without typer, and a test
keeps the two in step); cli/plan_run.py does the work."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.option_types import (
    Fp8RecipeOpt,
    GbsOpt,
    MoeCapacityOpt,
    MoePadOpt,
    OptMomentsOpt,
    OptOffloadOpt,
    PlanFwOpt,
    PrecOpt,
    RankByOpt,
    SeqOpt,
)
from cli.plan_run import run_plan


def main(
    ctx: typer.Context,
    model: Annotated[str | None, typer.Option("--model", "-m", help="catalog name/alias, or a model YAML / HF "
                                              "config.json path")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", "-c", help="{gpu}x{count} or a cluster YAML")] = None,
    seq_len: SeqOpt = 8192,
    global_batch: GbsOpt = 512,
    precision: PrecOpt = "bf16",
    framework: PlanFwOpt = None,
    fix: Annotated[list[str] | None, typer.Option("--fix", help="pin a knob, KEY=VALUE (repeatable): tp pp dp cp "
                                                  "ep etp vpp mbs zero recompute sp schedule cp_comm")] = None,
    top: Annotated[int, typer.Option("--top", min=1, max=1000, help="how many plans to report")] = 5,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table | json | yaml | megatron | torchtitan | "
                                     "deepspeed | nemo | env")] = "table",
    rank: Annotated[int, typer.Option("--rank", min=1, help="which plan a launcher format prints")] = 1,
    allow_tp_across_nodes: Annotated[bool, typer.Option("--allow-tp-across-nodes",
                                                        help="let tensor parallelism leave the NVLink domain")] = False,
    time_limit: Annotated[float | None, typer.Option("--time-limit", min=0.01, help="cap the search (seconds); "
                                                     "the answer then says it is not proven best")] = None,
    compress: Annotated[list[str] | None, typer.Option(
        "--compress", help="what-if: compress each dimension's traffic by a ratio, e.g. dp=4,tp=1.5 (adds codec time)"
    )] = None,
    memory_headroom: Annotated[float, typer.Option(
        "--memory-headroom", min=0.0, max=0.5, help="share of GPU memory a plan should leave free; plans above "
        "(1 - headroom) x capacity rank last and are marked tight")] = 0.05,
    optimizer_offload: OptOffloadOpt = 0.0,
    optimizer_moments: OptMomentsOpt = "fp32",
    fp8_recipe: Fp8RecipeOpt = "tensorwise",
    timings: Annotated[bool, typer.Option("--timings", help="record search seconds in JSON/YAML (off by default "
                                          "so output is byte-identical across runs)")] = False,
    moe_capacity_factor: MoeCapacityOpt = None,
    moe_pad_to_capacity: MoePadOpt = False,
    rank_by: RankByOpt = "preference",
) -> None:
    """Plan the best parallel layouts for MODEL on CLUSTER (run with no subcommand)."""
    if ctx.invoked_subcommand is not None:
        return
    run_plan(model, cluster, seq_len, global_batch, precision, framework, fix, top, fmt, rank, allow_tp_across_nodes,
             time_limit, compress, memory_headroom, optimizer_offload, optimizer_moments, fp8_recipe, timings,
             moe_capacity_factor, moe_pad_to_capacity, rank_by)
