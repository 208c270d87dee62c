"""The model and cluster catalogs, and loading user files (our YAML or a Hugging Face config.json).

Every failure becomes a PlanInputError naming the file, the field and the fix. Files are parsed with safe loaders only.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from planner.errors import PlanInputError
from planner.inputs import architecture
from planner.inputs.files import (
    UnknownKeys,
    check_keys,
    did_you_mean,
    exists,
    pydantic_error,
    read_structured_file,
    warn,
)
from planner.inputs.network import TIER_KEYS
from planner.inputs.resilience import SECTIONS
from planner.inputs.specs import MAX_SIZE, ClusterSpec, GPUSpec, ModelSpec

# Keys of a Hugging Face config.json that do not change the planner's arithmetic; accepted without a warning.
# Attention sinks (gpt-oss; MiMo add_*_attention_sink_bias) add one logit per head: no parameters or FLOPs to count.
# Quantisation of the released weights does not set the training precision (--precision does).
_HF_IGNORED = {
    "architectures", "model_type", "torch_dtype", "transformers_version", "bos_token_id", "eos_token_id",
    "pad_token_id", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps", "rope_theta", "rope_scaling",
    "rope_parameters", "initializer_range", "use_cache", "attention_dropout",
    "pretraining_tp", "router_aux_loss_coef", "output_router_logits", "router_jitter_noise", "aliases",
    "_name_or_path", "auto_map", "quantization_config", "dtype", "norm_topk_prob", "topk_method",
    "routed_scaling_factor", "n_group", "topk_group", "aux_loss_alpha", "seq_aux", "ep_size", "rope_interleave",
    "qkv_bias", "partial_rotary_factor", "rotary_dim", "use_qk_norm", "qk_norm_type", "qk_layernorm",
    "use_routing_bias", "initial_context_length", "attention_value_scale", "swa_rope_theta",
    "add_swa_attention_sink_bias", "add_full_attention_sink_bias", "_attn_implementation_autoset",
    "for_llm_compressor", "attn_temperature_tuning", "floor_scale", "attn_scale", "router_bias", "hidden_dropout",
    "mamba_hidden_act", "mamba_proj_bias", "mamba_ssm_cache_dtype", "mamba_ssm_dtype", "use_bias", "use_conv_bias",
    "use_mamba_kernels", "rescale_prenorm_residual", "residual_in_fp32", "time_step_floor", "time_step_max",
    "time_step_min", "time_step_limit", "time_step_rank", "num_logits_to_keep", "expand",
    "mtp_use_dedicated_embeddings",
    "final_logit_softcapping", "attn_logit_softcapping", "query_pre_attn_scalar", "vocab_size_per_layer_input",
    "use_bidirectional_attention", "indexer_rope_interleave", "qk_head_dim", "head_dim_original",
    "image_token_id", "boi_token_id", "eoi_token_id", "vision_config", "audio_config", "tie_encoder_decoder",
    # routing and bookkeeping of the families in tests/data/hf_configs: no parameters or FLOPs of their own
    "group_limited_greedy", "moe_drop_tokens", "moe_random_routing_dropped_token", "moe_apply_router_weight_on_input",
    "moe_routed_scaling_factor", "moe_router_scaling_factor", "use_moe_router_bias", "moe_shared_expert_overlap",
    "layernorm_epsilon", "add_classification_head", "dense_list",  # Hunyuan's (unused) classification head
    "mtp_hybrid_override_pattern",  # Nemotron 3 Super's MTP block: attention + MoE, as priced (flops.mtp_params)
    "layer_rope_theta",  # Muse Glimmer: a RoPE base per layer
    "no_rope_layer_interval",  # SmolLM3 NoPE layers: skipping the rotation changes no weight and no GEMM
    # QKV clamping (OLMoE, DBRX) and the biases of Phi-3.5-MoE's LM head and Seed-OSS's attention output: no GEMM
    "clip_qkv", "lm_head_bias", "attention_out_bias",
    "mtp_loss_scaling_factor",  # EXAONE 4.5: the MTP loss weight
    "moe_router_dtype", "moe_router_logit_softcapping",  # router precision and softcap (GLM-5.2, Laguna)
    # transformers' PretrainedConfig defaults, written out by configs saved with every attribute (Kimi-K2.5)
    "add_cross_attention", "cross_attention_hidden_size", "output_attentions", "output_hidden_states", "pruned_heads",
    # ERNIE 4.5's Paddle training switches (recompute, kernel fusion, loss weights, comm overlap): how Baidu's run
    # executed, not the model's shapes. moe_capacity caps the tokens an expert takes (the excess is dropped): the
    # planner prices the dropless upper bound.
    "use_recompute", "use_recompute_attn", "use_recompute_moe", "use_recompute_loss_fn", "use_rmsnorm",
    "fuse_rms_norm", "use_fast_ln", "fuse_attn_ffn", "fuse_linear", "rope_reorder", "fuse_rope", "fuse_swiglu",
    "fuse_gate_detach_matmul", "moe_capacity", "moe_gate", "moe_gate_scale", "moe_gate_detach", "moe_aux_loss_lambda",
    "moe_group_orthogonal_loss", "moe_orthogonal_loss_lambda", "moe_use_aux_free", "using_precision_check",
    "fp8_mem_configs", "use_ep_comm_overlap", "max_sequence_length",
}
# An unknown key of a Hugging Face config is named when its name looks like it sizes something (a family's own
# spelling of experts, layers, heads or widths that the planner would otherwise ignore in silence); other unknown
# keys (tokenizer ids, vision settings, ...) stay quiet.
_STRUCTURAL_KEY = re.compile(r"expert|moe|layer|head|hidden|intermediate|ffn|attn|attention|mamba|ssm|lora|window|"
                             r"kv|rank|mlp|block|shared|dense|sparse|mtp|nextn|linear|conv|_dim")
# The "did you mean" of an unknown key: close spellings only (a typo), not keys that merely share a suffix
# ('index_head_dim' is 0.75 similar to 'v_head_dim'; 'num_hiden_layers' is 0.97 similar to 'num_hidden_layers').
MODEL_KEY_CUTOFF = 0.85


# The package's own files (the catalogs, planner/cost's fitted.yaml and bands.yaml) parse with libyaml's safe loader
# where PyYAML has it: the same plain data, ~10x faster than the pure-Python loader (most of a small plan's
# start-up). User files keep the pure-Python loader, whose error messages planner.inputs.files words.
_PACKAGED_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_packaged_yaml(path: Path) -> Any:
    """A YAML file the package ships, parsed with the fast safe loader (trusted: no user-facing error wording)."""
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_PACKAGED_LOADER)


def data_dir(kind: str) -> Path:
    """Where a catalog lives: inside the installed wheel, or at the repository root in a source checkout."""
    installed = Path(__file__).resolve().parents[1] / "_catalog" / kind
    if installed.is_dir():
        return installed
    return Path(__file__).resolve().parents[2] / kind


@lru_cache(maxsize=1)
def model_catalog() -> dict[str, dict]:
    out: dict[str, dict] = {}
    for path in sorted(data_dir("models").glob("*.yaml")):
        doc = read_packaged_yaml(path)
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
    """Build a ModelSpec from HF-style keys (planner.inputs.architecture folds each family's dialect in); warns about
    unknown keys and about what is not modelled exactly."""
    if not isinstance(doc, dict):
        raise PlanInputError(f"expected a mapping of config keys, got {type(doc).__name__}", source=source,
                             fix="write 'hidden_size: 4096' style keys")
    check_keys(doc, source, set(), name_unmatched=False)  # non-text keys would break sorting and lookups below
    if "n_layer" in doc or "n_embd" in doc:
        raise PlanInputError("GPT-2 style keys (n_layer/n_embd) are not supported", source=source,
                             fix="use num_hidden_layers / hidden_size")
    hf_file = "architectures" in doc or "model_type" in doc
    doc, notes = architecture.normalize(doc, source)
    known = set(ModelSpec.model_fields)
    # A Hugging Face config.json carries many keys the planner does not need: name only the likely typos there.
    unknown = check_keys(doc, source, known, ignored=_HF_IGNORED, cutoff=MODEL_KEY_CUTOFF,
                         name_unmatched=_STRUCTURAL_KEY.search if hf_file else True)
    for key, value in doc.items():
        if key in known and isinstance(value, float) and value.is_integer() and key != "published_params":
            doc[key] = int(value)
    if "intermediate_size" not in doc and doc.get("moe_intermediate_size"):
        doc["intermediate_size"] = doc["moe_intermediate_size"]
    doc.setdefault("name", Path(source).stem if source not in ("<inline>",) else "custom")
    try:
        spec = ModelSpec.model_validate(doc)
    except ValidationError as exc:
        raise pydantic_error(exc, source, unknown=unknown) from None
    unknown.warn()
    for note in notes:
        warn(f"{source}: {note}")
    return spec


def load_model(ref: str) -> ModelSpec:
    """A catalog name or alias, or a path to our YAML / a Hugging Face config.json."""
    aliases = model_aliases()
    key = ref.strip().lower()
    if not key:
        raise PlanInputError("is empty", field="--model", fix="e.g. --model llama70b, or a config.json path")
    if key in aliases:
        name = aliases[key]
        return model_from_mapping(model_catalog()[name], f"models/{name}.yaml")
    path = Path(ref).expanduser()
    if exists(path) or path.suffix.lower() in (".yaml", ".yml", ".json") or "/" in ref:
        return model_from_mapping(read_structured_file(path), str(path))
    raise PlanInputError(f"unknown model '{ref}'; {did_you_mean(key, list(aliases))}", field="--model",
                         fix="run 'plan models' for the catalog, or pass a config.json path")


# --- GPUs and clusters -----------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def gpu_catalog() -> dict[str, dict]:
    return read_packaged_yaml(data_dir("clusters") / "gpus.yaml")


def load_gpu(ref: Any, source: str, pending: list[UnknownKeys] | None = None) -> GPUSpec:
    """A catalog key, or an inline mapping (optionally on top of a catalog `key`). Unknown-key warnings go to
    `pending` when given (the caller warns once the whole file has validated)."""
    if isinstance(ref, dict):
        unknown = check_keys(ref, source, set(GPUSpec.model_fields), where="gpu")
        base: dict = {}
        if isinstance(ref.get("key"), str) and ref["key"] in gpu_catalog():
            base = dict(gpu_catalog()[ref["key"]])
        try:
            gpu = GPUSpec.model_validate({**base, **ref})
        except ValidationError as exc:
            raise pydantic_error(exc, source, prefix="gpu.", unknown=unknown) from None
        if pending is None:
            unknown.warn()
        else:
            pending.append(unknown)
        return gpu
    if not isinstance(ref, str):
        raise PlanInputError("gpu must be a catalog key or a mapping", field="gpu", source=source,
                             fix=f"use one of {', '.join(gpu_catalog())}")
    key, catalog = ref.strip().lower(), gpu_catalog()
    if key not in catalog:  # another spelling of a catalog GPU (h100-sxm5, a100-80gb, gb200-nvl72)
        key = next((name for name, doc in catalog.items() if key in doc.get("aliases", ())), key)
    if key not in catalog:
        raise PlanInputError(f"unknown GPU '{ref}'; {did_you_mean(key, list(catalog))}", field="gpu",
                             source=source, fix="run 'plan clusters' for the GPU catalog")
    return GPUSpec.model_validate({"key": key, **catalog[key]})  # GPUSpec ignores `aliases`


_CLUSTER_NAME = re.compile(r"^(?P<gpu>[a-z0-9][a-z0-9.\-]*?)x(?P<count>\d+)$")


def job_nvlink_domain(domain: int, count: int) -> int:
    """NVLink domain a job of `count` GPUs gets: the whole fabric when the job fits in it, else the largest
    power-of-two segment of it. Rack-scale fabrics (NVL72: 18 trays of 4) are handed to large jobs in 16-tray, 64-GPU
    segments (clusters/gpus.yaml [SEG]); 8-GPU boards are already a power of two."""
    if count <= domain:
        return count
    return 1 << (domain.bit_length() - 1)


def cluster_from_gpu(gpu: GPUSpec, count: int, name: str) -> ClusterSpec:
    per_node = gpu.nvlink_domain if gpu.nvlink_domain <= 8 else 4  # NVL72 trays hold 4 GPUs; HGX boards 8
    return ClusterSpec(name=name, gpu=gpu, num_gpus=count, gpus_per_node=min(per_node, count),
                       nvlink_domain=job_nvlink_domain(gpu.nvlink_domain, count), network_gbps=gpu.network_gbps)


def cluster_from_mapping(doc: Any, source: str) -> ClusterSpec:
    if not isinstance(doc, dict):
        raise PlanInputError(f"expected a mapping, got {type(doc).__name__}", source=source,
                             fix="write 'gpu: h100' and 'nodes: 64' keys")
    known = {"name", "gpu", "nodes", "gpus_per_node", "num_gpus", "nvlink_domain", "network_gbps",
             "network_latency_us", "oversubscription", "profile", "tiers", *SECTIONS}
    unknown = check_keys(doc, source, known, cutoff=0.6)
    pending = [unknown, *_tier_keys(doc, source)]
    if "gpu" not in doc:
        raise PlanInputError("missing", field="gpu", source=source,
                             fix=unknown.fix_for_missing("gpu", "add 'gpu: h100' (or an inline GPU spec)"))
    gpu = load_gpu(doc["gpu"], source, pending)
    if doc.get("profile") is not None:  # measured efficiencies from `plan calibrate` replace the catalog defaults
        from planner.inputs.profile import apply_profile, load_profile, resolve_profile_path  # only with a profile

        gpu = apply_profile(gpu, load_profile(resolve_profile_path(Path(source), doc["profile"])))
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
        raise PlanInputError("missing", field="nodes", source=source,
                             fix=unknown.fix_for_missing("nodes", "add 'nodes: N' or 'num_gpus: N'"))
    spec = {
        "name": doc.get("name", Path(source).stem),
        "gpu": gpu,
        "num_gpus": count,
        "gpus_per_node": per_node,
        "nvlink_domain": doc.get("nvlink_domain", job_nvlink_domain(gpu.nvlink_domain, count)
                                 if type(count) is int and count > 0 else gpu.nvlink_domain),
        "network_gbps": doc.get("network_gbps", gpu.network_gbps),
        "network_latency_us": doc.get("network_latency_us", 5.0),
        "oversubscription": doc.get("oversubscription", 1.0),
        **({"tiers": doc["tiers"]} if "tiers" in doc else {}),
        **_sections(doc, source, pending),
    }
    try:
        cluster = ClusterSpec.model_validate(spec)
    except ValidationError as exc:
        raise pydantic_error(exc, source, unknown=unknown) from None
    for keys in pending:
        keys.warn()
    return cluster


def _tier_keys(doc: dict, source: str) -> list[UnknownKeys]:
    """A `tiers:` list is the whole network: not beside the two-tier fields it replaces. Each tier's unknown keys
    (a typo of `gbps`, `oversubscription`) are named like the file's own."""
    tiers = doc.get("tiers")
    if tiers is None:
        return []
    both = [k for k in ("nvlink_domain", "network_gbps", "oversubscription") if k in doc]
    if both:
        raise PlanInputError(f"{', '.join(both)} and tiers both describe the network", field=both[0], source=source,
                             fix="keep tiers (the first tier is the NVLink domain) and drop " + ", ".join(both))
    if not isinstance(tiers, list) or not all(isinstance(t, dict) for t in tiers):
        raise PlanInputError("must be a list of tiers, each a mapping", field="tiers", source=source,
                             fix="e.g. '- {name: nvlink, size: 8}' then '- {name: network, size: 1024, gbps: 50}'")
    return [check_keys(t, source, set(TIER_KEYS), where=f"tiers.{i}", cutoff=0.6) for i, t in enumerate(tiers)]


def _sections(doc: dict, source: str, pending: list[UnknownKeys]) -> dict[str, Any]:
    """The optional `reliability:` and `storage:` mappings (planner.inputs.resilience), their unknown keys warned
    about with the rest of the file's."""
    out: dict[str, Any] = {}
    for name, spec in SECTIONS.items():
        if doc.get(name) is None:
            continue
        section = doc[name]
        if not isinstance(section, dict):
            raise PlanInputError(f"expected a mapping, got {type(section).__name__}", field=name, source=source,
                                 fix=f"write e.g. '{name}:' with indented keys (docs/commands.md)")
        pending.append(check_keys(section, source, set(spec.model_fields), where=name))
        try:
            out[name] = spec.model_validate(section)
        except ValidationError as exc:
            raise pydantic_error(exc, source, prefix=f"{name}.") from None
    return out


def load_cluster(ref: str) -> ClusterSpec:
    """`{gpu}x{count}` for any count (h100x512, gb200x256, a100-40gx64), or a cluster YAML path."""
    key = ref.strip().lower()
    if not key:
        raise PlanInputError("is empty", field="--cluster", fix="e.g. --cluster h100x512, or a cluster YAML path")
    match = _CLUSTER_NAME.match(key)
    if match and not exists(Path(ref)):
        count = int(match["count"]) if len(match["count"]) <= 12 else MAX_SIZE + 1  # int() refuses 4,300+ digits
        if count <= 0:
            raise PlanInputError("the GPU count must be positive", field="--cluster", fix="e.g. h100x512")
        if count > MAX_SIZE:
            raise PlanInputError(f"{match['count'][:20]} GPUs is beyond any cluster this planner models "
                                 f"(limit {MAX_SIZE:,})",
                                 field="--cluster", fix="check the count")
        return cluster_from_gpu(load_gpu(match["gpu"], "--cluster"), count, key)
    path = Path(ref).expanduser()
    if exists(path) or path.suffix.lower() in (".yaml", ".yml", ".json"):
        return cluster_from_mapping(read_structured_file(path), str(path))
    raise PlanInputError(f"'{ref}' is neither {{gpu}}x{{count}} nor a file", field="--cluster",
                         fix=f"e.g. h100x512; GPUs: {', '.join(gpu_catalog())}")
