"""`plan explain`: one layout priced in full, given as --layout or read from a launch file (--from)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.commands.report import writable_path, write_text
from cli.exit_codes import ExitCode
from cli.option_types import SetOpt, plan_command
from cli.options import (
    build_problem,
    check_format,
    framework_for,
    problem_for,
    stderr,
    stdout,
    table_console,
)
from cli.plan_options import PlanOptions
from planner.errors import PlanInputError

if TYPE_CHECKING:
    from planner.inputs.launch_readers import LaunchConfig
    from planner.inputs.layout import Knobs
    from planner.inputs.problem import Problem


@plan_command("explain", after="cluster")
def explain(
    options: PlanOptions,
    stated: frozenset[str],
    layout: Annotated[str | None, typer.Option("--layout", "-l", help="knobs as 'tp=8,pp=4,vpp=5,mbs=1,zero=1,"
                                               "recompute=selective'; the rest take defaults")] = None,
    from_file: Annotated[str | None, typer.Option(
        "--from", help="a launch configuration to price instead of --layout: Megatron-LM flags or script, torchtitan "
        "TOML, DeepSpeed ds_config JSON or Megatron-Bridge (NeMo) overrides; the best alternatives are shown "
        "with what changes")] = None,
    dialect: Annotated[str | None, typer.Option("--dialect", help="with --from: megatron | torchtitan | deepspeed | "
                                                "nemo | llm-foundry (default: detected)")] = None,
    assign: SetOpt = None,
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

    fmt = options.fmt
    check_format(fmt, ("table", "json", "yaml"))
    if (layout is None) == (from_file is None):
        raise PlanInputError("give exactly one of --layout and --from", field="--layout",
                             fix='e.g. --layout "tp=8,pp=4" or --from launch.sh')
    assigned = _assignments(assign or [], from_file is not None)
    svg_path = writable_path(svg, "--svg", ".svg") if svg is not None else None
    if from_file is not None:
        _explain_from(from_file, dialect, options, stated, svg_path, assigned)
        return
    if options.model is None or options.cluster is None:
        raise PlanInputError("is required with --layout", field="--model" if options.model is None else "--cluster",
                             fix="e.g. --model llama70b --cluster h100x512")
    from planner.inputs.layout import parse_pairs

    problem = build_problem(options)
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


def write_svg(problem: Problem, given: Knobs, path: Path) -> None:
    """The layout's timeline and memory chart, priced as `explain` prices it (even when it breaks a rule)."""
    from planner.report.explain import complete_layout
    from planner.report.html import layout_svg
    from planner.search.search import price_layout

    lay = complete_layout(problem, given)
    write_text(path, layout_svg(problem, lay, price_layout(problem, lay)), "--svg")
    stderr().print(f"wrote {path}")


def _explain_from(path: str, dialect: str | None, options: PlanOptions, stated: frozenset[str],
                  svg_path: Path | None = None, assigned: dict[str, str] | None = None) -> None:
    """`--from FILE`: the file's problem and layout (options fill what it leaves out, and override what they state),
    priced beside the best. `assigned`: the --set values."""
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
    resolved_model = resolve_model(cfg, options.model)
    resolved_cluster = resolve_cluster(cfg, options.cluster)
    recompute_note(cfg, resolved_model)
    given = layout_for(cfg, resolved_model, resolved_cluster.num_gpus)
    if "seq_len" not in stated and cfg.seq_len is None:
        cfg.defaults.append(f"sequence length {options.seq_len}: the file does not state one (pass --seq-len)")
    if "global_batch" not in stated and cfg.global_batch is None:
        cfg.defaults.append(f"global batch {options.global_batch}: the file does not state one (pass --global-batch)")
    _warn_read(cfg)
    problem = problem_for(resolved_model, resolved_cluster, _with_file(options, stated, cfg))
    if cfg.pipeline_layout is not None:  # the file's own stage split, priced as it states it
        from planner.inputs.problem import stated_layout

        problem = stated_layout(problem, cfg.pipeline_layout, "--pipeline-model-parallel-layout")
    fmt = options.fmt
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


def _warn_read(cfg: LaunchConfig) -> None:
    """What the reader could not price as written, what the file leaves open, and the framework defaults it took:
    one stderr line each."""
    from planner.inputs.files import warn

    for label, items in (("not understood, ignored", cfg.ignored), ("left open by the file", cfg.doubts),
                         ("taken from defaults", cfg.defaults)):
        if items:
            warn(f"{cfg.source}: {label}: {'; '.join(dict.fromkeys(items))}")


def _with_file(options: PlanOptions, stated: frozenset[str], cfg: LaunchConfig) -> PlanOptions:
    """The options for a launch file: what the command line states, else what the file says, else the defaults.
    The fp8 recipe is always the file's (blockwise only where it says so and trains in fp8)."""
    switches = {k: None if v is None else ("on" if v else "off")
                for k, v in (("tp_comm_overlap", cfg.tp_comm_overlap), ("torch_compile", cfg.torch_compile),
                             ("moe_router_fusion", cfg.moe_router_fusion), ("fp8_attention", cfg.fp8_attention))}
    file = {"seq_len": cfg.seq_len, "global_batch": cfg.global_batch, "precision": cfg.precision,
            "optimizer_offload": cfg.optimizer_offload, "optimizer_moments": cfg.optimizer_moments,
            "optimizer": cfg.optimizer,
            "moe_capacity_factor": cfg.moe_capacity_factor, "moe_pad_to_capacity": cfg.moe_pad_to_capacity,
            "param_offload": cfg.param_offload, "moe_dispatcher": cfg.moe_dispatcher,
            "moe_force_balance": cfg.moe_force_balance, "cuda_graphs": cfg.cuda_graphs,
            "cuda_graph_modules": None if cfg.cuda_graph_modules is None else ",".join(cfg.cuda_graph_modules),
            **switches}
    # (a capacity factor the file states is taken as it is; the other figures only where they are set and not zero)
    merged = replace(options, **{k: v for k, v in file.items()
                                 if k not in stated and (v is not None if k == "moe_capacity_factor" else v)})
    recipe = (cfg.fp8_recipe or "tensorwise") if merged.precision == "fp8" else "tensorwise"
    framework = options.framework or cfg.framework or framework_for(None, cfg.dialect)
    return replace(merged, fp8_recipe=recipe, framework=framework)
