"""Read NeMo launch configurations into a LaunchConfig: Megatron-Bridge (NeMo 2) recipe overrides, `section.field=value`
(what `--format nemo` writes; a `run_recipe.py ... key=value` command line works too) or the same as a YAML override
file; and NeMo 1.x YAML training configs and the NeMo-Framework-Launcher scripts that run them
(planner.inputs.launch_readers.nemo_yaml). Keys of sections that do not change the plan's arithmetic (optimizer,
logger, checkpoint, ...) are accepted silently; unknown keys are named in a warning."""

from __future__ import annotations

import re
import shlex
from pathlib import Path, PurePosixPath
from typing import Any

from planner.errors import PlanInputError
from planner.inputs.launch_readers import megatron_flags as mf
from planner.inputs.launch_readers import megatron_model, nemo_yaml
from planner.inputs.launch_readers._common import (
    LaunchConfig,
    as_bool,
    as_int,
    as_share,
    cuda_graphs,
    is_null,
    moments_dtype,
    read_fine_grained_offload,
    read_header,
    read_optimizer,
    token_drop,
)
from planner.inputs.launch_readers.shell import read_script

_KNOBS = {"model.tensor_model_parallel_size": "tp", "model.pipeline_model_parallel_size": "pp",
          "model.context_parallel_size": "cp", "model.expert_model_parallel_size": "ep",
          "model.virtual_pipeline_model_parallel_size": "vpp", "train.micro_batch_size": "mbs"}
_SHAPE = {"model.num_layers": "num_hidden_layers", "model.hidden_size": "hidden_size",
          "model.ffn_hidden_size": "intermediate_size", "model.num_attention_heads": "num_attention_heads",
          "model.num_query_groups": "num_key_value_heads", "model.kv_channels": "head_dim",
          "model.vocab_size": "vocab_size", "model.num_moe_experts": "num_local_experts",
          "model.moe_router_topk": "num_experts_per_tok", "model.moe_ffn_hidden_size": "moe_intermediate_size"}
_PRECISION = {"bf16_mixed": "bf16", "bf16_with_fp8_delayed_scaling_mixed": "fp8", "bf16_with_fp8_current_scaling_mixed":
              "fp8", "bf16_with_mxfp8_mixed": "fp8", "bf16_with_fp8_subchannel_scaling_mixed": "fp8",
              "bf16_with_nvfp4_mixed": "fp4"}
_HANDLED = {"model.seq_length", "dataset.seq_length", "dataset.sequence_length", "train.global_batch_size",
            "model.sequence_parallel", "dist.use_torch_fsdp2", "ddp.use_torch_fsdp2",
            "model.recompute_granularity", "model.recompute_method", "model.recompute_num_layers",
            "model.recompute_modules", "model.cpu_offloading", "model.cpu_offloading_num_layers",
            "model.cpu_offloading_activations", "model.cpu_offloading_weights", "model.moe_token_dispatcher_type",
            "model.fine_grained_activation_offloading", "model.offload_modules",
            "model.moe_flex_dispatcher_backend", "model.moe_router_score_function", "model.moe_router_pre_softmax",
            "model.moe_router_num_groups", "model.moe_router_group_topk", "model.mtp_num_layers",
            "model.cp_comm_type", "ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer",
            "dist.use_megatron_fsdp", "ddp.use_megatron_fsdp", "ddp.data_parallel_sharding_strategy",
            "dist.use_tp_pp_dp_mapping",
            "mixed_precision", "model.expert_tensor_parallel_size", "model.hierarchical_context_parallel_sizes",
            "model.pipeline_model_parallel_layout", "model.account_for_embedding_in_pipeline_split",
            "model.account_for_loss_in_pipeline_split", "model.num_layers_in_first_pipeline_stage",
            "model.num_layers_in_last_pipeline_stage", "ddp.overlap_grad_reduce", "ddp.overlap_param_gather",
            "ddp.grad_reduce_in_fp32", "mixed_precision.grad_reduce_in_fp32",
            "checkpoint.ckpt_format", "model.moe_expert_capacity_factor", "model.moe_pad_expert_input_to_capacity",
            "model.moe_router_force_load_balancing", "model.moe_router_fusion", "model.cuda_graph_impl",
            "model.cuda_graph_scope", "model.cuda_graph_modules", "model.enable_cuda_graph",
            "model.external_cuda_graph", "mixed_precision.fp8_dot_product_attention",
            "model.fp8_dot_product_attention", "mixed_precision.fp8_param_gather", "optimizer.optimizer"}
_QUIET_SECTIONS = ("optimizer.", "scheduler.", "logger.", "checkpoint.", "tokenizer.", "rng.", "profiling.",
                   "comm_overlap.", "dataset.", "train.")


def _is_override(key: str) -> bool:
    """A Hydra-style `section.key` override name (or the bare `mixed_precision` preset), not a command-line flag."""
    return not key.startswith("-") and (key == "mixed_precision" or "." in key)


def overrides(text: str, source: str) -> dict[str, str]:
    """Every `section.key=value` token (comments and non-override tokens skipped); a later repeat wins."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        try:
            tokens = shlex.split(line.replace("\\", " "), comments=True)
        except ValueError as exc:
            raise PlanInputError(f"cannot split '{line[:60]}' ({exc})", source=source, fix="close the quote") from None
        for token in tokens:
            key, eq, value = token.partition("=")
            if eq and _is_override(key):
                out[key.lstrip("+~")] = value
    return out


# Megatron-Bridge's recipe runner (scripts/training/run_recipe.py: `--recipe NAME` then `section.key=value` overrides).
RUN_RECIPE = "run_recipe.py"


def read(text: str, source: str, given: dict[str, str] | None = None) -> LaunchConfig:
    given = dict(given or {})
    if Path(source).suffix.lower() in (".yaml", ".yml"):
        return _yaml(text, source, given)
    if "main.py" in text and "training" in text:  # a NeMo-Framework-Launcher run script
        cfg = LaunchConfig("nemo", source)
        doc, _ = nemo_yaml.from_launcher_script(read_script(text, source, given), source, given)
        nemo_yaml.read(nemo_yaml.resolve(doc, source), cfg)
        return cfg
    if RUN_RECIPE in text and _is_script(text):  # a shell script that builds and runs a run_recipe.py command
        found, notes = _recipe_launch(text, source, given)
        cfg = _overrides(text, source, {**found, **{k: v for k, v in given.items() if _is_override(k)}})
        cfg.doubts += notes
        return cfg
    return _overrides(text, source, {**overrides(text, source), **given})


def _variables(value: str) -> list[str]:
    """The shell variables a value still names, in order ($TP, ${PP})."""
    return re.findall(r"\$\{?([A-Za-z_]\w*)", value)


def _is_script(text: str) -> bool:
    """More than a bare command line: the overrides it passes come from variables, loops or strings the shell builds
    (Megatron-Bridge's examples/models/*/slurm_pretrain.sh), so they are read as bash would expand them."""
    return "$" in text or text.lstrip().startswith("#!")


def _recipe_launch(text: str, source: str, given: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The `section.key=value` overrides of the run_recipe.py command the script runs (planner.inputs.launch_readers
    .shell expands its variables, loops and `bash -c` strings), and what the reader could not pin down."""
    script = read_script(text, source, given)
    runs = [c for c in script.commands if c.words and PurePosixPath(c.words[0]).name != "echo"
            and any(PurePosixPath(w).name == RUN_RECIPE for w in c.words)]
    if not runs:
        where = f" (it exits at line {script.exit_line} first)" if script.exit_line else ""
        raise PlanInputError(f"runs no Megatron-Bridge {RUN_RECIPE} on a path the reader can follow{where}",
                             source=source, fix="pass --set NAME=VALUE for the variables the script checks before "
                             "it launches (a container image, a data path), or pass the overrides themselves")
    out: dict[str, str] = {}
    for word in runs[0].argv:
        key, eq, value = word.text.partition("=")
        if not (eq and _is_override(key)):
            continue
        key = key.lstrip("+~")
        unset = [d for d in _variables(value) if d in word.doubt and d in script.unresolved]
        if unset and (key in _KNOBS or key in _SHAPE or key in _HANDLED):
            raise PlanInputError(f"is {value[:40]}, which the file leaves unset", field=key, source=source,
                                 fix=f"pass --set {unset[0]}=<value>")
        out[key] = value
    recipe = next((runs[0].words[i + 1] for i, w in enumerate(runs[0].words[:-1]) if w == "--recipe"), None)
    notes = [f"what recipe {recipe} sets itself is not in the file: priced at Megatron-Core's defaults (pass a "
             "setting as --set section.key=value)"] if recipe else []
    launches = {tuple(w.text for w in run.argv) for run in runs}
    if len(launches) > 1:
        notes.append(f"the script launches {len(launches)} different {RUN_RECIPE} commands; the first is read")
    return out, notes


def _yaml(text: str, source: str, given: dict[str, str]) -> LaunchConfig:
    doc = nemo_yaml.load_yaml(text, source)
    if not isinstance(doc, dict):
        raise PlanInputError("expected a mapping of sections", source=source,
                             fix="pass a NeMo training config (trainer:, model:) or a Bridge override YAML")
    cfg = LaunchConfig("nemo", source)
    if nemo_yaml.looks_like(doc):  # NeMo 1.x / launcher training config; --set key=value as Hydra overrides
        for key, value in given.items():
            nemo_yaml.override(doc, key.removeprefix("training."), value, False)
        nemo_yaml.read(nemo_yaml.resolve(doc, source), cfg)
        return cfg
    for key, value in doc.items():  # Bridge's ConfigContainer: sections of fields, mixed_precision a preset name
        if not isinstance(value, dict) and key != "mixed_precision":
            raise PlanInputError(f"expected a section of fields, got {type(value).__name__}", field=str(key)[:40],
                                 source=source, fix="write Bridge overrides as `section:` mappings (model:, train:)")
    found = {**_flatten(doc), **given}
    if not any(k in _KNOBS or k in _SHAPE or k in _HANDLED for k in found):
        raise PlanInputError("states none of the keys plan reads (no parallel sizes, batch, model or precision)",
                             source=source, fix="pass a NeMo training config (trainer:, model:) or Bridge overrides")
    return _overrides(text, source, found)


def _flatten(doc: dict[str, Any], prefix: str = "", depth: int = 0) -> dict[str, str]:
    """A Bridge override YAML as the `section.field=value` overrides it amounts to."""
    out: dict[str, str] = {}
    for key, value in doc.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and depth < 8:
            out.update(_flatten(value, name + ".", depth + 1))
        elif isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif value is None:
            out[name] = "null"
        elif isinstance(value, list):
            out[name] = "[" + ",".join(str(v) for v in value) + "]"
        else:
            out[name] = str(value)
    return out


def _overrides(text: str, source: str, found: dict[str, str]) -> LaunchConfig:
    cfg = LaunchConfig("nemo", source)
    read_header(cfg, text)
    if not found:
        raise PlanInputError("no section.key=value overrides found", source=source,
                             fix="pass Megatron-Bridge recipe overrides (the output of --format nemo)")
    for key, knob in _KNOBS.items():
        if key in found and not is_null(found[key]):
            cfg.set_knob(knob, found[key], key)
    for key, name in _SHAPE.items():
        if key in found and not is_null(found[key]):
            cfg.model_keys[name] = as_int(found[key], key, source)
    if cfg.model_keys and not is_null(found.get("model.moe_router_score_function", "null")):
        cfg.model_keys["scoring_func"] = found["model.moe_router_score_function"]
    for key, name in (("model.moe_router_num_groups", "n_group"), ("model.moe_router_group_topk", "topk_group")):
        if cfg.model_keys and key in found and not is_null(found[key]):
            cfg.model_keys[name] = as_int(found[key], key, source)
    mtp = found.get("model.mtp_num_layers")
    if mtp is not None:
        cfg.mtp_layers = 0 if is_null(mtp) else as_int(mtp, "model.mtp_num_layers", source, minimum=0)
        if cfg.model_keys:
            cfg.model_keys["num_nextn_predict_layers"] = cfg.mtp_layers
    etp_key = "model.expert_tensor_parallel_size"
    if etp_key in found and not is_null(found[etp_key]):
        cfg.set_expert_tp(found[etp_key], etp_key)
    layout_key = "model.pipeline_model_parallel_layout"
    if layout_key in found and not is_null(found[layout_key]):
        _pipeline_layout(cfg, found[layout_key], layout_key)
    for key in ("model.seq_length", "dataset.seq_length", "dataset.sequence_length"):
        if key in found:
            cfg.seq_len = as_int(found[key], key, source)
    if "train.global_batch_size" in found:
        cfg.global_batch = as_int(found["train.global_batch_size"], "train.global_batch_size", source)
    cfg.batch_rule, cfg.micro_batch = "megatron", cfg.layout.get("mbs")  # Bridge runs Megatron's batch arithmetic
    _memory(cfg, found)
    if "mixed_precision" in found:
        preset = found["mixed_precision"].strip("'\"")
        if preset not in _PRECISION:
            cfg.ignored.append(f"mixed_precision={preset} (priced as bf16)")
        cfg.precision = _PRECISION.get(preset, "bf16")
        if "subchannel" in preset:  # Bridge's block-scaled fp8 presets (training/mixed_precision.py)
            cfg.fp8_recipe = "blockwise"
    _fp8_attention(cfg, found)
    cfg.ignored += sorted(k for k in found if k not in _KNOBS and k not in _SHAPE and k not in _HANDLED
                          and not k.startswith(_QUIET_SECTIONS))
    return cfg


def _pipeline_layout(cfg: LaunchConfig, text: str, key: str) -> None:
    """model.pipeline_model_parallel_layout: a list of layer-type lists, one per model chunk, as Megatron-Bridge's
    recipes set it ([[embedding,decoder],[decoder,loss]]), or Megatron's layout string (TransformerConfig takes
    both): its chunk count over pp is the virtual stages per rank, its decoder counts the split priced."""
    text = text.strip().strip("'\"")
    if text.startswith("["):
        stages = re.findall(r"\[([^\[\]]*)\]", text)
        if not stages:
            raise PlanInputError("expected a list of lists of layer types", field=key, source=cfg.source,
                                 fix="e.g. [[embedding,decoder],[decoder,loss]]")
        layers = [sum(item.strip(" '\"") == "decoder" for item in stage.split(",")) for stage in stages]
    else:
        try:
            layers = list(megatron_model.layout_chunks(text))
        except ValueError as e:
            raise PlanInputError(str(e), field=key, source=cfg.source, fix="e.g. 'Et|(tt|)*30L'") from None
    pp = cfg.layout.get("pp", 1)
    if len(layers) % pp:
        raise PlanInputError(f"{len(layers)} model chunks do not split over pp={pp} ranks", field=key,
                             source=cfg.source, fix="give a multiple of the pipeline size in chunks")
    cfg.set_knob("vpp", len(layers) // pp, key)
    cfg.pipeline_layout = tuple(layers)
    cfg.runs_anyway["stage_split_launchable"] = key


def _fp8_attention(cfg: LaunchConfig, found: dict[str, str]) -> None:
    """Bridge's MixedPrecisionConfig.fp8_dot_product_attention (copied onto the model's TransformerConfig field of
    the same name): Transformer Engine's fp8 attention, which runs only inside an fp8 recipe."""
    for key in ("mixed_precision.fp8_dot_product_attention", "model.fp8_dot_product_attention"):
        if key not in found or is_null(found[key]):
            continue
        on = as_bool(found[key], key, cfg.source)
        if on and cfg.precision not in ("fp8", "fp4"):
            cfg.ignored.append(f"{key}=true (no fp8 recipe: the attention stays bf16)")
        else:
            cfg.fp8_attention = on


def _hydra_list(raw: str) -> list[str]:
    """A Hydra list override's items: `[core_attn,attn_proj]` (quotes around items dropped)."""
    return [x.strip(" '\"") for x in raw.strip("[] ").split(",") if x.strip(" '\"")]


def _memory(cfg: LaunchConfig, found: dict[str, str]) -> None:
    src = cfg.source

    def flag(key: str) -> bool:
        return key in found and as_bool(found[key], key, src)

    if flag("dist.use_torch_fsdp2") or flag("ddp.use_torch_fsdp2"):
        cfg.layout["zero"] = 3  # PyTorch FSDP2 reshards after forward: ZeRO-3
    elif flag("ddp.use_megatron_fsdp") or flag("dist.use_megatron_fsdp"):
        strategy = found.get("ddp.data_parallel_sharding_strategy", "optim_grads_params")
        if strategy not in mf.FSDP_ZERO:
            raise PlanInputError(f"unknown strategy '{strategy[:40]}'", field="ddp.data_parallel_sharding_strategy",
                                 source=src, fix=f"use one of {', '.join(mf.FSDP_ZERO)}")
        cfg.layout["zero"] = mf.FSDP_ZERO[strategy]
    elif "ddp.use_distributed_optimizer" in found or "optimizer.use_distributed_optimizer" in found:
        # Bridge turns the distributed optimizer on when either section asks for it.
        cfg.layout["zero"] = int(flag("ddp.use_distributed_optimizer") or flag("optimizer.use_distributed_optimizer"))
    granularity = found.get("model.recompute_granularity")
    cfg.set_knob("recompute", "none" if is_null(granularity) else granularity, "model.recompute_granularity")
    if not is_null(granularity) and str(granularity) == "selective":  # TransformerConfig default: core_attn
        raw = str(found.get("model.recompute_modules", "null"))
        modules = _hydra_list(raw)
        cfg.recompute_modules = tuple(modules) if not is_null(raw) and modules else mf.DEFAULT_RECOMPUTE_MODULES
    if flag("model.cpu_offloading"):  # Megatron-Core's layer-level activation offloading (TransformerConfig)
        cfg.set_knob("recompute", "offload", "model.cpu_offloading")
    if flag("model.fine_grained_activation_offloading"):
        read_fine_grained_offload(cfg, _hydra_list(str(found.get("model.offload_modules", ""))),
                                  "model.offload_modules")
    # Megatron-Core OptimizerConfig: optimizer_cpu_offload with optimizer_offload_fraction (default 0.0, nothing
    # moves), exp_avg_dtype / exp_avg_sq_dtype (default fp32)
    if flag("optimizer.optimizer_cpu_offload"):
        key = "optimizer.optimizer_offload_fraction"
        cfg.optimizer_offload = as_share(found[key], key, src) if key in found and not is_null(found[key]) else 0.0
    moments_dtype(found.get("optimizer.exp_avg_dtype", "fp32"), found.get("optimizer.exp_avg_sq_dtype", "fp32"),
                  "optimizer.exp_avg_dtype/exp_avg_sq_dtype", cfg)
    if "optimizer.optimizer" in found and not is_null(found["optimizer.optimizer"]):
        read_optimizer(cfg, found["optimizer.optimizer"], "optimizer.optimizer")
    token_drop(cfg, found.get("model.moe_expert_capacity_factor"), flag("model.moe_pad_expert_input_to_capacity"),
               ("model.moe_expert_capacity_factor", "model.moe_pad_expert_input_to_capacity"))
    cfg.moe_force_balance = flag("model.moe_router_force_load_balancing")
    if "model.moe_router_fusion" in found:  # else the recipe's own setting decides
        cfg.moe_router_fusion = flag("model.moe_router_fusion")
    impl = found.get("model.cuda_graph_impl")  # Megatron-Core TransformerConfig, as Bridge sets it (None: "none")
    impl = ("none" if is_null(impl) else str(impl)) if impl is not None else (
        "local" if flag("model.enable_cuda_graph") else "transformer_engine" if flag("model.external_cuda_graph")
        else None)
    named = next((k for k in ("model.cuda_graph_modules", "model.cuda_graph_scope") if k in found),
                 "model.cuda_graph_modules")
    raw = str(found.get(named, "null"))
    cuda_graphs(cfg, impl, [] if is_null(raw) else _hydra_list(raw), "model.cuda_graph_impl", named)
    if flag("comm_overlap.overlap_moe_expert_parallel_comm"):  # Megatron-Core's combined 1F1B
        cfg.set_knob("schedule", "combined-1f1b", "comm_overlap.overlap_moe_expert_parallel_comm")
    if "model.sequence_parallel" in found:
        cfg.layout["sp"] = int(flag("model.sequence_parallel") and cfg.layout.get("tp", 1) > 1)
    if flag("dist.use_tp_pp_dp_mapping"):  # Bridge DistributedInitConfig: rank order tp-cp-ep-pp-dp
        cfg.set_knob("order", "tp-cp-ep-pp-dp", "dist.use_tp_pp_dp_mapping")
    dispatcher = found.get("model.moe_token_dispatcher_type")
    if dispatcher is not None and not is_null(dispatcher):  # allgather priced as alltoall (every copy sent)
        cfg.moe_dispatcher = "flex" if str(dispatcher) == "flex" else "alltoall"
    if "comm_overlap.tp_comm_overlap" in found:  # else the recipe's own CommOverlapConfig decides
        cfg.tp_comm_overlap = flag("comm_overlap.tp_comm_overlap")
    kind = found.get("model.cp_comm_type")
    if kind is not None and not is_null(kind):
        if kind not in mf.CP_COMM:
            raise PlanInputError(f"'{kind[:40]}' is not a context-parallel exchange the planner prices",
                                 field="model.cp_comm_type", source=src, fix="use p2p, a2a or a2a+p2p")
        cfg.set_knob("cp_comm", mf.CP_COMM[kind], "model.cp_comm_type")
