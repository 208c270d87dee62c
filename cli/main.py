"""The `plan` command line (typer). Exit codes: 0 ok, 1 nothing feasible / check failed, 2 bad input, 3 bug."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer
from rich.console import Console

from planner.errors import NoFeasiblePlan, PlanInputError, single_line

# typer >= 0.20 vendors click and raises its own exception classes; older typer raises click's, and click is then
# installed. run() matches both by shape so that a usage error is one line and exit 2, never an "internal error".

EXAMPLES = """
Examples:

  plan --model llama70b --cluster h100x512

  plan --model ./config.json --cluster a100x1024 --seq-len 4096 --global-batch 1024 --top 10

  plan --model mixtral-8x22b --cluster h100x256 --fix ep=8 --fix tp=2 --format json

  plan explain --model llama70b --cluster h100x512 --layout "tp=8,pp=4,vpp=5,mbs=1,zero=1,recompute=selective"

  plan validate --format json
"""

app = typer.Typer(
    help="Parallelism auto-planner for LLM training: ranked layouts with predicted step time, MFU and memory.",
    epilog=EXAMPLES, add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None,
    no_args_is_help=False, context_settings={"help_option_names": ["-h", "--help"]},
)

FORMATS_PLAN = ("table", "json", "yaml", "megatron", "torchtitan", "deepspeed", "nemo", "env")
ModelOpt = Annotated[str, typer.Option("--model", "-m", help="catalog name/alias (see 'plan models'), or a path to "
                                       "a model YAML or Hugging Face config.json")]
ClusterOpt = Annotated[str, typer.Option("--cluster", "-c", help="{gpu}x{count} (h100x512, gb200x256) or a "
                                         "cluster YAML")]
SeqOpt = Annotated[int, typer.Option("--seq-len", help="tokens per sequence")]
GbsOpt = Annotated[int, typer.Option("--global-batch", help="sequences per optimizer step")]
PrecOpt = Annotated[str, typer.Option("--precision", help="bf16 | fp8 | fp4")]
FwOpt = Annotated[str, typer.Option("--framework", help="training stack whose behaviour and schedules to "
                                    "model: generic, megatron-core, megatron (paper era), nemo, torchtitan, "
                                    "llm-foundry, ...")]


def _stdout() -> Console:
    return Console(no_color="NO_COLOR" in os.environ or None, soft_wrap=False,
                   width=None if sys.stdout.isatty() else 200)


def _stderr() -> Console:
    return Console(stderr=True, no_color="NO_COLOR" in os.environ or None, soft_wrap=True)


def _check_format(fmt: str, allowed: tuple[str, ...]) -> None:
    if fmt not in allowed:
        raise PlanInputError(f"unknown format '{fmt}'", field="--format", fix=f"use one of {', '.join(allowed)}")


def _compress(items: list[str] | None) -> dict[str, float]:
    """`--compress dp=4,tp=1.5`: a what-if compression ratio per parallel dimension (>= 1)."""
    from planner.cost.fabric import DIMENSIONS

    ratios: dict[str, float] = {}
    for item in items or []:
        for part in filter(None, (p.strip() for p in item.split(","))):
            key, _, raw = part.partition("=")
            key = key.strip().lower()
            if key not in DIMENSIONS:
                raise PlanInputError(f"unknown dimension '{key}'", field="--compress",
                                     fix=f"use {', '.join(DIMENSIONS)}, e.g. --compress dp=4,tp=1.5")
            try:
                ratio = float(raw)
            except ValueError:
                raise PlanInputError(f"ratio for {key} must be a number (got '{raw}')", field="--compress",
                                     fix="e.g. --compress dp=4") from None
            if not 1.0 <= ratio <= 1000.0:
                raise PlanInputError(f"ratio for {key} must be between 1 and 1000 (got {raw})", field="--compress",
                                     fix="a ratio of 4 sends a quarter of the bytes")
            ratios[key] = ratio
    return ratios


def _problem(model: str, cluster: str, seq_len: int, global_batch: int, precision: str, framework: str,
             fix: list[str] | None, allow_tp_across_nodes: bool = False, enforce_memory: bool = True,
             compress: list[str] | None = None):
    from pydantic import ValidationError

    from planner.cost.profiles import PROFILES
    from planner.inputs.catalog import load_cluster, load_model
    from planner.inputs.files import pydantic_error
    from planner.inputs.layout import parse_pairs
    from planner.inputs.problem import Problem
    from planner.inputs.specs import TrainingSpec

    if precision not in ("bf16", "fp8", "fp4"):
        raise PlanInputError(f"unknown precision '{precision}'", field="--precision", fix="use bf16, fp8 or fp4")
    if framework not in PROFILES:
        raise PlanInputError(f"unknown framework '{framework}'", field="--framework",
                             fix=f"use one of {', '.join(sorted(PROFILES))}")
    m = load_model(model)
    c = load_cluster(cluster)
    try:
        tr = TrainingSpec(seq_len=seq_len, global_batch=global_batch, precision=precision, framework=framework)
    except ValidationError as exc:
        raise pydantic_error(exc, "options") from None
    if m.max_position_embeddings and seq_len > m.max_position_embeddings:
        _stderr().print(f"warning: --seq-len {seq_len} exceeds the model's max_position_embeddings "
                        f"({m.max_position_embeddings}); Megatron refuses this (set max_position_embeddings)")
    if precision in ("fp8", "fp4") and not (c.gpu.fp8_tflops if precision == "fp8" else c.gpu.fp4_tflops):
        _stderr().print(f"warning: {c.gpu.name} has no {precision} tensor cores; predicting at its bf16 rate")
    fixed = parse_pairs(fix or [], "--fix")
    return Problem(m, c, tr, fixed=fixed, allow_tp_across_nodes=allow_tp_across_nodes, enforce_memory=enforce_memory,
                   compress=_compress(compress))


@app.callback(invoke_without_command=True)
def main(
    ctx: typer.Context,
    model: Annotated[str | None, typer.Option("--model", "-m", help="catalog name/alias, or a model YAML / HF "
                                              "config.json path")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", "-c", help="{gpu}x{count} or a cluster YAML")] = None,
    seq_len: SeqOpt = 8192,
    global_batch: GbsOpt = 512,
    precision: PrecOpt = "bf16",
    framework: FwOpt = "generic",
    fix: Annotated[list[str] | None, typer.Option("--fix", help="pin a knob, KEY=VALUE (repeatable): tp pp dp cp "
                                                  "ep vpp mbs zero recompute sp schedule cp_comm")] = None,
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
    timings: Annotated[bool, typer.Option("--timings", help="record search seconds in JSON/YAML (off by default "
                                          "so output is byte-identical across runs)")] = False,
) -> None:
    """Plan the best parallel layouts for MODEL on CLUSTER (run with no subcommand)."""
    if ctx.invoked_subcommand is not None:
        return
    if model is None or cluster is None:
        missing = "--model" if model is None else "--cluster"
        raise PlanInputError("is required", field=missing, fix="e.g. plan --model llama70b --cluster h100x512")
    _check_format(fmt, FORMATS_PLAN)
    from planner.report import document
    from planner.search.search import search

    problem = _problem(model, cluster, seq_len, global_batch, precision, framework, fix, allow_tp_across_nodes,
                       compress=compress)
    try:
        result = search(problem, top=max(top, rank), time_limit_s=time_limit)
    except NoFeasiblePlan as exc:
        from planner.search.diagnosis import explain_infeasible

        exc.diagnosis.update(explain_infeasible(problem))
        raise
    options = {"fix": {k: v for k, v in sorted(problem.fixed.items())}, "top": top,
               "allow_tp_across_nodes": allow_tp_across_nodes, "time_limit": time_limit,
               "compress": dict(sorted(problem.compress.items()))}
    doc = document.build(result, options)
    doc["search"]["seconds"] = round(result.seconds, 3) if timings else None
    if fmt == "table":
        from planner.report.table import render

        render(result, _stdout())
    elif fmt in ("json", "yaml"):
        sys.stdout.write(document.dumps(doc, fmt))
    else:
        from planner.report.launchers import render as render_launcher

        sys.stdout.write(render_launcher(doc, fmt, rank))


@app.command()
def explain(
    model: ModelOpt,
    cluster: ClusterOpt,
    layout: Annotated[str, typer.Option("--layout", "-l", help="knobs as 'tp=8,pp=4,vpp=5,mbs=1,zero=1,"
                                        "recompute=selective'; the rest take defaults")],
    seq_len: SeqOpt = 8192,
    global_batch: GbsOpt = 512,
    precision: PrecOpt = "bf16",
    framework: FwOpt = "generic",
    fmt: Annotated[str, typer.Option("--format", "-f", help="table | json | yaml")] = "table",
    osdp: Annotated[bool, typer.Option("--osdp", help="also solve per-layer sharded vs replicated parameters "
                                       "(OSDP, CP-SAT knapsack) for this data-parallel layout")] = False,
    partition: Annotated[bool, typer.Option("--partition", help="also balance layers (and recompute) per "
                                            "pipeline stage with CP-SAT")] = False,
) -> None:
    """Price one layout in full: time and memory breakdown, schedule timeline, every rule it breaks."""
    from planner.inputs.layout import parse_pairs
    from planner.report import document
    from planner.report.explain import explain as run_explain

    _check_format(fmt, ("table", "json", "yaml"))
    problem = _problem(model, cluster, seq_len, global_batch, precision, framework, None)
    given = parse_pairs([layout], "--layout")
    out = run_explain(problem, given)
    extras = _explain_extras(problem, given, osdp, partition)
    if fmt != "table":
        out.update({k: v for k, v in extras.items() if k != "text"})
        out = {"schema_version": document.SCHEMA_VERSION, "inputs": document.inputs_dict(problem, {}), **out}
        sys.stdout.write(document.dumps(out, fmt))
        raise typer.Exit(0 if out["feasible"] else 1)
    con = _stdout()
    lay = out["layout"]
    con.print(f"[bold]layout[/] {', '.join(f'{k}={v}' for k, v in lay.items())}")
    mt = out["metrics"]
    con.print(f"step {mt['step_time_s']:.3f} s, {mt['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU, MFU {mt['mfu']:.1%}, "
              f"peak memory {mt['memory_peak_gib']:.1f} of {mt['memory_capacity_gib']:g} GiB")
    bd = out["breakdown"]
    con.print("time (s per step): " + ", ".join(f"{k.removesuffix('_s')} {v:.3f}" for k, v in bd.items()
                                                 if k.endswith("_s")))
    con.print("memory (GiB, busiest stage): " + ", ".join(f"{k} {v:.2f}" for k, v in bd["memory_gib"].items()))
    first, last = out["stages"]["first"], out["stages"]["last"]
    con.print(f"stages: first {first['memory_gib']:.1f} GiB, {first['microbatch_fwd_bwd_s'] * 1e3:.1f} ms per "
              f"micro-batch; last {last['memory_gib']:.1f} GiB, {last['microbatch_fwd_bwd_s'] * 1e3:.1f} ms per "
              "micro-batch (fwd+bwd)")
    con.print(out["timeline"], highlight=False, markup=False)
    for text in extras.get("text", []):
        con.print(text, highlight=False, markup=False)
    if out["broken_rules"]:
        for r in out["broken_rules"]:
            con.print(f"[red]breaks[/] {r['rule']}: {r['message']} (fix: {r['fix']})")
        raise typer.Exit(1)
    con.print("[green]satisfies every rule[/]")


def _explain_extras(problem, given: dict[str, int], osdp: bool, partition: bool) -> dict:
    import dataclasses

    from planner.report.explain import complete_layout

    lay = complete_layout(problem, given)
    out: dict = {"text": []}
    if osdp:
        from planner.strategies.osdp import plan_osdp, render_osdp

        plan = plan_osdp(problem, lay)
        out["osdp"] = _jsonable(dataclasses.asdict(plan))
        out["text"].append(render_osdp(plan))
    if partition:
        from planner.strategies.partition import partition_for, render_partition

        part = partition_for(problem, lay)
        out["partition"] = _jsonable(dataclasses.asdict(part))
        out["text"].append(render_partition(part))
    return out


def _jsonable(obj):
    """Tuples to lists, numpy scalars to floats, non-finite to None: JSON/YAML-safe and deterministic."""
    import math

    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "item"):
        obj = obj.item()
    if isinstance(obj, float):
        return round(obj, 9) if math.isfinite(obj) else None
    return obj


@app.command()
def models(fmt: Annotated[str, typer.Option("--format", "-f", help="table | json")] = "table") -> None:
    """List the model catalog."""
    import json

    _check_format(fmt, ("table", "json"))
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
    from rich.table import Table

    t = Table("name", "aliases", "params", "active", "layers", "hidden", "experts")
    for r in rows:
        t.add_row(r["name"], ", ".join(r["aliases"]), f"{r['params'] / 1e9:.1f}B", f"{r['active_params'] / 1e9:.1f}B",
                  str(r["layers"]), str(r["hidden_size"]), str(r["experts"] or "-"))
    _stdout().print(t)


@app.command()
def clusters(fmt: Annotated[str, typer.Option("--format", "-f", help="table | json")] = "table") -> None:
    """List the GPU catalog; any {gpu}x{count} is a cluster."""
    import json

    _check_format(fmt, ("table", "json"))
    from planner.inputs.catalog import gpu_catalog

    cat = gpu_catalog()
    if fmt == "json":
        sys.stdout.write(json.dumps(cat, indent=2, sort_keys=True) + "\n")
        return
    from rich.table import Table

    t = Table("gpu", "name", "GiB", "BF16 TF", "FP8 TF", "HBM TB/s", "NVLink GB/s", "domain", "net GB/s")
    for key, g in cat.items():
        t.add_row(key, g["name"], f"{g['memory_gib']:g}", f"{g['bf16_tflops']:g}", f"{g.get('fp8_tflops', '-')}",
                  f"{g['hbm_tbps']:g}", f"{g['nvlink_gbps']:g}", str(g["nvlink_domain"]), f"{g['network_gbps']:g}")
    _stdout().print(t)
    _stdout().print("Use any count: h100x512, gb200x256, a100-40gx64. Or describe a cluster in YAML (README).")


@app.command()
def validate(
    cases: Annotated[str | None, typer.Option("--cases", help="case file (schema_version 1); default: the "
                                              "published runs shipped with plan")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table | json")] = "table",
) -> None:
    """Score the cost model against measured, published training runs."""
    from planner.evidence.validate import validate as run_validate
    from planner.report import document

    _check_format(fmt, ("table", "json", "yaml"))
    report = run_validate(cases)
    if fmt == "table":
        from planner.report.table import render_validation

        render_validation(report, _stdout())
    else:
        sys.stdout.write(document.dumps(report, fmt))


@app.command()
def dsp(
    dims: Annotated[str, typer.Option("--dims", help="sequence dimensions, e.g. T=16,S=4096")],
    hidden: Annotated[int, typer.Option("--hidden", min=1, help="hidden size")],
    heads: Annotated[int, typer.Option("--heads", min=1, help="attention heads")],
    blocks: Annotated[int, typer.Option("--blocks", min=1, help="transformer blocks")],
    sp: Annotated[int, typer.Option("--sp", min=1, help="sequence-parallel degree (GPUs)")],
    cluster: ClusterOpt = "h100x8",
    pattern: Annotated[str | None, typer.Option("--pattern", help="dimension each block attends over, e.g. TSTS "
                                                "or T,S,T,S (default: cycle through --dims)")] = None,
    batch: Annotated[int, typer.Option("--batch", min=1, help="sequences per GPU")] = 1,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table | json")] = "table",
) -> None:
    """Multi-dimensional sequences (video): DSP's dimension switching vs Ulysses / ring in every attention."""
    import dataclasses
    import json

    from planner.inputs.catalog import load_cluster
    from planner.strategies.dsp import MultiDimSequence, compare, parse_dims, render_dsp

    if fmt not in ("table", "json"):
        raise PlanInputError(f"unknown format '{fmt}'", field="--format", fix="use table or json")
    names = parse_dims(dims)
    pat = None
    if pattern:
        pat = tuple(p for p in pattern.split(",")) if "," in pattern else tuple(pattern)
    spec = MultiDimSequence(dims=names, hidden=hidden, heads=heads, blocks=blocks, pattern=pat, batch=batch)
    result = compare(spec, sp, load_cluster(cluster))
    if fmt == "json":
        sys.stdout.write(json.dumps(_jsonable(dataclasses.asdict(result)), indent=2, sort_keys=True) + "\n")
    else:
        _stdout().print(render_dsp(result), highlight=False, markup=False)


def _print_infeasible(exc: NoFeasiblePlan) -> None:
    err = _stderr()
    d = exc.diagnosis
    err.print(f"no feasible plan: {exc.message}")
    for reason in d.get("reasons", []):
        err.print(f"  binding: {reason}")
    if d.get("suggestions"):
        err.print("  would help: " + "; ".join(d["suggestions"]))


from cli.calibrate import register as _register_calibrate  # noqa: E402 - commands defined in their own modules
from cli.regression import register as _register_regression  # noqa: E402

_register_regression(app)
_register_calibrate(app)


def run() -> None:
    """Console-script entry point: map errors to exit codes, never show a traceback."""
    try:
        rc = app(standalone_mode=False)
        sys.exit(rc if isinstance(rc, int) else 0)
    except PlanInputError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        sys.exit(2)
    except NoFeasiblePlan as exc:
        _print_infeasible(exc)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as exc:  # noqa: BLE001 - the promise is "never a traceback"; report and exit 3
        name = type(exc).__name__
        if name == "Exit":
            sys.exit(getattr(exc, "exit_code", 0))
        if name == "Abort":
            print("aborted", file=sys.stderr)
            sys.exit(130)
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            print(single_line(f"error: {exc.format_message()} (fix: see 'plan --help')"), file=sys.stderr)
            sys.exit(2)
        print(single_line(f"internal error: {type(exc).__name__}: {exc} (please report with the command line)"),
              file=sys.stderr)
        sys.exit(3)


if __name__ == "__main__":
    run()
