"""Read a Megatron-LM (or Megatron-DeepSpeed) launch into a LaunchConfig: the `pretrain_gpt.py` / `pretrain_mamba.py`
command a script runs, found by planner.inputs.launch_readers.shell (variables, arrays, quoted flag strings,
defaults, branches, `bash -c`, sbatch here-documents), its flags read as Megatron's argparse reads them (exact names,
the last repeat wins; arguments.py builds its parser with allow_abbrev=False), and the torchrun / srun / deepspeed
launcher in front of it for the world size. A bare list of flags (what `--format megatron` writes) works too.

Every flag that changes the price is read, or named in the "not understood" warning; a value the script leaves to a
variable it never sets is an error naming the variable (pass it with --set), and one taken from a scheduler variable's
default or an undecided branch is read and named in the doubts warning. The model comes from the shape flags with
Megatron's defaults for the ones left out (planner.inputs.launch_readers.megatron_model).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from planner.errors import PlanInputError
from planner.inputs.files import read_text
from planner.inputs.launch_readers import deepspeed, megatron_model
from planner.inputs.launch_readers import megatron_flags as mf
from planner.inputs.launch_readers._common import (
    LaunchConfig,
    as_int,
    as_share,
    cuda_graphs,
    moments_dtype,
    read_fine_grained_offload,
    read_header,
    read_optimizer,
    token_drop,
)
from planner.inputs.launch_readers.shell import Command, Script, read_script
from planner.inputs.launch_readers.shell_values import Field

_LAUNCHERS = {"torchrun", "torch.distributed.run", "torch.distributed.launch", "deepspeed", "srun", "mpirun"}


def _entry(command: Command) -> int | None:
    """Where the command names a Megatron entry point (not where it only prints one: `echo $CMD`)."""
    if not command.argv or PurePosixPath(command.argv[0].text).name in ("echo", "printf"):
        return None
    return next((i for i, w in enumerate(command.argv)
                 if PurePosixPath(w.text).name in mf.ENTRY_SCRIPTS + mf.OTHER_ENTRIES), None)


def launch_args(script: Script) -> tuple[list[Field], list[Field], str | None]:
    """(the launcher's arguments before the entry script, the entry script's arguments, its name) of the last command
    that runs a Megatron entry point; with none, every `--flag` of the file (a bare flag list) and no launcher."""
    for command in reversed(script.commands):
        i = _entry(command)
        if i is not None:
            return command.argv[:i], command.argv[i + 1:], PurePosixPath(command.argv[i].text).name
    flat = [f for c in script.commands for f in c.argv]
    return [], flat, None


def _launches(cfg: LaunchConfig, script: Script) -> None:
    """Launches the reader could not single out: several entry commands (the last is read), or one inside a branch
    it could not decide (read as written there)."""
    runs = [c for c in script.commands if _entry(c) is not None]
    if len(runs) > 1:
        cfg.doubts.append(f"the script launches {len(runs)} times (lines {', '.join(str(c.line) for c in runs)}); "
                          f"the last is read")
    if runs and runs[-1].conditional:
        tests = "; ".join(script.undecided[:2])[:100] or "a branch or loop"
        cfg.doubts.append(f"the launch at line {runs[-1].line} runs only on a path the reader could not decide "
                          f"({tests})")


def parse_flags(args: list[Field]) -> dict[str, list[Field]]:
    """`--flag [values...]` and `--flag=value`, each flag's values up to the next `--flag`; a later repeat wins."""
    out: dict[str, list[Field]] = {}
    current: str | None = None
    for arg in args:
        if arg.text.startswith("--") and len(arg.text) > 2:
            name, eq, value = arg.text.partition("=")
            out[name] = [Field(value, arg.doubt)] if eq else []
            current = None if eq else name
        elif current is not None:
            out[current].append(arg)
    return out


def looks_like(text: str, source: str) -> bool:
    """The file runs a Megatron entry point, or is a list of Megatron flags."""
    try:
        script = read_script(text, source)
    except PlanInputError:
        return False
    runner, args, entry = launch_args(script)
    return entry is not None or any(f in parse_flags(args) for f in (*mf.KNOBS, "--num-layers", "--hidden-size"))


class Flags:
    """The entry script's flags, read one by one: values with their doubts recorded, unset variables refused."""

    def __init__(self, found: dict[str, list[Field]], cfg: LaunchConfig, script: Script) -> None:
        self.found, self.cfg, self.script = found, cfg, script

    def __contains__(self, flag: str) -> bool:
        return flag in self.found

    def field(self, flag: str) -> Field:
        values = self.found[flag]
        if not values:
            raise PlanInputError("needs a value", field=flag, source=self.cfg.source, fix=f"e.g. {flag} 8")
        value = values[0]
        if value.doubt:
            unset = [d for d in sorted(value.doubt) if d in self.script.unresolved and value.text.startswith("$")]
            if unset:
                name = unset[0].lstrip("$")
                raise PlanInputError(f"is {value.text[:60]}, which the file leaves unset", field=flag,
                                     source=self.cfg.source, fix=f"pass --set {name}=<value> (or write the number)")
            self.cfg.doubts.append(f"{flag} {value.text} from {self.script.why(value.doubt)}")
        return value

    def text(self, flag: str) -> str:
        return self.field(flag).text

    def number(self, flag: str, minimum: int = 1) -> int:
        return as_int(self.text(flag), flag, self.cfg.source, minimum=minimum)

    def words(self, flag: str) -> list[str]:
        return [self.field(flag).text, *(f.text for f in self.found[flag][1:])] if self.found[flag] else []


def read(text: str, source: str, given: dict[str, str] | None = None) -> LaunchConfig:
    cfg = LaunchConfig("megatron", source)
    read_header(cfg, text)
    script = read_script(text, source, given)
    runner, args, entry = launch_args(script)
    if entry in mf.OTHER_ENTRIES:
        raise PlanInputError(f"runs {entry}, not a decoder-only language model", source=source,
                             fix="plan prices pretrain_gpt.py and pretrain_mamba.py launches")
    found = parse_flags(args)
    if not found or not (entry or any(f in found for f in (*mf.KNOBS, *mf.SHAPE))):
        raise PlanInputError("no Megatron-LM flags found", source=source,
                             fix="pass a pretrain_gpt.py or pretrain_mamba.py command line or script (what --format "
                             "megatron writes)")
    flags = Flags(found, cfg, script)
    _launches(cfg, script)
    for flag, knob in mf.KNOBS.items():
        if flag in flags:
            cfg.set_knob(knob, flags.text(flag), flag)
    _world(cfg, runner, script)
    _batch(cfg, flags)
    megatron_model.read_model(cfg, flags)
    _precision(cfg, flags)
    _memory(cfg, flags)
    _schedule(cfg, flags)
    _cuda_graphs(cfg, flags)
    if "--deepspeed" in flags:
        cfg.framework = "megatron-deepspeed"
        _deepspeed(cfg, flags, script)
    if "--expert-tensor-parallel-size" in flags:
        cfg.set_expert_tp(flags.text("--expert-tensor-parallel-size"), "--expert-tensor-parallel-size")
    known = (*mf.KNOBS, *mf.SHAPE, *mf.HANDLED, *mf.QUIET, *mf.LINEAR_SHAPE, *mf.DSA_SHAPE, *mf.MLA_SHAPE,
             *mf.MAMBA_SHAPE)
    cfg.ignored = sorted(f for f in found if f not in known) + cfg.ignored
    if script.sourced:
        names = sorted({PurePosixPath(s).name for s in script.sourced})
        cfg.doubts.append(f"the script sources {', '.join(names)[:80]} (not read)")
    return cfg


def _world(cfg: LaunchConfig, runner: list[Field], script: Script) -> None:
    """The world size from the launcher in front of the entry script: torchrun's --nnodes x --nproc-per-node (also
    `python -m torch.distributed.run/launch`), the deepspeed launcher's --num_nodes x --num_gpus, or srun's tasks."""
    launch = parse_flags(runner)
    names = {PurePosixPath(w.text).name for w in runner}
    per_node = next((launch[f] for f in ("--nproc_per_node", "--nproc-per-node", "--num_gpus", "--num-gpus")
                     if launch.get(f)), None)
    nodes = next((launch[f] for f in ("--nnodes", "--num_nodes", "--num-nodes") if launch.get(f)), None)
    if per_node is None and "srun" in names:  # one task per GPU: srun's own counts, else the #SBATCH ones
        per_node = launch.get("--ntasks-per-node") or [script.variables.get("SLURM_NTASKS_PER_NODE", Field("?"))]
        nodes = launch.get("--nodes") or [script.variables.get("SLURM_NNODES", Field("?"))]
    if per_node is None or not names & _LAUNCHERS and not any(n.startswith("torch.distributed") for n in names):
        return
    nodes = nodes or [Field("1")]  # torchrun's --nnodes defaults to 1
    a, b = per_node[0], nodes[0]
    if ":" in b.text or not (a.text.isdigit() and b.text.isdigit()):  # an elastic range (2:4) or an unknown value
        cfg.world_in_doubt = f"the launcher's {a.text} GPUs x {b.text} nodes"
        cfg.doubts.append(f"world size {a.text} x {b.text} from {script.why(a.doubt | b.doubt) or 'the launcher'}")
        return
    cfg.num_gpus = int(a.text) * int(b.text)
    if a.doubt or b.doubt:
        cfg.world_in_doubt = script.why(a.doubt | b.doubt)
        cfg.doubts.append(f"world size {a.text} x {b.text} GPUs from {cfg.world_in_doubt}")


def _batch(cfg: LaunchConfig, flags: Flags) -> None:
    """Megatron's batch: --global-batch-size, else micro-batch x data-parallel size (arguments.py); a ramp-up or a
    batch schedule is priced at its final size, and said so."""
    src = cfg.source
    cfg.batch_rule = "megatron"
    if "--micro-batch-size" in flags:
        cfg.micro_batch = cfg.layout["mbs"]
    if "--global-batch-size" in flags:
        cfg.global_batch = flags.number("--global-batch-size")
    for flag in ("--rampup-batch-size", "--step-batch-size-schedule"):
        if flag in flags:
            clash = flag == "--step-batch-size-schedule" and "--global-batch-size" in flags
            cfg.ignored.append(f"{flag} (priced at the final global batch" + (
                "; Megatron-LM refuses it beside --global-batch-size, arguments.py validate_args)" if clash else ")"))
    if "--seq-length" in flags:
        cfg.seq_len = flags.number("--seq-length")
    if "--num-layers-per-virtual-pipeline-stage" in flags:
        cfg.layers_per_stage = as_int(flags.text("--num-layers-per-virtual-pipeline-stage"),
                                      "--num-layers-per-virtual-pipeline-stage", src)
        # arguments.py counts the embedding and the loss as a layer each before dividing into stages
        cfg.split_extra_layers = sum(f in flags for f in ("--account-for-embedding-in-pipeline-split",
                                                          "--account-for-loss-in-pipeline-split"))


def _precision(cfg: LaunchConfig, flags: Flags) -> None:
    """--fp4-format, --fp8-format (with --fp8-recipe: delayed and tensorwise are per-tensor scales, blockwise the
    128 x 128 blocks; mxfp8's 32-element blocks run at the fp8 rate and are priced as per-tensor), --bf16, --fp16
    (priced as bf16: the same tensor-core rate and bytes), none of them fp32 (priced as bf16, said so)."""
    if "--fp4-format" in flags:
        cfg.precision = "fp4"
    elif "--fp8-format" in flags:
        cfg.precision = "fp8"
        recipe = flags.text("--fp8-recipe") if "--fp8-recipe" in flags else "delayed"
        if recipe == "blockwise":
            cfg.fp8_recipe = "blockwise"
        elif recipe not in ("delayed", "tensorwise"):
            cfg.ignored.append(f"--fp8-recipe {recipe} (priced as per-tensor fp8)")
    elif "--bf16" in flags:
        cfg.precision = "bf16"
    elif "--fp16" in flags:
        cfg.precision = "bf16"
        cfg.ignored.append("--fp16 (priced as bf16: same tensor-core rate and bytes)")
    else:
        cfg.precision = "bf16"
        cfg.ignored.append("no --bf16/--fp16: Megatron trains in fp32 (priced as bf16)")


def _memory(cfg: LaunchConfig, flags: Flags) -> None:
    src = cfg.source
    if "--use-megatron-fsdp" in flags:
        strategy = flags.text("--data-parallel-sharding-strategy") if "--data-parallel-sharding-strategy" in flags \
            else "optim_grads_params"  # Megatron-FSDP's default strategy
        if strategy not in mf.FSDP_ZERO:
            raise PlanInputError(f"unknown strategy '{strategy[:40]}'", field="--data-parallel-sharding-strategy",
                                 source=src, fix=f"use one of {', '.join(mf.FSDP_ZERO)}")
        cfg.layout["zero"] = mf.FSDP_ZERO[strategy]
    else:
        cfg.layout["zero"] = 1 if "--use-distributed-optimizer" in flags else 0
    _recompute(cfg, flags)
    # a positive count switches Megatron-Core's activation offloading on (arguments.py); the planner then offloads
    # the fewest layers that fit, which it prices and prints as offload_layers
    if "--cpu-offloading-num-layers" in flags and flags.number("--cpu-offloading-num-layers", minimum=0) > 0:
        cfg.set_knob("recompute", "offload", "--cpu-offloading-num-layers")
    if "--fine-grained-activation-offloading" in flags:
        modules = flags.words("--offload-modules") if "--offload-modules" in flags else []
        read_fine_grained_offload(cfg, modules, "--offload-modules")
    _optimizer(cfg, flags)
    cfg.layout["sp"] = int("--sequence-parallel" in flags and cfg.layout.get("tp", 1) > 1)
    cfg.tp_comm_overlap = "--tp-comm-overlap" in flags  # store_true, off by default (arguments.py)
    if "--moe-token-dispatcher-type" in flags:  # allgather (the default) is priced as alltoall: every copy sent
        kind = flags.text("--moe-token-dispatcher-type")
        cfg.moe_dispatcher = "flex" if kind == "flex" else "alltoall"


def _recompute(cfg: LaunchConfig, flags: Flags) -> None:
    """--recompute-granularity full|selective (with --recompute-method/--recompute-num-layers and
    --recompute-modules, default core_attn: TransformerConfig), --recompute-activations (selective), and the
    pre-2022 --checkpoint-activations (full, --checkpoint-num-layers layers per checkpoint; Megatron-DeepSpeed still
    reads it, Megatron-LM now exits on it)."""
    granularity = flags.text("--recompute-granularity") if "--recompute-granularity" in flags else None
    if granularity is None and "--recompute-activations" in flags:
        granularity = "selective"
    if granularity is None and "--checkpoint-activations" in flags:
        granularity = "full"
        every = flags.number("--checkpoint-num-layers") if "--checkpoint-num-layers" in flags else 1
        if every != 1:
            cfg.ignored.append(f"--checkpoint-num-layers {every} (priced as one layer per checkpoint)")
        if "--deepspeed" not in flags:
            cfg.ignored.append("--checkpoint-activations (Megatron-LM since 2022 exits on it; read as its older "
                               "meaning, full recompute)")
    cfg.set_knob("recompute", granularity or "none", "--recompute-granularity")
    if granularity == "full":
        method = flags.text("--recompute-method") if "--recompute-method" in flags else "uniform"
        count = flags.number("--recompute-num-layers") if "--recompute-num-layers" in flags else 1
        if (method, count) != ("uniform", 1):
            cfg.ignored.append(f"--recompute-method {method} --recompute-num-layers {count} (priced as every layer "
                               "recomputed whole)")
    if granularity == "selective":
        modules = tuple(flags.words("--recompute-modules")) if "--recompute-modules" in flags \
            else mf.DEFAULT_RECOMPUTE_MODULES
        cfg.recompute_modules = modules
    for flag in ("--partition-activations", "--distribute-saved-activations"):
        if flag in flags:
            cfg.ignored.append(f"{flag} (activations split over the tensor-parallel ranks: not priced)")


def _optimizer(cfg: LaunchConfig, flags: Flags) -> None:
    """Optimizer states in CPU memory and bf16 Adam moments, as the megatron launcher writes them (arguments.py:
    --optimizer-cpu-offload with --optimizer-offload-fraction, default 1.0; --exp-avg-dtype / --exp-avg-sq-dtype,
    default fp32); Muon as Megatron-Core runs it (read_optimizer), any other optimizer priced as Adam, said so."""
    if "--optimizer-cpu-offload" in flags or "--cpu-optimizer" in flags:
        fraction = "--optimizer-offload-fraction"
        cfg.optimizer_offload = as_share(flags.text(fraction), fraction, cfg.source) if fraction in flags else 1.0
    first, second = (flags.text(f) if f in flags else "fp32" for f in ("--exp-avg-dtype", "--exp-avg-sq-dtype"))
    moments_dtype(first, second, "--exp-avg-dtype/--exp-avg-sq-dtype", cfg)
    for flag in ("--main-grads-dtype", "--main-params-dtype"):
        if flag in flags and flags.text(flag) != "fp32":
            cfg.ignored.append(f"{flag} {flags.text(flag)} (priced as fp32)")
    if "--optimizer" in flags:
        read_optimizer(cfg, flags.text("--optimizer"), "--optimizer")
    capacity, pad = "--moe-expert-capacity-factor", "--moe-pad-expert-input-to-capacity"
    token_drop(cfg, flags.text(capacity) if capacity in flags else None, pad in flags, (capacity, pad))
    cfg.moe_force_balance = "--moe-router-force-load-balancing" in flags
    cfg.moe_router_fusion = "--moe-router-fusion" in flags  # store_true, off by default (arguments.py)


def _cuda_graphs(cfg: LaunchConfig, flags: Flags) -> None:
    """CUDA graph capture (Megatron-LM arguments.py): --cuda-graph-impl, or the deprecated --enable-cuda-graph (local)
    and --external-cuda-graph (transformer_engine); --cuda-graph-modules, formerly --cuda-graph-scope."""
    impl = flags.text("--cuda-graph-impl") if "--cuda-graph-impl" in flags else (
        "local" if "--enable-cuda-graph" in flags else "transformer_engine" if "--external-cuda-graph" in flags
        else None)
    named = next((f for f in ("--cuda-graph-modules", "--cuda-graph-scope") if f in flags), "--cuda-graph-modules")
    cuda_graphs(cfg, impl, flags.words(named) if named in flags else [], "--cuda-graph-impl", named)


def _schedule(cfg: LaunchConfig, flags: Flags) -> None:
    src = cfg.source
    if "--overlap-moe-expert-parallel-comm" in flags:  # Megatron-Core's combined 1F1B (EP all-to-all overlap)
        cfg.set_knob("schedule", "combined-1f1b", "--overlap-moe-expert-parallel-comm")
    if "--cp-comm-type" in flags:
        kind = flags.text("--cp-comm-type")
        if kind not in mf.CP_COMM:
            raise PlanInputError(f"'{kind[:40]}' is not a context-parallel exchange the planner prices",
                                 field="--cp-comm-type", source=src, fix="use p2p, a2a or a2a+p2p")
        cfg.set_knob("cp_comm", mf.CP_COMM[kind], "--cp-comm-type")
    if "--use-tp-pp-dp-mapping" in flags:  # training/initialize.py: rank order tp-cp-ep-pp-dp
        cfg.set_knob("order", "tp-cp-ep-pp-dp", "--use-tp-pp-dp-mapping")
    if "--pipeline-model-parallel-layout" in flags:
        megatron_model.read_layout(cfg, flags.text("--pipeline-model-parallel-layout"))
    for flag in ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers", "--pp-partition-method",
                 "--pipeline-model-parallel-layout"):
        if flag in flags:  # the file states its own split: launchable, priced with the planner's split
            cfg.runs_anyway["stage_split_launchable"] = flag
            if flag.startswith("--decoder"):
                flags.number(flag, minimum=0)


def _deepspeed(cfg: LaunchConfig, flags: Flags, script: Script) -> None:
    """Megatron-DeepSpeed: ZeRO and precision come from the ds_config DeepSpeed reads (a file the script writes with a
    here-document, or one beside it). DeepSpeed runs bf16 without ZeRO through BF16_Optimizer when pipelining, which
    shards the fp32 master weights and optimizer states over data-parallel ranks like ZeRO-1 (deepspeed
    runtime/engine.py _do_optimizer_sanity_check, runtime/bf16_optimizer.py)."""
    flag = next((f for f in ("--deepspeed_config", "--deepspeed-config") if f in flags), None)
    if flag is None:
        cfg.ignored.append("--deepspeed without --deepspeed_config (ZeRO stage unknown; priced as the flags say)")
        return
    path = flags.found[flag][0].text if flags.found[flag] else ""
    text = script.files.get(path)
    if text is None:
        beside = Path(cfg.source).parent / path
        if not beside.is_file():
            cfg.ignored.append(f"{flag} {path} (not found beside the script; ZeRO stage not read)")
            return
        text = read_text(beside, "pass the ds_config the script names")
    doc = deepspeed.load_ds_config(text, cfg.source, flag)  # one reader of ds_config JSON: a list is refused too
    zero = deepspeed.zero_stage(doc, cfg.source)
    bf16 = deepspeed.enabled(doc, "bf16", cfg.source)
    if zero == 0 and bf16 and cfg.layout.get("pp", 1) > 1:
        zero = 1
    cfg.layout["zero"] = zero
    deepspeed.read_offload(cfg, doc)
    if deepspeed.enabled(doc, "fp16", cfg.source) and "--fp16" not in flags:
        cfg.ignored.append("ds_config fp16 (priced as bf16: same tensor-core rate and bytes)")
