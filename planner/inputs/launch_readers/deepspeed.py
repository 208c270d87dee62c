"""Read a DeepSpeed `ds_config` JSON (runtime/config.py keys), or a `deepspeed` / `accelerate launch` of a Hugging
Face Trainer script that names one (`--deepspeed ds_config.json --per_device_train_batch_size 16 ...`; what
`--format deepspeed` writes, with the config in a here-document), into a LaunchConfig.

A ds_config states ZeRO stage and offloading (optimizer, and ZeRO-3 parameters), precision, AutoTP tensor
parallelism (`tensor_parallel.autotp_size`), the Ulysses degree (`sequence_parallel_size`) and the batch keys, which
DeepSpeed completes from the data-parallel world (planner.inputs.launch_readers.resolve). The launch adds what the
Trainer switches on: --gradient_checkpointing (full recompute), --torch_compile, and, through accelerate's config
(parallelism_config_sp_size with the deepspeed backend), Ulysses sequence parallelism.

"auto" values are the Hugging Face integration's (transformers integrations/deepspeed.py
HfTrainerDeepSpeedConfig.trainer_config_process): the micro-batch is --per_device_train_batch_size, the accumulation
--gradient_accumulation_steps, the batch their product with the world, fp16/bf16 the trainer's --fp16/--bf16; taken
from the launch's trainer arguments or --set, else from TrainingArguments' defaults (8, 1, off), said so.
"""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath
from typing import Any

from planner.errors import PlanInputError
from planner.inputs.files import read_text
from planner.inputs.launch_readers._common import LaunchConfig, as_bool, as_int
from planner.inputs.launch_readers.shell import read_script

# Keys that do not change the plan's arithmetic (optimizer, logging, I/O); accepted silently.
_QUIET = {"optimizer", "scheduler", "gradient_clipping", "steps_per_print", "wall_clock_breakdown",
          "prescale_gradients", "gradient_predivide_factor", "communication_data_type", "tensorboard", "wandb",
          "csv_monitor", "flops_profiler", "checkpoint", "data_types", "zero_allow_untested_optimizer",
          "sparse_gradients", "dump_state", "comms_logger", "aio", "elasticity", "compile",
          "zero_force_ds_cpu_optimizer", "memory_breakdown", "seq_parallel_communication_data_type",
          "gradient_accumulation_dtype"}
_KNOWN = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "zero_optimization",
          "bf16", "fp16", "activation_checkpointing", "tensor_parallel", "sequence_parallel_size"}
# zero_optimization keys that tune buckets, prefetching and persistence: no planner arithmetic depends on them.
_ZERO_QUIET = {"stage", "offload_optimizer", "offload_param", "overlap_comm", "contiguous_gradients", "sub_group_size",
               "reduce_bucket_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
               "stage3_max_live_parameters", "stage3_max_reuse_distance", "stage3_gather_16bit_weights_on_model_save",
               "stage3_gather_fp16_weights_on_model_save", "gather_16bit_weights_on_model_save", "allgather_partitions",
               "allgather_bucket_size", "reduce_scatter", "round_robin_gradients", "load_from_fp32_weights",
               "elastic_checkpoint", "ignore_unused_parameters", "cpu_offload", "prefetch_bucket_size",
               "param_persistence_threshold", "max_live_parameters", "max_reuse_distance", "memory_efficient_linear",
               "use_multi_rank_bucket_allreduce", "legacy_stage1", "log_trace_cache_warnings"}
# Trainer arguments of a launch read here, and those that change nothing the planner prices (paths, schedules,
# logging, evaluation); any other argument (a frozen backbone, LoRA, a vision tower, quantized weights) is named.
_TRAINER_READ = {"deepspeed", "per_device_train_batch_size", "gradient_accumulation_steps", "bf16", "fp16",
                 "zero_stage", "offload", "dtype", "max_seq_len",
                 "model_max_length", "gradient_checkpointing", "torch_compile", "config_file", "num_machines",
                 "num_processes", "machine_rank", "main_process_ip", "main_process_port"}
_TRAINER_QUIET = {"model_name_or_path", "version", "data_path", "image_folder", "output_dir", "num_train_epochs",
                  "per_device_eval_batch_size", "evaluation_strategy", "eval_strategy", "save_strategy", "save_steps",
                  "save_total_limit", "learning_rate", "weight_decay", "warmup_ratio", "warmup_steps",
                  "lr_scheduler_type", "logging_steps", "tf32", "dataloader_num_workers", "lazy_preprocess",
                  "report_to", "run_name", "seed", "max_grad_norm", "overwrite_output_dir", "do_train", "cache_dir",
                  "remove_unused_columns", "ddp_timeout", "logging_dir", "max_steps", "group_by_modality_length",
                  "image_aspect_ratio", "mm_use_im_start_end", "mm_use_im_patch_token", "mm_vision_select_layer",
                  "pretrain_mm_mlp_adapter", "mm_projector_type", "fsdp_transformer_layer_cls_to_wrap"}
# The comment `--format deepspeed` writes for the sequence length (the Trainer takes it from the data).
_PLANNED_LENGTH = re.compile(r"^# sequences of (?P<tokens>\d+) tokens", re.M)
# TrainingArguments defaults (transformers training_args.py) for the values an "auto" stands for.
_TRAINER_DEFAULTS = {"per_device_train_batch_size": "8", "gradient_accumulation_steps": "1", "bf16": "false",
                     "fp16": "false"}


def load_ds_config(text: str, source: str, where: str = "") -> dict[str, Any]:
    try:
        doc: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanInputError(f"invalid JSON at line {exc.lineno}: {exc.msg}", source=source, field=where or None,
                             fix="fix the JSON syntax") from None
    except RecursionError:
        raise PlanInputError("nested too deeply to read", source=source, field=where or None,
                             fix="a ds_config is a few levels deep; flatten the file") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise PlanInputError(f"unreadable value ({str(exc)[:80]})", source=source, field=where or None,
                             fix="write sizes as plain numbers") from None
    if not isinstance(doc, dict):
        raise PlanInputError("expected a JSON object (a ds_config)", source=source, fix="pass a ds_config.json")
    return doc


def zero_stage(doc: dict[str, Any], source: str) -> int:
    zero = doc.get("zero_optimization", {})
    stage = zero.get("stage", 0) if isinstance(zero, dict) else zero
    value = as_int(stage, "zero_optimization.stage", source, minimum=0)
    if value > 3:
        raise PlanInputError(f"ZeRO stage {value} does not exist", field="zero_optimization.stage", source=source,
                             fix="use 0, 1, 2 or 3")
    return value


def enabled(doc: dict[str, Any], key: str, source: str, trainer: dict[str, str] | None = None) -> bool:
    """fp16 / bf16 "enabled", an "auto" taken from the trainer's --fp16 / --bf16."""
    block = doc.get(key, {})
    if not isinstance(block, dict):
        return False
    value = block.get("enabled", False)
    if str(value).lower() == "auto":
        value = (trainer or _TRAINER_DEFAULTS).get(key, "false")
    return as_bool(value, f"{key}.enabled", source)


def read_offload(cfg: LaunchConfig, doc: dict[str, Any]) -> None:
    """ZeRO-Offload of the optimizer (the whole optimizer, Ren et al. 2021) and ZeRO-Infinity's parameter offload
    (ZeRO-3 partitions in host memory); NVMe is priced as CPU memory, its upper bound."""
    zero = doc.get("zero_optimization", {})
    if not isinstance(zero, dict):
        return
    offload = zero.get("offload_optimizer")
    if isinstance(offload, dict) and str(offload.get("device", "none")).lower() in ("cpu", "nvme"):
        cfg.optimizer_offload = 1.0
        if str(offload.get("device")).lower() == "nvme":
            cfg.ignored.append("zero_optimization.offload_optimizer.device=nvme (priced as cpu)")
    if zero.get("cpu_offload") is True:  # the pre-0.4 spelling of offload_optimizer
        cfg.optimizer_offload = 1.0
    param = zero.get("offload_param")
    if isinstance(param, dict) and str(param.get("device", "none")).lower() in ("cpu", "nvme"):
        if zero_stage(doc, cfg.source) == 3:
            cfg.param_offload = True
            if str(param.get("device")).lower() == "nvme":
                cfg.ignored.append("zero_optimization.offload_param.device=nvme (priced as cpu)")
        else:  # DeepSpeed reads offload_param under stage 3 only (config-json.md)
            cfg.ignored.append("zero_optimization.offload_param without ZeRO-3 (DeepSpeed ignores it)")
    cfg.ignored += [f"zero_optimization.{k}" for k in sorted(zero) if k not in _ZERO_QUIET]


def read(text: str, source: str, given: dict[str, str] | None = None) -> LaunchConfig:
    if text.lstrip().startswith("{"):
        return _config(load_ds_config(text, source), source, dict(given or {}), "--set")
    return _launch(text, source, given)


def _config(doc: dict[str, Any], source: str, trainer: dict[str, str], origin: str) -> LaunchConfig:
    cfg = LaunchConfig("deepspeed", source)
    cfg.ignored = sorted(k for k in doc if k not in _KNOWN and k not in _QUIET)
    cfg.set_knob("zero", zero_stage(doc, source), "zero_optimization.stage")
    read_offload(cfg, doc)
    autos = []

    def batch_key(key: str, arg: str) -> int | None:
        value = doc.get(key)
        if str(value).lower() == "auto":
            if key == "train_batch_size":
                return None  # the integration sets world x micro x accumulation: DeepSpeed's own rule
            if arg not in trainer:
                autos.append(f"{key} auto = {_TRAINER_DEFAULTS[arg]} (TrainingArguments' {arg} default; "
                             f"{origin} {arg}=N)")
            value = trainer.get(arg, _TRAINER_DEFAULTS[arg])
        return None if value is None else as_int(value, key, source)

    cfg.micro_batch = batch_key("train_micro_batch_size_per_gpu", "per_device_train_batch_size")
    cfg.grad_accum = batch_key("gradient_accumulation_steps", "gradient_accumulation_steps")
    cfg.global_batch = batch_key("train_batch_size", "")
    cfg.batch_rule = "deepspeed"
    if cfg.micro_batch is not None:
        cfg.set_knob("mbs", cfg.micro_batch, "train_micro_batch_size_per_gpu")
    for key in ("tp", "pp", "cp", "ep", "vpp"):
        cfg.layout[key] = 1
    cfg.layout.update(sp=0, recompute=0)  # AutoTP has no sequence parallelism; checkpointing is the Trainer's
    _model_parallel(cfg, doc)
    fp16, bf16 = (enabled(doc, k, source, {**_TRAINER_DEFAULTS, **trainer}) for k in ("fp16", "bf16"))
    for key in ("fp16", "bf16"):
        block = doc.get(key)
        if isinstance(block, dict) and str(block.get("enabled")).lower() == "auto" and key not in trainer:
            autos.append(f"{key}.enabled auto = off (TrainingArguments' --{key} default)")
    cfg.precision = "bf16"
    if fp16 and not bf16:
        cfg.ignored.append("fp16 (priced as bf16: same tensor-core rate and bytes)")
    elif not (fp16 or bf16):
        cfg.ignored.append("neither fp16 nor bf16 enabled: fp32 training (priced as bf16)")
    cfg.defaults += autos
    if doc.get("activation_checkpointing"):
        # The block only tunes the checkpoint calls model code makes; the config alone switches nothing on.
        cfg.ignored.append("activation_checkpointing (model code decides; priced without recompute)")
    return cfg


def _model_parallel(cfg: LaunchConfig, doc: dict[str, Any]) -> None:
    """AutoTP's degree (tensor_parallel.autotp_size, 0 or 1 = off) and the Ulysses degree (sequence_parallel_size):
    the planner's tp, and its all-to-all context parallelism."""
    tp_block = doc.get("tensor_parallel")
    if isinstance(tp_block, dict) and tp_block.get("autotp_size") not in (None, 0):
        cfg.set_knob("tp", as_int(tp_block["autotp_size"], "tensor_parallel.autotp_size", cfg.source),
                     "tensor_parallel.autotp_size")
    if isinstance(tp_block, dict) and tp_block.get("tp_overlap_comm") is True:
        cfg.ignored.append("tensor_parallel.tp_overlap_comm (AutoTP's all-reduce overlap: priced as blocking)")
    if doc.get("sequence_parallel_size") not in (None, 1):
        sp_size(cfg, doc["sequence_parallel_size"], "sequence_parallel_size")


def sp_size(cfg: LaunchConfig, raw: object, where: str) -> None:
    """The Ulysses degree: the planner's context parallelism with the all-to-all exchange."""
    size = as_int(raw, where, cfg.source)
    if size > 1:
        cfg.set_knob("cp", size, where)
        cfg.set_knob("cp_comm", "a2a", where)


def _launch(text: str, source: str, given: dict[str, str] | None) -> LaunchConfig:
    """A `deepspeed`, `accelerate launch` (or torchrun) launch of a Trainer script with `--deepspeed CONFIG`: the
    config the script writes or one beside it, the trainer's batch and precision arguments for its "auto" values and
    its switches, the launcher's GPU count."""
    script = read_script(text, source, given)
    for command in reversed(script.commands):
        words = command.words
        if "--deepspeed" not in words:
            continue
        at = words.index("--deepspeed") + 1
        trainer = _trainer_args(words)
        if "zero_stage" in trainer and (at >= len(words) or words[at].startswith("--")):
            cfg = _config(_chat_config(trainer, source), source, {**trainer, **(given or {})}, "--set")
            cfg.seq_len = as_int(trainer.get("max_seq_len", 512), "--max_seq_len", source)
        elif at >= len(words):
            continue
        else:
            cfg = _config(load_ds_config(*_config_text(script.files, words[at], source)), source,
                          {**trainer, **(given or {})}, "--set")
        if "--gradient_checkpointing" in words and trainer.get("gradient_checkpointing", "true").lower() == "true":
            cfg.set_knob("recompute", "full", "--gradient_checkpointing")  # HF checkpoints every decoder layer
            cfg.runs_anyway["framework_recompute"] = "--gradient_checkpointing (the Trainer's model code)"
        if "model_max_length" in trainer:
            cfg.seq_len = as_int(trainer["model_max_length"], "--model_max_length", source)
        elif planned := _PLANNED_LENGTH.search(text):  # the length a `--format deepspeed` script was planned for
            cfg.seq_len = int(planned["tokens"])
        # TrainingArguments.torch_compile, off by default
        cfg.torch_compile = trainer.get("torch_compile", "false").lower() == "true"
        named = _trainer_args(words[_script_at(words, 0) + 1:])
        cfg.ignored += [f"--{k}" for k in named if k not in _TRAINER_READ and k not in _TRAINER_QUIET]
        _world(cfg, words)
        _accelerate(cfg, words, script.files)
        return cfg
    raise PlanInputError("no command with --deepspeed CONFIG found", source=source,
                         fix="pass the ds_config JSON, or the deepspeed launch that names it")


def _chat_config(args: dict[str, str], source: str) -> dict[str, Any]:
    """The ds_config DeepSpeed-Chat's training scripts build from their arguments (`--deepspeed` a bare switch):
    dschat/utils/ds_utils.py get_train_ds_config (microsoft/DeepSpeedExamples@83757d9c applications/DeepSpeed-Chat):
    ZeRO `--zero_stage`, optimizer and parameters offloaded to the CPU with `--offload`, `--dtype` fp16 (default) or
    bf16, the micro-batch `--per_device_train_batch_size` and `--gradient_accumulation_steps` (main.py sets
    train_batch_size to their product with the world)."""
    offload = {"device": "cpu" if "offload" in args and args["offload"].lower() != "false" else "none"}
    dtype = args.get("dtype", "fp16")
    if dtype not in ("fp16", "bf16"):
        raise PlanInputError(f"--dtype {dtype[:20]} is not one DeepSpeed-Chat has", field="--dtype", source=source,
                             fix="use --dtype fp16 or bf16")
    return {"zero_optimization": {"stage": as_int(args["zero_stage"], "--zero_stage", source, minimum=0),
                                  "offload_param": offload, "offload_optimizer": offload},
            "train_micro_batch_size_per_gpu": args.get("per_device_train_batch_size", "16"),
            "gradient_accumulation_steps": args.get("gradient_accumulation_steps", "1"),
            dtype: {"enabled": True}}


def _config_text(files: dict[str, str], path: str, source: str) -> tuple[str, str]:
    """(text, where) of the ds_config a launch names: a here-document the script writes, else a file relative to
    where the script runs: its folder or, as with `deepspeed scripts/x/train.sh` run from a repository's root, a
    folder above it."""
    if path in files:
        return files[path], f"{source} ({path})"
    here = Path(source).parent
    config = next((f / path for f in (here, *list(here.parents)[:6]) if (f / path).is_file()), here / path)
    if not config.is_file():
        raise PlanInputError(f"names the ds_config {path[:80]}, which is not beside the script", source=source,
                             field="--deepspeed", fix="pass the ds_config JSON itself, with --set for trainer values")
    return read_text(config, "pass a ds_config JSON"), str(config)


def _accelerate(cfg: LaunchConfig, words: list[str], files: dict[str, str]) -> None:
    """`accelerate launch [--config_file F] [--num_processes N] train.py ...`: the world size and Ulysses' sp_size
    from the command line or from the accelerate config the script writes (transformers deepspeed_alst.md keys)."""
    names = [PurePosixPath(w).name for w in words]
    if names[:2] != ["accelerate", "launch"]:
        return
    args = _trainer_args(words[:_script_at(words, len(words))])
    keys: dict[str, str] = {}
    for line in files.get(args.get("config_file", ""), "").splitlines():
        key, colon, value = line.strip().partition(":")
        if colon and value.strip():
            keys[key.strip()] = value.strip().strip("'\"")
    processes = args.get("num_processes") or keys.get("num_processes")
    if processes and processes.isdigit():
        cfg.num_gpus = int(processes)
    if keys.get("parallelism_config_sp_backend") == "deepspeed" and "parallelism_config_sp_size" in keys:
        sp_size(cfg, keys["parallelism_config_sp_size"], "parallelism_config_sp_size")


def _script_at(words: list[str], missing: int) -> int:
    """Where the training script (the first `.py` word) sits in a launch command; `missing` without one."""
    return next((i for i, w in enumerate(words) if w.endswith(".py")), missing)


def _trainer_args(words: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for i, word in enumerate(words):
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            nxt = words[i + 1] if i + 1 < len(words) else ""
            out[name] = value if eq else ("true" if not nxt or nxt.startswith("--") else nxt)
    return out


def _world(cfg: LaunchConfig, words: list[str]) -> None:
    """The deepspeed launcher's --num_gpus x --num_nodes (both before the training script)."""
    names = [PurePosixPath(w).name for w in words]
    if "deepspeed" not in names[:1]:
        return
    args = _trainer_args(words[:_script_at(words, len(words))])
    gpus, nodes = args.get("num_gpus"), args.get("num_nodes", "1")
    if gpus and gpus.isdigit() and nodes.isdigit():
        cfg.num_gpus = int(gpus) * int(nodes)
