"""What a read launch file trains and on how many GPUs: the model (--model, the plan header's, the catalog model whose
shape the file states exactly, or one built from the file's own shape), the cluster, the layout, and the batch as the
file's framework completes it once the data-parallel size is known.

Batch rules: Megatron-LM sets --global-batch-size to micro-batch x data-parallel size when it is left out
(arguments.py validate_args); torchtitan's global batch defaults to local batch x data-parallel degree (job_config.py
Training.global_batch_size = -1) and must be a multiple of it, the rest being gradient accumulation; DeepSpeed fills
whichever of train_batch_size, train_micro_batch_size_per_gpu and gradient_accumulation_steps is missing from the
other two and the data-parallel world, then asserts train = micro x accumulation x world (runtime/config.py
_set_batch_related_parameters, _batch_assertion).
"""

from __future__ import annotations

import re
from pathlib import Path

from planner.errors import PlanInputError
from planner.inputs.catalog import load_cluster, load_model, model_catalog, model_from_mapping
from planner.inputs.launch_readers._common import LaunchConfig
from planner.inputs.layout import Knobs, Schedule
from planner.inputs.specs import ClusterSpec, ModelSpec

# The shape keys that identify a model; a file that states them is checked against --model (or the catalog).
_SHAPE_KEYS = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
               "num_local_experts")
# What the layers are, where a file says: two models of one shape can still differ here (DeepSeek-V3 and V3.2's
# sparse-attention indexer), and pricing one as the other would be wrong.
_STRUCTURE_KEYS = ("layer_types", "mlp_layer_types", "sliding_window", "index_topk", "index_n_heads",
                   "index_head_dim", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                   "linear_value_head_dim", "mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups")
# Fields that do not tell two models' compute and memory apart (or are compared in derived form below).
_NOT_SHAPE = {"name", "source", "published_params", "max_position_embeddings", "num_nextn_predict_layers",
              "scoring_func", "n_group", "topk_group", "attention_bias", "mlp_bias", "attention_sinks", "swiglu_limit",
              "head_dim", "num_key_value_heads", "layer_types", "mlp_layer_types", "intermediate_size",
              "moe_intermediate_size", "n_shared_experts", "shared_expert_intermediate_size", "vocab_size",
              "hidden_act"}


def _structure_of(model: ModelSpec, key: str) -> object:
    if key in ("layer_types", "mlp_layer_types"):
        return list(model.mixer_kinds if key == "layer_types" else model.mlp_kinds)
    return getattr(model, key)


def _structure_differs(model: ModelSpec, cfg: LaunchConfig) -> str | None:
    """The first structure key the file states differently from `model` (None when all agree)."""
    for key in _STRUCTURE_KEYS:
        if key in cfg.model_keys and cfg.model_keys[key] != _structure_of(model, key):
            return key
    return None


def signature(model: ModelSpec) -> dict[str, object]:
    """Everything that sets a model's compute and memory, in a form two descriptions of one model share."""
    out = {k: v for k, v in model.model_dump().items() if k not in _NOT_SHAPE}
    out.update(mixers=model.mixer_kinds, mlps=model.mlp_kinds, gated=model.gated_mlp,
               dense_ffn=model.intermediate_size if "dense" in model.mlp_kinds else None,
               expert_ffn=model.expert_ffn if model.is_moe else None, shared=model.shared_ffn if model.is_moe else 0)
    if not model.is_mla:
        out.update(kv_heads=model.kv_heads, d_head=model.d_head)
    return out


def _check_shape(model: ModelSpec, cfg: LaunchConfig, origin: str) -> None:
    """The file's sizes against `model`'s: the keys it states, and where it describes the whole model (with its
    framework's defaults), everything that sets the model's cost."""
    built = _built(cfg) if cfg.complete_model else None
    mine = {**(built.model_dump() if built else cfg.model_keys),
            "num_key_value_heads": built.kv_heads if built else cfg.model_keys.get("num_key_value_heads")}
    stated = {**model.model_dump(), "num_key_value_heads": model.kv_heads}
    for key in _SHAPE_KEYS:
        if key in cfg.model_keys and mine[key] != stated.get(key):
            raise PlanInputError(f"the file says {key} = {mine[key]} but {origin} {model.name} has "
                                 f"{stated.get(key)}", source=cfg.source, field=key,
                                 fix="pass the --model the file was written for, or leave --model out")
    key = _structure_differs(model, cfg)
    if key is None and built is not None:
        theirs = signature(model)
        key = next((k for k, v in signature(built).items() if theirs.get(k) != v), None)
    if key is not None:
        raise PlanInputError(f"the file's {key} differs from {origin} {model.name}'s", source=cfg.source, field=key,
                             fix="pass the --model (a config.json) the file was written for")


def _as_run(model: ModelSpec, cfg: LaunchConfig) -> ModelSpec:
    """The model as the file runs it: with the multi-token-prediction layers the file trains (none unless it says)."""
    if cfg.mtp_layers is not None and cfg.mtp_layers != model.num_nextn_predict_layers:
        cfg.defaults.append(f"{model.name} priced with {cfg.mtp_layers} MTP layer(s) as the file runs it (the "
                            f"model has {model.num_nextn_predict_layers})")
        return model.model_copy(update={"num_nextn_predict_layers": cfg.mtp_layers})
    return model


def _long_enough(model: ModelSpec, cfg: LaunchConfig) -> bool:
    return not (cfg.seq_len and model.max_position_embeddings and cfg.seq_len > model.max_position_embeddings)


def _one(matches: list[ModelSpec], cfg: LaunchConfig) -> ModelSpec | None:
    if len(matches) > 1:  # models of one shape (Llama 2 and 3 70B): the sequence length they must hold decides
        matches = [m for m in matches if _long_enough(m, cfg)] or matches
    if len(matches) > 1:
        raise PlanInputError(f"the model's shape matches {', '.join(m.name for m in matches)}", source=cfg.source,
                             field="--model", fix=f"pass --model {matches[-1].name} (or another of them)")
    return matches[0] if matches else None


def _catalog_match(cfg: LaunchConfig) -> ModelSpec | None:
    """The catalog model with the shape the file states (at least three shape keys), for files that state only part
    of a model (overrides)."""
    stated = {k: cfg.model_keys[k] for k in (*_SHAPE_KEYS, "vocab_size") if k in cfg.model_keys}
    if len(stated) < 3:
        return None
    matches = []
    for name in sorted(model_catalog()):
        model = load_model(name)
        shape = {**model.model_dump(), "num_key_value_heads": model.kv_heads}
        if all(shape.get(k) == v for k, v in stated.items()) and not _structure_differs(model, cfg):
            matches.append(model)
    return _one(matches, cfg)


def _exact_match(cfg: LaunchConfig, built: ModelSpec) -> ModelSpec | None:
    """The catalog model whose whole shape is the file's; the vocabulary is compared as the tokenizer gives it and
    as the framework pads it, and not at all where the file cannot say (then the catalog's is used, and said)."""
    want = signature(built)
    vocab_known = "vocab_size" in cfg.model_keys
    vocabs = {cfg.model_keys.get("vocab_size"), cfg.vocab_unpadded}
    matches = []
    for name in sorted(model_catalog()):
        model = load_model(name)
        if signature(model) == want and (not vocab_known or model.vocab_size in vocabs):
            matches.append(model)
    match = _one(matches, cfg)
    if match is not None and not vocab_known and not _tokenizer_fits(match, cfg.tokenizer_name):
        raise PlanInputError(f"has the shape of the catalog's {match.name} but names another model's tokenizer "
                             f"({cfg.tokenizer_name}), and not its vocabulary size", source=cfg.source,
                             field="vocab_size", fix="pass --model (that model's config.json), or state the vocabulary "
                             "size in the file")
    if match is not None and not vocab_known:
        cfg.defaults.append(f"vocabulary {match.vocab_size} from the catalog's {match.name} (the file does not "
                            f"state it: {cfg.vocab_source or 'no tokenizer named'})")
    return match


def _tokenizer_fits(model: ModelSpec, tokenizer: str | None) -> bool:
    """Whether a Hugging Face tokenizer the file names can be `model`'s: its name holds the model's family, the
    catalog name's leading word (meta-llama/Meta-Llama-3-8B for llama3-8b; mistralai/Mistral-7B-v0.1, whose trunk is
    Llama 3 8B's shape, is not). A file that names no such tokenizer says nothing against the match."""
    if not tokenizer:
        return True
    family = re.match(r"[a-z]+", model.name.lower())
    return family is None or family.group(0) in tokenizer.lower().rsplit("/", 1)[-1].replace("-", "")


def _built(cfg: LaunchConfig) -> ModelSpec:
    keys = dict(cfg.model_keys)
    keys.setdefault("vocab_size", 32)  # a placeholder: only compared when the file states it
    return model_from_mapping({"name": Path(cfg.source).stem, **keys}, cfg.source)


def resolve_model(cfg: LaunchConfig, model_ref: str | None) -> ModelSpec:
    """--model when given (checked against the sizes the file states), else the model the plan header names, else
    the catalog model with exactly the file's shape, else one built from the file's shape (which needs the
    vocabulary size)."""
    if model_ref:
        model = load_model(model_ref)
        _check_shape(model, cfg, "--model")
        return _as_run(model, cfg)
    if cfg.model_name and cfg.model_name.lower() in {n.lower() for n in model_catalog()}:
        model = load_model(cfg.model_name)
        _check_shape(model, cfg, "the header's model")
        return _as_run(model, cfg)
    if cfg.complete_model:
        built = _built(cfg)
        match = _exact_match(cfg, built)
        if match is not None:
            return _as_run(match, cfg)
        if "vocab_size" not in cfg.model_keys:
            where = cfg.vocab_source or "no tokenizer named"
            raise PlanInputError(f"states the model's shape but not its vocabulary size ({where}), and no catalog "
                                 "model has that shape", source=cfg.source, field="vocab_size",
                                 fix="pass --model (a catalog name or config.json) with that shape")
        cfg.defaults.append(f"no catalog model has this shape: built from the file ({built.num_hidden_layers} "
                            f"layers, hidden {built.hidden_size}, vocabulary {built.vocab_size})")
        return built
    match = _catalog_match(cfg)
    if match is not None:
        return _as_run(match, cfg)
    if {"num_hidden_layers", "hidden_size", "num_attention_heads"} <= set(cfg.model_keys):
        if "vocab_size" not in cfg.model_keys:
            raise PlanInputError("states the model's shape but not its vocabulary size, and no catalog model has "
                                 "that shape", source=cfg.source, field="vocab_size",
                                 fix="pass --model (a catalog name or config.json), or add the vocabulary to the file")
        return model_from_mapping({"name": Path(cfg.source).stem, **cfg.model_keys}, cfg.source)
    raise PlanInputError("does not say which model it trains", source=cfg.source, field="--model",
                         fix="pass --model, e.g. --model llama3-70b")


def resolve_cluster(cfg: LaunchConfig, cluster_ref: str | None) -> ClusterSpec:
    """--cluster when given (its GPU count must match the file's world size, unless that size is a scheduler's
    default the job overrides), else the plan header's cluster."""
    if cluster_ref:
        cluster = load_cluster(cluster_ref)
    elif cfg.cluster_name:
        cluster = load_cluster(cfg.cluster_name)
    else:
        raise PlanInputError("does not say which GPUs it runs on", source=cfg.source, field="--cluster",
                             fix="pass --cluster, e.g. --cluster h100x512")
    if cfg.num_gpus is not None and cfg.num_gpus != cluster.num_gpus and cfg.world_in_doubt is None:
        raise PlanInputError(f"the file runs on {cfg.num_gpus} GPUs but --cluster {cluster.name} has "
                             f"{cluster.num_gpus}", source=cfg.source, field="--cluster",
                             fix=f"pass a cluster of {cfg.num_gpus} GPUs, e.g. {cluster.gpu.key}x{cfg.num_gpus}, or "
                             "--set the variable that sets the node count")
    return cluster


def recompute_note(cfg: LaunchConfig, model: ModelSpec) -> None:
    """Megatron-Core's selective recompute re-runs the modules the file names (default core_attn); the planner prices
    its own set per model (dense: core attention; MoE: norms and the expert activation; MLA: also its up-projections;
    planner.cost.compute.recompute_time). A different set is named, priced as the planner's."""
    if cfg.recompute_modules is None:
        return
    planned = (("layernorm", *(("moe_act",) if model.is_moe else ()), *(("mla_up_proj",) if model.is_mla else ()))
               if model.is_moe or model.is_mla else ("core_attn",))
    if set(cfg.recompute_modules) != set(planned):
        name = "--recompute-modules" if cfg.dialect == "megatron" else "model.recompute_modules"
        cfg.ignored.append(f"{name} {' '.join(cfg.recompute_modules)} (priced as the planner's selective set: "
                           f"{' '.join(planned)})")


def layout_for(cfg: LaunchConfig, model: ModelSpec, num_gpus: int) -> Knobs:
    """The file's knobs, with what follows from the model and the GPU count: virtual stages given as layers per
    stage, the data-parallel size (world / (tp x pp x cp), checked against a stated one), the schedule, and the batch
    as the file's framework completes it (cfg.global_batch is set)."""
    lay = dict(cfg.layout)
    pp = lay.get("pp", 1)
    if cfg.layers_per_stage is not None and "vpp" not in lay:
        counted = model.num_hidden_layers + cfg.split_extra_layers  # embedding / loss as layers where the file says
        chunks, rest = divmod(counted, pp * cfg.layers_per_stage)
        if rest or not chunks:
            extra = f" (with the embedding and loss counted: {counted})" if cfg.split_extra_layers else ""
            raise PlanInputError(f"{model.num_hidden_layers} layers{extra} do not split into pp={pp} ranks of "
                                 f"{cfg.layers_per_stage}-layer stages", source=cfg.source, field="layers per stage",
                                 fix="pick a stage size that divides layers / pp")
        lay["vpp"] = chunks
    model_parallel = lay.get("tp", 1) * pp * lay.get("cp", 1)
    dp = cfg.data_parallel if cfg.data_parallel is not None else num_gpus // model_parallel
    if dp * model_parallel != num_gpus:
        raise PlanInputError(f"tp x pp x cp x dp = {model_parallel} x {dp} does not use the {num_gpus} GPUs",
                             source=cfg.source, field="world size",
                             fix="pass the --cluster the file was written for")
    lay["dp"] = dp
    lay.setdefault("schedule", int(Schedule.INTERLEAVED if lay.get("vpp", 1) > 1 else Schedule.ONE_F_ONE_B))
    complete_batch(cfg, lay, dp)
    return lay


# The key that sets torchtitan's global batch: the TOML job configs' (in sequences) and the config registries' (in
# tokens, planner.inputs.launch_readers.torchtitan_registry).
_TORCHTITAN_GLOBAL = {"torchtitan": "training.global_batch_size",
                      "torchtitan-registry": "training.num_tokens_per_train_step"}


def complete_batch(cfg: LaunchConfig, knobs: Knobs, dp: int) -> None:
    """The global batch (and micro-batch) the file's framework runs with `dp` data-parallel ranks."""
    src, rule = cfg.source, cfg.batch_rule
    if rule == "megatron" and cfg.global_batch is None and cfg.micro_batch is not None:
        cfg.global_batch = cfg.micro_batch * dp
        cfg.defaults.append(f"global batch {cfg.global_batch} = micro-batch {cfg.micro_batch} x data-parallel {dp} "
                            "(Megatron's default without --global-batch-size)")
    elif rule in _TORCHTITAN_GLOBAL and cfg.micro_batch is not None:
        per_step, key = cfg.micro_batch * dp, _TORCHTITAN_GLOBAL[rule]
        if cfg.global_batch is None:
            cfg.global_batch = per_step
            cfg.defaults.append(f"global batch {per_step} = local batch {cfg.micro_batch} x data-parallel {dp} "
                                f"(torchtitan's default without {key})")
        elif cfg.global_batch % per_step:  # torchtitan train.py asserts the same before accumulating gradients
            raise PlanInputError(f"{cfg.global_batch} is not a multiple of local batch x data-parallel degree "
                                 f"({cfg.micro_batch} x {dp})", field=key, source=src,
                                 fix="torchtitan accumulates whole local batches; correct one of them")
    elif rule == "deepspeed":
        _deepspeed_batch(cfg, knobs, dp)


def _deepspeed_batch(cfg: LaunchConfig, knobs: Knobs, dp: int) -> None:
    """DeepSpeed's runtime/config.py _set_batch_related_parameters: the missing ones of train_batch_size (train),
    train_micro_batch_size_per_gpu (micro) and gradient_accumulation_steps (gas) from the others and the world."""
    train, micro, gas = cfg.global_batch, cfg.micro_batch, cfg.grad_accum
    if train is None and micro is None:
        raise PlanInputError("states neither train_batch_size nor train_micro_batch_size_per_gpu", source=cfg.source,
                             field="train_micro_batch_size_per_gpu", fix="DeepSpeed needs one of them; add it")
    filled = []
    if train is not None and micro is not None and gas is None:
        gas = max(train // micro // dp, 1)
        filled.append(f"gradient_accumulation_steps {gas}")
    elif train is not None and micro is None:
        gas = gas or 1
        micro = max(train // dp // gas, 1)
        filled.append(f"train_micro_batch_size_per_gpu {micro}")
    elif train is None:
        gas = gas or 1
        train = micro * gas * dp  # type: ignore[operator]
        filled.append(f"train_batch_size {train}")
    if train != micro * gas * dp:  # type: ignore[operator]
        raise PlanInputError(f"{train} is not micro-batch {micro} x gradient_accumulation_steps {gas} x "
                             f"data-parallel size {dp}", field="train_batch_size", source=cfg.source,
                             fix="DeepSpeed asserts this product; correct one of the three, or the --cluster")
    if filled:
        cfg.defaults.append(f"{', '.join(filled)} filled in as DeepSpeed does from the other batch keys and "
                            f"{dp} data-parallel ranks")
    cfg.global_batch, cfg.grad_accum = train, gas
    knobs["mbs"] = micro  # type: ignore[assignment]
