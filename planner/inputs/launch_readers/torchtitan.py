"""Read a torchtitan TOML job config (v0.2.2 keys, `torchtitan/config/job_config.py`; what `--format torchtitan`
writes) into a LaunchConfig. Sections that do not change the plan's arithmetic (job, metrics, optimizer, checkpoint,
...) are accepted silently; unknown keys of the sections read here are named in one warning."""

from __future__ import annotations

import re
import sys
from typing import Any

from planner.errors import PlanInputError
from planner.inputs.launch_readers._common import LaunchConfig, as_int, read_header

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with the tomli backport (pyproject dependency)
    import tomli as tomllib

# torch.distributed.pipelining schedule -> plan schedule (the inverse of the torchtitan launcher's table).
_SCHEDULES = {"1f1b": "1f1b", "gpipe": "1f1b", "interleaved1f1b": "interleaved", "loopedbfs": "interleaved",
              "interleavedzerobubble": "zb-h1", "zbvzerobubble": "zb-v", "dualpipev": "dualpipe-v"}
_SECTIONS = {
    "training": {"local_batch_size", "global_batch_size", "seq_len", "mixed_precision_param", "batch_size", "steps",
                 "max_norm", "warmup_steps", "dataset", "dataset_path", "mixed_precision_reduce", "gc_freq", "seed",
                 "deterministic", "enable_cpu_offload", "compile"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                    "tensor_parallel_degree", "enable_async_tensor_parallel", "context_parallel_degree",
                    "pipeline_parallel_degree", "pipeline_parallel_schedule", "pipeline_parallel_microbatch_size",
                    "pipeline_parallel_layers_per_stage", "pipeline_parallel_first_stage_less_layers",
                    "pipeline_parallel_last_stage_less_layers", "module_fqns_per_model_part",
                    "expert_parallel_degree", "expert_tensor_parallel_degree", "disable_loss_parallel",
                    "context_parallel_rotate_method", "pipeline_parallel_split_points"},
    "activation_checkpoint": {"mode", "selective_ac_option", "per_op_sac_force_recompute_mm_shapes_by_fqns"},
    "model": {"name", "flavor", "converters", "tokenizer_path", "hf_assets_path", "print_after_conversion"},
}
# torchtitan [model] name/flavor -> catalog model (torchtitan/models/*/__init__.py flavors).
_MODELS = {("llama3", "8b"): "llama3-8b", ("llama3", "70b"): "llama3-70b", ("llama3", "405b"): "llama3-405b",
           ("deepseek_v3", "671b"): "deepseek-v3"}
_ZERO_COMMENT = re.compile(r"^# ZeRO-(?P<stage>[12]) runs as FSDP2", re.M)


def read(text: str, source: str) -> LaunchConfig:
    cfg = LaunchConfig("torchtitan", source)
    read_header(cfg, text)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PlanInputError(f"invalid TOML ({str(exc)[:100]})", source=source, fix="fix the TOML syntax") from None
    for section, known in _SECTIONS.items():
        table = doc.get(section, {})
        if not isinstance(table, dict):
            raise PlanInputError("expected a [table]", field=section, source=source, fix=f"write [{section}]")
        cfg.ignored += [f"{section}.{k}" for k in table if k not in known]
    model = doc.get("model", {})
    if model.get("name") and model.get("flavor"):
        cfg.model_name = _MODELS.get((str(model["name"]).lower(), str(model["flavor"]).lower()), cfg.model_name)
    if any("float8" in str(c) or "mx" in str(c) for c in model.get("converters", [])):
        cfg.precision = "fp8"
    _training(cfg, doc.get("training", {}), doc.get("parallelism", {}))
    _parallelism(cfg, doc.get("parallelism", {}), text)
    mode = str(doc.get("activation_checkpoint", {}).get("mode", "none")).lower()
    cfg.set_knob("recompute", mode, "activation_checkpoint.mode")
    return cfg


def _training(cfg: LaunchConfig, training: dict[str, Any], par: dict[str, Any]) -> None:
    src = cfg.source
    local = training.get("local_batch_size", training.get("batch_size"))
    if training.get("seq_len") is not None:
        cfg.seq_len = as_int(training["seq_len"], "training.seq_len", src)
    if training.get("global_batch_size") not in (None, -1):
        cfg.global_batch = as_int(training["global_batch_size"], "training.global_batch_size", src)
    pp = as_int(par.get("pipeline_parallel_degree", 1), "parallelism.pipeline_parallel_degree", src)
    if pp > 1:  # a pipeline's micro-batch is its own key; local_batch_size is micro-batch x microbatches
        cfg.set_knob("mbs", par.get("pipeline_parallel_microbatch_size", 1), "pipeline_parallel_microbatch_size")
    elif local is not None:
        cfg.set_knob("mbs", local, "training.local_batch_size")
    if cfg.precision is None:
        cfg.precision = "bf16"


def _parallelism(cfg: LaunchConfig, par: dict[str, Any], text: str) -> None:
    src = cfg.source
    degree = {key: as_int(par.get(f"{name}_degree", 1), f"parallelism.{name}_degree", src, minimum=-1)
              for key, name in (("tp", "tensor_parallel"), ("pp", "pipeline_parallel"), ("cp", "context_parallel"),
                                ("ep", "expert_parallel"), ("rep", "data_parallel_replicate"),
                                ("shard", "data_parallel_shard"))}
    for key in ("tp", "pp", "cp", "ep"):
        cfg.set_knob(key, degree[key], f"parallelism.{key}")
    if par.get("expert_tensor_parallel_degree") is not None:
        cfg.set_expert_tp(par["expert_tensor_parallel_degree"], "parallelism.expert_tensor_parallel_degree")
    shard, rep, cp = degree["shard"], degree["rep"], degree["cp"]
    if shard > 0 and rep > 0:
        cfg.data_parallel = shard * rep  # -1 (the default) takes what is left: dp comes from the world size
    reshard = str(par.get("fsdp_reshard_after_forward", "default")).lower()
    if shard > 1 or (shard == -1) or ("fsdp_reshard_after_forward" in par and shard * cp > 1):
        stated = _ZERO_COMMENT.search(text)
        # FSDP2 without resharding after forward shards gradients and optimizer states: ZeRO-2 (the plan's
        # launcher writes ZeRO-1 plans the same way and says so in a comment, which is read back here).
        zero = 3 if reshard == "always" or (reshard == "default" and degree["pp"] == 1) else 2
        if zero == 2 and stated:
            zero = int(stated["stage"])
        if zero == 3 and rep > 1:
            zero = 4  # HSDP: sharded inside a group, replicated across groups
        cfg.layout["zero"] = zero
    else:  # torchtitan applies DDP when data parallelism is the only dimension, FSDP (degree 1) otherwise
        cfg.layout["zero"] = 0 if max(degree["tp"], degree["pp"], cp, degree["ep"]) == 1 else 1
    cfg.layout["sp"] = int(degree["tp"] > 1)  # torchtitan's TP plan always shards norms along the sequence
    if degree["pp"] > 1:
        name = str(par.get("pipeline_parallel_schedule", "1F1B")).lower()
        if name not in _SCHEDULES:
            raise PlanInputError(f"schedule '{name[:40]}' is not one the planner prices",
                                 field="parallelism.pipeline_parallel_schedule", source=src,
                                 fix="use 1F1B, Interleaved1F1B, InterleavedZeroBubble, ZBVZeroBubble or DualPipeV")
        cfg.set_knob("schedule", _SCHEDULES[name], "parallelism.pipeline_parallel_schedule")
        parts = par.get("module_fqns_per_model_part")
        if isinstance(parts, list) and parts:
            cfg.set_knob("vpp", max(len(parts) // degree["pp"], 1), "parallelism.module_fqns_per_model_part")
        elif par.get("pipeline_parallel_layers_per_stage") is not None:
            cfg.layers_per_stage = as_int(par["pipeline_parallel_layers_per_stage"],
                                          "parallelism.pipeline_parallel_layers_per_stage", src)
        elif _SCHEDULES[name] in ("interleaved", "zb-h1", "zb-v", "dualpipe-v"):
            cfg.set_knob("vpp", 2, "parallelism.pipeline_parallel_schedule")  # torchtitan's default: 2 per rank
