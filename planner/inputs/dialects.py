"""Family spellings that must be rewritten before planner.inputs.architecture reads a config's per-layer keys:
per-layer lists that repeat one value (Hunyuan), other names for the same layer kinds (Nemotron-H layers_block_type,
Laguna 'sparse', Granite 4.0 'mamba' / 'attention'), nested shapes (DBRX), MoE placement rules (ERNIE 4.5), dense and
shared widths under family keys, HF class defaults a config leaves out (Gemma ties its embeddings), and features the
cost model does not have, refused by name rather than priced as something else.

Each rule names the HF modeling code it follows. What is refused changes the parameter count or the FLOPs by far more
than the planner's error bars, so a silent fallback would be a wrong answer.
"""

from __future__ import annotations

from typing import Any

from planner.errors import PlanInputError
from planner.inputs.specs import ModelSpec

# Keys whose feature the cost model does not have. Pricing the model without them is not an approximation: DeepSeek-V4-
# Flash read as plain attention has 20.4B active parameters against the 13B its card gives.
_UNMODELLED = {
    "linear_attn_config": "Kimi Delta Attention layers (linear_attn_config.kda_layers, Kimi-Linear)",
    "compress_ratios": "compressed sparse attention (per-layer KV compression, DeepSeek-V4)",
    "o_lora_rank": "a grouped low-rank output projection (o_lora_rank/o_groups, DeepSeek-V4)",
    "hc_mult": "hyper-connections (hc_mult residual streams, DeepSeek-V4)",
    "mamba_d_ssm": "Falcon-H1's parallel hybrid layers (attention and Mamba-2 side by side in every layer)",
    "zero_expert_num": "LongCat-Flash's zero-computation experts and shortcut-connected layers (two attention and "
                       "MLP blocks per layer)",
}
# Families whose attention always has q/k/v biases (HF Qwen2Attention and the VL models built on it).
_QKV_BIAS_FAMILIES = ("qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl")
# Hunyuan (Tencent modeling_hunyuan.py) gives some MoE sizes once per layer; one value per model is what we price.
_PER_LAYER = ("moe_intermediate_size", "moe_topk", "num_shared_expert", "num_experts")
# HF NemotronHConfig (transformers >= 5) spells hybrid_override_pattern as a list of block names.
_BLOCK_NAMES = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
# DBRX nests its shapes (HF DbrxConfig: d_model, n_heads, n_layers, attn_config, ffn_config).
_DBRX_TOP = {"d_model": "hidden_size", "n_heads": "num_attention_heads", "n_layers": "num_hidden_layers",
             "max_seq_len": "max_position_embeddings"}
# Granite 4.0 hybrid (HF GraniteMoeHybridConfig) Mamba-2 keys, with the class defaults a config may leave out.
_GRANITE_MAMBA = {"mamba_n_heads": ("mamba_num_heads", 128), "mamba_d_state": ("ssm_state_size", 256),
                  "mamba_n_groups": ("n_groups", 1), "mamba_d_conv": ("conv_kernel", 4),
                  "mamba_chunk_size": ("chunk_size", 256)}
# Jamba (HF JambaConfig): the class defaults, which are Jamba-v0.1's shapes.
_JAMBA = {"attn_layer_period": 8, "attn_layer_offset": 4, "expert_layer_period": 2, "expert_layer_offset": 1}
# LFM2 (HF Lfm2Config) keys read by _lfm2 or, as in HF, not read at all (block_dim and conv_dim equal hidden_size).
_LFM2_CONSUMED = ("block_ff_dim", "block_auto_adjust_ff_dim", "block_ffn_dim_multiplier", "block_multiple_of",
                  "conv_L_cache", "tie_embedding", "full_attn_idxs", "block_dim", "conv_dim", "conv_dim_out",
                  "block_use_swiglu", "block_mlp_init_scale", "block_out_init_scale", "block_use_xavier_init",
                  "conv_use_xavier_init", "block_norm_eps", "conv_bias", "num_heads", "use_pos_enc")
CONSUMED = {"attn_config", "ffn_config", "mamba_d_head", *_GRANITE_MAMBA, *_JAMBA,
            "mamba_inner_layernorms", "mamba_conv_bias",
            "moe_layer_start_index", "moe_layer_end_index", "moe_layer_interval", "layers_block_type",
            "mtp_layers_block_type", "num_attention_heads_per_layer", "use_mixed_mlp_moe",
            "num_shared_expert", "moe_topk", "dense_intermediate_size", "share_expert_dim", "_sliding_window_pattern",
            "use_cla", "cla_share_factor", "moe_layer_num_skipped", "attn_type_list", *_LFM2_CONSUMED,
            "index_topk_freq", "index_skip_topk_offset", "index_topk_pattern", "index_share_for_mtp_iteration",
            "remove_tail_layer", "moe_group_experts", "cross_attention_layers"}


def _fail(key: str, msg: str, fix: str, source: str) -> PlanInputError:
    return PlanInputError(msg, field=key, source=source, fix=fix)


def translate(doc: dict[str, Any], source: str, notes: list[str]) -> None:
    """Rewrite `doc` (the decoder's keys, text_config already unwrapped) in place into the keys architecture reads."""
    for key, what in _UNMODELLED.items():
        if doc.get(key):
            raise _fail(key, f"not modelled: {what}; priced as standard layers this model would be wrong by far "
                        "more than the planner's error bars", "not supported yet; describe an approximation in the "
                        "planner's own model YAML keys if you accept one", source)
    for key in [k for k in doc if k in ModelSpec.model_fields and doc[k] is None]:
        del doc[key]  # HF writes null for "feature off" (Hunyuan kv_lora_rank, Nemotron moe_latent_size)
    _nested(doc)
    _tail_layers(doc, source)
    n = doc.get("num_hidden_layers")
    n = n if isinstance(n, int) and not isinstance(n, bool) and 0 < n <= 100_000 else None
    _per_layer_values(doc, n, source)
    _ernie(doc, n, source)
    _granite_hybrid(doc)
    _jamba(doc, n, source)
    _lfm2(doc, n)
    _minimax_attention(doc, source)
    _indexer_types(doc, n, source, notes)
    _hunyuan(doc, notes)
    _block_list(doc, n, source)
    _heads_per_layer(doc, n, source)
    _widths(doc)
    if isinstance(doc.get("mlp_layer_types"), list):  # Laguna names its MoE layers 'sparse'
        doc["mlp_layer_types"] = ["moe" if k == "sparse" else k for k in doc["mlp_layer_types"]]
    _defaults(doc)
    _notes(doc, notes)


def _per_layer_values(doc: dict, n: int | None, source: str) -> None:
    """A per-layer list of one repeated value becomes that value; a list that varies is refused (one expert width and
    top-k per model is what the cost model prices)."""
    for key in _PER_LAYER:
        value = doc.get(key)
        if not isinstance(value, list):
            continue
        if not value or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise _fail(key, "must be an integer or a list of integers", f"write {key} as a number", source)
        if n is not None and len(value) != n:
            raise _fail(key, f"lists {len(value)} layers but num_hidden_layers is {n}", "give one entry per layer",
                        source)
        if len(set(value)) > 1:
            raise _fail(key, f"varies by layer ({sorted(set(value))}); one value per model is priced",
                        f"set {key} to one number (the most common, {max(set(value), key=value.count)}) if that "
                        "approximation is acceptable", source)
        doc[key] = value[0]


def _hunyuan(doc: dict, notes: list[str]) -> None:
    """Hunyuan-A13B (Tencent modeling_hunyuan.py): moe_topk is the top-k; with use_mixed_mlp_moe every MoE layer also
    runs a shared MLP of num_shared_expert x moe_intermediate_size (HunYuanMLP is_shared_mlp)."""
    if "moe_topk" in doc:
        doc.setdefault("num_experts_per_tok", doc["moe_topk"])
    if doc.get("use_mixed_mlp_moe"):
        width = doc.get("moe_intermediate_size") or doc.get("intermediate_size")
        if isinstance(width, int):
            doc.setdefault("shared_expert_intermediate_size", width * (doc.get("num_shared_expert") or 1))
    if doc.get("use_cla"):  # cross-layer attention shares K and V between cla_share_factor layers
        notes.append(f"use_cla (cla_share_factor {doc.get('cla_share_factor')}): KV sharing across layers not "
                     "modelled; every layer priced with its own K and V projections")
    if doc.get("moe_layer_num_skipped"):
        notes.append(f"moe_layer_num_skipped ({doc['moe_layer_num_skipped']}): not read; every layer priced as MoE")


def _block_list(doc: dict, n: int | None, source: str) -> None:
    blocks = doc.get("layers_block_type")
    if blocks is None or "hybrid_override_pattern" in doc:
        return
    if not isinstance(blocks, list) or any(b not in _BLOCK_NAMES for b in blocks):
        raise _fail("layers_block_type", f"must list block kinds {sorted(_BLOCK_NAMES)}", "give one kind per layer",
                    source)
    doc["hybrid_override_pattern"] = "".join(_BLOCK_NAMES[b] for b in blocks)
    doc.setdefault("num_hidden_layers", len(blocks))  # Nemotron 3 Ultra's config gives only the list


def _heads_per_layer(doc: dict, n: int | None, source: str) -> None:
    """Laguna: num_attention_heads_per_layer. Expressible when every full-attention layer has one head count and
    every sliding-window layer another: the sliding ones become swa_num_attention_heads (the MiMo-V2 keys)."""
    heads = doc.get("num_attention_heads_per_layer")
    if heads is None:
        return
    kinds = doc.get("layer_types") or ["full_attention"] * len(heads)
    if not isinstance(heads, list) or len(heads) != len(kinds) or (n is not None and len(heads) != n):
        raise _fail("num_attention_heads_per_layer", "must list one head count per layer", "give one per layer",
                    source)
    by_kind: dict[str, set] = {}
    for kind, count in zip(kinds, heads, strict=True):
        by_kind.setdefault(kind, set()).add(count)
    if any(len(counts) > 1 for counts in by_kind.values()) or set(by_kind) - {"full_attention", "sliding_attention"}:
        raise _fail("num_attention_heads_per_layer", f"head counts vary within a layer kind ({by_kind})",
                    "the planner prices one head count per attention kind", source)
    if "full_attention" in by_kind:
        doc["num_attention_heads"] = next(iter(by_kind["full_attention"]))
    if "sliding_attention" in by_kind:
        doc["swa_num_attention_heads"] = next(iter(by_kind["sliding_attention"]))
        doc.setdefault("swa_num_key_value_heads", doc.get("num_key_value_heads"))


def _widths(doc: dict) -> None:
    """Family names for MLP widths: MiniMax-M3 dense_intermediate_size (intermediate_size is then the expert width),
    Step-3.7 share_expert_dim (the shared expert's width)."""
    if doc.get("dense_intermediate_size"):
        doc.setdefault("moe_intermediate_size", doc.get("intermediate_size"))
        doc["intermediate_size"] = doc["dense_intermediate_size"]
    if doc.get("share_expert_dim"):
        doc.setdefault("shared_expert_intermediate_size", doc["share_expert_dim"])


def _defaults(doc: dict) -> None:
    """HF class defaults a config may leave out: Llama 4, GLM-4.5 MoE and Nemotron-H MoE routers gate by sigmoid
    without a scoring_func key; every Gemma config class ties the LM head to the embedding
    (GemmaConfig, Gemma2Config, Gemma3TextConfig tie_word_embeddings=True) and uses a tanh-GeLU GLU; Gemma 3
    alternates five sliding-window layers with one global (Gemma3TextConfig sliding_window_pattern=6, spelled
    _sliding_window_pattern when saved) over a 262,208-token vocabulary. Qwen2-family attention carries q/k/v biases
    with no config key for them (attention_bias: the Megatron launchers write --add-qkv-bias)."""
    family = str(doc.get("model_type", ""))
    # HF Llama4TextMoe gates the top-k by sigmoid; Glm4MoeTopkRouter and NemotronHTopkRouter are DeepSeek-V3's
    # router (DeepseekV3TopkRouter: sigmoid scores plus a correction bias)
    if family.startswith(("llama4", "glm4_moe", "nemotron_h", "deepseek_v3")):
        doc.setdefault("scoring_func", "sigmoid")
    if family in _QKV_BIAS_FAMILIES:  # HF Qwen2Attention: q_proj, k_proj, v_proj with bias=True, o_proj without
        doc.setdefault("attention_bias", True)
    if family.startswith("gemma"):
        doc.setdefault("tie_word_embeddings", True)
        if "hidden_act" not in doc:  # Gemma configs say hidden_activation (aliased later) or nothing
            doc.setdefault("hidden_activation", "gelu_pytorch_tanh")
    if family == "gemma3_text":  # the hub's gemma-3 configs leave the vocabulary to Gemma3TextConfig
        doc.setdefault("vocab_size", 262_208)
    if "_sliding_window_pattern" in doc:
        doc.setdefault("sliding_window_pattern", doc["_sliding_window_pattern"])
    if family.startswith("gemma3") and doc.get("sliding_window"):
        doc.setdefault("sliding_window_pattern", 6)
    pattern, n = doc.get("sliding_window_pattern"), doc.get("num_hidden_layers")
    if isinstance(pattern, str) and pattern and not set(pattern) - {"L", "G"} and isinstance(n, int) \
            and doc.get("layer_types") is None:  # HF Exaone4Config: "LLLG" = three local layers, then a global one
        doc["layer_types"] = ["sliding_attention" if pattern[i % len(pattern)] == "L" else "full_attention"
                              for i in range(min(n, 100_000))]


def _tail_layers(doc: dict, source: str) -> None:
    """ERNIE 4.5's Paddle configs (PaddlePaddle/ERNIE examples/pre-training/model_configs) build num_hidden_layers
    less remove_tail_layer layers (true: one), as FastDeploy's ModelConfig.override_name_from_config reads them:
    ERNIE-4.5-300B-A47B's 56 - 2 = the 54 layers its card gives."""
    drop = doc.get("remove_tail_layer")
    if drop is None or drop is False:
        return
    drop = 1 if drop is True else drop
    n = doc.get("num_hidden_layers")
    n = int(n) if isinstance(n, float) and n.is_integer() else n  # 56.0 is 56 (the spec reads it so too)
    if not isinstance(drop, int) or drop < 0 or (isinstance(n, int) and not isinstance(n, bool) and drop >= n):
        raise _fail("remove_tail_layer", f"must be true, false or a layer count below num_hidden_layers (got {drop!r})",
                    "e.g. 2", source)
    if isinstance(n, int) and not isinstance(n, bool):
        doc["num_hidden_layers"] = n - drop


def _notes(doc: dict, notes: list[str]) -> None:
    """Keys that change the cost and are not priced, said with what was assumed."""
    cross = doc.get("cross_attention_layers")
    if isinstance(cross, list) and cross:  # HF MllamaCrossAttentionDecoderLayer: gated attention to image tokens
        notes.append(f"cross_attention_layers ({len(cross)} layers): Mllama's cross-attention to the image tokens is "
                     "priced as causal self-attention over the text (the same q/k/v/o weights; K/V projections and "
                     "attention scores over the image tokens are not modelled)")
    if doc.get("moe_group_experts"):
        notes.append("moe_group_experts (True): ERNIE's grouped expert routing not modelled; experts priced as one "
                     "group")
    if doc.get("sparse_attention_config"):
        notes.append("sparse_attention_config: MiniMax sparse attention not modelled; every layer priced as full "
                     "attention")
    doc.pop("sparse_attention_config", None)
    if doc.get("gating") is True:
        notes.append("gating (True): Laguna's per-head attention gate (one scalar per head, hidden x heads weights) "
                     "is not priced")
    doc.pop("gating", None)


def _nested(doc: dict) -> None:
    """DBRX: top-level d_model/n_heads/n_layers, KV heads in attn_config, experts in ffn_config; its experts are GLUs
    (HF DbrxExpertGLU: w1, v1, w2), so the activation is a gated one."""
    attn, ffn = doc.get("attn_config"), doc.get("ffn_config")
    if not isinstance(attn, dict) and not isinstance(ffn, dict):
        return
    for theirs, ours in _DBRX_TOP.items():
        if theirs in doc:
            doc.setdefault(ours, doc.pop(theirs))
    if isinstance(attn, dict) and attn.get("kv_n_heads"):
        doc.setdefault("num_key_value_heads", attn["kv_n_heads"])
    if isinstance(ffn, dict):
        for theirs, ours in (("ffn_hidden_size", "intermediate_size"), ("moe_num_experts", "num_local_experts"),
                             ("moe_top_k", "num_experts_per_tok")):
            if ffn.get(theirs) is not None:
                doc.setdefault(ours, ffn[theirs])
        act = (ffn.get("ffn_act_fn") or {}).get("name", "silu") if isinstance(ffn.get("ffn_act_fn"), dict) else "silu"
        doc.setdefault("hidden_act", "silu" if act in ("silu", "swish") else "gelu_gated")


def _ernie(doc: dict, n: int | None, source: str) -> None:
    """ERNIE 4.5 (HF Ernie4_5_MoeDecoderLayer): layer i is MoE when (i + 1) % moe_layer_interval == 0 and
    moe_layer_start_index <= i <= moe_layer_end_index (-1 or null: the last layer); the VL models give lists, whose
    min and max bound the MoE layers."""
    if n is None or not any(k in doc for k in ("moe_layer_start_index", "moe_layer_interval")):
        return

    def bound(key: str, default: int, pick) -> int:
        value = doc.get(key)
        value = pick(value) if isinstance(value, list) and value else value
        if value is None or value == -1:
            return default
        if not isinstance(value, int) or isinstance(value, bool):
            raise _fail(key, f"must be a layer index (got {value!r})", "e.g. 1", source)
        return value

    start, end = bound("moe_layer_start_index", 0, min), bound("moe_layer_end_index", n - 1, max)
    every = bound("moe_layer_interval", 1, min)
    if every <= 0:
        raise _fail("moe_layer_interval", f"must be a positive integer (got {every})", "e.g. 1", source)
    doc["mlp_layer_types"] = ["moe" if (i + 1) % every == 0 and start <= i <= end else "dense" for i in range(n)]


def _granite_hybrid(doc: dict) -> None:
    """Granite 4.0 hybrid (HF GraniteMoeHybridDecoderLayer): layer_types names 'mamba' or 'attention' (a Mamba-2 or an
    attention mixer); every layer then runs the shared MLP (shared_intermediate_size) plus, when num_local_experts >
    0, the routed experts of width intermediate_size. mamba_d_head 'auto' is mamba_expand x hidden / mamba_n_heads."""
    if not str(doc.get("model_type", "")).startswith("granitemoehybrid"):
        return
    if isinstance(doc.get("layer_types"), list):
        doc["layer_types"] = ["full_attention" if k == "attention" else k for k in doc["layer_types"]]
    for theirs, (ours, default) in _GRANITE_MAMBA.items():
        doc.setdefault(ours, doc[theirs] if doc.get(theirs) is not None else default)
    h, heads, head = doc.get("hidden_size"), doc["mamba_num_heads"], doc.get("mamba_d_head", "auto")
    if head == "auto" and isinstance(h, int) and isinstance(heads, int) and heads > 0:
        head = (doc.get("mamba_expand") or 2) * h // heads
    if isinstance(head, int):
        doc.setdefault("mamba_head_dim", head)
    if not doc.get("num_local_experts") and doc.get("shared_intermediate_size"):
        doc["intermediate_size"] = doc.pop("shared_intermediate_size")  # no experts: the shared MLP is the MLP


def _jamba(doc: dict, n: int | None, source: str) -> None:
    """Jamba (HF JambaConfig): layer i attends when i % attn_layer_period == attn_layer_offset and runs a Mamba-1 mixer
    otherwise; its MLP is MoE when i % expert_layer_period == expert_layer_offset (num_experts > 1), dense otherwise.
    mamba_dt_rank 'auto' is ceil(hidden_size / 16)."""
    if n is None or (doc.get("model_type") != "jamba" and "attn_layer_period" not in doc):
        return
    rule = {}
    for key, default in _JAMBA.items():
        value = doc.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0 or (key.endswith("period") and not value):
            raise _fail(key, f"must be a non-negative integer, a period above 0 (got {value!r})", f"e.g. {default}",
                        source)
        rule[key] = value
    doc["layer_types"] = ["full_attention" if i % rule["attn_layer_period"] == rule["attn_layer_offset"] else "mamba1"
                          for i in range(n)]
    experts = doc.get("num_experts", 16)
    if isinstance(experts, int) and experts > 1:
        doc.setdefault("num_experts", experts)
        doc.setdefault("num_experts_per_tok", 2)  # JambaConfig default
        doc["mlp_layer_types"] = ["moe" if i % rule["expert_layer_period"] == rule["expert_layer_offset"] else "dense"
                                  for i in range(n)]
    else:
        doc.pop("num_experts", None)  # one "expert" is the dense MLP
        doc["mlp_layer_types"] = ["dense"] * n
    h = doc.get("hidden_size")
    rank = doc.get("mamba_dt_rank", "auto")
    if rank == "auto" and isinstance(h, int) and not isinstance(h, bool):
        rank = -(-h // 16)
    doc["mamba_dt_rank"] = rank
    doc.setdefault("ssm_state_size", doc.get("mamba_d_state", 16))
    doc.setdefault("conv_kernel", doc.get("mamba_d_conv", 4))
    doc.setdefault("mamba_expand", 2)


def _lfm2(doc: dict, n: int | None) -> None:
    """LFM2 (HF Lfm2Config / Lfm2MLP): block_ff_dim overrides intermediate_size and, with block_auto_adjust_ff_dim
    (default true), the SwiGLU width is int(2/3 x it), times block_ffn_dim_multiplier rounded up to block_multiple_of;
    'conv' layers are gated short convolutions of conv_L_cache taps (default 3); embeddings are tied unless the config
    says not (Lfm2Config tie_word_embeddings=True, alias tie_embedding)."""
    if not str(doc.get("model_type", "")).startswith("lfm2"):
        return
    doc.setdefault("tie_word_embeddings", doc.get("tie_embedding", True))
    doc.setdefault("conv_kernel", doc.get("conv_L_cache", 3))
    width = doc.get("block_ff_dim", doc.get("intermediate_size"))
    mult, every = doc.get("block_ffn_dim_multiplier", 1.0), doc.get("block_multiple_of", 256)
    if isinstance(width, int) and not isinstance(width, bool) and doc.get("block_auto_adjust_ff_dim", True):
        width = int(2 * width / 3)
        if isinstance(mult, int | float) and not isinstance(mult, bool) and isinstance(every, int) and every > 0:
            width = every * -(-int(mult * width) // every)
    if width is not None:
        doc["intermediate_size"] = width
    attn = doc.get("full_attn_idxs")
    if doc.get("layer_types") is None and n is not None:
        at = set(attn) if isinstance(attn, list) else set(range(n))
        doc["layer_types"] = ["full_attention" if i in at else "conv" for i in range(n)]


def _minimax_attention(doc: dict, source: str) -> None:
    """MiniMax (HF MiniMaxConfig): attn_type_list gives 1 for a softmax-attention layer and 0 for a lightning
    (linear) attention layer. All ones (MiniMax-M2) is plain attention; lightning attention is not in the cost model."""
    kinds = doc.get("attn_type_list")
    if kinds is None:
        return
    if not isinstance(kinds, list) or any(k not in (0, 1) for k in kinds):
        raise _fail("attn_type_list", "must list 0 (lightning attention) or 1 (softmax attention) per layer",
                    "give one 0/1 entry per layer", source)
    if 0 in kinds:
        raise _fail("attn_type_list", f"not modelled: {kinds.count(0)} lightning-attention layers (MiniMax-01); "
                    "priced as softmax attention their projections and FLOPs would be wrong",
                    "not supported yet; describe an approximation in the planner's own model YAML keys", source)


def _indexer_types(doc: dict, n: int | None, source: str, notes: list[str]) -> None:
    """GLM-5.2 (HF GlmMoeDsaConfig indexer_types): 'full' layers run the lightning indexer, 'shared' ones reuse the
    previous full layer's top-k keys. Without the list, a period (index_topk_freq) is not read: said, not guessed."""
    kinds = doc.get("indexer_types")
    if kinds is None:
        if (doc.get("index_topk_freq") or 1) > 1:
            notes.append(f"index_topk_freq ({doc['index_topk_freq']}) without indexer_types: every layer priced "
                         "with its own indexer")
        return
    if not isinstance(kinds, list) or set(kinds) - {"full", "shared"} or (n is not None and len(kinds) != n):
        raise _fail("indexer_types", "must list 'full' or 'shared' for every layer", "give one entry per layer",
                    source)
