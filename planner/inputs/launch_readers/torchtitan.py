"""Read a torchtitan TOML job config into a LaunchConfig, as torchtitan's ConfigManager reads it: v0.2-era keys
(torchtitan/config/job_config.py @v0.2.2, what `--format torchtitan` writes) and the 2024 keys the published
benchmark configs use ([training] batch_size and degrees, [experimental] pipeline and context degrees, [float8];
torchtitan/config_manager.py @b19456a98). `--set section.key=value` overrides a key as torchtitan's command line does.

Every key of a section that can change the price is read or named; sections of logging, checkpoints, the optimizer's
hyper-parameters and the data loader are quiet. Unset keys take the dataclass defaults (seq_len 2048, local batch 8,
data_parallel_shard_degree -1 = the ranks left over, activation_checkpoint mode "selective" every 2nd layer), said
where they matter. The model is the [model] name/flavor as torchtitan builds it (planner.inputs.launch_readers.
torchtitan_models).
"""

from __future__ import annotations

import re
import sys
from typing import Any

from planner.errors import PlanInputError
from planner.inputs.launch_readers import torchtitan_registry, torchtitan_trainer_config
from planner.inputs.launch_readers._common import LaunchConfig, as_bool, as_int, read_header
from planner.inputs.launch_readers.torchtitan_models import CATALOG, FLAVORS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with the tomli backport (pyproject dependency)
    import tomli as tomllib

# torch.distributed.pipelining schedule -> plan schedule (the inverse of the torchtitan launcher's table); GPipe
# keeps every micro-batch's activations and is named where priced as 1F1B.
_SCHEDULES = {"1f1b": "1f1b", "gpipe": "1f1b", "interleaved1f1b": "interleaved", "loopedbfs": "interleaved",
              "interleavedzerobubble": "zb-h1", "zbvzerobubble": "zb-v", "dualpipev": "dualpipe-v"}
_MULTI_STAGE = ("interleaved", "zb-h1", "zb-v", "dualpipe-v")
# Keys that change the price, by section (both eras); each is read below. Any other key of these sections is named.
_READ = {
    "training": {"local_batch_size", "batch_size", "global_batch_size", "seq_len", "mixed_precision_param", "dtype",
                 "enable_cpu_offload", "compile", "data_parallel_replicate_degree", "data_parallel_shard_degree",
                 "tensor_parallel_degree", "enable_loss_parallel", "mixed_precision_reduce"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                    "tensor_parallel_degree", "enable_async_tensor_parallel", "context_parallel_degree",
                    "pipeline_parallel_degree", "pipeline_parallel_schedule", "pipeline_parallel_microbatch_size",
                    "pipeline_parallel_layers_per_stage", "module_fqns_per_model_part", "expert_parallel_degree",
                    "expert_tensor_parallel_degree", "context_parallel_rotate_method", "pipeline_parallel_split_points",
                    "expert_parallel_comm_backend", "disable_loss_parallel", "enable_compiled_autograd",
                    "pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers",
                    "context_parallel_load_balancer", "pipeline_parallel_expert_parallel_overlap",
                    "pipeline_parallel_schedule_csv"},
    "experimental": {"pipeline_parallel_degree", "pipeline_parallel_split_points", "pipeline_parallel_schedule",
                     "pipeline_parallel_microbatches", "context_parallel_degree", "context_parallel_rotate_method",
                     "enable_async_tensor_parallel", "enable_compiled_autograd", "custom_import", "custom_args_module",
                     "pipeline_parallel_schedule_csv"},
    "activation_checkpoint": {"mode", "selective_ac_option", "per_op_sac_force_recompute_mm_shapes_by_fqns",
                              "memory_budget", "early_stop", "preserve_rng_state", "determinism_check", "debug",
                              "visualize_memory_budget_pareto"},
    "model": {"name", "flavor", "converters", "tokenizer_path", "hf_assets_path", "print_after_conversion",
              "norm_type"},
    "compile": {"enable", "components", "backend"},
    "float8": {"enable_float8_linear", "enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp",
               "recipe_name", "filter_fqns", "emulate", "force_recompute_fp8_weight_in_bwd", "scaling_type_input",
               "scaling_type_weight", "scaling_type_grad_output", "moe_fqns_prototype"},
    "mx": {"recipe_name", "filter_fqns", "use_fp8_dim1_cast_triton_kernel", "mxfp8_dim1_cast_kernel_choice"},
}
# Keys of the sections above that change nothing the planner prices.
_QUIET_KEYS = {"training": {"max_norm", "steps", "dataset", "dataset_path", "warmup_steps", "gc_freq", "gc_debug",
                            "seed", "deterministic", "dataloader"}}
# Sections that change nothing the planner prices.
_QUIET = {"job", "profiling", "metrics", "optimizer", "lr_scheduler", "checkpoint", "comm", "memory_estimation",
          "fault_tolerance", "validation", "debug"}
_ZERO_COMMENT = re.compile(r"^# ZeRO-(?P<stage>[12]) runs as FSDP2", re.M)


def load(text: str, source: str, given: dict[str, str] | None = None) -> dict[str, Any]:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PlanInputError(f"invalid TOML ({str(exc)[:100]})", source=source, fix="fix the TOML syntax") from None
    except (RecursionError, ValueError):
        raise PlanInputError("nested too deeply (or a value too large) to read", source=source,
                             fix="a job config is two levels deep; flatten the file") from None
    for key, value in (given or {}).items():  # torchtitan's CLI overrides: --section.key value
        section, dot, name = key.rpartition(".")
        if not dot or not section:
            raise PlanInputError(f"'{key}' is not section.key", field="--set", source=source,
                                 fix="e.g. --set training.local_batch_size=4")
        table = doc
        for part in section.split("."):
            table = table.setdefault(part, {})
            if not isinstance(table, dict):
                raise PlanInputError(f"'{section}' is not a table", field="--set", source=source,
                                     fix="name a [section] of the job config")
        table[name] = _toml_value(value)
    return doc


def _toml_value(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def read(text: str, source: str, given: dict[str, str] | None = None) -> LaunchConfig:
    cfg = LaunchConfig("torchtitan", source)
    read_header(cfg, text)
    if source.endswith(".py") or torchtitan_registry.is_registry(text):
        doc = _registry_document(cfg, text, given)
    else:
        doc = load(text, source, given)
    _check_sections(cfg, doc)
    model = doc.get("model", {})
    name, flavor = str(model.get("name", "llama3")).lower(), str(model.get("flavor", "debugmodel"))
    if (name, flavor.lower()) in CATALOG and cfg.model_name is None:
        cfg.model_name, cfg.mtp_layers = CATALOG[(name, flavor.lower())], 0
    elif (name, flavor.lower()) in FLAVORS:
        cfg.model_keys.update(FLAVORS[(name, flavor.lower())])
        cfg.complete_model, cfg.mtp_layers = True, 0  # torchtitan's models have no MTP module
        cfg.vocab_source = f"torchtitan's {name} {flavor} flavor"
    elif cfg.model_name is None:
        cfg.doubts.append(f"model {name} {flavor} is not a flavor plan knows (pass --model)")
    _precision(cfg, doc, model)
    training, par, exp = (doc.get(k, {}) for k in ("training", "parallelism", "experimental"))
    merged = {**{k: v for k, v in training.items() if k.endswith("_degree")}, **exp, **par}
    _training(cfg, training, merged)
    _parallelism(cfg, merged, text)
    _checkpointing(cfg, doc.get("activation_checkpoint", {}))
    return cfg


def _registry_document(cfg: LaunchConfig, text: str, given: dict[str, str] | None) -> dict[str, Any]:
    """A config registry (torchtitan after its TOML configs): the function --set CONFIG names, evaluated
    (planner.inputs.launch_readers.torchtitan_registry), as the job-config document the rest of this reader reads."""
    given = dict(given or {})
    function = next((given.pop(k) for k in torchtitan_registry.CONFIG_KEYS if k in given), None)
    config, name, doubts = torchtitan_registry.evaluate(text, cfg.source, function, given)
    module = torchtitan_trainer_config.module_name(cfg.source, name)
    doc = torchtitan_trainer_config.document(config, module, doubts, cfg.ignored, cfg.source)
    cfg.doubts += [f"{d} in {name}()" for d in doubts]
    cfg.batch_rule = "torchtitan-registry"
    return doc


def _check_sections(cfg: LaunchConfig, doc: dict[str, Any]) -> None:
    for section, value in doc.items():
        if section in _QUIET:
            continue
        if section == "quantize":
            continue  # read in _precision
        if not isinstance(value, dict):
            raise PlanInputError("expected a [table]", field=section, source=cfg.source, fix=f"write [{section}]")
        known = _READ.get(section)
        if known is None:
            cfg.ignored.append(f"[{section}]")
            continue
        quiet = _QUIET_KEYS.get(section, set())
        cfg.ignored += [f"{section}.{k}" for k in value if k not in known and k not in quiet]


def _precision(cfg: LaunchConfig, doc: dict[str, Any], model: dict[str, Any]) -> None:
    """fp8 where the float8 converter is on: model.converters naming float8 (v0.1: "float8"; v0.2:
    "quantize.linear.float8") or the 2024 [float8] enable_float8_linear; its recipe tensorwise (default), rowwise
    (priced as tensorwise, said so); MXFP8 converters priced as fp8. Parameters in float32 (mixed_precision_param)
    or a pure-bf16 run (training.dtype) are named."""
    converters = [str(c) for c in model.get("converters", []) or []] if isinstance(model.get("converters"), list) \
        else [str(model.get("converters"))] if model.get("converters") else []
    float8 = doc.get("float8", {}) if isinstance(doc.get("float8"), dict) else {}
    linear = doc.get("quantize", {}).get("linear", {}) if isinstance(doc.get("quantize"), dict) else {}
    fp8 = any("float8" in c for c in converters) or as_bool(float8.get("enable_float8_linear", False),
                                                             "float8.enable_float8_linear", cfg.source)
    mx = any(c.endswith("mx") or "mx" in c.split(".") for c in converters)
    fp4 = any("nvfp4" in c for c in converters)  # the config registries' NVFP4LinearConverter
    cfg.precision = "fp4" if fp4 else "fp8" if fp8 or mx else "bf16"
    recipe = (linear.get("float8", {}) if isinstance(linear, dict) else {}).get("recipe_name") \
        or float8.get("recipe_name")
    if fp8 and recipe not in (None, "tensorwise"):
        cfg.ignored.append(f"float8 recipe_name={recipe} (priced as tensorwise fp8)")
    if mx:
        cfg.ignored.append("MXFP8 converter (priced as tensorwise fp8)")
    other = [c for c in converters if "float8" not in c and "nvfp4" not in c
             and not (c.endswith("mx") or "mx" in c.split("."))]
    if other:
        cfg.ignored.append(f"model.converters {', '.join(other)}")
    training = doc.get("training", {})
    if str(training.get("mixed_precision_param", "bfloat16")) == "float32":
        cfg.ignored.append("training.mixed_precision_param=float32 (priced as bf16)")
    if str(training.get("dtype", "float32")) == "bfloat16":
        cfg.ignored.append("training.dtype=bfloat16 (no fp32 master weights: priced with them)")
    section = doc.get("compile") if isinstance(doc.get("compile"), dict) else {}
    compile_on = as_bool(section.get("enable", False), "compile.enable", cfg.source) \
        and "model" in list(section.get("components", ["model", "loss"]))
    # compile.enable is off by default (job_config); priced with the eager or compiled kernel rate
    # (planner.cost.profiles compile_speedup)
    cfg.torch_compile = compile_on or training.get("compile") is True
    if not cfg.torch_compile and cfg.precision == "fp8":  # torchtitan's float8 docs: float8 pays off compiled
        cfg.ignored.append("fp8 without torch.compile (float8 casts unfused: slower than priced)")


def _training(cfg: LaunchConfig, training: dict[str, Any], par: dict[str, Any]) -> None:
    src = cfg.source
    cfg.batch_rule = cfg.batch_rule or "torchtitan"
    key = "local_batch_size" if "local_batch_size" in training else "batch_size"
    if key in training:
        cfg.micro_batch = as_int(training[key], f"training.{key}", src)
    else:
        cfg.micro_batch = 8  # Training.local_batch_size
        cfg.defaults.append("local batch 8 (torchtitan's training.local_batch_size default)")
    if training.get("seq_len") is not None:
        cfg.seq_len = as_int(training["seq_len"], "training.seq_len", src)
    else:
        cfg.seq_len = 2048  # Training.seq_len
        cfg.defaults.append("seq_len 2048 (torchtitan's training.seq_len default)")
    if training.get("global_batch_size") not in (None, -1):
        cfg.global_batch = as_int(training["global_batch_size"], "training.global_batch_size", src)
    pp = as_int(par.get("pipeline_parallel_degree", 1), "parallelism.pipeline_parallel_degree", src)
    if pp > 1:  # a pipeline's micro-batch is its own key (v0.2) or local batch / microbatch count (2024)
        if "pipeline_parallel_microbatches" in par:
            count = as_int(par["pipeline_parallel_microbatches"], "experimental.pipeline_parallel_microbatches", src)
            cfg.set_knob("mbs", max(cfg.micro_batch // count, 1), "experimental.pipeline_parallel_microbatches")
        else:
            cfg.set_knob("mbs", par.get("pipeline_parallel_microbatch_size", 1), "pipeline_parallel_microbatch_size")
    else:
        cfg.set_knob("mbs", cfg.micro_batch, f"training.{key}")
    if as_bool(training.get("enable_cpu_offload", False), "training.enable_cpu_offload", src):
        cfg.ignored.append("training.enable_cpu_offload (FSDP2 parameters, gradients and optimizer in host memory: "
                           "not priced)")


def _parallelism(cfg: LaunchConfig, par: dict[str, Any], text: str) -> None:
    src = cfg.source
    degree = {key: as_int(par.get(f"{name}_degree", 1), f"parallelism.{name}_degree", src, minimum=-1)
              for key, name in (("tp", "tensor_parallel"), ("pp", "pipeline_parallel"), ("cp", "context_parallel"),
                                ("ep", "expert_parallel"), ("rep", "data_parallel_replicate"),
                                ("shard", "data_parallel_shard"))}
    if "data_parallel_shard_degree" not in par:
        degree["shard"] = -1  # Parallelism.data_parallel_shard_degree: -1, the ranks left over
    for key in ("tp", "pp", "cp", "ep", "rep"):
        if degree[key] < 1:
            raise PlanInputError(f"must be at least 1 (got {degree[key]}); only data_parallel_shard_degree may be -1",
                                 field=f"parallelism.{key}", source=src, fix="write the degree, or 1 to disable")
        if key != "rep":
            cfg.set_knob(key, degree[key], f"parallelism.{key}")
    if par.get("expert_tensor_parallel_degree") is not None and degree["ep"] > 1:
        cfg.set_expert_tp(par["expert_tensor_parallel_degree"], "parallelism.expert_tensor_parallel_degree")
    shard, rep, cp = degree["shard"], degree["rep"], degree["cp"]
    if shard > 0:
        cfg.data_parallel = shard * rep  # -1 takes what is left: dp then comes from the world size
    reshard = str(par.get("fsdp_reshard_after_forward", "default")).lower()
    if shard > 1 or shard == -1 or ("fsdp_reshard_after_forward" in par and shard * cp > 1):
        # FSDP2 without resharding after forward keeps parameters gathered between forward and backward: ZeRO-2
        # (the plan's launcher writes ZeRO-1 plans the same way and says so in a comment, read back here)
        stated = _ZERO_COMMENT.search(text)
        zero = 3 if reshard == "always" or (reshard == "default" and degree["pp"] == 1) else 2
        if zero == 2 and stated:
            zero = int(stated["stage"])
        if zero == 3 and rep > 1:
            zero = 4  # HSDP: sharded inside a group, replicated across groups
        cfg.layout["zero"] = zero
    else:  # torchtitan applies DDP when data parallelism is the only dimension, FSDP (degree 1) otherwise
        cfg.layout["zero"] = 0 if max(degree["tp"], degree["pp"], cp, degree["ep"]) == 1 else 1
    cfg.layout["sp"] = int(degree["tp"] > 1)  # torchtitan's TP plan always shards norms along the sequence
    for key in ("custom_import", "custom_args_module"):
        if par.get(key):
            cfg.ignored.append(f"experimental.{key} (custom code: not priced)")
    # async TP (PyTorch's micro-pipelined TP): off by default, priced where on (planner.cost.tensor "async-tp")
    cfg.tp_comm_overlap = as_bool(par.get("enable_async_tensor_parallel", False),
                                  "parallelism.enable_async_tensor_parallel", src) and degree["tp"] > 1
    if par.get("enable_compiled_autograd") is True:
        cfg.ignored.append("parallelism.enable_compiled_autograd (not priced)")
    backend = str(par.get("expert_parallel_comm_backend", "standard"))
    if backend != "standard":  # deepep (v0.2); hybridep, minimal_async_ep (the config registries' moe_comm_backend)
        cfg.ignored.append(f"expert_parallel_comm_backend={backend} (priced as the standard all-to-all)")
    if degree["pp"] > 1:
        _pipeline(cfg, par, degree["pp"])


def _pipeline(cfg: LaunchConfig, par: dict[str, Any], pp: int) -> None:
    """Schedule and stages per rank: module_fqns_per_model_part or split points (stages = parts), layers per stage,
    else one stage per rank for single-stage schedules and two for looped ones (torchtitan
    distributed/pipeline_parallel.py)."""
    src = cfg.source
    name = str(par.get("pipeline_parallel_schedule", "1F1B")).lower()
    if name not in _SCHEDULES:
        raise PlanInputError(f"schedule '{name[:40]}' is not one the planner prices",
                             field="parallelism.pipeline_parallel_schedule", source=src,
                             fix="use 1F1B, Interleaved1F1B, InterleavedZeroBubble, ZBVZeroBubble or DualPipeV")
    if name == "gpipe":
        cfg.ignored.append("pipeline_parallel_schedule=GPipe (priced as 1F1B)")
    cfg.set_knob("schedule", _SCHEDULES[name], "parallelism.pipeline_parallel_schedule")
    parts = par.get("module_fqns_per_model_part")
    points = par.get("pipeline_parallel_split_points")
    if isinstance(parts, list) and parts:
        cfg.set_knob("vpp", max(len(parts) // pp, 1), "parallelism.module_fqns_per_model_part")
    elif isinstance(points, list) and points:
        cfg.set_knob("vpp", max((len(points) + 1) // pp, 1), "pipeline_parallel_split_points")
    elif par.get("pipeline_parallel_layers_per_stage") is not None:
        cfg.layers_per_stage = as_int(par["pipeline_parallel_layers_per_stage"],
                                      "parallelism.pipeline_parallel_layers_per_stage", src)
    elif _SCHEDULES[name] in _MULTI_STAGE:
        cfg.set_knob("vpp", 2, "parallelism.pipeline_parallel_schedule")


def _checkpointing(cfg: LaunchConfig, ac: dict[str, Any]) -> None:
    """activation_checkpoint.mode: none, full, selective with selective_ac_option "op" (per-operator: the planner's
    selective) or N (every N-th layer checkpointed whole: N = 1 is full; larger N is priced as full, said so), and
    memory_budget (the compiler's choice, priced as selective, said so). Unset, torchtitan's defaults apply: mode
    "selective", option "2"."""
    mode = str(ac.get("mode", "selective")).lower()
    option = str(ac.get("selective_ac_option", "2")).lower()
    if "mode" not in ac:
        cfg.defaults.append("activation_checkpoint mode selective, option 2 (torchtitan's defaults)")
    if mode == "selective" and option != "op":
        every = as_int(option, "activation_checkpoint.selective_ac_option", cfg.source)
        if every > 1:
            cfg.ignored.append(f"activation_checkpoint.selective_ac_option={every} (every {every}th layer "
                               "checkpointed whole; priced as every layer)")
        mode = "full"
    elif mode == "memory_budget":
        cfg.ignored.append("activation_checkpoint.mode=memory_budget (priced as selective)")
        mode = "selective"
    cfg.set_knob("recompute", mode, "activation_checkpoint.mode")
