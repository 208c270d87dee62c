"""The model a Megatron-LM launch trains, from its shape flags with Megatron's defaults for the ones left out: every
Hugging Face key the planner prices is stated, so the model can be matched to the catalog exactly or built as is
(planner.inputs.launch_readers.resolve). Also the custom pipeline layout (--pipeline-model-parallel-layout), whose
stage count gives the virtual stages.

Defaults (Megatron-LM arguments.py validate_args and TransformerConfig): --ffn-hidden-size 4 x hidden, or
int(8 x hidden / 3 / 64) x 64 with --swiglu; --kv-channels hidden / heads; one KV head per query head unless
--group-query-attention; gelu unless --swiglu / --squared-relu / --quick-geglu; biases on every linear unless
--disable-bias-linear; tied embeddings unless --untie-embeddings-and-output-weights; no experts unless --num-experts
(then --moe-router-topk 2 and the dense width); no MTP unless --mtp-num-layers; the vocabulary the tokenizer gives,
padded to a multiple of --make-vocab-size-divisible-by (128) x tp (tokenizer build: vocab_size_with_padding).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from planner.errors import PlanInputError
from planner.inputs.architecture import HYBRID_PATTERN, hybrid_layers
from planner.inputs.launch_readers import megatron_flags as mf
from planner.inputs.launch_readers._common import LaunchConfig

if TYPE_CHECKING:
    from planner.inputs.launch_readers.megatron import Flags

_LAYOUT_LIMIT = 100_000  # characters a pipeline layout may unroll to (Megatron's own are a few hundred)


def read_model(cfg: LaunchConfig, flags: Flags) -> None:
    keys = cfg.model_keys
    for flag, key in mf.SHAPE.items():
        if flag in flags:
            keys[key] = flags.number(flag)
    hybrid = next((f for f in ("--hybrid-override-pattern", "--hybrid-layer-pattern") if f in flags), None)
    if hybrid:
        _hybrid(cfg, flags, hybrid)
    if not {"num_hidden_layers", "hidden_size", "num_attention_heads"} <= set(keys):
        return  # not a model description (an overrides-only file): leave the model to --model or the header
    cfg.complete_model = True
    h, heads = keys["hidden_size"], keys["num_attention_heads"]
    act = ("silu" if "--swiglu" in flags else "relu2" if "--squared-relu" in flags
           else "swigluoai" if "--quick-geglu" in flags else "gelu")
    keys["hidden_act"] = act
    keys.setdefault("intermediate_size", int(4 * h * 2 / 3 / 64) * 64 if act == "silu" else 4 * h)
    if "--group-query-attention" not in flags:
        keys["num_key_value_heads"] = heads  # Megatron ignores --num-query-groups without it
    keys.setdefault("head_dim", h // heads if h % heads == 0 else None)
    if keys["head_dim"] is None:
        keys.pop("head_dim")
    keys["attention_bias"] = "--disable-bias-linear" not in flags or "--add-qkv-bias" in flags
    keys["mlp_bias"] = "--disable-bias-linear" not in flags
    keys["tie_word_embeddings"] = "--untie-embeddings-and-output-weights" not in flags
    if "--softmax-type" in flags:
        keys["attention_sinks"] = flags.text("--softmax-type") == "learnable"
    if "--activation-func-clamp-value" in flags:
        keys["swiglu_limit"] = float(flags.text("--activation-func-clamp-value"))
    _moe(cfg, flags)
    if "--multi-latent-attention" in flags:
        for flag, (key, default) in mf.MLA_SHAPE.items():
            keys[key] = flags.number(flag, minimum=0) if flag in flags else default
        keys.pop("head_dim", None)  # MLA's head sizes are its own
    cfg.mtp_layers = flags.number("--mtp-num-layers", minimum=0) if "--mtp-num-layers" in flags else 0
    keys["num_nextn_predict_layers"] = cfg.mtp_layers
    if "--window-size" in flags:
        _windows(cfg, flags)
    _attention_variant(cfg, flags)
    _vocabulary(cfg, flags)


def _moe(cfg: LaunchConfig, flags: Flags) -> None:
    keys = cfg.model_keys
    experts = keys.get("num_local_experts", 0)
    keys["num_local_experts"] = experts
    if not experts:
        keys.pop("num_experts_per_tok", None)
        keys.pop("moe_intermediate_size", None)
        return
    keys.setdefault("num_experts_per_tok", 2)  # TransformerConfig.moe_router_topk
    keys.setdefault("moe_intermediate_size", keys["intermediate_size"])  # arguments.py: moe_ffn_hidden_size default
    shared = "--moe-shared-expert-intermediate-size"
    if shared in flags:
        keys["n_shared_experts"] = max(1, round(flags.number(shared) / keys["moe_intermediate_size"]))
    if "--moe-router-score-function" in flags:
        keys["scoring_func"] = flags.text("--moe-router-score-function")
    for flag, key in (("--moe-router-num-groups", "n_group"), ("--moe-router-group-topk", "topk_group")):
        if flag in flags:
            keys[key] = flags.number(flag)
    if "--moe-latent-size" in flags:
        keys["moe_latent_size"] = flags.number("--moe-latent-size")
    if "--moe-layer-freq" in flags:
        bits = _layer_bits(cfg, flags.text("--moe-layer-freq"), "--moe-layer-freq")
        first = next((i for i, b in enumerate(bits) if b), len(bits))
        if bits[first:] != [1] * (len(bits) - first):
            raise PlanInputError("MoE layers that do not follow the first dense ones are not priced",
                                 field="--moe-layer-freq", source=cfg.source, fix="e.g. '([0]*3+[1]*58)'")
        keys["first_k_dense_replace"] = first


def _vocabulary(cfg: LaunchConfig, flags: Flags) -> None:
    """The vocabulary the tokenizer gives, as Megatron pads it: --vocab-size (NullTokenizer adds one EOD token), a
    GPT-2 BPE vocabulary, or Megatron-DeepSpeed's --pad-vocab-size-to; any other tokenizer file is unknown here."""
    keys, tp = cfg.model_keys, cfg.layout.get("tp", 1)
    tokenizer = flags.text("--tokenizer-type") if "--tokenizer-type" in flags else None
    vocab_file = flags.found["--vocab-file"][0].text if flags.found.get("--vocab-file") else ""
    if "--pad-vocab-size-to" in flags:
        keys["vocab_size"] = flags.number("--pad-vocab-size-to")
        cfg.vocab_source = "--pad-vocab-size-to"
        return
    if "--vocab-size" in flags:  # NullTokenizer adds one end-of-document token to it (_NullTokenizer.vocab_size)
        stated = flags.number("--vocab-size")
        size = stated + (1 if tokenizer == "NullTokenizer" else 0)
        cfg.vocab_source = "--vocab-size"
    elif tokenizer in mf.TOKENIZER_VOCAB or vocab_file.endswith(mf.GPT2_VOCAB_FILES) \
            or (tokenizer is None and "--merge-file" in flags):
        size = mf.TOKENIZER_VOCAB["GPT2BPETokenizer"]
        cfg.vocab_source = "the GPT-2 BPE vocabulary"
    else:
        cfg.vocab_source = f"tokenizer {tokenizer}, whose size the file does not state" if tokenizer \
            else "no tokenizer or --vocab-size named"
        if tokenizer == "HuggingFaceTokenizer" and "--tokenizer-model" in flags:
            try:  # a path left to a variable names nothing
                named = flags.text("--tokenizer-model")
            except PlanInputError:
                named = ""
            if re.fullmatch(r"[\w.-]+/[\w.-]+", named):
                cfg.tokenizer_name = named
        return
    multiple = (flags.number("--make-vocab-size-divisible-by") if "--make-vocab-size-divisible-by" in flags
                else 128) * tp
    keys["vocab_size"] = -(-size // multiple) * multiple
    cfg.vocab_unpadded = stated if "--vocab-size" in flags else size


def layout_stages(text: str) -> list[str]:
    """A --pipeline-model-parallel-layout string's stages, unrolled (megatron-core pipeline_parallel_layer_layout.py
    parse_str_to_list): | splits stages, E is the embedding, t a decoder layer, m an MTP layer, L the loss, (..)*n and
    x*n repeat, commas are cosmetic. ValueError on anything else."""
    raw = text
    text = raw.replace(",", "").replace(" ", "").strip("'\"")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, lambda m: m.group(1) * min(int(m.group(2)), _LAYOUT_LIMIT), text)
        if len(text) > _LAYOUT_LIMIT:
            raise ValueError("unrolls to more than 100,000 layers")
    if set(text) - set("EtmL|"):
        raise ValueError(f"'{raw[:40]}' has characters other than E, t, m, L and |")
    return text.split("|")


def layout_chunks(text: str) -> tuple[int, ...]:
    """Decoder layers of each model chunk of a --pipeline-model-parallel-layout string (layout_stages); ValueError
    where the string is none."""
    return tuple(stage.count("t") for stage in layout_stages(text))


def read_layout(cfg: LaunchConfig, text: str) -> None:
    """--pipeline-model-parallel-layout: stages split by |, E embedding, t a decoder layer, m an MTP layer, L the
    loss, (..)*n and x*n repeats, commas cosmetic (megatron-core pipeline_parallel_layer_layout.py
    parse_str_to_list); its stage count over pp is the virtual stages per rank."""
    flag, src = "--pipeline-model-parallel-layout", cfg.source
    try:
        layers = layout_chunks(text)
    except ValueError as e:
        raise PlanInputError(str(e), field=flag, source=src, fix="one character per layer, e.g. 'Et|(tt|)*30L'") \
            from None
    pp = cfg.layout.get("pp", 1)
    if len(layers) % pp:
        raise PlanInputError(f"{len(layers)} stages do not split over pp={pp} ranks", field=flag, source=src,
                             fix="give a multiple of the pipeline size in stages")
    cfg.set_knob("vpp", len(layers) // pp, flag)
    n = cfg.model_keys.get("num_hidden_layers")
    if n is not None and sum(layers) != n:  # Megatron asserts the same (validate_layer_layout)
        raise PlanInputError(f"places {sum(layers)} decoder layers, --num-layers says {n}", field=flag, source=src,
                             fix="one t per decoder layer")
    cfg.pipeline_layout = layers  # priced as stated (TrainingSpec.pipeline_layout)


def _windows(cfg: LaunchConfig, flags: Flags) -> None:
    """Sliding-window attention as HF keys: --window-size "left,right" (window = left + 1 keys, as the megatron
    launcher writes it) on the layers --window-attn-skip-freq marks 1; without it every layer is windowed."""
    try:
        left = int(flags.text("--window-size").strip("()").split(",")[0])
    except ValueError:
        raise PlanInputError("expected 'left,right' token counts", field="--window-size", source=cfg.source,
                             fix="e.g. --window-size 127,0") from None
    cfg.model_keys["sliding_window"] = left + 1
    flag = "--window-attn-skip-freq"
    bits = _layer_bits(cfg, flags.text(flag) if flag in flags else None, flag)
    cfg.model_keys["layer_types"] = ["sliding_attention" if b else "full_attention" for b in bits]


def _attention_variant(cfg: LaunchConfig, flags: Flags) -> None:
    """Megatron-Core's experimental attention variants as HF keys: gated_delta_net on the layers
    --linear-attention-freq marks 1, with its head shapes; dsa's indexer heads, head size and top-k."""
    keys = cfg.model_keys
    if "--attention-output-gate" in flags:
        keys["attn_output_gate"] = True
    variant = flags.text("--experimental-attention-variant") if "--experimental-attention-variant" in flags else None
    if variant == "gated_delta_net":
        for flag, key in mf.LINEAR_SHAPE.items():
            if flag in flags:
                keys[key] = flags.number(flag)
        flag = "--linear-attention-freq"
        bits = _layer_bits(cfg, flags.text(flag) if flag in flags else None, flag)
        keys["layer_types"] = ["linear_attention" if b else "full_attention" for b in bits]
    elif variant == "dsa":
        for flag, key in mf.DSA_SHAPE.items():
            if flag in flags:
                keys[key] = flags.number(flag)
    elif variant is not None:
        cfg.ignored.append(f"--experimental-attention-variant {variant} (priced as softmax attention)")


def _hybrid(cfg: LaunchConfig, flags: Flags, flag: str) -> None:
    """pretrain_mamba.py's --hybrid-override-pattern (--hybrid-layer-pattern since core_v0.16) as per-layer HF kinds
    (one layer per character, as Megatron-Core's _allocate_override counts them), and the Mamba-2 shapes where the
    pattern has Mamba layers."""
    keys = cfg.model_keys
    pattern = flags.text(flag)
    if set(pattern) - set(HYBRID_PATTERN):
        raise PlanInputError(f"'{pattern[:40]}' has symbols other than {', '.join(HYBRID_PATTERN)}", field=flag,
                             source=cfg.source, fix="one of M (Mamba), * (attention), - (MLP), E (MoE) per layer")
    n = keys.setdefault("num_hidden_layers", len(pattern))
    if n != len(pattern):  # mamba_hybrid_layer_allocation.py _allocate_override raises the same
        raise PlanInputError(f"gives {len(pattern)} layers, --num-layers says {n}", field=flag, source=cfg.source,
                             fix="one character per layer")
    keys["layer_types"], keys["mlp_layer_types"] = hybrid_layers(pattern)
    if "M" not in pattern:
        return
    for mamba_flag, (key, default) in mf.MAMBA_SHAPE.items():
        keys[key] = flags.number(mamba_flag) if mamba_flag in flags else default
    if keys["mamba_num_heads"] is None:  # Megatron-Core's default needs the width; without it the model says
        keys.pop("mamba_num_heads")
        if "hidden_size" in keys:
            keys["mamba_num_heads"] = 2 * keys["hidden_size"] // keys["mamba_head_dim"]


def _layer_bits(cfg: LaunchConfig, freq: str | None, flag: str) -> list[int]:
    """A per-layer 0/1 pattern as Megatron-LM reads it (arguments.py moe_freq_type): none = every layer 1; an int N =
    one 1 every N layers (MoE) / one 0 after N - 1 ones (windows, linear attention); a list expression of 0/1 per
    layer of digits, brackets, + and * (read here by a small parser: nothing is evaluated)."""
    n = cfg.model_keys.get("num_hidden_layers", 0)
    if freq is None:
        bits = [1] * n
    elif freq.strip().isdigit():
        period = max(int(freq), 1)
        if flag == "--moe-layer-freq":
            bits = [int(i % period == 0) for i in range(n)]
        else:
            bits = [int((i + 1) % period != 0) for i in range(n)]
    else:
        bits = _bit_list(freq, cfg, flag, n)
    if len(bits) != n:
        raise PlanInputError(f"gives {len(bits)} layers, the model has {n}", field=flag, source=cfg.source,
                             fix="one 0/1 per layer")
    return bits


def _bit_list(text: str, cfg: LaunchConfig, flag: str, n: int) -> list[int]:
    """'([1,0]*18)' or '[0]*3+[1]*58': sums of bracketed 0/1 lists, each optionally repeated."""
    body = text.strip().strip("'\"").replace(" ", "")
    while body.startswith("(") and body.endswith(")"):
        body = body[1:-1]
    bits: list[int] = []
    for term in body.split("+"):
        match = re.fullmatch(r"\(?\[([01](?:,[01])*)\]\)?(?:\*(\d+))?", term)
        if match is None:
            raise PlanInputError(f"'{text[:40]}' is neither a number nor a 0/1 list expression", field=flag,
                                 source=cfg.source, fix="e.g. '([1,0]*18)'")
        repeat = int(match[2] or 1)
        if len(bits) + repeat * (match[1].count(",") + 1) > max(n, 1) * 4 + 64:
            raise PlanInputError(f"gives far more than the model's {n} layers", field=flag, source=cfg.source,
                                 fix="one 0/1 per layer")
        bits += [int(b) for b in match[1].split(",")] * repeat
    return bits
