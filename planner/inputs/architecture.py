"""Hugging Face config.json dialects turned into one per-layer description (ModelSpec.layer_types, mlp_layer_types).

Each family spells "which layers are MoE, which attend how" differently; the rules here follow the HF modeling code
of each family (named at each rule). What cannot be priced exactly is returned as a note naming the key and the
assumption, and printed as a warning once the model has validated.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, get_args

from planner.errors import PlanInputError
from planner.inputs import dialects
from planner.inputs.specs import MixerKind

# Keys renamed to the spec's (first present wins; the spec's own key always wins).
_ALIASES = {
    "num_local_experts": ("num_experts", "n_routed_experts", "moe_num_experts"),  # ERNIE 4.5: moe_num_experts
    "num_experts_per_tok": ("experts_per_token", "top_k_experts", "num_experts_per_token", "moe_k", "moe_top_k"),
    "n_shared_experts": ("num_shared_experts", "moe_num_shared_experts"),  # Ling/Bailing, ERNIE 4.5
    "head_dim": ("attention_head_dim",),  # Nemotron-H
    "moe_intermediate_size": ("expert_intermediate_size",),  # Gemma 4 (null in the dense 31B)
    "hidden_act": ("mlp_hidden_act", "hidden_activation"),  # Nemotron-H (relu2 MLP), Gemma
    "shared_expert_intermediate_size": ("moe_shared_expert_intermediate_size", "shared_intermediate_size"),
    "sliding_window": ("sliding_window_size",),
    "attn_output_gate": ("attention_output_gate",),  # MiniMax-M3
    "scoring_func": ("score_function",),  # Ling 2.0 / bailing_moe_v2 (sigmoid router; the launchers state it)
}
# Keys this module reads and removes: they are described by the per-layer lists afterwards.
CONSUMED = {
    "hybrid_override_pattern", "block_configs", "interleave_moe_layer_step", "intermediate_size_mlp", "moe_layers",
    "decoder_sparse_step", "mlp_only_layers", "moe_layer_freq", "full_attention_interval", "hybrid_layer_pattern",
    "no_rope_layers", "use_sliding_window", "max_window_layers", "sliding_window_pattern", "enable_moe_block",
    "mtp_num_hidden_layers", "num_mtp_modules", "mtp_transformer_layers", "use_mtp", "text_config",
    "_num_mtp_layers", "mtp_share_layers",
}
# hybrid_override_pattern symbols (HF NemotronHBlock; Megatron-Core ssm/mamba_hybrid_layer_allocation.py Symbols)
HYBRID_PATTERN = {"M": ("mamba", "none"), "*": ("full_attention", "none"), "-": ("none", "dense"), "E": ("none", "moe")}
_HF_LAYER_TYPES = set(get_args(MixerKind))  # HF's kinds plus ours (a plan's own model block reads back)


def _fail(key: str, msg: str, fix: str, source: str) -> PlanInputError:
    return PlanInputError(msg, field=key, source=source, fix=fix)


def _int_list(doc: dict, key: str, n: int | None, source: str) -> list[int]:
    value = doc.get(key)
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise _fail(key, "must be a list of integers", f"write {key} as a JSON list", source)
    if n is not None and len(value) != n:
        raise _fail(key, f"lists {len(value)} layers but num_hidden_layers is {n}", "give one entry per layer",
                    source)
    return value


def _routed_without_experts(doc: dict[str, Any], source: str) -> None:
    """A config that states zero experts and still routes each token to top-k of them describes no model."""
    counts = [doc[k] for k in ("num_local_experts", *_ALIASES["num_local_experts"]) if k in doc]
    routed = next((doc[k] for k in ("num_experts_per_tok", *_ALIASES["num_experts_per_tok"]) if k in doc), None)
    if (isinstance(routed, int) and not isinstance(routed, bool) and routed > 0
            and any(isinstance(c, int) and not isinstance(c, bool) and c == 0 for c in counts)):
        raise _fail("num_experts_per_tok", f"routes each token to {routed} experts, but the config has 0",
                    "set the expert count (num_local_experts), or drop num_experts_per_tok for a dense model", source)


def normalize(doc: dict[str, Any], source: str) -> tuple[dict[str, Any], list[str]]:
    """The config with its family's layer keys folded into ModelSpec fields, and the notes to warn about."""
    notes: list[str] = []
    doc = _unwrap(dict(doc), notes)
    _routed_without_experts(doc, source)
    dialects.translate(doc, source, notes)
    for key, aliases in _ALIASES.items():
        for alias in aliases:
            if doc.get(alias) is not None and doc.get(key) is None:  # null means "not used" (Gemma 4 dense)
                doc[key] = doc.pop(alias)
            doc.pop(alias, None)
    for key in ("intermediate_size", "num_key_value_heads", "n_shared_experts", "sliding_window"):
        if key in doc and doc[key] is None:  # DeciLM and MiMo write null for "not used"
            del doc[key]
    if str(doc.get("model_type", "")).startswith("gemma") and doc.get("hidden_act") in ("gelu_pytorch_tanh", "gelu"):
        doc["hidden_act"] = "geglu"  # Gemma's MLP is gated: gate_proj and up_proj (HF GemmaMLP)
    if doc.get("model_type") == "gpt_oss":
        # HF modeling_gpt_oss: GptOssExperts computes (up + 1) * gate * sigmoid(1.702 * gate) on inputs clamped to
        # swiglu_limit and always carries gate_up_proj_bias / down_proj_bias; GptOssAttention adds a learnable
        # sink logit per head ("sinks") to every softmax.
        if doc.get("hidden_act") in (None, "silu"):
            doc["hidden_act"] = "swigluoai"
        doc.setdefault("mlp_bias", True)
        doc.setdefault("attention_sinks", True)
    n = doc.get("num_hidden_layers")
    if isinstance(n, int) and not isinstance(n, bool) and 0 < n <= 100_000:
        if "hybrid_override_pattern" in doc:
            _hybrid_pattern(doc, n, source)
        elif "block_configs" in doc:
            _block_configs(doc, n, source, notes)
        else:
            _moe_placement(doc, n, source)
            _attention_kinds(doc, n, source, notes)
    _shared_experts(doc, notes)
    _mtp(doc, notes)
    _unmodelled(doc, notes)
    for key in CONSUMED | dialects.CONSUMED:
        doc.pop(key, None)
    return doc, notes


def _unwrap(doc: dict, notes: list[str]) -> dict:
    """Multimodal configs nest the decoder under text_config; the vision/audio towers are not modelled. Voxtral also
    writes hidden_size on the outer config, so the decoder is the nested one unless the outer config has layers."""
    nested = isinstance(doc.get("text_config"), dict) and not ("hidden_size" in doc and "num_hidden_layers" in doc)
    for tower in ("vision_config", "audio_config"):
        if isinstance(doc.get(tower), dict):  # nested (Gemma 3, Mllama) or beside a flat decoder (Qwen2.5-VL)
            notes.append(f"{tower}: the {tower.split('_')[0]} encoder is not modelled; priced the text decoder"
                         f"{' (text_config)' if nested else ''} only")
    if nested:
        text = doc["text_config"]
        # the composite config's tie_word_embeddings ties the LM head when the decoder's own config does not say
        outer = {k: v for k, v in doc.items() if k in ("name", "published_params", "source", "aliases")
                 or (k == "tie_word_embeddings" and k not in text)}
        doc = {**text, **outer}
    return doc


def _hybrid_pattern(doc: dict, n: int, source: str) -> None:
    """Nemotron-H: one character per block, M = Mamba-2, * = attention, - = MLP, E = MoE (HF NemotronHBlock)."""
    pattern = doc["hybrid_override_pattern"]
    if not isinstance(pattern, str) or len(pattern) != n or set(pattern) - set(HYBRID_PATTERN):
        raise _fail("hybrid_override_pattern", f"must be {n} characters of M, *, - and E",
                    "give one character per layer (num_hidden_layers)", source)
    doc["layer_types"], doc["mlp_layer_types"] = hybrid_layers(pattern)


def hybrid_layers(pattern: str) -> tuple[list[str], list[str]]:
    """Each layer's (token mixer, MLP) kinds of a hybrid pattern of M, *, - and E (one layer per character)."""
    return [HYBRID_PATTERN[c][0] for c in pattern], [HYBRID_PATTERN[c][1] for c in pattern]


def _block_configs(doc: dict, n: int, source: str, notes: list[str]) -> None:
    """DeciLM / Nemotron-NAS (Puzzle, arXiv 2411.19146): per block, attention and FFN each no_op, replace_with_linear
    or present; FFN width from ffn_mult as in HF configuration_decilm `_ffn_mult_to_intermediate_size`
    (int(2·ffn_mult·h/3) rounded up to a multiple of 256); KV heads = heads / n_heads_in_group."""
    blocks, h = doc["block_configs"], doc.get("hidden_size")
    if not isinstance(blocks, list) or len(blocks) != n or not all(isinstance(b, dict) for b in blocks):
        raise _fail("block_configs", f"must list {n} blocks", "give one block per layer (num_hidden_layers)", source)
    if not isinstance(h, int) or isinstance(h, bool) or h <= 0:
        return  # the spec reports hidden_size
    mixers, mlps, widths, groups = [], [], [], Counter()
    for i, block in enumerate(blocks):
        attn, ffn = block.get("attention") or {}, block.get("ffn") or {}
        if not isinstance(attn, dict) or not isinstance(ffn, dict):
            part, got = ("attention", attn) if not isinstance(attn, dict) else ("ffn", ffn)
            raise _fail(f"block_configs[{i}].{part}", f"must be a mapping (got {type(got).__name__})",
                        "give each block an attention and an ffn mapping, as DeciLM configs do", source)
        if attn.get("no_op"):
            mixers.append("none")
        elif attn.get("replace_with_linear"):
            mixers.append("linear")
        else:
            mixers.append("full_attention")
            group = attn.get("n_heads_in_group") or 1
            if not isinstance(group, int) or isinstance(group, bool) or group <= 0:
                raise _fail("block_configs.attention.n_heads_in_group", f"must be a positive integer (got {group!r})",
                            "e.g. 8", source)
            groups[group] += 1
            if attn.get("window_length") or attn.get("num_sink_tokens"):
                notes.append("block_configs.attention.window_length/num_sink_tokens: priced as full attention")
        width = 0
        if ffn.get("no_op"):
            mlps.append("none")
        elif ffn.get("replace_with_linear"):
            mlps.append("linear")
        else:
            mlps.append("dense")
            mult = ffn.get("ffn_mult")
            if not isinstance(mult, int | float) or isinstance(mult, bool) or not 0 < mult < 1e4:
                raise _fail("block_configs.ffn.ffn_mult", f"must be a positive number (got {mult!r})",
                            "set ffn_mult, e.g. 5.25", source)
            width = -(-int(2 * mult * h / 3) // 256) * 256
        widths.append(width)
    doc["layer_types"], doc["mlp_layer_types"], doc["layer_intermediate_sizes"] = mixers, mlps, widths
    dense = [w for w in widths if w]
    doc["intermediate_size"] = round(sum(dense) / len(dense)) if dense else h
    heads = doc.get("num_attention_heads")
    if groups and isinstance(heads, int) and not isinstance(heads, bool):
        group, _ = groups.most_common(1)[0]
        doc["num_key_value_heads"] = max(1, heads // group)
        if len(groups) > 1:
            notes.append(f"block_configs.attention.n_heads_in_group varies ({sorted(groups)}); every attention "
                         f"block priced with {group} (the most common)")


def _moe_placement(doc: dict, n: int, source: str) -> None:
    """Which layers are MoE, per family; absent keys leave the spec's first_k_dense_replace rule."""
    experts = doc.get("num_local_experts")
    if not isinstance(experts, int) or isinstance(experts, bool) or experts <= 0:
        return
    moe: list[bool] | None = None
    if "intermediate_size_mlp" in doc:  # Llama 4: intermediate_size is the expert width, _mlp the dense one
        doc.setdefault("moe_intermediate_size", doc.get("intermediate_size"))
        doc["intermediate_size"] = doc["intermediate_size_mlp"]
    if isinstance(doc.get("moe_layers"), list):  # Llama 4 explicit list
        moe_at = set(_int_list(doc, "moe_layers", None, source))
        moe = [i in moe_at for i in range(n)]
    elif "interleave_moe_layer_step" in doc:  # HF Llama4TextConfig: every step-th layer, 1-based
        step = doc["interleave_moe_layer_step"]
        if not isinstance(step, int) or isinstance(step, bool) or step <= 0:
            raise _fail("interleave_moe_layer_step", f"must be a positive integer (got {step!r})", "e.g. 1 or 2",
                        source)
        moe = [(i + 1) % step == 0 for i in range(n)]
    elif "decoder_sparse_step" in doc or "mlp_only_layers" in doc:  # HF Qwen2/3-MoE decoder layer rule
        step = doc.get("decoder_sparse_step") or 1
        only = set(_int_list(doc, "mlp_only_layers", None, source)) if doc.get("mlp_only_layers") else set()
        if not isinstance(step, int) or isinstance(step, bool) or step <= 0:
            raise _fail("decoder_sparse_step", f"must be a positive integer (got {step!r})", "e.g. 1", source)
        moe = [i not in only and (i + 1) % step == 0 for i in range(n)]
    elif isinstance(doc.get("moe_layer_freq"), list):  # MiMo-V2: one 0/1 per layer
        moe = [bool(v) for v in _int_list(doc, "moe_layer_freq", n, source)]
    elif "moe_layer_freq" in doc:  # HF DeepseekV3: MoE where i >= first_k_dense_replace and i % freq == 0
        freq, first = doc["moe_layer_freq"], doc.get("first_k_dense_replace") or 0
        if not isinstance(freq, int) or isinstance(freq, bool) or freq <= 0 or not isinstance(first, int):
            raise _fail("moe_layer_freq", f"must be a positive integer (got {freq!r})", "e.g. 1", source)
        moe = [i >= first and i % freq == 0 for i in range(n)]
    if doc.get("enable_moe_block"):  # Gemma 4: every layer runs a dense MLP beside the routed experts
        doc["shared_expert_intermediate_size"] = doc.get("intermediate_size")
        moe = [True] * n
    if moe is not None:
        doc["mlp_layer_types"] = ["moe" if x else "dense" for x in moe]


def _attention_kinds(doc: dict, n: int, source: str, notes: list[str]) -> None:
    """Each layer's attention kind from layer_types, or the family rule that implies it."""
    kinds: list[str] | None = None
    if doc.get("layer_types") is not None:
        kinds = doc["layer_types"]
        if not isinstance(kinds, list) or len(kinds) != n or not all(isinstance(k, str) for k in kinds):
            raise _fail("layer_types", f"must list {n} layer kinds, e.g. {sorted(_HF_LAYER_TYPES)}",
                        "give one kind per layer", source)
        other = sorted(set(kinds) - _HF_LAYER_TYPES)
        if other:  # pricing an unknown mixer as anything would be a guess: refused, naming it
            raise _fail("layer_types", f"{', '.join(repr(k[:30]) for k in other[:3])} is not a layer kind the planner "
                        "prices", f"use {', '.join(sorted(_HF_LAYER_TYPES))}", source)
    elif "full_attention_interval" in doc:  # HF Qwen3NextConfig: every interval-th layer full, the rest linear
        every = doc["full_attention_interval"]
        if not isinstance(every, int) or isinstance(every, bool) or every <= 0:
            raise _fail("full_attention_interval", f"must be a positive integer (got {every!r})", "e.g. 4", source)
        kinds = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(n)]
    elif isinstance(doc.get("hybrid_layer_pattern"), list):  # MiMo-V2: 1 = sliding window, 0 = full
        kinds = ["sliding_attention" if v else "full_attention"
                 for v in _int_list(doc, "hybrid_layer_pattern", n, source)]
    elif doc.get("attention_chunk_size") and str(doc.get("model_type", "")).startswith("llama4"):
        # HF Llama4TextConfig: no_rope_layers defaults to RoPE everywhere but every 4th layer; RoPE layers attend
        # within chunks, the NoPE ones globally.
        rope = doc.get("no_rope_layers") or [int((i + 1) % 4 != 0) for i in range(n)]
        kinds = ["chunked_attention" if r else "full_attention" for r in rope][:n]
    elif doc.get("sliding_window") and doc.get("use_sliding_window", True):
        every = doc.get("sliding_window_pattern")
        if str(doc.get("model_type", "")) == "gemma2" and every is None:
            every = 2  # HF Gemma2Config: sliding and full layers alternate
        if isinstance(every, int) and not isinstance(every, bool) and every > 0:  # Gemma 2/3, Cohere 2
            kinds = ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(n)]
        elif isinstance(doc.get("max_window_layers"), int) and doc.get("use_sliding_window"):  # HF Qwen2
            kinds = ["sliding_attention" if i >= doc["max_window_layers"] else "full_attention" for i in range(n)]
        else:  # Mistral: every layer
            kinds = ["sliding_attention"] * n
            notes.append(f"sliding_window ({doc['sliding_window']}) without layer_types: every layer priced with "
                         "the window (Mistral's rule)")
    if str(doc.get("model_type", "")).startswith("qwen3_next"):
        doc.setdefault("attn_output_gate", True)  # HF Qwen3NextAttention: q_proj emits the query and a gate
    if kinds is not None:
        doc["layer_types"] = kinds


def _shared_experts(doc: dict, notes: list[str]) -> None:
    """Shared experts: Qwen/Nemotron/Gemma give a width, DeepSeek a count of expert-wide MLPs; Llama 4 has one
    expert-wide shared expert in every MoE layer with no key for it (HF Llama4TextMoe.shared_expert)."""
    expert = doc.get("moe_intermediate_size") or doc.get("intermediate_size")
    if str(doc.get("model_type", "")).startswith("llama4") and doc.get("num_local_experts"):
        doc.setdefault("n_shared_experts", 1)
    width = doc.get("shared_expert_intermediate_size")
    if isinstance(width, int) and not isinstance(width, bool) and isinstance(expert, int) and expert > 0:
        # keep the exact width for parameters and FLOPs; the count (in expert widths) feeds memory and kernel terms
        doc["n_shared_experts"] = max(1, round(width / expert)) if width else 0
        if width and width % expert:
            notes.append(f"shared_expert_intermediate_size ({width}) is not a multiple of the expert width "
                         f"({expert}); activation memory counts {doc['n_shared_experts']} expert-wide shared MLPs")


def _mtp(doc: dict, notes: list[str]) -> None:
    """Multi-token prediction depth: DeepSeek/GLM num_nextn_predict_layers, Qwen3.5 mtp_num_hidden_layers,
    MiniMax-M2 num_mtp_modules x mtp_transformer_layers (when use_mtp), EXAONE 4.5 _num_mtp_layers."""
    if doc.get("mtp_share_layers") and (doc.get("num_nextn_predict_layers") or 0) > 1:
        notes.append("mtp_share_layers (True): not read; each MTP layer priced with its own weights")
    if doc.get("num_nextn_predict_layers") is None:
        depth = doc.get("mtp_num_hidden_layers", doc.get("_num_mtp_layers"))
        if doc.get("use_mtp") and isinstance(doc.get("num_mtp_modules"), int):
            depth = doc["num_mtp_modules"] * (doc.get("mtp_transformer_layers") or 1)
        if isinstance(depth, int) and not isinstance(depth, bool):
            doc["num_nextn_predict_layers"] = depth


def _unmodelled(doc: dict, notes: list[str]) -> None:
    """Features that change the cost but are not priced: said once, with what was assumed."""
    checks = {
        "hidden_size_per_layer_input": "per-layer input embeddings (Gemma 3n) not counted",
        "num_kv_shared_layers": "KV sharing across layers not modelled; every layer priced with its own K and V",
        "use_double_wide_mlp": "double-wide MLP layers not modelled; priced at intermediate_size",
        "num_experts_per_group": "expert groups not modelled",
    }
    for key, what in checks.items():
        if doc.get(key):
            notes.append(f"{key} ({doc[key]}): {what}")
        doc.pop(key, None)
    if doc.get("moe_latent_size"):
        notes.append(f"moe_latent_size ({doc['moe_latent_size']}): expert parameters and FLOPs use the latent "
                     "width; the expert all-to-all, the busiest-expert surplus and expert activations are priced at "
                     "hidden_size")
    if doc.get("attention_chunk_size") and "chunked_attention" not in (doc.get("layer_types") or []):
        if not str(doc.get("model_type", "")).startswith("mimo"):
            notes.append(f"attention_chunk_size ({doc['attention_chunk_size']}): chunked attention is only read "
                         "for Llama 4 (model_type llama4*); priced as full attention")
    if "chunked_attention" not in (doc.get("layer_types") or []):
        doc.pop("attention_chunk_size", None)
