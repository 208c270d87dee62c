"""The options of `plan` and of the commands that plan too (report, sweep, explain), declared once: PlanOptions.

Each field of PlanOptions is one option; its metadata (an Opt) gives its spellings, help, kind, bounds and the commands
that take it, with that command's default and help where they differ from plain `plan`'s. Everything else reads this:
cli/option_types.py builds the typer options of each command from it, cli/quick.py reads a plain `plan` command line
with it (no typer), cli/options.py builds the planning problem from a PlanOptions, and render_options_markdown()
writes the options table of docs/commands.md (tests/test_plan_options.py keeps all of them in step).

Typer-free and pydantic-free: a plain `plan` imports this before anything else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.inputs.layout import KNOBS

COMMANDS = ("plan", "report", "sweep", "explain")
# The stack a planning command plans for when neither --framework nor a launcher format names one: a stack that ships
# (planner.inputs.frameworks.DEFAULT_FRAMEWORK, written out here so that a plain `plan` imports no planner module
# for it; tests/test_plan_options.py keeps the two equal).
DEFAULT_FRAMEWORK = "megatron-core"  # the commands that plan, in the order the docs list them
KINDS = ("str", "int", "float", "flag", "list")
FORMATS_PLAN = ("table", "json", "yaml", "megatron", "torchtitan", "deepspeed", "nemo", "env")  # plan's --format


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


REQUIRED: Any = _Marker("REQUIRED")  # a command's option that has no default: the command line must give it
AS_IN_PLAN: Any = _Marker("AS_IN_PLAN")  # a Variant's default that is plain `plan`'s


# The records below are plain slotted classes, and PlanOptions writes out its methods: a dataclass (or a
# typing.NamedTuple) compiles source for its methods (or its annotations) when its module is imported, a cost every
# plain `plan` run would pay. The records are not changed after the declaration.
class Variant:
    """How one command's option differs from plain `plan`'s: another default (REQUIRED: none; None where the command
    fills it in itself) and the help that says so."""

    __slots__ = ("default", "help")

    def __init__(self, default: Any = AS_IN_PLAN, help: str | None = None) -> None:
        self.default, self.help = default, help


class Opt:
    """One command-line option: its spellings (the long one first), what it does, how its value is read (KINDS:
    `list` is repeatable, `flag` takes no value) and its bounds as typer checks them, and the commands that take it
    (command -> its Variant, or None where it is as in `plan`)."""

    __slots__ = ("flags", "help", "kind", "commands", "lower", "upper")

    def __init__(self, flags: tuple[str, ...], help: str, kind: str, commands: Mapping[str, Variant | None],
                 lower: float | None = None, upper: float | None = None) -> None:
        if kind not in KINDS or not set(commands) <= set(COMMANDS):
            raise ValueError(f"{flags[0]}: kind {kind!r}, commands {sorted(commands)}")
        self.flags, self.help, self.kind, self.commands, self.lower, self.upper = (flags, help, kind, commands, lower,
                                                                                   upper)


def _opt(default: Any, flags: tuple[str, ...], help: str, kind: str, commands: Mapping[str, Variant | None],
         **bounds: Any) -> Any:
    """A PlanOptions field: `default` as plain `plan`'s default, the rest as its Opt."""
    return field(default=default, metadata={"opt": Opt(flags, help, kind, commands, **bounds)})


_ALL: Mapping[str, Variant | None] = dict.fromkeys(COMMANDS)
_FILE = "(default: the file's, else {})"  # explain --from reads these from the launch file when not given


@dataclass(init=False, repr=False, eq=False)  # (its methods are written out below, as for the records above)
class PlanOptions:
    """What a command line asks a planning command to do: which model on which cluster, the training recipe, the
    knobs to pin, the what-ifs, and how much and in what form to report. Every field is an option (its Opt says how
    it is spelled and which commands take it); the problem builder (cli/options.py) reads the recipe fields."""

    model: str | None = _opt(
        None, ("--model", "-m"), "catalog name/alias (see 'plan models'), or a path to a model YAML or Hugging Face "
        "config.json", "str", {"plan": None, "report": Variant(REQUIRED), "sweep": Variant(REQUIRED),
                               "explain": Variant(None, "catalog name/alias, or a model YAML / HF config.json path "
                                                  "(with --from: only if the file does not say)")})
    cluster: str | None = _opt(
        None, ("--cluster", "-c"), "{gpu}x{count} (h100x512, gb200x256) or a cluster YAML", "str",
        {"plan": None, "report": Variant(REQUIRED),
         "explain": Variant(None, "{gpu}x{count} or a cluster YAML (with --from: only if the file does not say)")})
    seq_len: int = _opt(8192, ("--seq-len",), "tokens per sequence", "int",
                        {**_ALL, "explain": Variant(None, "tokens per sequence " + _FILE.format(8192))})
    global_batch: int = _opt(512, ("--global-batch",), "sequences per optimizer step", "int",
                             {"plan": None, "report": None,
                              "explain": Variant(None, "sequences per optimizer step " + _FILE.format(512))})
    precision: str = _opt("bf16", ("--precision",), "bf16 | fp8 | fp4", "str",
                          {**_ALL, "explain": Variant(None, "bf16 | fp8 | fp4 " + _FILE.format("bf16"))})
    framework: str | None = _opt(
        None, ("--framework",), "training stack to plan for: its capabilities limit the search and its behaviour "
        "prices it (generic, megatron-core, megatron (paper era), nemo, torchtitan, deepspeed, llm-foundry, ...); "
        "default: the launcher's framework with --format megatron|nemo|torchtitan|deepspeed, else " + DEFAULT_FRAMEWORK,
        "str",
        {"plan": None, "explain": None,
         "report": Variant(DEFAULT_FRAMEWORK, "training stack to plan for, as in plan: its capabilities limit the "
                           "search and its behaviour prices it"),
         "sweep": Variant(DEFAULT_FRAMEWORK, "training stack to plan for (see plan --help)")})
    fix: tuple[str, ...] = _opt((), ("--fix",), f"pin a knob, KEY=VALUE (repeatable): {' '.join(KNOBS)}", "list",
                                {"plan": None, "report": None})
    top: int = _opt(5, ("--top",), "how many plans to report", "int",
                    {"plan": None, "report": Variant(10, "how many plans to rank")}, lower=1, upper=1000)
    fmt: str = _opt("table", ("--format", "-f"), " | ".join(FORMATS_PLAN), "str",
                    {"plan": None, "sweep": Variant(help="table | json | yaml"),
                     "explain": Variant(help="table | json | yaml")})
    rank: int = _opt(1, ("--rank",), "which plan a launcher format prints", "int", {"plan": None}, lower=1)
    rank_by: str = _opt(
        "preference", ("--rank-by",), "preference: layouts priced within the model's own error of the fastest tie, and "
        "a tie is ranked by what practitioners prefer (no offloading over PCIe, no needless CP, standard schedules, "
        "memory room); time: by predicted step time alone", "str", {"plan": None, "report": None})
    allow_tp_across_nodes: bool = _opt(False, ("--allow-tp-across-nodes",),
                                       "let tensor parallelism leave the NVLink domain", "flag",
                                       {"plan": None, "report": None})
    time_limit: float | None = _opt(None, ("--time-limit",), "cap the search (seconds); the answer then says it is "
                                    "not proven best", "float", {"plan": None, "report": None}, lower=0.01)
    compress: tuple[str, ...] = _opt((), ("--compress",), "what-if: compress each dimension's traffic by a ratio, "
                                     "e.g. dp=4,tp=1.5 (adds codec time)", "list", {"plan": None, "report": None})
    memory_headroom: float = _opt(0.05, ("--memory-headroom",), "share of GPU memory a plan should leave free; plans "
                                  "above (1 - headroom) x capacity rank last and are marked tight", "float",
                                  {"plan": None}, lower=0.0, upper=0.5)
    optimizer_offload: float = _opt(
        0.0, ("--optimizer-offload",), "share of optimizer states kept and stepped in CPU memory; priced as host-link "
        "traffic per step (PCIe or NVLink-C2C)", "float",
        {**_ALL, "explain": Variant(None, "share of optimizer states kept and stepped in CPU memory "
                                    + _FILE.format(0))}, lower=0.0, upper=1.0)
    optimizer: str = _opt(
        "adam", ("--optimizer",), "adam | muon (Megatron-Core's layer-wise distributed Muon: one fp32 momentum, "
        "Newton-Schulz GEMMs in the update, fp32 gradients all-reduced, parameters gathered after the step)", "str",
        _ALL)
    optimizer_moments: str = _opt(
        "fp32", ("--optimizer-moments",), "dtype of Adam's moments: fp32 | bf16 (Megatron-Core's precision-aware "
        "optimizer; halves them)", "str",
        {**_ALL, "explain": Variant(None, "dtype of Adam's moments: fp32 | bf16 " + _FILE.format("fp32"))})
    fp8_recipe: str = _opt(
        "tensorwise", ("--fp8-recipe",), "with --precision fp8: tensorwise (one scale per tensor) | blockwise (1x128 / "
        "128x128 block scales as DeepSeek-V3 trains; slower GEMMs on Hopper)", "str", _ALL)
    timings: bool = _opt(False, ("--timings",), "record search seconds in JSON/YAML (off by default so output is "
                         "byte-identical across runs)", "flag", {"plan": None})
    moe_capacity_factor: float | None = _opt(
        None, ("--moe-capacity-factor",), "token dropping: each expert takes at most this many times its even share "
        "of the routed tokens and drops the rest (Megatron-Core --moe-expert-capacity-factor); default dropless",
        "float", {**_ALL, "explain": Variant(None, "token dropping: each expert's capacity in even shares of the "
                                             "routed tokens (default: the file's, else dropless)")},
        lower=0.01, upper=64.0)
    moe_pad_to_capacity: bool = _opt(False, ("--moe-pad-to-capacity",), "with --moe-capacity-factor: pad every "
                                     "expert's input to its capacity (static shapes; priced as a full capacity of "
                                     "work)", "flag", _ALL)
    moe_force_balance: bool = _opt(False, ("--moe-force-balance",), "the router hands every expert the same token "
                                   "count (Megatron-Core --moe-router-force-load-balancing, a benchmarking switch): "
                                   "priced with every rank at the mean load", "flag", _ALL)
    moe_dispatcher: str = _opt(
        "stack", ("--moe-dispatcher",), "MoE token dispatcher the run uses: stack (the framework's; DeepEP where it "
        "ships it) | alltoall (Megatron-Core's: every routed copy over the wire) | flex (DeepEP/HybridEP: a token "
        "crosses to each remote node once)", "str",
        {**_ALL, "explain": Variant(None, "MoE token dispatcher: stack | alltoall | flex " + _FILE.format("stack"))})
    cuda_graphs: str = _opt(
        "none", ("--cuda-graphs",), "CUDA graph capture the recipe runs: none (eager, the frameworks' default) | "
        "per-layer (attention, router and dispatch preprocessing of dropless MoE layers; whole dense layers) | "
        "full-iteration; removes the host time of what it captures, per-layer graphs keep static buffers", "str",
        _ALL)
    cuda_graph_modules: str | None = _opt(
        None, ("--cuda-graph-modules",), "with --cuda-graphs per-layer, the modules captured, comma-separated "
        "(Megatron-Core --cuda-graph-modules): attn, mlp, moe (drop-and-pad MoE), moe_router, moe_preprocess, mamba; "
        "default: whole layers, a dropless MoE layer's attn, moe_router and moe_preprocess", "str", _ALL)

    param_offload: bool = _opt(False, ("--param-offload",), "with ZeRO-3: keep the parameter partitions in host "
                               "memory and copy each layer's in before its gather (DeepSpeed offload_param); priced "
                               "as host-link traffic per layer and pass", "flag",
                               {"plan": None, "report": None,
                                "explain": Variant(None, "ZeRO-3 parameters in host memory (default: the file's)")})
    tp_comm_overlap: str | None = _opt(
        None, ("--tp-comm-overlap",), "on | off: overlap tensor-parallel collectives with the GEMMs beside them "
        "(Megatron --tp-comm-overlap / NeMo tp_comm_overlap: Transformer Engine userbuffers; torchtitan async TP); "
        "default: as the framework's recipes ship it (on for nemo and generic, off elsewhere)", "str",
        {"plan": None, "report": None,
         "explain": Variant(None, "on | off: TP communication overlap " + _FILE.format("the framework's default"))})
    moe_router_fusion: str | None = _opt(
        None, ("--moe-router-fusion",), "on | off: run the MoE router as Transformer Engine's fused top-k, score and "
        "aux-loss kernels (Megatron-Core --moe-router-fusion / NeMo model.moe_router_fusion), fewer host ops per MoE "
        "layer; default: as the framework's recipes ship it (on for nemo and generic, off for megatron-core)", "str",
        {"plan": None, "report": None,
         "explain": Variant(None, "on | off: the fused MoE router " + _FILE.format("the framework's default"))})
    fp8_attention: str | None = _opt(
        None, ("--fp8-attention",), "on | off: with an fp8 recipe, run the attention core in fp8 (Transformer "
        "Engine's fp8 attention: Megatron-Core fp8_dot_product_attention, Megatron-Bridge "
        "mixed_precision.fp8_dot_product_attention); priced at the bf16 rate, but a model with attention sinks "
        "(gpt-oss) then runs them on cuDNN's unified engine instead of computing every score tile; default: off",
        "str", {"plan": None, "report": None,
                "explain": Variant(None, "on | off: fp8 attention " + _FILE.format("off"))})
    torch_compile: str | None = _opt(
        None, ("--torch-compile",), "on | off: compile the model with torch.compile (torchtitan [compile], Hugging "
        "Face --torch_compile), priced with the compiled kernel rate; default: on for torchtitan, off for deepspeed",
        "str", {"plan": None, "report": None,
                "explain": Variant(None, "on | off: torch.compile " + _FILE.format("the framework's default"))})

    def __init__(self, **values: Any) -> None:
        """Options by field name; one left out takes its default (plain `plan`'s). Frozen, as frozen=True makes it."""
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, values.pop(f.name, f.default))
        if values:
            raise TypeError(f"PlanOptions has no option {sorted(values)[0]!r}")

    def __setattr__(self, name: str, value: object) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PlanOptions) and self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        return "PlanOptions(" + ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self)) + ")"


class CommandOption:
    """One option as one command takes it: the PlanOptions field, its Opt, and this command's default and help."""

    __slots__ = ("name", "opt", "default", "help")

    def __init__(self, name: str, opt: Opt, default: Any, help: str) -> None:
        self.name, self.opt, self.default, self.help = name, opt, default, help


def options_of(command: str) -> tuple[CommandOption, ...]:
    """The options `command` takes, in declaration order (the order of its --help)."""
    out = []
    for f in dataclasses.fields(PlanOptions):
        opt: Opt = f.metadata["opt"]
        if command not in opt.commands:
            continue
        variant = opt.commands[command] or Variant()
        default = f.default if variant.default is AS_IN_PLAN else variant.default
        out.append(CommandOption(f.name, opt, default, variant.help or opt.help))
    return tuple(out)


def plan_options(values: Mapping[str, Any]) -> PlanOptions:
    """PlanOptions from an option parser's values (typer's or cli/quick.py's): repeatable options as tuples, and an
    option left at None (a command's "not given") at PlanOptions' own default."""
    return PlanOptions(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items() if v is not None})


def stated_options(command: str, values: Mapping[str, Any]) -> frozenset[str]:
    """The options of `command` whose value is not its default: what the command line states."""
    defaults = {o.name: o.default for o in options_of(command)}
    return frozenset(k for k, v in values.items() if k in defaults and v != defaults[k])


# --- the options table of docs/commands.md ----------------------------------------------------------------------------
_KIND_WORDS = {"str": "text", "int": "integer", "float": "number", "flag": "flag", "list": "text, repeatable"}


def _shown(value: Any) -> str:
    if value is REQUIRED:
        return "required"
    if value is None:
        return "—"
    if value == ():
        return "none"
    if isinstance(value, bool):
        return "off" if not value else "on"
    return f"`{value}`"


def _bounds(opt: Opt) -> str:
    if opt.lower is None and opt.upper is None:
        return ""
    if opt.upper is None:
        return f" ≥ {opt.lower:g}"
    return f" {opt.lower:g} to {opt.upper:g}"


def render_options_markdown() -> str:
    """The options of the planning commands as a Markdown table (docs/commands.md holds exactly this): one row per
    option, with each command's default and help where it differs from plain `plan`'s."""
    lines = ["| option | value | default | commands | what it does |", "| --- | --- | --- | --- | --- |"]
    for f in dataclasses.fields(PlanOptions):
        opt: Opt = f.metadata["opt"]
        defaults = [_shown(f.default) if "plan" in opt.commands else ""]
        notes = [opt.help]
        commands = [c for c in COMMANDS if c in opt.commands]
        for command in commands:
            variant = opt.commands[command]
            if variant is None:
                continue
            # (a default of None is one the command fills in itself: its help says how)
            if variant.default not in (AS_IN_PLAN, None, f.default):
                defaults.append(f"{command}: {_shown(variant.default)}")
            if variant.help:
                notes.append(f"{command}: {variant.help}")
        flags = ", ".join(f"`{x}`" for x in opt.flags)
        default = "; ".join(d for d in defaults if d)
        lines.append(f"| {flags} | {_KIND_WORDS[opt.kind]}{_bounds(opt)} | {default} | {', '.join(commands)} | "
                     + "<br>".join(n.replace("|", "\\|") for n in notes) + " |")
    return "\n".join(lines) + "\n"
