"""What every launch-file reader returns (LaunchConfig) and the helpers they share: the `# plan ...` header the
launchers write, integer and boolean values, and the warnings for flags a reader does not understand."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from planner.errors import PlanInputError
from planner.inputs.frameworks import MCORE_OFFLOAD_MODULES, OFFLOAD_ATTENTION_MODULES, OFFLOAD_EXPERT_MODULES
from planner.inputs.layout import ExpertTp, Recompute, encode
from planner.inputs.specs import GRAPH_MODULES

# First comment line of every commented launcher format (planner/report/launchers/_plan.py header()).
_HEADER = re.compile(r"^#\s*plan \S+ \| (?P<model>\S+) on (?P<cluster>\S+) \((?P<gpus>\d+) GPUs\)", re.M)


@dataclass
class LaunchConfig:
    """What a launch file states. Layout knobs are encoded as planner.inputs.layout encodes them; anything the
    file leaves out is absent (None, or missing from `layout`), to be filled from the options or defaults."""

    dialect: str
    source: str
    layout: dict[str, int] = field(default_factory=dict)
    model_name: str | None = None  # from a plan header: a catalog name
    cluster_name: str | None = None  # from a plan header: {gpu}x{count}
    num_gpus: int | None = None  # world size the file states (header, torchrun --nnodes x --nproc-per-node)
    model_keys: dict[str, Any] = field(default_factory=dict)  # Hugging Face config keys the file states
    seq_len: int | None = None
    global_batch: int | None = None
    precision: str | None = None
    fp8_recipe: str | None = None  # "blockwise" where the file asks for 128 x 128 block scales
    optimizer_offload: float | None = None  # share of optimizer states the file keeps in CPU memory
    optimizer_moments: str | None = None  # "bf16" where the file keeps both Adam moments in bf16
    optimizer: str | None = None  # "muon" where the file runs Megatron-Core's Muon (None: Adam, or not said)
    moe_capacity_factor: float | None = None  # token dropping: each expert's capacity in even shares
    moe_pad_to_capacity: bool = False  # experts' inputs padded to that capacity
    moe_force_balance: bool = False  # the router forced to spread tokens evenly (a benchmarking switch)
    moe_router_fusion: bool | None = None  # the MoE router as TE's fused kernels, as the file runs it (None: not said)
    fp8_attention: bool | None = None  # Transformer Engine's fp8 attention, where the file sets it with an fp8 recipe
    param_offload: bool = False  # ZeRO-3 parameter partitions in host memory (DeepSpeed offload_param)
    tp_comm_overlap: bool | None = None  # TP collectives overlapped with GEMMs, as the file runs it (None: not said)
    torch_compile: bool | None = None  # torch.compile of the model, as the file runs it (None: not said)
    moe_dispatcher: str | None = None  # "alltoall" | "flex" where the file names its MoE token dispatcher
    cuda_graphs: str | None = None  # "none" | "per-layer" | "full-iteration" where the file sets CUDA graphs
    cuda_graph_modules: tuple[str, ...] | None = None  # the modules per-layer capture takes (None: whole layers)
    pipeline_layout: tuple[int, ...] | None = None  # decoder layers per model chunk, where the file states a layout
    layers_per_stage: int | None = None  # virtual stages given as layers per stage (vpp needs the layer count)
    split_extra_layers: int = 0  # the embedding and the loss counted as layers in that split (Megatron account-for)
    data_parallel: int | None = None  # dp when the file states it (torchtitan degrees, ds_config batch arithmetic)
    ignored: list[str] = field(default_factory=list)  # flags or keys not understood, named in one warning
    doubts: list[str] = field(default_factory=list)  # values the file leaves open (unset variables), one warning
    defaults: list[str] = field(default_factory=list)  # knobs left to the framework's default, where it matters
    # How the framework completes the batch once the data-parallel size is known (planner.inputs.launch_readers.batch)
    batch_rule: str | None = None  # "megatron" | "torchtitan" | "torchtitan-registry" | "deepspeed" | None (all stated)
    micro_batch: int | None = None  # per-rank micro-batch as the file states it (None: the framework decides)
    grad_accum: int | None = None  # gradient-accumulation steps as the file states them
    world_in_doubt: str | None = None  # why num_gpus may not be what runs (a scheduler variable's default)
    complete_model: bool = False  # model_keys describe the whole model (the framework's defaults filled in)
    vocab_source: str | None = None  # where the vocabulary size came from, or why it is unknown
    tokenizer_name: str | None = None  # a Hugging Face tokenizer the file names (org/name), where it names one
    vocab_unpadded: int | None = None  # the tokenizer's own size, before the framework pads it
    mtp_layers: int | None = None  # multi-token-prediction layers the file runs (None: it cannot say)
    recompute_modules: tuple[str, ...] | None = None  # Megatron-Core's selective-recompute modules, as the file runs
    framework: str | None = None  # the planning framework the file implies beside its dialect's (megatron-deepspeed)
    # Launchability rules the file itself shows are met (it states its own stage split, or its trainer switches on
    # a recompute a bare config cannot): a rule the planner's launcher could not meet is no fault of this file.
    runs_anyway: dict[str, str] = field(default_factory=dict)  # rule name -> the flag or key that meets it

    def set_knob(self, key: str, raw: object, flag: str) -> None:
        """Encode one knob as `--fix` would, naming the file's flag when the value is bad."""
        name, value = encode(key, str(raw), where=flag)
        self.layout[name] = value

    def set_expert_tp(self, raw: object, flag: str) -> None:
        """The expert tensor-parallel size as the `etp` knob: 1 (whole experts) or the file's tp (read first)."""
        size, tp = as_int(raw, flag, self.source), self.layout.get("tp", 1)
        if size not in (1, tp):
            raise PlanInputError(f"expert tensor-parallel size {size} is neither 1 nor the tensor-parallel size {tp}",
                                 field=flag, source=self.source, fix="plan prices expert TP 1 or equal to tp")
        self.layout["etp"] = int(ExpertTp.TP if size == tp else ExpertTp.ONE)


def read_fine_grained_offload(cfg: LaunchConfig, modules: list[str], flag: str) -> None:
    """Megatron-Core's fine-grained activation offloading, switched on with `modules` as its offload_modules (read
    after the recompute granularity): recompute=offload-modules where nothing is recomputed. The planner prices its
    one module set (planner.cost.module_offload); another set, or offloading beside selective recompute, is priced
    as that set or as the recompute alone, and said so in the warning."""
    unknown = sorted(set(modules) - set(MCORE_OFFLOAD_MODULES))
    if not modules or unknown:
        raise PlanInputError(f"offload_modules {'/'.join(unknown)[:60] or '(empty)'} are not modules Megatron-Core "
                             "offloads", field=flag, source=cfg.source, fix=f"use {', '.join(MCORE_OFFLOAD_MODULES)}")
    if cfg.layout.get("recompute", Recompute.NONE) != Recompute.NONE:
        cfg.ignored.append(f"{flag} beside recomputation (priced as the recomputation alone)")
        return
    cfg.set_knob("recompute", Recompute.OFFLOAD_MODULES.label, flag)
    if set(modules) - set(OFFLOAD_EXPERT_MODULES) != set(OFFLOAD_ATTENTION_MODULES):  # (expert_fc1: MoE layers)
        planned = "+".join((*OFFLOAD_ATTENTION_MODULES, *OFFLOAD_EXPERT_MODULES))
        cfg.ignored.append(f"{flag}={'+'.join(modules)} (priced as {planned})")


def read_header(cfg: LaunchConfig, text: str) -> None:
    match = _HEADER.search(text)
    if match:
        cfg.model_name, cfg.cluster_name, cfg.num_gpus = match["model"], match["cluster"], int(match["gpus"])


def as_int(raw: object, where: str, source: str, minimum: int = 1, maximum: float = 10_000_000) -> int:
    """A whole number from a flag or key; a float such as 8.0 is accepted, anything else is a bad file. `maximum`:
    a sanity bound (token counts per step run past the usual one)."""
    if isinstance(raw, bool):
        raw = str(raw)
    try:
        number = float(raw) if isinstance(raw, int | float) else float(str(raw).strip())
    except ValueError:
        raise PlanInputError(f"expected a whole number, got '{str(raw)[:40]}'", field=where, source=source,
                             fix="write the value as a plain number") from None
    if not number.is_integer() or number < minimum or number > maximum:
        raise PlanInputError(f"expected a whole number >= {minimum}, got '{str(raw)[:40]}'", field=where,
                             source=source, fix="write the value as a plain number")
    return int(number)


def as_bool(raw: object, where: str, source: str) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off", "null", "none"):
        return False
    raise PlanInputError(f"expected true or false, got '{text[:40]}'", field=where, source=source,
                         fix="write true or false")


def is_null(raw: object) -> bool:
    return raw is None or str(raw).strip().lower() in ("null", "none", "~", "")


def token_drop(cfg: LaunchConfig, capacity: object, padded: bool, where: tuple[str, str]) -> None:
    """Token dropping as Megatron-Core reads it (transformer_config.py): a capacity factor, where a negative one
    means dropless, and padding that needs a capacity. `where`: the capacity and padding keys, for errors."""
    if capacity is not None and str(capacity).strip().lower() not in ("", "null", "none"):
        try:
            value = float(str(capacity).strip())
        except ValueError:
            raise PlanInputError(f"expected a number, got '{str(capacity)[:40]}'", field=where[0], source=cfg.source,
                                 fix="e.g. 1.0 (a negative value means dropless)") from None
        cfg.moe_capacity_factor = value if value > 0 else None
    if padded and cfg.moe_capacity_factor is None:
        raise PlanInputError("pads to a capacity that is not set", field=where[1], source=cfg.source,
                             fix=f"set {where[0]} too, as Megatron-Core requires")
    cfg.moe_pad_to_capacity = padded


def as_share(raw: object, where: str, source: str) -> float:
    """A share in [0, 1] (an offload fraction); anything else is a bad file."""
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise PlanInputError(f"expected a number from 0 to 1, got '{str(raw)[:40]}'", field=where, source=source,
                             fix="e.g. 0.5") from None
    if not 0.0 <= value <= 1.0:
        raise PlanInputError(f"expected a number from 0 to 1, got {value:g}", field=where, source=source,
                             fix="e.g. 0.5")
    return value


def moments_dtype(first: str | None, second: str | None, where: str, cfg: LaunchConfig) -> None:
    """Adam's moment dtypes as the planner prices them: both bf16 -> "bf16"; anything else but fp32 (fp16, fp8, or
    the two differing) is named as not understood and priced as fp32 moments."""
    names = [str(x).strip("'\"").replace("torch.", "").replace("float32", "fp32").replace("bfloat16", "bf16")
             for x in (first, second) if x is not None and not is_null(str(x))]
    if not names:
        return
    if all(n == "bf16" for n in names) and len(names) == 2:
        cfg.optimizer_moments = "bf16"
    elif any(n != "fp32" for n in names):
        cfg.ignored.append(f"{where}={'/'.join(names)} (priced as fp32 moments)")


def cuda_graphs(cfg: LaunchConfig, impl: str | None, modules: list[str], impl_field: str, modules_field: str) -> None:
    """CUDA graph capture as Megatron-Core reads it (megatron/training/arguments.py, transformer/cuda_graph_config.py):
    implementation local | transformer_engine captures per layer, full_iteration the whole step, none nothing; the
    modules list names the captured regions (CudaGraphModule), empty or `full` the whole layer, and the deprecated
    module `full_iteration` means full-iteration capture. Modules without an implementation capture nothing."""
    if impl is None and not modules:
        return
    if impl not in (None, "none", "local", "transformer_engine", "full_iteration"):
        raise PlanInputError(f"'{str(impl)[:40]}' is not a CUDA graph implementation Megatron-Core has",
                             field=impl_field, source=cfg.source,
                             fix="use none, local, transformer_engine or full_iteration")
    if impl == "full_iteration" or "full_iteration" in modules:
        cfg.cuda_graphs = "full-iteration"
        return
    if impl in (None, "none"):
        cfg.cuda_graphs = "none"
        return
    cfg.cuda_graphs = "per-layer"
    unknown = [m for m in modules if m not in (*GRAPH_MODULES, "full")]
    if unknown:
        cfg.ignored.append(f"{modules_field} {' '.join(unknown)} (not a capture region Megatron-Core names)")
    kept = tuple(m for m in modules if m in GRAPH_MODULES)
    cfg.cuda_graph_modules = kept or None  # none named, or `full`: the whole layer


# Megatron-Core's optimizer names (arguments.py --optimizer, OptimizerConfig.optimizer) and what the planner prices:
# Adam, or Muon, whose dist_ form is the layer-wise distributed optimizer (ZeRO-1 of whole matrices)
MUON_NAMES = {"muon": False, "dist_muon": True}


def read_optimizer(cfg: LaunchConfig, name: str, where: str) -> None:
    """The optimizer a file names: Adam (adam, adamw), Muon (muon; dist_muon also shards its states over the data
    ranks, zero 1), anything else named as priced as Adam."""
    name = name.strip("'\"").lower()
    if name in MUON_NAMES:
        cfg.optimizer = "muon"
        if MUON_NAMES[name]:
            cfg.set_knob("zero", "1", where)
    elif name not in ("adam", "adamw"):
        cfg.ignored.append(f"{where} {name} (priced as Adam)")
