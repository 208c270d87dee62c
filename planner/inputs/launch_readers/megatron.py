"""Read a Megatron-LM command line or launch script (the flags `--format megatron` writes, ecosystem.md section 1)
into a LaunchConfig: parallel sizes, batch, model shape, recompute, data-parallel sharding and precision.

Shell assignments in the script (`TP=8`, `export GBS=1024`) are substituted into `$TP` / `${GBS}`; torchrun's
`--nnodes` x `--nproc-per-node` give the world size. Flags that do not change the plan's arithmetic (data,
tokenizer, optimizer, logging) are accepted silently; any other flag is named in one warning.
"""

from __future__ import annotations

import re
import shlex

from planner.errors import PlanInputError
from planner.inputs.architecture import HYBRID_PATTERN, hybrid_layers
from planner.inputs.launch_readers._common import (
    LaunchConfig,
    as_int,
    as_share,
    moments_dtype,
    read_fine_grained_offload,
    read_header,
    token_drop,
)

# Flag -> layout knob (values as --fix takes them).
_KNOBS = {
    "--tensor-model-parallel-size": "tp", "--pipeline-model-parallel-size": "pp", "--context-parallel-size": "cp",
    "--expert-model-parallel-size": "ep", "--num-virtual-stages-per-pipeline-rank": "vpp",
    "--virtual-pipeline-model-parallel-size": "vpp", "--micro-batch-size": "mbs",
}
# Flag -> Hugging Face config key (integers).
_SHAPE = {
    "--num-layers": "num_hidden_layers", "--hidden-size": "hidden_size", "--ffn-hidden-size": "intermediate_size",
    "--num-attention-heads": "num_attention_heads", "--num-query-groups": "num_key_value_heads",
    "--kv-channels": "head_dim", "--max-position-embeddings": "max_position_embeddings", "--vocab-size": "vocab_size",
    "--num-experts": "num_local_experts", "--moe-router-topk": "num_experts_per_tok",
    "--moe-ffn-hidden-size": "moe_intermediate_size", "--q-lora-rank": "q_lora_rank", "--kv-lora-rank": "kv_lora_rank",
    "--qk-head-dim": "qk_nope_head_dim", "--qk-pos-emb-head-dim": "qk_rope_head_dim", "--v-head-dim": "v_head_dim",
}
# Gated DeltaNet and DeepSeek sparse-attention shapes (Megatron-LM flag -> HF key).
_LINEAR_SHAPE = {"--linear-conv-kernel-dim": "linear_conv_kernel_dim", "--linear-key-head-dim": "linear_key_head_dim",
                 "--linear-value-head-dim": "linear_value_head_dim", "--linear-num-key-heads": "linear_num_key_heads",
                 "--linear-num-value-heads": "linear_num_value_heads"}
_DSA_SHAPE = {"--dsa-indexer-n-heads": "index_n_heads", "--dsa-indexer-head-dim": "index_head_dim",
              "--dsa-indexer-topk": "index_topk"}
# Mamba-2 shapes of pretrain_mamba.py (TransformerConfig mamba_* fields, megatron-core transformer_config.py:846-857)
# -> HF NemotronHConfig keys, with Megatron-Core's defaults where a script leaves a flag out (heads: None there,
# hidden x expand 2 / head dim in ssm/mamba_mixer.py:186-239).
_MAMBA_SHAPE = {"--mamba-state-dim": ("ssm_state_size", 128), "--mamba-head-dim": ("mamba_head_dim", 64),
                "--mamba-num-groups": ("n_groups", 8), "--mamba-num-heads": ("mamba_num_heads", None)}
_FSDP_ZERO = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
_CP_COMM = {"p2p": "ring", "a2a": "a2a", "a2a+p2p": "a2a+p2p"}
# Flags read elsewhere in this module, or known not to change the planner's arithmetic.
_HANDLED = {
    "--global-batch-size", "--seq-length", "--sequence-parallel", "--use-distributed-optimizer", "--use-megatron-fsdp",
    "--data-parallel-sharding-strategy", "--recompute-granularity", "--recompute-method", "--recompute-num-layers",
    "--recompute-activations", "--cp-comm-type", "--hierarchical-context-parallel-sizes", "--swiglu",
    "--squared-relu", "--group-query-attention", "--untie-embeddings-and-output-weights", "--multi-latent-attention",
    "--moe-shared-expert-intermediate-size", "--moe-layer-freq", "--num-layers-per-virtual-pipeline-stage",
    "--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute", "--moe-flex-dispatcher-backend",
    "--recompute-modules", "--cpu-offloading-num-layers", "--cpu-offloading", "--moe-router-score-function",
    "--fine-grained-activation-offloading", "--offload-modules",
    "--moe-router-pre-softmax", "--moe-router-num-groups", "--moe-router-group-topk",
    "--bf16", "--fp16", "--fp8-format", "--fp4-format", "--nnodes", "--nproc-per-node", "--nproc_per_node",
    "--expert-tensor-parallel-size", "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
    # the embedding/loss-as-layer split follows from pp and vpp (planner.inputs.layout.embedding_loss_split)
    "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
    "--optimizer-cpu-offload", "--optimizer-offload-fraction", "--use-precision-aware-optimizer", "--exp-avg-dtype",
    "--exp-avg-sq-dtype", "--window-size", "--window-attn-skip-freq", "--mtp-num-layers", "--quick-geglu",
    "--activation-func-clamp-value", "--glu-linear-offset", "--softmax-type", "--add-qkv-bias",
    "--attention-output-gate", "--experimental-attention-variant", "--linear-attention-freq", "--no-rope-fusion",
    "--moe-expert-capacity-factor", "--moe-pad-expert-input-to-capacity",
    "--hybrid-override-pattern", "--moe-latent-size", *_MAMBA_SHAPE,
}
_IRRELEVANT = {
    "--disable-bias-linear", "--overlap-grad-reduce", "--overlap-param-gather", "--no-gradient-accumulation-fusion",
    "--ckpt-format", "--moe-token-dispatcher-type", "--moe-grouped-gemm", "--fp8-recipe", "--fp8-amax-history-len",
    "--fp8-amax-compute-algo", "--fp8-param-gather", "--fp4-recipe", "--lr", "--min-lr", "--lr-decay-style",
    "--lr-warmup-iters", "--lr-warmup-samples", "--lr-decay-iters", "--lr-decay-samples", "--train-iters",
    "--train-samples", "--weight-decay", "--clip-grad", "--adam-beta1", "--adam-beta2", "--adam-eps",
    "--init-method-std", "--data-path", "--split", "--tokenizer-type", "--tokenizer-model", "--vocab-file",
    "--merge-file", "--save", "--load", "--save-interval", "--eval-interval", "--eval-iters", "--log-interval",
    "--tensorboard-dir", "--seed", "--position-embedding-type", "--normalization", "--rotary-base",
    "--use-rotary-position-embeddings", "--attention-dropout", "--hidden-dropout", "--norm-epsilon",
    "--no-masked-softmax-fusion", "--use-flash-attn", "--attention-backend", "--distributed-backend",
    "--transformer-impl", "--use-mcore-models", "--wandb-project", "--wandb-exp-name", "--exit-duration-in-mins",
    "--master_addr", "--master_port", "--master-addr", "--master-port", "--node_rank", "--node-rank", "--rdzv_id",
    "--rdzv_backend", "--rdzv_endpoint", "--rdzv-id", "--rdzv-backend", "--rdzv-endpoint", "--log-throughput",
    "--distributed-timeout-minutes", "--no-position-embedding", "--make-vocab-size-divisible-by", "--data-cache-path",
    "--mock-data", "--no-load-optim", "--no-load-rng", "--use-checkpoint-args", "--bias-swiglu-fusion",
    "--no-bias-swiglu-fusion", "--timing-log-level", "--log-timers-to-tensorboard", "--moe-aux-loss-coeff",
    "--moe-router-load-balancing-type", "--tp-comm-overlap", "--manual-gc", "--cross-entropy-loss-fusion",
    "--spec", "--is-hybrid-model",  # pretrain_mamba.py's layer spec; hybrid init scaling and FLOPs accounting
}
_ASSIGN = re.compile(r"^\s*(?:export\s+)?(?P<name>[A-Za-z_]\w*)=(?P<value>[^\s;#]*)", re.M)
_VAR = re.compile(r"\$\{?([A-Za-z_]\w*)\}?")


def _substitute(text: str) -> str:
    """Expand `$NAME` / `${NAME}` from simple `NAME=value` lines of the script (one pass, last assignment wins)."""
    names: dict[str, str] = {}
    for match in _ASSIGN.finditer(text):
        names[match["name"]] = _VAR.sub(lambda m: names.get(m[1], m[0]), match["value"].strip("'\""))
    return _VAR.sub(lambda m: names.get(m[1], m[0]), text)


def flags(text: str, source: str) -> dict[str, list[str]]:
    """Every `--flag [values...]` of the script (`--flag=value` too); a later repeat of a flag wins."""
    body = _substitute(text).replace("\\\n", " ")
    try:
        tokens = shlex.split(body, comments=True)
    except ValueError as exc:
        raise PlanInputError(f"cannot split the command line ({exc})", source=source,
                             fix="close the open quote") from None
    out: dict[str, list[str]] = {}
    current: str | None = None
    for token in tokens:
        if token.startswith("--"):
            name, eq, value = token.partition("=")
            out[name] = [value] if eq else []
            current = None if eq else name
        elif current is not None and token not in ("(", ")", "\\"):
            out[current].append(token)
    return out


def read(text: str, source: str) -> LaunchConfig:
    cfg = LaunchConfig("megatron", source)
    read_header(cfg, text)
    found = flags(text, source)
    if not found:
        raise PlanInputError("no Megatron-LM flags found", source=source,
                             fix="pass a pretrain_gpt.py or pretrain_mamba.py command line or script (what --format "
                             "megatron writes)")

    def value(flag: str) -> str:
        if not found[flag]:
            raise PlanInputError("needs a value", field=flag, source=source, fix=f"e.g. {flag} 8")
        if found[flag][0].startswith("$"):
            raise PlanInputError(f"is the shell variable {found[flag][0]}, which the script does not set", field=flag,
                                 source=source, fix="write the number, or set the variable in the script")
        return found[flag][0]

    for flag, knob in _KNOBS.items():
        if flag in found:
            cfg.set_knob(knob, value(flag), flag)
    for flag, key in _SHAPE.items():
        if flag in found:
            cfg.model_keys[key] = as_int(value(flag), flag, source, minimum=0 if "lora" in flag else 1)
    _batch_and_world(cfg, found, value)
    _model_extras(cfg, found, value)
    _memory_and_schedule(cfg, found, value)
    if "--expert-tensor-parallel-size" in found:
        cfg.set_expert_tp(value("--expert-tensor-parallel-size"), "--expert-tensor-parallel-size")
    cfg.ignored = sorted(f for f in found if f not in _KNOBS and f not in _SHAPE and f not in _HANDLED
                         and f not in _IRRELEVANT and f not in _LINEAR_SHAPE and f not in _DSA_SHAPE) + cfg.ignored
    return cfg


def _batch_and_world(cfg: LaunchConfig, found: dict[str, list[str]], value) -> None:  # noqa: ANN001 - closure
    src = cfg.source
    if "--global-batch-size" in found:
        cfg.global_batch = as_int(value("--global-batch-size"), "--global-batch-size", src)
    if "--seq-length" in found:
        cfg.seq_len = as_int(value("--seq-length"), "--seq-length", src)
    per_node = next((f for f in ("--nproc-per-node", "--nproc_per_node") if f in found), None)
    if "--nnodes" in found and per_node and ":" not in value("--nnodes"):  # elastic ranges (2:4) state no size
        cfg.num_gpus = as_int(value("--nnodes"), "--nnodes", src) * as_int(value(per_node), per_node, src)
    if "--num-layers-per-virtual-pipeline-stage" in found:
        cfg.layers_per_stage = as_int(value("--num-layers-per-virtual-pipeline-stage"),
                                      "--num-layers-per-virtual-pipeline-stage", src)
    if "--fp4-format" in found:
        cfg.precision = "fp4"
    elif "--fp8-format" in found:
        cfg.precision = "fp8"
        if "--fp8-recipe" in found and value("--fp8-recipe") == "blockwise":
            cfg.fp8_recipe = "blockwise"
    elif "--bf16" in found or "--fp16" in found:
        cfg.precision = "bf16"


def _model_extras(cfg: LaunchConfig, found: dict[str, list[str]], value) -> None:  # noqa: ANN001 - closure
    keys = cfg.model_keys
    if keys:
        keys["hidden_act"] = ("silu" if "--swiglu" in found else "relu2" if "--squared-relu" in found
                              else "swigluoai" if "--quick-geglu" in found else "gelu")
        # Megatron-LM's default adds biases to every linear; --add-qkv-bias puts them back on q/k/v only
        keys["attention_bias"] = "--disable-bias-linear" not in found or "--add-qkv-bias" in found
        keys["mlp_bias"] = "--disable-bias-linear" not in found
        if "--softmax-type" in found:
            keys["attention_sinks"] = value("--softmax-type") == "learnable"
        if "--activation-func-clamp-value" in found:
            keys["swiglu_limit"] = float(value("--activation-func-clamp-value"))
        keys["tie_word_embeddings"] = "--untie-embeddings-and-output-weights" not in found
        if "--group-query-attention" not in found:
            keys.pop("num_key_value_heads", None)  # Megatron ignores --num-query-groups without it
    shared = "--moe-shared-expert-intermediate-size"
    if shared in found and keys.get("moe_intermediate_size"):
        keys["n_shared_experts"] = max(1, round(as_int(value(shared), shared, cfg.source)
                                                / keys["moe_intermediate_size"]))
    if "--moe-router-score-function" in found and keys:
        keys["scoring_func"] = value("--moe-router-score-function")
    for flag, key in (("--moe-router-num-groups", "n_group"), ("--moe-router-group-topk", "topk_group")):
        if flag in found and keys:
            keys[key] = as_int(value(flag), flag, cfg.source)
    if "--mtp-num-layers" in found and keys:
        keys["num_nextn_predict_layers"] = as_int(value("--mtp-num-layers"), "--mtp-num-layers", cfg.source, minimum=0)
    if "--window-size" in found and keys:
        _windows(cfg, found, value)
    if keys:
        _attention_variant(cfg, found, value)
    if "--hybrid-override-pattern" in found:
        _hybrid(cfg, found, value)
    if "--moe-latent-size" in found and keys:
        keys["moe_latent_size"] = as_int(value("--moe-latent-size"), "--moe-latent-size", cfg.source)
    freq = re.fullmatch(r"\(?\[0\]\*(\d+)\+\[1\]\*\d+\)?", value("--moe-layer-freq")) if "--moe-layer-freq" in found \
        else None
    if freq:
        keys["first_k_dense_replace"] = int(freq[1])


def _memory_and_schedule(cfg: LaunchConfig, found: dict[str, list[str]], value) -> None:  # noqa: ANN001 - closure
    src = cfg.source
    if "--use-megatron-fsdp" in found:
        strategy = value("--data-parallel-sharding-strategy") if "--data-parallel-sharding-strategy" in found \
            else "optim_grads_params"  # Megatron-FSDP's default strategy
        if strategy not in _FSDP_ZERO:
            raise PlanInputError(f"unknown strategy '{strategy[:40]}'", field="--data-parallel-sharding-strategy",
                                 source=src, fix=f"use one of {', '.join(_FSDP_ZERO)}")
        cfg.layout["zero"] = _FSDP_ZERO[strategy]
    else:
        cfg.layout["zero"] = 1 if "--use-distributed-optimizer" in found else 0
    granularity = value("--recompute-granularity") if "--recompute-granularity" in found else None
    if granularity is None and "--recompute-activations" in found:
        granularity = "selective"  # the older spelling of selective recompute
    cfg.set_knob("recompute", granularity or "none", "--recompute-granularity")
    # a positive count switches Megatron-Core's activation offloading on (arguments.py); the planner then offloads
    # the fewest layers that fit, which it prices and prints as offload_layers
    if "--cpu-offloading-num-layers" in found and as_int(value("--cpu-offloading-num-layers"),
                                                         "--cpu-offloading-num-layers", src, minimum=0) > 0:
        cfg.set_knob("recompute", "offload", "--cpu-offloading-num-layers")
    if "--fine-grained-activation-offloading" in found:
        read_fine_grained_offload(cfg, found.get("--offload-modules", []), "--offload-modules")
    _optimizer(cfg, found, value)
    tp = cfg.layout.get("tp", 1)
    cfg.layout["sp"] = int("--sequence-parallel" in found and tp > 1)
    if "--overlap-moe-expert-parallel-comm" in found:  # Megatron-Core's combined 1F1B (EP all-to-all overlap)
        cfg.set_knob("schedule", "combined-1f1b", "--overlap-moe-expert-parallel-comm")
    if "--cp-comm-type" in found:
        kind = value("--cp-comm-type")
        if kind not in _CP_COMM:
            raise PlanInputError(f"'{kind[:40]}' is not a context-parallel exchange the planner prices",
                                 field="--cp-comm-type", source=src, fix="use p2p, a2a or a2a+p2p")
        cfg.set_knob("cp_comm", _CP_COMM[kind], "--cp-comm-type")


def _optimizer(cfg: LaunchConfig, found: dict[str, list[str]], value) -> None:  # noqa: ANN001 - closure
    """Optimizer states in CPU memory and bf16 Adam moments, as the megatron launcher writes them (arguments.py:
    --optimizer-cpu-offload with --optimizer-offload-fraction, default 1.0; --exp-avg-dtype / --exp-avg-sq-dtype,
    default fp32)."""
    if "--optimizer-cpu-offload" in found:
        fraction = "--optimizer-offload-fraction"
        cfg.optimizer_offload = as_share(value(fraction), fraction, cfg.source) if fraction in found else 1.0
    first, second = (value(f) if f in found else "fp32" for f in ("--exp-avg-dtype", "--exp-avg-sq-dtype"))
    moments_dtype(first, second, "--exp-avg-dtype/--exp-avg-sq-dtype", cfg)
    capacity, pad = "--moe-expert-capacity-factor", "--moe-pad-expert-input-to-capacity"
    token_drop(cfg, value(capacity) if capacity in found else None, pad in found, (capacity, pad))


def _windows(cfg: LaunchConfig, found: dict[str, list[str]], value) -> None:  # noqa: ANN001 - closure
    """Sliding-window attention as HF keys: --window-size "left,right" (window = left + 1 keys, as the megatron
    launcher writes it) on the layers --window-attn-skip-freq marks 1; without it every layer is windowed."""
    try:
        left = int(value("--window-size").strip("()").split(",")[0])
    except ValueError:
        raise PlanInputError("expected 'left,right' token counts", field="--window-size", source=cfg.source,
                             fix="e.g. --window-size 127,0") from None
    cfg.model_keys["sliding_window"] = left + 1
    flag = "--window-attn-skip-freq"
    bits = _layer_bits(cfg, value(flag) if flag in found else None, flag)
    cfg.model_keys["layer_types"] = ["sliding_attention" if b else "full_attention" for b in bits]


def _attention_variant(cfg: LaunchConfig, found: dict[str, list[str]], value) -> None:  # noqa: ANN001 - closure
    """Megatron-Core's experimental attention variants as HF keys: gated_delta_net on the layers
    --linear-attention-freq marks 1, with its head shapes; dsa's indexer heads, head size and top-k."""
    keys, src = cfg.model_keys, cfg.source
    if "--attention-output-gate" in found:
        keys["attn_output_gate"] = True
    variant = value("--experimental-attention-variant") if "--experimental-attention-variant" in found else None
    if variant == "gated_delta_net":
        for flag, key in _LINEAR_SHAPE.items():
            if flag in found:
                keys[key] = as_int(value(flag), flag, src)
        flag = "--linear-attention-freq"
        bits = _layer_bits(cfg, value(flag) if flag in found else None, flag)
        keys["layer_types"] = ["linear_attention" if b else "full_attention" for b in bits]
    elif variant == "dsa":
        for flag, key in _DSA_SHAPE.items():
            if flag in found:
                keys[key] = as_int(value(flag), flag, src)
    elif variant is not None:
        cfg.ignored.append(f"--experimental-attention-variant {variant} (priced as softmax attention)")


def _hybrid(cfg: LaunchConfig, found: dict[str, list[str]], value) -> None:  # noqa: ANN001 - closure
    """pretrain_mamba.py's --hybrid-override-pattern as per-layer HF kinds (one layer per character, as
    Megatron-Core's _allocate_override counts them), and the Mamba-2 shapes where the pattern has Mamba layers."""
    keys, flag = cfg.model_keys, "--hybrid-override-pattern"
    pattern = value(flag)
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
    for mamba_flag, (key, default) in _MAMBA_SHAPE.items():
        keys[key] = as_int(value(mamba_flag), mamba_flag, cfg.source) if mamba_flag in found else default
    if keys["mamba_num_heads"] is None:  # Megatron-Core's default needs the width; without it the model says
        keys.pop("mamba_num_heads")
        if "hidden_size" in keys:
            keys["mamba_num_heads"] = 2 * keys["hidden_size"] // keys["mamba_head_dim"]


def _layer_bits(cfg: LaunchConfig, freq: str | None, flag: str) -> list[int]:
    """A per-layer 0/1 pattern as Megatron-LM reads it (arguments.py moe_freq_type): none = every layer 1; an int N =
    one 0 after N - 1 ones; a Python list expression of 0/1 per layer (digits, brackets, + and * only)."""
    n = cfg.model_keys.get("num_hidden_layers", 0)
    if freq is None:
        bits = [1] * n
    elif freq.strip().isdigit():
        period = max(int(freq), 1)
        bits = [int((i + 1) % period != 0) for i in range(n)]
    elif re.fullmatch(r"[\d,\[\]()+*\s]+", freq):  # the characters Megatron's _eval_pattern admits
        bits = list(eval(freq, {"__builtins__": {}}))  # noqa: S307 - digits, brackets, + and * only
    else:
        raise PlanInputError(f"'{freq[:40]}' is neither a number nor a 0/1 list expression", field=flag,
                             source=cfg.source, fix="e.g. '([1,0]*18)'")
    if len(bits) != n:
        raise PlanInputError(f"gives {len(bits)} layers, the model has {n}", field=flag, source=cfg.source,
                             fix="one 0/1 per layer")
    return bits
