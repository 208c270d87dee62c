"""`plan sweep`: capacity planning over GPU kinds and counts (planner.report.sweep); progress on stderr."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Annotated

import typer

from cli.option_types import plan_command
from cli.options import build_problem, check_format, stderr, table_console
from cli.plan_options import PlanOptions

PROGRESS_AFTER_S = 2.0  # a sweep quicker than this prints no progress at all
# Default tokens per optimizer step: Llama 3 405B's batch after 2.87T tokens of its pre-training (Dubey et al. 2024,
# "The Llama 3 Herd of Models", section 3.4.1: 4M, then 8M, then 16M tokens per batch).
DEFAULT_TOKENS_PER_BATCH = "16M"


@contextmanager
def _progress() -> Iterator[Callable[[int, int, str], None]]:
    """A progress callback: a rich bar on a terminal, plain lines when stderr is a file (only once the sweep has
    run for PROGRESS_AFTER_S), nothing for a quick sweep."""
    err = stderr()
    start = time.perf_counter()
    if err.is_terminal:
        from rich.progress import Progress

        with Progress(console=err, transient=True) as bar:
            task = bar.add_task("sweep", total=None)

            def update(done: int, total: int, name: str) -> None:
                bar.update(task, completed=done, total=total, description=f"sweep {name}".rstrip())

            yield update
        return

    def report(done: int, total: int, name: str) -> None:
        if name and time.perf_counter() - start > PROGRESS_AFTER_S:
            print(f"sweep: {done}/{total} done, searching {name}", file=sys.stderr, flush=True)

    yield report


@plan_command("sweep", after="model")
def sweep(
    gpus: Annotated[str, typer.Option("--gpus", help="catalog GPU keys, comma-separated: h100,b200,gb200")],
    counts: Annotated[str, typer.Option("--counts", help="GPU counts, comma-separated: 256,512,1024")],
    train_tokens: Annotated[str, typer.Option("--train-tokens", help="token budget of the run: 15T, 2.5e12")],
    options: PlanOptions,
    gpu_hour_price: Annotated[list[str] | None, typer.Option(
        "--gpu-hour-price", help="dollars per GPU-hour, GPU=PRICE (repeatable or comma-separated): h100=2.5,b200=4; "
        "the frontier trades days against dollars when every GPU has a price, else against GPU-hours")] = None,
    tokens_per_batch: Annotated[str, typer.Option(
        "--tokens-per-batch", help="target tokens per optimizer step; global batch = this / seq_len, rounded so "
        "every count's layouts divide it")] = DEFAULT_TOKENS_PER_BATCH,
    chart: Annotated[str | None, typer.Option("--chart", help="also write days vs cost (or GPU-hours) as an SVG "
                                              "chart to this file")] = None,
) -> None:
    """Best layout, days, GPU-hours and cost to train a token budget at every (GPU kind, count); frontier starred."""
    from planner.inputs.sweep_args import global_batch_for, parse_amount, parse_counts, parse_gpus, parse_prices
    from planner.report import document
    from planner.report.sweep import RECIPE_KEYS, SweepSpec, run_sweep, sweep_document

    fmt, seq_len = options.fmt, options.seq_len
    check_format(fmt, ("table", "json", "yaml"))
    gpu_keys, count_list = parse_gpus(gpus), parse_counts(counts)
    tokens = parse_amount(train_tokens, "--train-tokens", "15T")
    per_batch = parse_amount(tokens_per_batch, "--tokens-per-batch", "16M")
    prices = parse_prices(gpu_hour_price, gpu_keys)
    if chart:
        from planner.report.sweep_chart import check_chart_path

        check_chart_path(chart)
    # One problem built the usual way checks model, precision, framework and sequence length before any search.
    first = build_problem(replace(options, cluster=f"{gpu_keys[0]}x{count_list[0]}",
                                  global_batch=global_batch_for(per_batch, seq_len, count_list[0])))
    recipe = {key: getattr(first.training, key) for key in RECIPE_KEYS}
    spec = SweepSpec(first.model, gpu_keys, count_list, tokens, per_batch, seq_len, options.precision,
                     first.training.framework, prices, recipe)
    with _progress() as progress:
        points = run_sweep(spec, progress)
    if chart:
        from planner.report.sweep_chart import write_chart

        write_chart(spec, points, chart)
    if fmt == "table":
        from planner.report.sweep_text import render_sweep

        render_sweep(spec, points, table_console())
    else:
        sys.stdout.write(document.dumps(sweep_document(spec, points), fmt))


def register(app: typer.Typer) -> None:
    """Add `plan sweep` to `app`."""
    app.command("sweep")(sweep)
