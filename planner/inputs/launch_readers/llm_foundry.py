"""Read an llm-foundry training YAML (mosaicml/llm-foundry scripts/train/yamls, run by Composer's train.py) into a
LaunchConfig, as llm-foundry reads it: OmegaConf `${variables.x}` references resolved, `global_train_batch_size`
and `device_train_microbatch_size` (Composer accumulates gradients to make up the rest), `max_seq_len`, `precision`
(amp_bf16, amp_fp8), and the FSDP config: `sharding_strategy` (FULL_SHARD ZeRO-3, SHARD_GRAD_OP ZeRO-2,
HYBRID_SHARD HSDP, NO_SHARD DDP) and `activation_checkpointing` (every block recomputed). Pure data parallelism:
these YAMLs state no tensor or pipeline parallelism.

The model is an `mpt_causal_lm` built from its keys (d_model, n_heads, n_layers, expansion_ratio, vocab_size; a GELU
MLP, tied embeddings, `attn_config.kv_n_heads` for grouped queries, as llm-foundry's MPTConfig defaults them), or an
`hf_causal_lm`, whose Hugging Face checkpoint is named for --model. `--set key=value` sets a variable
(`variables.max_seq_len=4096`) or a top-level key.
"""

from __future__ import annotations

import re
from typing import Any

from planner.errors import PlanInputError
from planner.inputs.launch_readers._common import LaunchConfig, as_bool, as_int
from planner.inputs.launch_readers.nemo_yaml import load_yaml, override

# Keys any llm-foundry training YAML has and a NeMo or Bridge config does not.
SIGNATURE = ("global_train_batch_size", "device_train_microbatch_size")
_ZERO = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "HYBRID_SHARD": 4, "_HYBRID_SHARD_ZERO2": 2, "NO_SHARD": 0}
_PRECISION = {"amp_bf16": "bf16", "amp_fp8": "fp8", "amp_fp16": "bf16", "fp32": "bf16"}
_REF = re.compile(r"\$\{([\w.]+)\}")


def looks_like(doc: Any) -> bool:
    return isinstance(doc, dict) and any(k in doc for k in SIGNATURE)


def _resolve(value: Any, root: dict[str, Any], depth: int = 0) -> Any:
    """OmegaConf-style `${a.b}` references, whole or inside a string, resolved against the document."""
    if depth > 20:
        raise PlanInputError("references refer to each other in a loop", field="variables", fix="break the loop")
    if isinstance(value, dict):
        return {k: _resolve(v, root, depth) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, root, depth) for v in value]
    if not isinstance(value, str) or "${" not in value:
        return value

    def lookup(path: str) -> Any:
        node: Any = root
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return _resolve(node, root, depth + 1)

    whole = _REF.fullmatch(value.strip())
    if whole:
        return lookup(whole.group(1))
    return _REF.sub(lambda m: str(lookup(m.group(1))), value)


def read(text: str, source: str, given: dict[str, str] | None = None) -> LaunchConfig:
    cfg = LaunchConfig("llm-foundry", source)
    cfg.framework = "llm-foundry"
    raw = load_yaml(text, source)
    if not isinstance(raw, dict):
        raise PlanInputError("is not an llm-foundry training config (a mapping of keys)", source=source,
                             fix="pass scripts/train/yamls/... as llm-foundry has it")
    for key, value in (given or {}).items():  # Hydra-style dotted keys, as NeMo's overrides
        override(raw, key, value, delete=False)
    doc = _resolve(raw, raw)
    _batch(cfg, doc)
    _model(cfg, doc.get("model") if isinstance(doc.get("model"), dict) else {})
    _fsdp(cfg, doc.get("fsdp_config"))
    precision = str(doc.get("precision", "fp32"))
    if precision not in _PRECISION:
        raise PlanInputError(f"precision '{precision[:40]}' is not one Composer has", field="precision",
                             source=source, fix="use amp_bf16, amp_fp8, amp_fp16 or fp32")
    cfg.precision = _PRECISION[precision]
    if precision in ("amp_fp16", "fp32"):
        cfg.ignored.append(f"precision {precision} (priced as bf16)")
    for key in ("tp_config", "parallelism_config"):
        if doc.get(key):
            cfg.ignored.append(f"{key} (tensor parallelism: not read, priced as pure data parallelism)")
    cfg.layout.update(tp=1, pp=1, cp=1)
    return cfg


def _batch(cfg: LaunchConfig, doc: dict[str, Any]) -> None:
    src = cfg.source
    if doc.get("global_train_batch_size") is None:
        raise PlanInputError("states no global_train_batch_size", field="global_train_batch_size", source=src,
                             fix="add it (Composer needs it)")
    cfg.global_batch = as_int(doc["global_train_batch_size"], "global_train_batch_size", src)
    micro = doc.get("device_train_microbatch_size")
    if micro is None or str(micro).lower() == "auto":
        raise PlanInputError(f"device_train_microbatch_size is {micro or 'unset'} (Composer searches for the largest "
                             "that fits at run time)", field="device_train_microbatch_size", source=src,
                             fix="--set device_train_microbatch_size=N, the micro-batch to price")
    cfg.micro_batch = as_int(micro, "device_train_microbatch_size", src)
    cfg.set_knob("mbs", cfg.micro_batch, "device_train_microbatch_size")
    cfg.batch_rule = "megatron"  # global = micro x data-parallel x accumulation, the accumulation Composer's
    seq = doc.get("max_seq_len")
    if seq is None:
        raise PlanInputError("states no max_seq_len", field="max_seq_len", source=src, fix="add it")
    cfg.seq_len = as_int(seq, "max_seq_len", src)


def _model(cfg: LaunchConfig, model: dict[str, Any]) -> None:
    """MPT from its keys (llm-foundry MPTConfig: expansion_ratio x d_model GELU MLP, tied embeddings, kv_n_heads
    defaulting to n_heads); a Hugging Face model is named, for --model."""
    name = str(model.get("name", ""))
    if name == "mpt_causal_lm":
        src = cfg.source
        d, heads = as_int(model.get("d_model", 2048), "model.d_model", src), as_int(model.get("n_heads", 16),
                                                                                  "model.n_heads", src)
        attn = model.get("attn_config") if isinstance(model.get("attn_config"), dict) else {}
        cfg.model_keys.update({
            "num_hidden_layers": as_int(model.get("n_layers", 24), "model.n_layers", src), "hidden_size": d,
            "num_attention_heads": heads, "num_key_value_heads": as_int(attn.get("kv_n_heads", heads),
                                                                        "model.attn_config.kv_n_heads", src),
            "intermediate_size": int(float(model.get("expansion_ratio", 4)) * d),
            "vocab_size": as_int(model.get("vocab_size", 50368), "model.vocab_size", src), "hidden_act": "gelu",
            "tie_word_embeddings": True,
            "max_position_embeddings": as_int(model.get("max_seq_len", cfg.seq_len or 2048), "model.max_seq_len",
                                              src)})
        cfg.complete_model, cfg.mtp_layers = True, 0
        cfg.vocab_source = "model.vocab_size"
        if str(attn.get("attn_impl", "flash")) != "flash":
            cfg.ignored.append(f"model.attn_config.attn_impl={attn.get('attn_impl')} (priced as flash attention)")
    elif name == "hf_causal_lm":
        checkpoint = model.get("pretrained_model_name_or_path")
        cfg.tokenizer_name = str(checkpoint) if checkpoint else None
        cfg.doubts.append(f"the Hugging Face model {checkpoint} (pass --model: its catalog name or config.json)")
    else:
        cfg.doubts.append(f"model {name or '?'} (pass --model)")


def _fsdp(cfg: LaunchConfig, fsdp: Any) -> None:
    """FSDP's sharding strategy as the ZeRO stage, activation checkpointing as full recompute; no fsdp_config runs
    Composer's DDP."""
    if not isinstance(fsdp, dict):
        cfg.layout["zero"] = 0
        cfg.set_knob("recompute", "none", "fsdp_config")
        return
    strategy = str(fsdp.get("sharding_strategy", "FULL_SHARD")).upper()
    if strategy not in _ZERO:
        raise PlanInputError(f"sharding_strategy '{strategy[:40]}' is not one of FSDP's", source=cfg.source,
                             field="fsdp_config.sharding_strategy", fix=f"use one of {', '.join(_ZERO)}")
    cfg.layout["zero"] = _ZERO[strategy]
    checkpointing = as_bool(fsdp.get("activation_checkpointing", False), "fsdp_config.activation_checkpointing",
                            cfg.source)
    cfg.set_knob("recompute", "full" if checkpointing else "none", "fsdp_config.activation_checkpointing")
    if as_bool(fsdp.get("activation_cpu_offload", False), "fsdp_config.activation_cpu_offload", cfg.source):
        cfg.ignored.append("fsdp_config.activation_cpu_offload (not priced)")
