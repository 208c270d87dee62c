"""Read an existing launch configuration back into a planning problem and a layout (`plan explain --from FILE`):
a Megatron-LM command line or script, a torchtitan TOML, a DeepSpeed ds_config JSON, or Megatron-Bridge (NeMo)
overrides, the dialects planner/report/launchers writes. One module per dialect; this one picks the dialect, and
settles the model, the cluster and the layout from what the file says and what the options add.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from planner.errors import PlanInputError
from planner.inputs.catalog import load_cluster, load_model, model_catalog, model_from_mapping
from planner.inputs.files import read_text
from planner.inputs.launch_readers import deepspeed, megatron, nemo, torchtitan
from planner.inputs.launch_readers._common import LaunchConfig
from planner.inputs.layout import Knobs, Schedule
from planner.inputs.specs import ClusterSpec, ModelSpec

DIALECTS = ("megatron", "torchtitan", "deepspeed", "nemo")
_READERS: dict[str, Callable[[str, str], LaunchConfig]] = {
    "megatron": megatron.read, "torchtitan": torchtitan.read, "deepspeed": deepspeed.read, "nemo": nemo.read,
}
# The shape keys that identify a model; a file that states them is checked against --model (or the catalog).
_SHAPE_KEYS = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
               "num_local_experts")
# What the layers are, where a file says: two models of one shape can still differ here (DeepSeek-V3 and V3.2's
# sparse-attention indexer), and pricing one as the other would be wrong.
_STRUCTURE_KEYS = ("layer_types", "mlp_layer_types", "sliding_window", "index_topk", "index_n_heads",
                   "index_head_dim", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                   "linear_value_head_dim", "mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups")


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

__all__ = ["DIALECTS", "LaunchConfig", "detect_dialect", "layout_for", "read_launch_file", "resolve_cluster",
           "resolve_model"]


def detect_dialect(path: Path, text: str) -> str:
    """The dialect by file name, then by content: .json ds_config, .toml torchtitan, `--flags` Megatron-LM,
    `section.key=value` lines Megatron-Bridge."""
    suffix = path.suffix.lower()
    if suffix == ".json" or text.lstrip().startswith("{"):
        return "deepspeed"
    if suffix == ".toml" or any(line.strip().startswith("[") and line.strip().endswith("]")
                                for line in text.splitlines()):
        return "torchtitan"
    scripts = ("--tensor-model-parallel-size", "pretrain_gpt", "pretrain_mamba")
    if any(s in text for s in scripts) or megatron.flags(text, str(path)):
        return "megatron"
    if nemo.overrides(text, str(path)):
        return "nemo"
    raise PlanInputError("cannot tell which launcher wrote this file", source=str(path),
                         fix=f"name it with --dialect ({', '.join(DIALECTS)})")


def read_launch_file(path: str, dialect: str | None = None) -> LaunchConfig:
    """Read `path` in `dialect` (detected when None); bad values are one PlanInputError naming the flag or key."""
    if dialect is not None and dialect not in DIALECTS:
        raise PlanInputError(f"unknown dialect '{dialect[:40]}'", field="--dialect",
                             fix=f"use one of {', '.join(DIALECTS)}")
    file = Path(path).expanduser()
    text = read_text(file, "pass a launch script, TOML, ds_config JSON or overrides file")
    return _READERS[dialect or detect_dialect(file, text)](text, str(file))


def _check_shape(model: ModelSpec, cfg: LaunchConfig, origin: str) -> None:
    stated = model.model_dump()
    stated["num_key_value_heads"] = model.kv_heads
    for key in _SHAPE_KEYS:
        if key in cfg.model_keys and cfg.model_keys[key] != stated.get(key):
            raise PlanInputError(f"the file says {key} = {cfg.model_keys[key]} but {origin} {model.name} has "
                                 f"{stated.get(key)}", source=cfg.source, field=key,
                                 fix="pass the --model the file was written for, or leave --model out")
    key = _structure_differs(model, cfg)
    if key is not None:
        raise PlanInputError(f"the file's {key} differs from {origin} {model.name}'s", source=cfg.source, field=key,
                             fix="pass the --model (a config.json) the file was written for")


def _catalog_match(cfg: LaunchConfig) -> ModelSpec | None:
    """The catalog model with the shape the file states (at least three shape keys). Models of one shape (Llama 2
    and 3 70B) are told apart by the vocabulary and the sequence length they must hold; still several: refused."""
    stated = {k: cfg.model_keys[k] for k in (*_SHAPE_KEYS, "vocab_size") if k in cfg.model_keys}
    if len(stated) < 3:
        return None
    matches = []
    for name in sorted(model_catalog()):
        model = load_model(name)
        shape = {**model.model_dump(), "num_key_value_heads": model.kv_heads}
        long_enough = not (cfg.seq_len and model.max_position_embeddings
                           and cfg.seq_len > model.max_position_embeddings)
        if long_enough and all(shape.get(k) == v for k, v in stated.items()) and not _structure_differs(model, cfg):
            matches.append(model)
    if len(matches) > 1:
        raise PlanInputError(f"the model's shape matches {', '.join(m.name for m in matches)}", source=cfg.source,
                             field="--model", fix=f"pass --model {matches[-1].name} (or another of them)")
    return matches[0] if matches else None


def resolve_model(cfg: LaunchConfig, model_ref: str | None) -> ModelSpec:
    """--model when given (checked against the sizes the file states), else the model the plan header names, else
    the catalog model with the file's sizes, else one built from them (which needs the vocabulary size)."""
    if model_ref:
        model = load_model(model_ref)
        _check_shape(model, cfg, "--model")
        return model
    if cfg.model_name and cfg.model_name.lower() in {n.lower() for n in model_catalog()}:
        model = load_model(cfg.model_name)
        _check_shape(model, cfg, "the header's model")
        return model
    match = _catalog_match(cfg)
    if match is not None:
        return match
    if {"num_hidden_layers", "hidden_size", "num_attention_heads"} <= set(cfg.model_keys):
        if "vocab_size" not in cfg.model_keys:
            raise PlanInputError("states the model's shape but not its vocabulary size, and no catalog model has "
                                 "that shape", source=cfg.source, field="--model",
                                 fix="pass --model (a catalog name or config.json), or add --vocab-size to the file")
        return model_from_mapping({"name": Path(cfg.source).stem, **cfg.model_keys}, cfg.source)
    raise PlanInputError("does not say which model it trains", source=cfg.source, field="--model",
                         fix="pass --model, e.g. --model llama3-70b")


def resolve_cluster(cfg: LaunchConfig, cluster_ref: str | None) -> ClusterSpec:
    """--cluster when given (its GPU count must match the file's world size), else the plan header's cluster."""
    if cluster_ref:
        cluster = load_cluster(cluster_ref)
    elif cfg.cluster_name:
        cluster = load_cluster(cfg.cluster_name)
    else:
        raise PlanInputError("does not say which GPUs it runs on", source=cfg.source, field="--cluster",
                             fix="pass --cluster, e.g. --cluster h100x512")
    if cfg.num_gpus is not None and cfg.num_gpus != cluster.num_gpus:
        raise PlanInputError(f"the file runs on {cfg.num_gpus} GPUs but --cluster {cluster.name} has "
                             f"{cluster.num_gpus}", source=cfg.source, field="--cluster",
                             fix=f"pass a cluster of {cfg.num_gpus} GPUs, e.g. {cluster.gpu.key}x{cfg.num_gpus}")
    return cluster


def layout_for(cfg: LaunchConfig, model: ModelSpec, num_gpus: int) -> Knobs:
    """The file's knobs, with what follows from the model and the GPU count: virtual stages given as layers per
    stage, the data-parallel size (world / (tp x pp x cp), checked against a stated one), and the schedule. Knobs the
    file leaves out stay out (planner.report.explain.complete_layout gives them their defaults)."""
    lay = dict(cfg.layout)
    pp = lay.get("pp", 1)
    if cfg.layers_per_stage is not None and "vpp" not in lay:
        chunks, rest = divmod(model.num_hidden_layers, pp * cfg.layers_per_stage)
        if rest or not chunks:
            raise PlanInputError(f"{model.num_hidden_layers} layers do not split into pp={pp} ranks of "
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
    return lay
