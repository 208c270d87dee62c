"""The model and cluster catalogs, and loading user files (our YAML or a Hugging Face config.json).

Every failure becomes a PlanInputError naming the file, the field and the fix. Files are parsed with safe loaders only.
"""

from __future__ import annotations

import difflib
import json
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .errors import PlanInputError
from .specs import ClusterSpec, GPUSpec, ModelSpec

MAX_FILE_BYTES = 4 * 1024 * 1024  # a model or cluster description is a few KB; refuse anything absurd
_EXPERT_ALIASES = ("num_experts", "n_routed_experts")
# Keys of a Hugging Face config.json that do not change the planner's arithmetic; accepted without a warning.
_HF_IGNORED = {
    "architectures", "model_type", "torch_dtype", "transformers_version", "bos_token_id", "eos_token_id",
    "pad_token_id", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "rope_theta", "rope_scaling",
    "initializer_range", "use_cache", "attention_bias", "attention_dropout", "mlp_bias", "pretraining_tp",
    "sliding_window", "use_sliding_window", "max_window_layers", "router_aux_loss_coef", "output_router_logits",
    "router_jitter_noise", "aliases", "_name_or_path", "auto_map", "quantization_config", "dtype",
    "num_experts_per_token", "norm_topk_prob", "scoring_func", "topk_method", "routed_scaling_factor",
    "n_group", "topk_group", "aux_loss_alpha", "seq_aux", "moe_layer_freq", "ep_size", "num_nextn_predict_layers",
    "rope_interleave", "decoder_sparse_step", "mlp_only_layers", "shared_expert_intermediate_size", "qkv_bias",
}


def data_dir(kind: str) -> Path:
    """Where a catalog lives: inside the installed wheel, or at the repository root in a source checkout."""
    installed = Path(__file__).parent / "_catalog" / kind
    if installed.is_dir():
        return installed
    return Path(__file__).resolve().parents[1] / kind


def _warn(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr)


def read_structured_file(path: Path) -> Any:
    """Read YAML or JSON safely, turning every I/O or syntax problem into one PlanInputError line."""
    src = str(path)
    if not path.exists():
        raise PlanInputError("file not found", source=src, fix="check the path")
    if path.is_dir():
        raise PlanInputError("is a directory, not a file", source=src, fix="point at a .yaml or config.json file")
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise PlanInputError(f"file is {size} bytes; the limit is {MAX_FILE_BYTES}", source=src,
                                 fix="pass the model/cluster description, not a checkpoint or dataset")
        raw = path.read_bytes()
    except PermissionError:
        raise PlanInputError("cannot read file (permission denied)", source=src, fix="check its permissions") from None
    except OSError as exc:
        raise PlanInputError(f"cannot read file ({exc.strerror})", source=src, fix="check the path") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlanInputError(f"not UTF-8 text (byte {exc.start})", source=src, fix="save the file as UTF-8") from None
    if not text.strip():
        raise PlanInputError("file is empty", source=src, fix="describe the model or cluster in YAML or JSON")
    try:
        if path.suffix.lower() == ".json":
            return json.loads(text)
        return yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise PlanInputError(f"invalid JSON at line {exc.lineno}: {exc.msg}", source=src,
                             fix="fix the JSON syntax") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise PlanInputError(f"invalid YAML{where}: {problem}", source=src,
                             fix="fix the YAML syntax (tags that construct objects are refused)") from None


def pydantic_error(exc: ValidationError, source: str) -> PlanInputError:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or None
    msg = err["msg"].removeprefix("Value error, ")
    got = err.get("input")
    if field and not isinstance(got, dict | list):
        msg = f"{msg} (got {got!r})"
    return PlanInputError(msg, field=field, source=source, fix="correct the value as described")


def _did_you_mean(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else f"choose one of: {', '.join(sorted(options))}"


# --- models ----------------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def model_catalog() -> dict[str, dict]:
    out: dict[str, dict] = {}
    for path in sorted(data_dir("models").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        out[doc["name"]] = doc
    return out


@lru_cache(maxsize=1)
def model_aliases() -> dict[str, str]:
    table: dict[str, str] = {}
    for name, doc in model_catalog().items():
        table[name] = name
        for alias in doc.get("aliases", []):
            table[alias] = name
    return table


def model_from_mapping(doc: Any, source: str) -> ModelSpec:
    """Build a ModelSpec from HF-style keys; warns about unknown keys, folds expert-count aliases."""
    if not isinstance(doc, dict):
        raise PlanInputError(f"expected a mapping of config keys, got {type(doc).__name__}", source=source,
                             fix="write 'hidden_size: 4096' style keys")
    doc = dict(doc)
    if "text_config" in doc and isinstance(doc["text_config"], dict) and "hidden_size" not in doc:
        doc = {**doc["text_config"], "name": doc.get("name", source)}
    for alias in _EXPERT_ALIASES:
        if alias in doc and "num_local_experts" not in doc:
            doc["num_local_experts"] = doc.pop(alias)
    if "n_layer" in doc or "n_embd" in doc:
        raise PlanInputError("GPT-2 style keys (n_layer/n_embd) are not supported", source=source,
                             fix="use num_hidden_layers / hidden_size")
    known = set(ModelSpec.model_fields)
    for key in sorted(doc):
        if key in known or key in _HF_IGNORED or key in _EXPERT_ALIASES:
            continue
        close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
        if close:
            _warn(f"{source}: unknown key '{key}' ignored; did you mean '{close[0]}'?")
        elif "architectures" not in doc and "model_type" not in doc:
            _warn(f"{source}: unknown key '{key}' ignored")
    for key, value in doc.items():
        if key in known and isinstance(value, float) and value.is_integer() and key != "published_params":
            doc[key] = int(value)
    if "intermediate_size" not in doc and doc.get("moe_intermediate_size"):
        doc["intermediate_size"] = doc["moe_intermediate_size"]
    doc.setdefault("name", Path(source).stem if source not in ("<inline>",) else "custom")
    try:
        return ModelSpec.model_validate(doc)
    except ValidationError as exc:
        raise pydantic_error(exc, source) from None


def load_model(ref: str) -> ModelSpec:
    """A catalog name or alias, or a path to our YAML / a Hugging Face config.json."""
    aliases = model_aliases()
    key = ref.strip().lower()
    if key in aliases:
        name = aliases[key]
        return model_from_mapping(model_catalog()[name], f"models/{name}.yaml")
    path = Path(ref).expanduser()
    if path.exists() or path.suffix.lower() in (".yaml", ".yml", ".json") or "/" in ref:
        return model_from_mapping(read_structured_file(path), str(path))
    raise PlanInputError(f"unknown model '{ref}'; {_did_you_mean(key, list(aliases))}", field="--model",
                         fix="run 'plan models' for the catalog, or pass a config.json path")


# --- GPUs and clusters -----------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def gpu_catalog() -> dict[str, dict]:
    return yaml.safe_load((data_dir("clusters") / "gpus.yaml").read_text())


def load_gpu(ref: Any, source: str) -> GPUSpec:
    if isinstance(ref, dict):
        base: dict = {}
        if isinstance(ref.get("key"), str) and ref["key"] in gpu_catalog():
            base = dict(gpu_catalog()[ref["key"]])
        try:
            return GPUSpec.model_validate({**base, **ref})
        except ValidationError as exc:
            raise pydantic_error(exc, source) from None
    if not isinstance(ref, str):
        raise PlanInputError("gpu must be a catalog key or a mapping", field="gpu", source=source,
                             fix=f"use one of {', '.join(gpu_catalog())}")
    key = ref.strip().lower()
    if key not in gpu_catalog():
        raise PlanInputError(f"unknown GPU '{ref}'; {_did_you_mean(key, list(gpu_catalog()))}", field="gpu",
                             source=source, fix="run 'plan clusters' for the GPU catalog")
    return GPUSpec.model_validate({"key": key, **gpu_catalog()[key]})


_CLUSTER_NAME = re.compile(r"^(?P<gpu>[a-z0-9][a-z0-9.\-]*?)x(?P<count>\d+)$")


def cluster_from_gpu(gpu: GPUSpec, count: int, name: str) -> ClusterSpec:
    per_node = gpu.nvlink_domain if gpu.nvlink_domain <= 8 else 4  # NVL72 trays hold 4 GPUs; HGX boards 8
    return ClusterSpec(name=name, gpu=gpu, num_gpus=count, gpus_per_node=min(per_node, count),
                       nvlink_domain=min(gpu.nvlink_domain, count), network_gbps=gpu.network_gbps)


def cluster_from_mapping(doc: Any, source: str) -> ClusterSpec:
    if not isinstance(doc, dict):
        raise PlanInputError(f"expected a mapping, got {type(doc).__name__}", source=source,
                             fix="write 'gpu: h100' and 'nodes: 64' keys")
    known = {"name", "gpu", "nodes", "gpus_per_node", "num_gpus", "nvlink_domain", "network_gbps",
             "network_latency_us", "oversubscription"}
    for key in sorted(doc):
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            _warn(f"{source}: unknown key '{key}' ignored{hint}")
    if "gpu" not in doc:
        raise PlanInputError("missing", field="gpu", source=source, fix="add 'gpu: h100' (or an inline GPU spec)")
    gpu = load_gpu(doc["gpu"], source)
    per_node = doc.get("gpus_per_node", 8 if gpu.nvlink_domain <= 8 else 4)
    if "num_gpus" in doc:
        count = doc["num_gpus"]
    elif "nodes" in doc:
        nodes = doc["nodes"]
        if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes <= 0:
            raise PlanInputError(f"must be a positive integer (got {nodes!r})", field="nodes", source=source,
                                 fix="set the number of nodes, e.g. 'nodes: 64'")
        if not isinstance(per_node, int) or per_node <= 0:
            raise PlanInputError(f"must be a positive integer (got {per_node!r})", field="gpus_per_node",
                                 source=source, fix="e.g. 'gpus_per_node: 8'")
        count = nodes * per_node
    else:
        raise PlanInputError("missing", field="nodes", source=source, fix="add 'nodes: N' or 'num_gpus: N'")
    spec = {
        "name": doc.get("name", Path(source).stem),
        "gpu": gpu,
        "num_gpus": count,
        "gpus_per_node": per_node,
        "nvlink_domain": doc.get("nvlink_domain", gpu.nvlink_domain),
        "network_gbps": doc.get("network_gbps", gpu.network_gbps),
        "network_latency_us": doc.get("network_latency_us", 5.0),
        "oversubscription": doc.get("oversubscription", 1.0),
    }
    try:
        return ClusterSpec.model_validate(spec)
    except ValidationError as exc:
        raise pydantic_error(exc, source) from None


def load_cluster(ref: str) -> ClusterSpec:
    """`{gpu}x{count}` for any count (h100x512, gb200x256, a100-40gx64), or a cluster YAML path."""
    key = ref.strip().lower()
    match = _CLUSTER_NAME.match(key)
    if match and not Path(ref).exists():
        count = int(match["count"])
        if count <= 0:
            raise PlanInputError("the GPU count must be positive", field="--cluster", fix="e.g. h100x512")
        if count > 10_000_000:
            raise PlanInputError(f"{count} GPUs is beyond any cluster this planner models (limit 10,000,000)",
                                 field="--cluster", fix="check the count")
        return cluster_from_gpu(load_gpu(match["gpu"], "--cluster"), count, key)
    path = Path(ref).expanduser()
    if path.exists() or path.suffix.lower() in (".yaml", ".yml", ".json"):
        return cluster_from_mapping(read_structured_file(path), str(path))
    raise PlanInputError(f"'{ref}' is neither {{gpu}}x{{count}} nor a file", field="--cluster",
                         fix=f"e.g. h100x512; GPUs: {', '.join(gpu_catalog())}")
