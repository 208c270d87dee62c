"""Read a DeepSpeed `ds_config` JSON (0.17-era keys; what `--format deepspeed` writes) into a LaunchConfig.

A ds_config states data parallelism only: ZeRO stage, micro-batch, accumulation and the global batch, from which
the data-parallel size follows (train_batch_size = micro x accumulation x dp, which DeepSpeed asserts).
"""

from __future__ import annotations

import json
from typing import Any

from planner.errors import PlanInputError
from planner.inputs.launch_readers._common import LaunchConfig, as_bool, as_int

# Keys that do not change the plan's arithmetic (optimizer, logging, I/O); accepted silently.
_IRRELEVANT = {"optimizer", "scheduler", "gradient_clipping", "steps_per_print", "wall_clock_breakdown",
               "prescale_gradients", "gradient_predivide_factor", "communication_data_type", "tensorboard",
               "wandb", "csv_monitor", "flops_profiler", "checkpoint", "data_types", "zero_allow_untested_optimizer",
               "amp", "sparse_gradients", "dump_state", "comms_logger", "aio", "elasticity", "compile"}
_KNOWN = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "zero_optimization",
          "bf16", "fp16", "activation_checkpointing"}


def read(text: str, source: str) -> LaunchConfig:
    cfg = LaunchConfig("deepspeed", source)
    try:
        doc: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanInputError(f"invalid JSON at line {exc.lineno}: {exc.msg}", source=source,
                             fix="fix the JSON syntax") from None
    if not isinstance(doc, dict):
        raise PlanInputError("expected a JSON object (a ds_config)", source=source, fix="pass a ds_config.json")
    cfg.ignored = sorted(k for k in doc if k not in _KNOWN and k not in _IRRELEVANT)
    zero = doc.get("zero_optimization", {})
    stage = zero.get("stage", 0) if isinstance(zero, dict) else zero
    cfg.set_knob("zero", as_int(stage, "zero_optimization.stage", source, minimum=0), "zero_optimization.stage")
    offload = zero.get("offload_optimizer") if isinstance(zero, dict) else None
    if isinstance(offload, dict) and str(offload.get("device", "none")).lower() in ("cpu", "nvme"):
        # ZeRO-Offload moves the whole optimizer (Ren et al. 2021); NVMe is priced as CPU memory, its upper bound
        cfg.optimizer_offload = 1.0
        if str(offload.get("device")).lower() == "nvme":
            cfg.ignored.append("zero_optimization.offload_optimizer.device=nvme (priced as cpu)")
    micro = doc.get("train_micro_batch_size_per_gpu")
    accumulation = as_int(doc.get("gradient_accumulation_steps", 1), "gradient_accumulation_steps", source)
    if micro is not None:
        cfg.set_knob("mbs", as_int(micro, "train_micro_batch_size_per_gpu", source), "train_micro_batch_size_per_gpu")
    if doc.get("train_batch_size") is not None:
        cfg.global_batch = as_int(doc["train_batch_size"], "train_batch_size", source)
        per_rank = cfg.layout.get("mbs", 1) * accumulation
        if cfg.global_batch % per_rank:
            raise PlanInputError(f"{cfg.global_batch} is not micro-batch x gradient_accumulation_steps "
                                 f"({per_rank}) x data-parallel size", field="train_batch_size", source=source,
                                 fix="DeepSpeed asserts this product; correct one of the three")
        cfg.data_parallel = cfg.global_batch // per_rank
        cfg.num_gpus = cfg.data_parallel  # a plain ds_config has no model parallelism: every GPU is a data rank
    for key in ("tp", "pp", "cp", "ep", "vpp"):
        cfg.layout[key] = 1
    cfg.layout.update(sp=0, recompute=0)
    fp16 = doc.get("fp16", {})
    if isinstance(fp16, dict) and as_bool(fp16.get("enabled", False), "fp16.enabled", source):
        cfg.ignored.append("fp16 (priced as bf16)")
    cfg.precision = "bf16"
    if doc.get("activation_checkpointing"):
        # The block only tunes the checkpoint calls model code makes; the config alone switches nothing on.
        cfg.ignored.append("activation_checkpointing (model code decides; priced without recompute)")
    return cfg
