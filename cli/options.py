"""What several commands share: the consoles, format and framework checks, and the problem the options describe.
Typer-free (the options are declared in cli/plan_options.py, their typer parameters built in cli/option_types.py),
so that cli/quick.py runs a plan without typer."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from planner.errors import PlanInputError

if TYPE_CHECKING:  # imported on use: `plan --help` and `plan models` need no pydantic specs, JSON output no rich
    from rich.console import Console

    from cli.plan_options import PlanOptions
    from planner.inputs.problem import Problem
    from planner.inputs.specs import ClusterSpec, ModelSpec


def stdout() -> Console:
    from rich.console import Console

    return Console(no_color="NO_COLOR" in os.environ or None, soft_wrap=False,
                   width=None if sys.stdout.isatty() else 200)


def table_console() -> Console:
    from rich.console import Console

    """stdout for tables: a terminal's own width, or COLUMNS (80 when unset) when piped, so that output is the same
    on every machine unless the caller asks for a width."""
    width: int | None = None
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) >= 40:
        width = int(columns)
    elif not sys.stdout.isatty():
        width = 80
    return Console(no_color="NO_COLOR" in os.environ or None, soft_wrap=False, width=width)


def stderr() -> Console:
    from rich.console import Console

    return Console(stderr=True, no_color="NO_COLOR" in os.environ or None, soft_wrap=True)


def check_format(fmt: str, allowed: tuple[str, ...]) -> None:
    if fmt not in allowed:
        raise PlanInputError(f"unknown format '{fmt}'", field="--format", fix=f"use one of {', '.join(allowed)}")


def check_rank_by(rank_by: str) -> None:
    from planner.search.preference import RANK_BY

    if rank_by not in RANK_BY:
        raise PlanInputError(f"unknown ranking '{rank_by}'", field="--rank-by", fix=f"use {' or '.join(RANK_BY)}")


def framework_for(framework: str | None, fmt: str) -> str:
    """The framework to plan for: as given, or implied by a launcher format (`--format deepspeed` plans for
    DeepSpeed). A launcher format with a framework it cannot launch is a bad input, not a silent switch."""
    from planner.inputs.frameworks import DEFAULT_FRAMEWORK, FRAMEWORK_FOR_FORMAT, LAUNCHES

    implied = FRAMEWORK_FOR_FORMAT.get(fmt)
    if framework is None:
        return implied or DEFAULT_FRAMEWORK
    if implied and framework not in LAUNCHES[fmt]:
        raise PlanInputError(f"--format {fmt} launches {', '.join(LAUNCHES[fmt])}, not '{framework}'",
                             field="--framework",
                             fix=f"drop --framework (it defaults to {implied}) or use --format env")
    return framework


def build_problem(options: PlanOptions) -> Problem:
    """The planning problem the options describe (their model and cluster loaded from the catalog or a file); one
    PlanInputError for any bad option."""
    from planner.inputs.catalog import load_cluster, load_model

    if options.model is None or options.cluster is None:
        missing = "--model" if options.model is None else "--cluster"
        raise PlanInputError("is required", field=missing, fix="e.g. --model llama70b --cluster h100x512")
    _check_names(options.precision, framework_for(options.framework, options.fmt))
    return problem_for(load_model(options.model), load_cluster(options.cluster), options)


def _check_names(precision: str, framework: str) -> None:
    from planner.cost.profiles import PROFILE_NAMES

    if precision not in ("bf16", "fp8", "fp4"):
        raise PlanInputError(f"unknown precision '{precision}'", field="--precision", fix="use bf16, fp8 or fp4")
    if framework not in PROFILE_NAMES:
        raise PlanInputError(f"unknown framework '{framework}'", field="--framework",
                             fix=f"use one of {', '.join(sorted(PROFILE_NAMES))}")


def _check_fp8_recipe(fp8_recipe: str, precision: str, framework: str) -> None:
    from planner.inputs.frameworks import capabilities_for
    from planner.inputs.specs import FP8_RECIPES

    if fp8_recipe not in FP8_RECIPES:
        raise PlanInputError(f"unknown fp8 recipe '{fp8_recipe}'", field="--fp8-recipe",
                             fix=f"use {' or '.join(FP8_RECIPES)}")
    if fp8_recipe == "blockwise" and precision != "fp8":
        raise PlanInputError(f"blockwise scaling is an fp8 recipe, not {precision}", field="--fp8-recipe",
                             fix="add --precision fp8, or drop --fp8-recipe")
    if fp8_recipe == "blockwise" and not capabilities_for(framework).blockwise_fp8:
        raise PlanInputError(f"{framework} has no block-scaled fp8 recipe", field="--fp8-recipe",
                             fix="use --fp8-recipe tensorwise, or --framework megatron-core / nemo")


def _check_moe_dispatcher(dispatcher: str | None, capacity_factor: float | None) -> str:
    """--moe-dispatcher as the training takes it (None: the stack's)."""
    dispatcher = dispatcher or "stack"
    if dispatcher not in ("stack", "alltoall", "flex"):
        raise PlanInputError(f"unknown MoE dispatcher '{dispatcher[:40]}'", field="--moe-dispatcher",
                             fix="use stack, alltoall or flex")
    if dispatcher == "flex" and capacity_factor is not None:  # transformer_config.py refuses padding with DeepEP
        raise PlanInputError("token dropping runs on the alltoall dispatcher, not flex (DeepEP)",
                             field="--moe-dispatcher",
                             fix="use --moe-dispatcher alltoall, or drop --moe-capacity-factor")
    return dispatcher


def _check_cuda_graphs(cuda_graphs: str) -> None:
    from planner.cost.host import GRAPH_SCOPES

    if cuda_graphs not in GRAPH_SCOPES:
        raise PlanInputError(f"unknown CUDA graph scope '{cuda_graphs}'", field="--cuda-graphs",
                             fix=f"use {' | '.join(GRAPH_SCOPES)}")


def _graph_modules(modules: str | None, cuda_graphs: str) -> tuple[str, ...] | None:
    """--cuda-graph-modules as the tuple TrainingSpec takes (None when not given)."""
    from planner.inputs.specs import GRAPH_MODULES

    if modules is None:
        return None
    names = tuple(m.strip() for m in modules.split(",") if m.strip())
    unknown = [m for m in names if m not in GRAPH_MODULES]
    if unknown or not names:
        raise PlanInputError(f"unknown CUDA graph module '{unknown[0] if unknown else modules}'",
                             field="--cuda-graph-modules", fix=f"use a comma list of {', '.join(GRAPH_MODULES)}")
    if cuda_graphs != "per-layer":
        raise PlanInputError("--cuda-graph-modules names what per-layer capture takes", field="--cuda-graph-modules",
                             fix="add --cuda-graphs per-layer, or drop --cuda-graph-modules")
    return names


def _check_token_drop(m: ModelSpec, framework: str, capacity: float | None, padded: bool) -> None:
    from planner.inputs.frameworks import capabilities_for

    if padded and capacity is None:
        raise PlanInputError("pads each expert's input to its capacity, and no capacity is set",
                             field="--moe-pad-to-capacity", fix="add --moe-capacity-factor (e.g. 1.0)")
    if capacity is None:
        return
    if capacity <= 0:
        raise PlanInputError(f"must be positive, got {capacity:g}", field="--moe-capacity-factor",
                             fix="e.g. --moe-capacity-factor 1.25 (or leave it out: dropless)")
    if not m.is_moe:
        stderr().print("warning: --moe-capacity-factor has no effect: the model has no experts")
    elif not capabilities_for(framework).token_drop:
        raise PlanInputError(f"{framework} trains mixture-of-experts layers dropless; it has no capacity factor",
                             field="--moe-capacity-factor",
                             fix="leave it out, or plan for --framework megatron-core / nemo")


def _on_off(value: str | None, flag: str) -> bool | None:
    if value is None:
        return None
    if value not in ("on", "off"):
        raise PlanInputError(f"expected on or off, got '{value[:40]}'", field=flag, fix=f"use {flag} on or {flag} off")
    return value == "on"


def recipe_switches(framework: str, tp_comm_overlap: str | None, torch_compile: str | None,
                    moe_router_fusion: str | None = None) -> dict[str, bool]:
    """--tp-comm-overlap, --torch-compile and --moe-router-fusion as the training prices them: as given, else the
    framework's default (planner.cost.profiles); one asked for where the framework has no such switch is refused."""
    from planner.cost.profiles import profile_for
    from planner.inputs.frameworks import capabilities_for

    prof = profile_for(framework)
    overlap, compile_ = _on_off(tp_comm_overlap, "--tp-comm-overlap"), _on_off(torch_compile, "--torch-compile")
    if overlap and not prof.tp_comm_method:
        raise PlanInputError(f"{framework} has no switch to overlap tensor-parallel collectives with GEMMs",
                             field="--tp-comm-overlap", fix="drop it, or plan for megatron-core, nemo or torchtitan")
    if compile_ and prof.compile_speedup <= 1.0:
        raise PlanInputError(f"{framework} runs its own fused kernels; the planner has no torch.compile switch for it",
                             field="--torch-compile", fix="drop it, or plan for torchtitan or deepspeed")
    overlap = prof.tp_comm_overlap if overlap is None else overlap
    compile_ = prof.compile_speedup > 1.0 and (prof.compiles_by_default if compile_ is None else compile_)
    if overlap and prof.tp_comm_method == "async-tp" and not compile_:
        raise PlanInputError(f"{framework}'s async tensor parallelism needs torch.compile", field="--tp-comm-overlap",
                             fix="add --torch-compile on, or --tp-comm-overlap off")
    fused = _on_off(moe_router_fusion, "--moe-router-fusion")
    if fused and not capabilities_for(framework).moe_router_fusion:
        raise PlanInputError(f"{framework} routes MoE tokens with its own code; the fused router is Megatron-Core's",
                             field="--moe-router-fusion", fix="drop it, or plan for megatron-core, nemo or generic")
    fused = prof.moe_router_fusion if fused is None else fused
    return {"tp_comm_overlap": overlap, "torch_compile": compile_, "moe_router_fusion": fused}


def _attention_kernel(fp8_attention: str | None, precision: str, framework: str) -> str:
    """--fp8-attention as TrainingSpec.attention_kernel: `fp8` where asked for, an fp8 recipe runs and the framework
    has Transformer Engine's fp8 attention; else the stack's kernel."""
    from planner.inputs.frameworks import capabilities_for

    if not _on_off(fp8_attention, "--fp8-attention"):
        return "stack"
    if precision not in ("fp8", "fp4"):
        raise PlanInputError("fp8 attention runs inside an fp8 recipe", field="--fp8-attention",
                             fix="add --precision fp8, or drop --fp8-attention")
    if not capabilities_for(framework).fp8_attention:
        raise PlanInputError(f"{framework} runs its attention in bf16 (no fp8 attention switch)",
                             field="--fp8-attention", fix="drop it, or plan for megatron-core, nemo or generic")
    return "fp8"


def problem_for(m: ModelSpec, c: ClusterSpec, options: PlanOptions) -> Problem:
    """The planning problem of `options` for a loaded model and cluster (`explain --from` reads them from a launch
    file; options.model and options.cluster are not read)."""
    from pydantic import ValidationError

    from planner.cost.profiles import plan_compiles_loss
    from planner.inputs.files import pydantic_error
    from planner.inputs.frameworks import (
        capabilities_for,
        moments_refusal,
        offload_refusal,
        optimizer_refusal,
        precision_refusal,
    )
    from planner.inputs.layout import parse_pairs
    from planner.inputs.problem import Problem, parse_compress
    from planner.inputs.specs import TrainingSpec

    o, framework = options, framework_for(options.framework, options.fmt)
    _check_names(o.precision, framework)
    refusal = precision_refusal(framework, o.precision, m.is_moe)
    if refusal:
        raise PlanInputError(refusal, field="--precision",
                             fix="use --precision bf16, or a framework with this recipe (megatron-core, nemo)")
    refusal = offload_refusal(framework, o.optimizer_offload)
    if refusal:
        raise PlanInputError(refusal, field="--optimizer-offload",
                             fix="use 0 or 1 as the framework allows, or --framework megatron-core (any share)")
    if o.optimizer not in ("adam", "muon"):
        raise PlanInputError(f"unknown optimizer '{o.optimizer[:40]}'", field="--optimizer", fix="use adam or muon")
    refusal = optimizer_refusal(framework, o.optimizer)
    if refusal:
        raise PlanInputError(refusal, field="--optimizer", fix="use adam, or --framework megatron-core / nemo")
    if o.optimizer == "muon" and (o.optimizer_moments != "fp32" or o.optimizer_offload > 0):
        raise PlanInputError("bf16 moments and optimizer offload are Adam's (Megatron-Core's precision-aware "
                             "optimizer); Muon keeps one fp32 momentum on the GPU", field="--optimizer",
                             fix="drop --optimizer-moments / --optimizer-offload, or use --optimizer adam")
    if o.optimizer_moments not in ("fp32", "bf16"):
        raise PlanInputError(f"unknown moment dtype '{o.optimizer_moments}'", field="--optimizer-moments",
                             fix="use fp32 or bf16")
    refusal = moments_refusal(framework, o.optimizer_moments)
    if refusal:
        raise PlanInputError(refusal, field="--optimizer-moments",
                             fix="use fp32, or --framework megatron-core / nemo (precision-aware optimizer)")
    _check_fp8_recipe(o.fp8_recipe, o.precision, framework)
    if o.param_offload and not capabilities_for(framework).param_offload:
        raise PlanInputError(f"{framework} has no switch to keep ZeRO-3 parameters in host memory",
                             field="--param-offload", fix="drop it, or plan for --framework deepspeed")
    _check_token_drop(m, framework, o.moe_capacity_factor, o.moe_pad_to_capacity)
    _check_cuda_graphs(o.cuda_graphs)
    if o.cuda_graphs not in capabilities_for(framework).cuda_graphs:
        raise PlanInputError(f"{framework} launches without CUDA graphs (it has no switch for them)",
                             field="--cuda-graphs", fix="drop it, or plan for --framework megatron-core / nemo")
    dispatcher = _check_moe_dispatcher(o.moe_dispatcher, o.moe_capacity_factor)
    attention = _attention_kernel(o.fp8_attention, o.precision, framework)
    try:
        tr = TrainingSpec(seq_len=o.seq_len, global_batch=o.global_batch, precision=o.precision, framework=framework,
                          optimizer_offload=o.optimizer_offload, optimizer_moments=o.optimizer_moments,
                          optimizer=o.optimizer,
                          fp8_recipe=o.fp8_recipe, moe_capacity_factor=o.moe_capacity_factor,
                          moe_pad_to_capacity=o.moe_pad_to_capacity, cuda_graphs=o.cuda_graphs,
                          cuda_graph_modules=_graph_modules(o.cuda_graph_modules, o.cuda_graphs),
                          moe_force_balance=o.moe_force_balance,
                          moe_dispatcher=dispatcher, param_offload=bool(o.param_offload), attention_kernel=attention,
                          **recipe_switches(framework, o.tp_comm_overlap, o.torch_compile, o.moe_router_fusion))
    except ValidationError as exc:
        raise pydantic_error(exc, "options") from None
    if m.max_position_embeddings and o.seq_len > m.max_position_embeddings:
        stderr().print(f"warning: --seq-len {o.seq_len} exceeds the model's max_position_embeddings "
                       f"({m.max_position_embeddings}); Megatron refuses this (set max_position_embeddings)")
    if o.precision in ("fp8", "fp4") and not (c.gpu.fp8_tflops if o.precision == "fp8" else c.gpu.fp4_tflops):
        stderr().print(f"warning: {c.gpu.name} has no {o.precision} tensor cores; predicting at its bf16 rate")
    fixed = parse_pairs(list(o.fix), "--fix")
    return Problem(m, c, tr, fixed=fixed, allow_tp_across_nodes=o.allow_tp_across_nodes,
                   compress=parse_compress(o.compress), memory_headroom=o.memory_headroom,
                   compiled_loss=plan_compiles_loss(tr))
