"""NeMo 1.x training configs (the `trainer:` / `model:` YAML of NeMo's megatron_gpt_config.yaml and the
NeMo-Framework-Launcher's conf/training/<family>/<size>.yaml) and the launcher's command lines that run them
(`main.py training=gpt3/175b training.model.tensor_model_parallel_size=4 training.trainer.num_nodes=16 ...`).

Read as NeMo reads them: OmegaConf interpolations (`${.hidden_size}`, `${model.encoder_seq_length}`, the launcher's
`${multiply:a,b}`) resolved; Hydra overrides applied on top (`key=value`, `+key=value` adds, `~key` deletes); the base
config a launcher script names (`training=gpt3/175b`) looked up as the launcher does, under launcher_scripts/conf/
training/ in a directory above the script, or given with --set training=PATH. Knobs and defaults follow NeMo 1.x
MegatronGPTModel (nemo/collections/nlp/models/language_modeling/megatron_gpt_model.py and megatron_base_model.py):
micro/global batch and parallel sizes under model, num_nodes x devices for the world, trainer.precision, fp8 by
model.fp8, the distributed optimizer by optim.name distributed_fused_adam / mcore_distributed_optim, selective or
full recompute by activations_checkpoint_granularity, activation gelu and tied embeddings unless set.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from planner.errors import PlanInputError
from planner.inputs.files import read_text
from planner.inputs.launch_readers import megatron_flags as mf
from planner.inputs.launch_readers._common import (
    LaunchConfig,
    as_bool,
    as_int,
    cuda_graphs,
    is_null,
    token_drop,
)
from planner.inputs.launch_readers.shell import Script

_KNOBS = {"tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp", "context_parallel_size": "cp",
          "expert_model_parallel_size": "ep", "virtual_pipeline_model_parallel_size": "vpp",
          "micro_batch_size": "mbs"}
_SHAPE = {"num_layers": "num_hidden_layers", "hidden_size": "hidden_size", "ffn_hidden_size": "intermediate_size",
          "num_attention_heads": "num_attention_heads", "num_query_groups": "num_key_value_heads",
          "kv_channels": "head_dim", "max_position_embeddings": "max_position_embeddings",
          "num_moe_experts": "num_local_experts", "moe_router_topk": "num_experts_per_tok"}
# model keys read by this module's own code, and those that change nothing the planner prices.
_READ = {"global_batch_size", "rampup_batch_size", "encoder_seq_length", "seq_length", "sequence_parallel",
         "activation", "bias", "share_embeddings_and_output_weights", "activations_checkpoint_granularity",
         "activations_checkpoint_method", "activations_checkpoint_num_layers", "fp8", "fp8_hybrid", "fp8_e4m3",
         "optim", "fsdp", "fsdp_sharding_strategy", "tokenizer", "make_vocab_size_divisible_by", "cpu_offloading",
         "cpu_offloading_num_layers", "cpu_offloading_activations", "cpu_offloading_weights", "mcore_gpt",
         "transformer_engine", "num_micro_batches_with_partial_activation_checkpoints",
         "activations_checkpoint_layers_per_pipeline", "expert_tensor_parallel_size", "moe_grouped_gemm",
         "moe_token_dispatcher_type", "moe_aux_loss_coeff", "moe_router_load_balancing_type", "normalization",
         "position_embedding_type", "rotary_base", "rotary_percentage", "seq_len_interpolation_factor",
         "moe_expert_capacity_factor", "moe_pad_expert_input_to_capacity", "precision",
         "moe_router_force_load_balancing", "enable_cuda_graph", "external_cuda_graph", "cuda_graph_impl",
         "cuda_graph_scope", "cuda_graph_modules"}
_QUIET = {"resume_from_checkpoint", "init_method_std", "hidden_dropout", "attention_dropout", "ffn_dropout",
          "apply_query_key_layer_scaling", "layernorm_epsilon", "pre_process", "post_process", "persist_layer_norm",
          "gradient_as_bucket_view", "grad_div_ar_fusion", "gradient_accumulation_fusion", "bias_activation_fusion",
          "bias_dropout_add_fusion", "masked_softmax_fusion", "fsdp_grad_reduce_dtype", "fsdp_sharded_checkpoint",
          "overlap_p2p_comm", "batch_p2p_comm", "native_amp_init_scale", "native_amp_growth_interval", "hysteresis",
          "fp32_residual_connection", "fp16_lm_cross_entropy", "megatron_amp_O2", "grad_allreduce_chunk_size_mb",
          "sharp", "fp8_margin", "fp8_interval", "fp8_amax_history_len", "fp8_amax_compute_algo", "fp8_wgrad",
          "ub_tp_comm_overlap", "ub_tp_comm_overlap_cfg", "seed", "sync_batch_comm", "use_cpu_initialization",
          "onnx_safe", "apex_transformer_log_level", "gc_interval", "nsys_profile", "data", "name",
          "use_scaled_init_method", "openai_gelu", "headscale", "transformer_block_type",
          "layernorm_zero_centered_gamma", "attention_type", "use_flash_attention", "deterministic_mode",
          "defer_embedding_wgrad_compute", "wgrad_deferral_limit", "use_te_rng_tracker", "context_parallel_comm",
          "apply_rope_fusion", "get_attention_mask_from_fusion", "cross_entropy_loss_fusion", "restore_from_path",
          "num_layers_per_virtual_pipeline_stage", "scale_positional_embedding", "mcore_customization_config",
          "fp8_params", "fp8_dot_product_attention", "fp8_multi_head_attention", "reduce_amax", "use_emha",
          "do_layer_norm_weight_decay", "normalize_attention_scores", "moe_router_pre_softmax",
          "moe_input_jitter_eps", "moe_z_loss_coeff", "moe_per_layer_logging", "moe_router_topk_scaling_factor"}
_TRAINER_QUIET = {"accelerator", "logger", "enable_checkpointing", "use_distributed_sampler", "replace_sampler_ddp",
                  "max_epochs", "max_steps", "max_time", "log_every_n_steps", "val_check_interval",
                  "limit_val_batches", "limit_test_batches", "accumulate_grad_batches", "gradient_clip_val",
                  "benchmark", "enable_model_summary", "num_sanity_val_steps"}
_DISTRIBUTED_OPTIMIZERS = ("distributed_fused_adam", "mcore_distributed_optim")
_INTERPOLATION = re.compile(r"\$\{([^${}]*)\}")


def looks_like(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("model"), dict) and isinstance(doc.get("trainer"), dict)


def load_yaml(text: str, source: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise PlanInputError(f"invalid YAML{where}", source=source, fix="fix the YAML syntax") from None
    except (RecursionError, ValueError):
        raise PlanInputError("nested too deeply (or a value too large) to read", source=source,
                             fix="a training config is a few levels deep; flatten the file") from None


def from_launcher_script(script: Script, source: str, given: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """The base training config the launch names, with its overrides applied; the override keys not read."""
    words = next((c.words for c in reversed(script.commands) if any(w.endswith("main.py") for w in c.words)), [])
    overrides = [w for w in words if "=" in w and not w.startswith("-")]
    choice = next((w.split("=", 1)[1] for w in overrides if w.startswith("training=")), None)
    path = given.get("training") or (choice and _find_base(Path(source).parent, choice))
    if not path:
        raise PlanInputError(f"names the launcher's base config training={choice or '?'}, which is not beside it",
                             source=source, field="training", fix="pass --set training=PATH/TO/<size>.yaml "
                             "(NeMo-Framework-Launcher launcher_scripts/conf/training/...)")
    doc = load_yaml(read_text(Path(path), "pass the launcher's training YAML"), str(path))
    if not looks_like(doc):
        raise PlanInputError("is not a NeMo training config (no trainer: and model: sections)", source=str(path),
                             fix="pass the launcher's conf/training/<family>/<size>.yaml")
    for item in overrides:
        key, _, value = item.partition("=")
        if key.lstrip("+~").startswith("training."):
            override(doc, key.lstrip("+").removeprefix("training."), value, key.startswith("~"))
    return doc, []


def _find_base(start: Path, choice: str) -> str | None:
    """launcher_scripts/conf/training/<choice>.yaml in this directory or one above it (Hydra's config search path
    of the launcher's main.py)."""
    for folder in (start, *start.parents):
        candidate = folder / "launcher_scripts" / "conf" / "training" / f"{choice}.yaml"
        if candidate.is_file():
            return str(candidate)
    return None


def override(doc: dict[str, Any], key: str, value: str, delete: bool) -> None:
    parts = key.lstrip("~").split(".")
    table = doc
    for part in parts[:-1]:
        nxt = table.get(part)
        if not isinstance(nxt, dict):
            nxt = table[part] = {}
        table = nxt
    if delete:
        table.pop(parts[-1], None)
        return
    try:
        table[parts[-1]] = yaml.safe_load(value) if value else None
    except yaml.YAMLError:
        table[parts[-1]] = value


def resolve(doc: dict[str, Any], source: str) -> dict[str, Any]:
    """OmegaConf interpolations of the model and trainer sections resolved: ${key} from the root (the launcher's
    configs live under `training.`), ${.key} from the same section, and the launcher's ${multiply:a,b}."""

    def lookup(path: str, here: dict[str, Any]) -> Any:
        if path.startswith("."):
            return here.get(path.lstrip("."))
        node: Any = doc
        for part in path.removeprefix("training.").split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return node

    def value(raw: Any, here: dict[str, Any], depth: int = 0) -> Any:
        if not isinstance(raw, str) or "${" not in raw or depth > 8:
            return raw
        whole = _INTERPOLATION.fullmatch(raw.strip())
        if whole and ":" not in whole[1]:
            return value(lookup(whole[1].strip(), here), here, depth + 1)
        multiply = re.fullmatch(r"\$\{multiply:\s*([^,]+),\s*(.+)\}", raw.strip())
        if multiply:
            a, b = (value(x.strip(), here, depth + 1) for x in (multiply[1], multiply[2]))
            try:
                return int(a) * int(b)
            except (TypeError, ValueError):
                return raw
        return raw

    for section in ("model", "trainer"):
        table = doc.get(section)
        if isinstance(table, dict):
            for key in list(table):
                table[key] = value(table[key], table)
    return doc


def read(doc: dict[str, Any], cfg: LaunchConfig) -> None:
    """Knobs, batch, world, precision and model shape of a NeMo 1.x training config (interpolations resolved)."""
    src = cfg.source
    model, trainer = doc["model"], doc["trainer"]
    cfg.ignored += [f"model.{k}" for k in model if k not in _KNOBS and k not in _SHAPE and k not in _READ
                    and k not in _QUIET]
    cfg.ignored += [f"trainer.{k}" for k in trainer if k not in _TRAINER_QUIET
                    and k not in ("num_nodes", "devices", "precision")]
    for key, knob in _KNOBS.items():
        if not is_null(model.get(key)):
            cfg.set_knob(knob, model[key], f"model.{key}")
    cfg.batch_rule = "megatron"  # NeMo 1.x runs Megatron's batch arithmetic (global = micro x dp x accumulation)
    cfg.micro_batch = cfg.layout.get("mbs")
    if not is_null(model.get("global_batch_size")):
        cfg.global_batch = as_int(model["global_batch_size"], "model.global_batch_size", src)
    if not is_null(model.get("rampup_batch_size")):
        cfg.ignored.append("model.rampup_batch_size (priced at the final global batch)")
    seq = model.get("encoder_seq_length", model.get("seq_length"))
    if not is_null(seq):
        cfg.seq_len = as_int(seq, "model.encoder_seq_length", src)
    nodes, devices = trainer.get("num_nodes", 1), trainer.get("devices", 1)
    if not is_null(nodes) and not is_null(devices) and str(devices).isdigit():
        cfg.num_gpus = as_int(nodes, "trainer.num_nodes", src) * as_int(devices, "trainer.devices", src)
    _precision(cfg, model, trainer)
    _memory(cfg, model)
    _shape(cfg, model)
    _graphs(cfg, model)


def _graphs(cfg: LaunchConfig, model: dict[str, Any]) -> None:
    """CUDA graphs as Megatron-Core's TransformerConfig takes them (NeMo passes these model keys through):
    cuda_graph_impl, or the older enable_cuda_graph (local) / external_cuda_graph (transformer_engine) switches, and
    the captured modules (cuda_graph_modules, formerly cuda_graph_scope: a list or one name)."""
    src = cfg.source
    impl = model.get("cuda_graph_impl")
    if is_null(impl):
        impl = ("local" if as_bool(model.get("enable_cuda_graph", False), "model.enable_cuda_graph", src) else
                "transformer_engine" if as_bool(model.get("external_cuda_graph", False), "model.external_cuda_graph",
                                                src) else None)
    key = next((k for k in ("cuda_graph_modules", "cuda_graph_scope") if k in model), "cuda_graph_modules")
    raw = model.get(key)
    modules = [] if is_null(raw) else [str(m) for m in (raw if isinstance(raw, list) else [raw])]
    cuda_graphs(cfg, None if impl is None else str(impl), modules, "model.cuda_graph_impl", f"model.{key}")


def _precision(cfg: LaunchConfig, model: dict[str, Any], trainer: dict[str, Any]) -> None:
    """trainer.precision (a model.precision the launcher's MoE configs also write, which wins in NeMo's
    MegatronBaseModel), with fp8 switched on by model.fp8."""
    precision = str(model.get("precision", trainer.get("precision", 32))).lower()
    if as_bool(model.get("fp8", False), "model.fp8", cfg.source):
        cfg.precision = "fp8"  # Transformer Engine's delayed-scaling recipe, hybrid or e4m3: per-tensor scales
    elif precision.startswith("bf16"):
        cfg.precision = "bf16"
    elif precision.startswith("16"):
        cfg.precision = "bf16"
        cfg.ignored.append(f"trainer.precision={precision} (fp16, priced as bf16: same tensor-core rate and bytes)")
    else:
        cfg.precision = "bf16"
        cfg.ignored.append(f"trainer.precision={precision} (fp32, priced as bf16)")


def _memory(cfg: LaunchConfig, model: dict[str, Any]) -> None:
    src = cfg.source
    optim = model.get("optim") if isinstance(model.get("optim"), dict) else {}
    if as_bool(model.get("fsdp", False), "model.fsdp", src):
        strategy = str(model.get("fsdp_sharding_strategy", "full"))
        cfg.layout["zero"] = {"full": 3, "hybrid": 4, "grad": 2}.get(strategy, 3)
    else:
        cfg.layout["zero"] = int(str(optim.get("name", "fused_adam")) in _DISTRIBUTED_OPTIMIZERS)
    granularity = model.get("activations_checkpoint_granularity")
    cfg.set_knob("recompute", "none" if is_null(granularity) else granularity,
                 "model.activations_checkpoint_granularity")
    if not is_null(granularity) and str(granularity) == "full":
        method = str(model.get("activations_checkpoint_method") or "uniform")
        count = model.get("activations_checkpoint_num_layers") or 1
        if (method, int(count)) != ("uniform", 1):
            cfg.ignored.append(f"activations_checkpoint_method {method}, num_layers {count} (priced as every layer "
                               "recomputed whole)")
    if as_bool(model.get("cpu_offloading", False), "model.cpu_offloading", src):
        cfg.set_knob("recompute", "offload", "model.cpu_offloading")
    cfg.layout["sp"] = int(as_bool(model.get("sequence_parallel", False), "model.sequence_parallel", src)
                           and cfg.layout.get("tp", 1) > 1)
    if "ub_tp_comm_overlap" in model:  # NeMo 1.x's userbuffers switch (default false in its GPT configs)
        cfg.tp_comm_overlap = as_bool(model["ub_tp_comm_overlap"], "model.ub_tp_comm_overlap", src)
    token_drop(cfg, model.get("moe_expert_capacity_factor"),
               as_bool(model.get("moe_pad_expert_input_to_capacity", False), "model.moe_pad_expert_input_to_capacity",
                       src), ("model.moe_expert_capacity_factor", "model.moe_pad_expert_input_to_capacity"))
    cfg.moe_force_balance = as_bool(model.get("moe_router_force_load_balancing", False),
                                    "model.moe_router_force_load_balancing", src)


def _shape(cfg: LaunchConfig, model: dict[str, Any]) -> None:
    """The model as NeMo 1.x builds it: gelu and biases unless `activation`/`bias` say, tied embeddings unless
    share_embeddings_and_output_weights is false, MHA unless num_query_groups, ffn 4 x hidden unless given, and the
    GPT-2 BPE vocabulary padded to make_vocab_size_divisible_by (128) x tp where that is the tokenizer."""
    keys = cfg.model_keys
    for key, name in _SHAPE.items():
        if not is_null(model.get(key)):
            keys[name] = as_int(model[key], f"model.{key}", cfg.source)
    if not {"num_hidden_layers", "hidden_size", "num_attention_heads"} <= set(keys):
        return
    cfg.complete_model, cfg.mtp_layers = True, 0
    h = keys["hidden_size"]
    act = str(model.get("activation", "gelu")).lower()
    keys["hidden_act"] = "silu" if "swiglu" in act else "geglu" if "geglu" in act else \
        "relu2" if "squared" in act else "gelu"
    keys.setdefault("intermediate_size", 4 * h)
    keys.setdefault("num_key_value_heads", keys["num_attention_heads"])
    keys["tie_word_embeddings"] = as_bool(model.get("share_embeddings_and_output_weights", True),
                                          "model.share_embeddings_and_output_weights", cfg.source)
    keys["attention_bias"] = keys["mlp_bias"] = as_bool(model.get("bias", True), "model.bias", cfg.source)
    keys["num_local_experts"] = keys.get("num_local_experts", 0)
    if keys["num_local_experts"]:
        keys.setdefault("num_experts_per_tok", 2)
    else:
        keys.pop("num_experts_per_tok", None)
    tokenizer = model.get("tokenizer") if isinstance(model.get("tokenizer"), dict) else {}
    if str(tokenizer.get("type", "")) == "GPT2BPETokenizer":
        multiple = as_int(model.get("make_vocab_size_divisible_by", 128), "model.make_vocab_size_divisible_by",
                          cfg.source) * cfg.layout.get("tp", 1)
        cfg.vocab_unpadded = size = mf.TOKENIZER_VOCAB["GPT2BPETokenizer"]
        keys["vocab_size"] = -(-size // multiple) * multiple
        cfg.vocab_source = "the GPT-2 BPE vocabulary"
    else:
        cfg.vocab_source = (f"tokenizer {tokenizer.get('library', '?')} {tokenizer.get('type') or ''}".strip()
                            + ", whose size the file does not state")
        if str(tokenizer.get("library", "")) == "huggingface" and "/" in str(tokenizer.get("type") or ""):
            cfg.tokenizer_name = str(tokenizer["type"])
