"""`plan explain`: one layout priced in full, given as --layout or read from a launch file (--from)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.commands.report import writable_path, write_text
from cli.exit_codes import ExitCode
from cli.option_types import MoePadOpt, PlanFwOpt, SetOpt
from cli.options import (
    build_problem,
    check_format,
    framework_for,
    problem_for,
    stderr,
    stdout,
    table_console,
)
from planner.errors import PlanInputError
from planner.inputs.frameworks import DEFAULT_FRAMEWORK

if TYPE_CHECKING:
    from planner.inputs.problem import Problem


def explain(
    model: Annotated[str | None, typer.Option("--model", "-m", help="catalog name/alias, or a model YAML / HF "
                                              "config.json path (with --from: only if the file does not say)")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", "-c", help="{gpu}x{count} or a cluster YAML (with "
                                                "--from: only if the file does not say)")] = None,
    layout: Annotated[str | None, typer.Option("--layout", "-l", help="knobs as 'tp=8,pp=4,vpp=5,mbs=1,zero=1,"
                                               "recompute=selective'; the rest take defaults")] = None,
    from_file: Annotated[str | None, typer.Option(
        "--from", help="a launch configuration to price instead of --layout: Megatron-LM flags or script, torchtitan "
        "TOML, DeepSpeed ds_config JSON or Megatron-Bridge (NeMo) overrides; the best alternatives are shown "
        "with what changes")] = None,
    dialect: Annotated[str | None, typer.Option("--dialect", help="with --from: megatron | torchtitan | deepspeed | "
                                                "nemo (default: detected)")] = None,
    assign: SetOpt = None,
    seq_len: Annotated[int | None, typer.Option("--seq-len", help="tokens per sequence (default: the file's, "
                                                "else 8192)")] = None,
    global_batch: Annotated[int | None, typer.Option("--global-batch", help="sequences per optimizer step "
                                                     "(default: the file's, else 512)")] = None,
    precision: Annotated[str | None, typer.Option("--precision", help="bf16 | fp8 | fp4 (default: the file's, "
                                                  "else bf16)")] = None,
    framework: PlanFwOpt = None,
    fp8_recipe: Annotated[str, typer.Option(
        "--fp8-recipe", help="with --precision fp8: tensorwise | blockwise (1x128 / 128x128 block scales)")
    ] = "tensorwise",
    optimizer_offload: Annotated[float | None, typer.Option(
        "--optimizer-offload", min=0.0, max=1.0, help="share of optimizer states kept and stepped in CPU memory "
        "(default: the file's, else 0)")] = None,
    optimizer_moments: Annotated[str | None, typer.Option(
        "--optimizer-moments", help="dtype of Adam's moments: fp32 | bf16 (default: the file's, else fp32)")] = None,
    moe_capacity_factor: Annotated[float | None, typer.Option(
        "--moe-capacity-factor", min=0.01, max=64.0, help="token dropping: each expert's capacity in even shares of "
        "the routed tokens (default: the file's, else dropless)", show_default=False)] = None,
    moe_pad_to_capacity: MoePadOpt = False,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table | json | yaml")] = "table",
    osdp: Annotated[bool, typer.Option("--osdp", help="also solve per-layer sharded vs replicated parameters "
                                       "(OSDP, CP-SAT knapsack) for this data-parallel layout")] = False,
    partition: Annotated[bool, typer.Option("--partition", help="also balance layers (and recompute) per "
                                            "pipeline stage with CP-SAT")] = False,
    svg: Annotated[str | None, typer.Option("--svg", help="also write this layout's simulated pipeline timeline "
                                            "and memory per stage as an SVG file")] = None,
) -> None:
    """Price one layout in full: time and memory breakdown, schedule timeline, every rule it breaks."""
    from planner.report import document
    from planner.report.explain import explain as run_explain
    from planner.report.explain import explain_extras, render

    check_format(fmt, ("table", "json", "yaml"))
    if (layout is None) == (from_file is None):
        raise PlanInputError("give exactly one of --layout and --from", field="--layout",
                             fix='e.g. --layout "tp=8,pp=4" or --from launch.sh')
    given = _assignments(assign or [], from_file is not None)
    svg_path = writable_path(svg, "--svg", ".svg") if svg is not None else None
    if from_file is not None:
        _explain_from(from_file, dialect, model, cluster, seq_len, global_batch, precision, framework, fmt, svg_path,
                      optimizer_offload, optimizer_moments, (moe_capacity_factor, moe_pad_to_capacity), given)
        return
    if model is None or cluster is None:
        raise PlanInputError("is required with --layout", field="--model" if model is None else "--cluster",
                             fix="e.g. --model llama70b --cluster h100x512")
    from planner.inputs.layout import parse_pairs

    problem = build_problem(model, cluster, seq_len or 8192, global_batch or 512, precision or "bf16",
                            framework or DEFAULT_FRAMEWORK, None, fp8_recipe=fp8_recipe,
                            optimizer_offload=optimizer_offload or 0.0, optimizer_moments=optimizer_moments or "fp32",
                            moe_capacity_factor=moe_capacity_factor, moe_pad_to_capacity=moe_pad_to_capacity)
    given = parse_pairs([layout or ""], "--layout")
    out = run_explain(problem, given)
    if svg_path is not None:
        write_svg(problem, given, svg_path)
    extras = explain_extras(problem, given, osdp, partition)
    if fmt != "table":
        out.update({k: v for k, v in extras.items() if k != "text"})
        out = {"schema_version": document.SCHEMA_VERSION, "inputs": document.inputs_dict(problem, {}), **out}
        sys.stdout.write(document.dumps(out, fmt))
        raise typer.Exit(ExitCode.OK if out["feasible"] else ExitCode.NOTHING_FEASIBLE_OR_CHANGED)
    from planner.report.table import training_text

    stdout().print(f"[bold]training[/] {training_text(problem.training)}")
    if not render(out, extras.get("text", []), stdout()):
        raise typer.Exit(ExitCode.NOTHING_FEASIBLE_OR_CHANGED)


def _assignments(items: list[str], with_file: bool) -> dict[str, str]:
    """--set NAME=VALUE pairs (the last of a repeated name wins); only with --from."""
    if items and not with_file:
        raise PlanInputError("is for values a --from file leaves open", field="--set", fix="drop --set, or use --from")
    out: dict[str, str] = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name.strip() or len(name) > 200:
            raise PlanInputError(f"'{item[:60]}' is not NAME=VALUE", field="--set", fix="e.g. --set NNODES=16")
        out[name.strip()] = value
    return out


def write_svg(problem: Problem, given: dict[str, int], path: Path) -> None:
    """The layout's timeline and memory chart, priced as `explain` prices it (even when it breaks a rule)."""
    from planner.report.explain import complete_layout
    from planner.report.html import layout_svg
    from planner.search.search import price_layout

    lay = complete_layout(problem, given)
    write_text(path, layout_svg(problem, lay, price_layout(problem, lay)), "--svg")
    stderr().print(f"wrote {path}")


def _explain_from(path: str, dialect: str | None, model: str | None, cluster: str | None, seq_len: int | None,
                  global_batch: int | None, precision: str | None, framework: str | None, fmt: str,
                  svg_path: Path | None = None, optimizer_offload: float | None = None,
                  optimizer_moments: str | None = None,
                  token_drop: tuple[float | None, bool] = (None, False),
                  assigned: dict[str, str] | None = None) -> None:
    """`--from FILE`: the file's problem and layout (options fill what it leaves out), priced beside the best.
    `token_drop`: the --moe-capacity-factor and --moe-pad-to-capacity options (None / False: the file's);
    `assigned`: the --set values."""
    from planner.inputs.launch_readers import (
        layout_for,
        read_launch_file,
        recompute_note,
        resolve_cluster,
        resolve_model,
    )
    from planner.report import document
    from planner.report.explain_from import explain_from, render_from

    cfg = read_launch_file(path, dialect, assigned)
    resolved_model = resolve_model(cfg, model)
    resolved_cluster = resolve_cluster(cfg, cluster)
    recompute_note(cfg, resolved_model)
    given = layout_for(cfg, resolved_model, resolved_cluster.num_gpus)
    if seq_len is None and cfg.seq_len is None:
        cfg.defaults.append("sequence length 8192: the file does not state one (pass --seq-len)")
    if global_batch is None and cfg.global_batch is None:
        cfg.defaults.append("global batch 512: the file does not state one (pass --global-batch)")
    _warn_read(cfg)
    precision = precision or cfg.precision or "bf16"
    recipe = (cfg.fp8_recipe or "tensorwise") if precision == "fp8" else "tensorwise"
    problem = problem_for(resolved_model, resolved_cluster, seq_len or cfg.seq_len or 8192,
                          global_batch or cfg.global_batch or 512, precision,
                          framework or cfg.framework or framework_for(None, cfg.dialect), None, fp8_recipe=recipe,
                          optimizer_offload=(cfg.optimizer_offload or 0.0) if optimizer_offload is None
                          else optimizer_offload,
                          optimizer_moments=optimizer_moments or cfg.optimizer_moments or "fp32",
                          moe_capacity_factor=cfg.moe_capacity_factor if token_drop[0] is None else token_drop[0],
                          moe_pad_to_capacity=token_drop[1] or cfg.moe_pad_to_capacity)
    out = explain_from(problem, given, cfg)
    if svg_path is not None:
        write_svg(problem, given, svg_path)
    if fmt != "table":
        out = {"schema_version": document.SCHEMA_VERSION, "inputs": document.inputs_dict(problem, {}), **out}
        sys.stdout.write(document.dumps(out, fmt))
    else:
        render_from(out, table_console())
    if not out["yours"]["feasible"]:
        raise typer.Exit(ExitCode.NOTHING_FEASIBLE_OR_CHANGED)


def _warn_read(cfg: object) -> None:
    """What the reader could not price as written, what the file leaves open, and the framework defaults it took:
    one stderr line each."""
    from planner.inputs.files import warn

    source = getattr(cfg, "source", "")
    for label, items in (("not understood, ignored", getattr(cfg, "ignored", [])),
                         ("left open by the file", getattr(cfg, "doubts", [])),
                         ("taken from defaults", getattr(cfg, "defaults", []))):
        if items:
            warn(f"{source}: {label}: {'; '.join(dict.fromkeys(items))}")
