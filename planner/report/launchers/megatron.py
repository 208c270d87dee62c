"""Megatron-LM `pretrain_gpt.py` flags for one plan.

Output: comment lines, then one flag (with its value, shell-quoted) per line, so that
`eval "ARGS=($(cat FILE))"` builds a bash array; inside `( ... )` bash skips the `#` lines itself.
Flag spellings follow Megatron-LM core_v0.15 and main of 2026-08 (ecosystem.md section 1).
"""

from __future__ import annotations

import shlex

from planner.inputs.specs import ATTENTION_KINDS
from planner.report.launchers import _hybrid, _mcore
from planner.report.launchers._plan import ModelShape, PlanView, header, placement_note, refuse

TARGET = "Megatron-LM core_v0.15 / main 2026-08 (pretrain_gpt.py)"
# core_v0.15's pattern alphabet has no MoE symbol (ssm/mamba_hybrid_layer_allocation.py Symbols: M, *, -); 0.16 adds E
HYBRID_TARGET = f"Megatron-LM core_v0.16 / main 2026-08 ({_hybrid.SCRIPT})"
NAME = "Megatron-LM"

# HF activation name -> Megatron flag; gelu is Megatron's default and needs none. gpt-oss's clamped SwiGLU is
# quick-GELU gated with an offset on the linear half (Megatron-Bridge gpt_oss_bridge.py: quick_gelu,
# activation_func_clamp_value = swiglu_limit, glu_linear_offset = 1.0).
ACTIVATION_FLAGS: dict[str, tuple[str, ...]] = {"silu": ("--swiglu",), "gelu": (), "relu2": ("--squared-relu",),
                                               "swigluoai": ("--quick-geglu",)}

Flag = tuple[str, ...]


def render(view: PlanView) -> str:
    _mcore.check(view, NAME)
    if view.layout.fsdp_shard_group is not None:
        refuse(view, NAME, "fsdp_shard_group", "hybrid sharding (ZeRO-3 inside a node, replicated across nodes) has "
               "no Megatron-FSDP flag in the targeted release", "re-plan with --fix zero=3, or use --format torchtitan")
    if view.attention_kernel == "fp8":  # arguments.py lists fp8_dot_product_attention among the fields without a flag
        refuse(view, NAME, "inputs.training.attention_kernel", "no command-line flag sets fp8 attention "
               "(TransformerConfig.fp8_dot_product_attention)",
               "use --format nemo (mixed_precision.fp8_dot_product_attention), or plan without --fp8-attention")
    if view.model.hidden_act not in ACTIVATION_FLAGS:
        refuse(view, NAME, "inputs.model.hidden_act", f"no Megatron-LM flag for activation {view.model.hidden_act!r}",
               "set the MLP activation flags by hand and use --format env for the layout")
    hybrid = _hybrid.is_hybrid(view.model)
    if hybrid:
        _hybrid.check(view, NAME)
    else:
        _check_layer_kinds(view)
    flags = _parallel(view) + _batch(view) + _model(view) + _recompute(view) + _data_parallel(view) + _precision(view)
    lines = [header(view, HYBRID_TARGET if hybrid else TARGET), _env_note(view), _mcore.offload_env_note(view),
             placement_note(view),
             f"# run with {_hybrid.SCRIPT} (hybrid Mamba model)" if hybrid else "",
             "# flags cover layout, batch and model shape; add data, tokenizer, optimizer and norm/rope flags"]
    lines += [" ".join(shlex.quote(part) for part in flag) for flag in flags]
    return "\n".join(line for line in lines if line) + "\n"


def _env_note(view: PlanView) -> str:
    lay = view.layout
    if _mcore.ep_overlap(view):
        # EP overlap needs several hardware queues (Megatron-Core moe/README.md), and validate_args only warns with TP
        # or CP > 1 then. Megatron-Bridge's performance plugin gives it 8, or 32 with DeepEP/HybridEP
        # (scripts/performance/perf_plugins.py _set_num_cuda_device_max_connections @0fbfe7d3e); on Hopper TP's
        # collectives then run beside their GEMMs no more, which the plan prices (planner.cost.tensor).
        queues = 32 if _mcore.deepep_dispatch(view) else 8
        return (f"# env: export CUDA_DEVICE_MAX_CONNECTIONS={queues} (EP overlap needs more than one; with TP or CP "
                "> 1 Megatron-LM warns on Hopper and older GPUs)")
    if lay.tp > 1 or lay.cp > 1:  # validate_args asserts it (arguments.py M31); this wins over FSDP's preference
        return "# env: export CUDA_DEVICE_MAX_CONNECTIONS=1 (asserted with TP or CP > 1 on Hopper and older GPUs)"
    if lay.zero >= 2:
        # FSDP overlaps its collectives better with several CUDA connections (torch FSDP2 asserts != 1).
        return "# env: leave CUDA_DEVICE_MAX_CONNECTIONS unset (FSDP overlaps better with more connections)"
    return ""


def _parallel(view: PlanView) -> list[Flag]:
    lay, m = view.layout, view.model
    flags: list[Flag] = [
        ("--tensor-model-parallel-size", str(lay.tp)),
        ("--pipeline-model-parallel-size", str(lay.pp)),
        ("--context-parallel-size", str(lay.cp)),
    ]
    if lay.cp > 1 and lay.cp_comm == "a2a":
        flags.append(("--cp-comm-type", "a2a"))
    if lay.cp > 1 and lay.cp_comm == "a2a+p2p" and lay.cp_hierarchy:
        flags.append(("--cp-comm-type", "a2a+p2p"))
        flags.append(("--hierarchical-context-parallel-sizes", *(str(x) for x in lay.cp_hierarchy)))
    if lay.sequence_parallel:
        flags.append(("--sequence-parallel",))
    if lay.dp_outermost:  # rank order tp-cp-ep-pp-dp (training/initialize.py)
        flags.append(("--use-tp-pp-dp-mapping",))
    if _mcore.tp_comm_overlap(view):  # Transformer Engine userbuffers with TE's default methods (initialize_ub)
        flags.append(("--tp-comm-overlap",))
    if lay.pipeline_layout is not None:  # the layout sets vpp itself; arguments.py refuses a vpp flag beside it
        flags.append(("--pipeline-model-parallel-layout", _mcore.layout_text(view)))
    elif lay.vpp > 1:
        # The only per-rank VPP flag that also works with uneven first/last stages; there is no
        # --virtual-pipeline-model-parallel-size flag in Megatron-LM.
        flags.append(("--num-virtual-stages-per-pipeline-rank", str(lay.vpp)))
    if lay.stage_split == "embedding_loss":  # the first/last counts follow; the flags exclude the count flags
        flags += [("--account-for-embedding-in-pipeline-split",), ("--account-for-loss-in-pipeline-split",)]
    elif lay.first_stage_layers is not None:
        flags.append(("--decoder-first-pipeline-num-layers", str(lay.first_stage_layers)))
    if lay.last_stage_layers is not None and lay.stage_split != "embedding_loss":
        flags.append(("--decoder-last-pipeline-num-layers", str(lay.last_stage_layers)))
    if m.is_moe:
        # Expert TP = TP when experts spread over dp x cp (Megatron-Core's default grid); 1 with MoE parallel folding.
        flags += [("--expert-model-parallel-size", str(lay.ep)),
                  ("--expert-tensor-parallel-size", str(lay.expert_tp or lay.tp))]
    return flags


def _batch(view: PlanView) -> list[Flag]:
    lay = view.layout
    return [
        ("--micro-batch-size", str(lay.micro_batch)),
        ("--global-batch-size", str(view.global_batch)),
        ("--seq-length", str(view.seq_len)),
    ]


def _model(view: PlanView) -> list[Flag]:
    m = view.model
    flags: list[Flag] = [
        ("--num-layers", str(m.num_layers)),
        ("--hidden-size", str(m.hidden_size)),
        ("--ffn-hidden-size", str(m.ffn_hidden_size)),
        ("--num-attention-heads", str(m.num_heads)),
        ("--max-position-embeddings", str(m.max_position_embeddings or view.seq_len)),
    ]
    if m.is_mla:
        flags += [
            ("--multi-latent-attention",),
            ("--q-lora-rank", str(m.q_lora_rank)),
            ("--kv-lora-rank", str(m.kv_lora_rank)),
            ("--qk-head-dim", str(m.qk_nope_head_dim)),
            ("--qk-pos-emb-head-dim", str(m.qk_rope_head_dim)),
            ("--v-head-dim", str(m.v_head_dim)),
        ]
    else:
        flags.append(("--kv-channels", str(m.head_dim)))
        if m.num_kv_heads != m.num_heads:
            flags += [("--group-query-attention",), ("--num-query-groups", str(m.num_kv_heads))]
    flags += [(flag,) for flag in ACTIVATION_FLAGS[m.hidden_act]]
    if m.hidden_act == "swigluoai":
        flags += [("--activation-func-clamp-value", f"{m.swiglu_limit or 7.0:g}"), ("--glu-linear-offset", "1.0")]
    flags += _biases(m)
    if m.attention_sinks:  # arguments.py --softmax-type: a learnable offset (sink) per head
        flags.append(("--softmax-type", "learnable"))
    if not m.tied_embeddings:
        flags.append(("--untie-embeddings-and-output-weights",))
    flags += _windows(view) + _attention_variant(view)
    if m.mtp_layers:  # the planner prices the MTP block on the last stage (arguments.py --mtp-num-layers)
        flags.append(("--mtp-num-layers", str(m.mtp_layers)))
    if m.is_moe:
        flags += _moe(view)
    if _hybrid.is_hybrid(m):
        flags += _hybrid.flags(view)
    return flags


def _biases(m: ModelShape) -> list[Flag]:
    """Megatron-LM adds biases to every linear layer unless --disable-bias-linear. A model that declares biases on
    both its attention and MLP projections (gpt-oss) keeps the default; attention biases alone become
    --add-qkv-bias (an o_proj bias, a few thousand weights, is not expressible). SwiGLU-family models that declare
    none (Llama, Mixtral, Qwen, DeepSeek) have no biases, nor have the squared-ReLU Nemotrons (Nemotron-4 340B
    report §2.1: "no bias terms"), and MoE with expert TP > 1 asserts without the flag ("Bias in Moe is only
    supported when ETP==1"); GELU models keep Megatron's biases, as GPT-3 had."""
    if m.attention_bias and m.mlp_bias:
        return []
    if m.attention_bias:
        return [("--disable-bias-linear",), ("--add-qkv-bias",)]
    return [("--disable-bias-linear",)] if m.hidden_act in ("silu", "swiglu", "swigluoai", "relu2") else []


# Token mixers pretrain_gpt.py's flags describe: attention layers (ATTENTION_KINDS: full, sliding-window, and chunked
# while one chunk holds the whole sequence) and Gated DeltaNet layers among them (--experimental-attention-variant
# gated_delta_net). Models with Mamba layers launch through pretrain_mamba.py (_hybrid); short convolutions and no-op
# mixers are other layer classes neither script builds.


def _check_layer_kinds(view: PlanView) -> None:
    m = view.model
    kinds = set(m.layer_kinds or ())
    if m.linear_attention is not None:
        kinds.discard("linear_attention")
    if ("linear_attention" in (m.layer_kinds or ()) and m.indexer) or m.shared_indexers:
        refuse(view, NAME, "inputs.model.indexer_types" if m.shared_indexers else "inputs.model.layer_types",
               "shared sparse-attention indexers, or sparse attention beside Gated DeltaNet, have no Megatron-LM "
               "flags", "use --format nemo with the model's Megatron-Bridge recipe")
    other = sorted(kinds - set(ATTENTION_KINDS))
    if other:
        refuse(view, NAME, "inputs.model.layer_types", f"{', '.join(other)} layers have no pretrain_gpt.py or "
               f"{_hybrid.SCRIPT} flags (these flags would train an all-attention model)",
               "use --format nemo with the model's Megatron-Bridge recipe, or --format env for the layout and your "
               "own model flags")
    if "chunked_attention" in kinds and (m.attention_chunk_size or 0) < view.seq_len:
        refuse(view, NAME, "inputs.model.attention_chunk_size", f"chunked attention over {m.attention_chunk_size} "
               f"tokens of {view.seq_len} has no Megatron-LM flag", f"plan with --seq-len {m.attention_chunk_size} "
               "or less (one chunk is plain causal attention), or use --format nemo")


def _windows(view: PlanView) -> list[Flag]:
    """Sliding-window layers: --window-size (left, right) keys around the query, left = window - 1 as
    Megatron-Bridge maps HF sliding_window (models/gpt_oss/gpt_oss_bridge.py), and --window-attn-skip-freq as a
    list expression, 1 = sliding, 0 = full (arguments.py moe_freq_type / _eval_pattern). Nothing where the window
    covers the sequence."""
    m = view.model
    kinds = m.layer_kinds or ()
    if "sliding_attention" not in kinds or not m.sliding_window or m.sliding_window >= view.seq_len:
        return []
    flags: list[Flag] = [("--window-size", f"{m.sliding_window - 1},0")]
    if set(kinds) != {"sliding_attention"}:
        flags.append(("--window-attn-skip-freq", _pattern([int(k == "sliding_attention") for k in kinds])))
    return flags


def _attention_variant(view: PlanView) -> list[Flag]:
    """Megatron-Core's experimental attention variants (transformer_config.py experimental_attention_variant):
    Gated DeltaNet on the layers --linear-attention-freq marks 1 (1 = linear attention, 0 = softmax attention),
    with its head shapes; DeepSeek sparse attention's indexer (DSAttention asserts RoPE fusion off, so
    --no-rope-fusion). The attention output gate of Qwen3-Next/Qwen3.5 is --attention-output-gate."""
    m, flags = view.model, []
    if m.attn_output_gate:
        flags.append(("--attention-output-gate",))
    if m.linear_attention is not None and "linear_attention" in (m.layer_kinds or ()):
        conv, key_dim, value_dim, key_heads, value_heads = m.linear_attention
        bits = [int(k == "linear_attention") for k in m.layer_kinds or ()]
        flags += [("--experimental-attention-variant", "gated_delta_net"), ("--linear-attention-freq", _pattern(bits)),
                  ("--linear-conv-kernel-dim", str(conv)), ("--linear-key-head-dim", str(key_dim)),
                  ("--linear-value-head-dim", str(value_dim)), ("--linear-num-key-heads", str(key_heads)),
                  ("--linear-num-value-heads", str(value_heads))]
    elif m.indexer is not None:
        heads, dim, topk = m.indexer
        flags += [("--experimental-attention-variant", "dsa"), ("--dsa-indexer-n-heads", str(heads)),
                  ("--dsa-indexer-head-dim", str(dim)), ("--dsa-indexer-topk", str(topk)), ("--no-rope-fusion",)]
    return flags


def _pattern(bits: list[int]) -> str:
    """A 0/1 per-layer list as Megatron's list expression, its shortest repeating unit times its repeats."""
    n = len(bits)
    for size in range(1, n + 1):
        if n % size == 0 and bits[:size] * (n // size) == bits:
            return f"([{','.join(map(str, bits[:size]))}]*{n // size})"
    return f"[{','.join(map(str, bits))}]"


def _moe(view: PlanView) -> list[Flag]:
    m = view.model
    flags: list[Flag] = [
        ("--num-experts", str(m.num_experts)),
        ("--moe-router-topk", str(m.experts_per_token)),
        ("--moe-ffn-hidden-size", str(m.moe_ffn_hidden_size or m.ffn_hidden_size)),
        *_mcore.router_flags(m),
    ]
    if view.moe_router_fusion:  # priced with the fused router's host ops (planner.cost.host)
        flags.append(("--moe-router-fusion",))
    # All-to-all dispatch is what the planner's EP cost assumes (the default allgather moves far more data); across
    # nodes it prices DeepEP's node-deduplicated kernels, Megatron-Core's flex dispatcher (needs the deep_ep package).
    if _mcore.deepep_dispatch(view):
        flags += [("--moe-token-dispatcher-type", "flex"), ("--moe-flex-dispatcher-backend", "deepep")]
    else:
        flags.append(("--moe-token-dispatcher-type", "alltoall"))
    if _mcore.ep_overlap(view):
        # combined 1F1B; delayed weight gradients widen the window that hides the all-to-all (frontier_facts §A3)
        flags += [("--overlap-moe-expert-parallel-comm",), ("--delay-wgrad-compute",)]
    for key, value in _mcore.token_drop(view):  # --moe-expert-capacity-factor F [--moe-pad-expert-input-to-capacity]
        flag = "--" + key.replace("_", "-")
        flags.append((flag,) if value is True else (flag, f"{value:g}"))
    if m.shared_experts:  # the width the config states, else whole experts (DeepSeek's count)
        width = m.shared_expert_ffn or m.shared_experts * m.moe_ffn_hidden_size
        flags.append(("--moe-shared-expert-intermediate-size", str(width)))
    if m.moe_latent_size:  # transformer_config.py:719 moe_latent_size (megatron-core 0.16.1)
        flags.append(("--moe-latent-size", str(m.moe_latent_size)))
    hybrid = _hybrid.is_hybrid(m)  # a hybrid places its MoE layers with the pattern's E symbols instead
    pattern = None if hybrid else m.moe_layer_pattern
    if pattern and len(pattern) == m.num_layers and 0 in pattern:
        flags.append(("--moe-layer-freq", "[" + ",".join(map(str, pattern)) + "]"))  # interleaved (Llama 4)
    elif m.first_dense_layers and not hybrid:
        dense, moe = m.first_dense_layers, m.num_layers - m.first_dense_layers
        flags.append(("--moe-layer-freq", f"([0]*{dense}+[1]*{moe})"))
    flags.append(("--moe-grouped-gemm",))  # grouped GEMM asserts --bf16 (arguments.py), which every plan sets
    return flags


def _recompute(view: PlanView) -> list[Flag]:
    granularity, method, num_layers = _mcore.RECOMPUTE[view.layout.recompute]
    flags: list[Flag] = []
    if granularity:
        flags.append(("--recompute-granularity", granularity))
    modules = _mcore.recompute_modules(view)
    if modules:
        flags.append(("--recompute-modules", *modules))
    if method:
        flags += [("--recompute-method", method), ("--recompute-num-layers", str(num_layers))]
    if view.layout.recompute == "offload":  # arguments.py: a positive count switches cpu_offloading on
        flags.append(("--cpu-offloading-num-layers", str(_mcore.offload_layers(view))))
    if _mcore.offload_modules(view):  # TransformerConfig fields, flags by argument_utils (list: nargs "+")
        flags += [("--fine-grained-activation-offloading",), ("--offload-modules", *_mcore.offload_modules(view))]
    graphs = _mcore.cuda_graphs(view)
    if graphs:  # arguments.py --cuda-graph-impl, --cuda-graph-modules (nargs "*"; none: the whole layer)
        flags.append(("--cuda-graph-impl", graphs[0]))
        if graphs[1]:
            flags.append(("--cuda-graph-modules", *graphs[1]))
    return flags


def _data_parallel(view: PlanView) -> list[Flag]:
    zero = view.layout.zero
    if view.optimizer == "muon":
        # Megatron-Core's Muon refuses the distributed optimizer; dist_muon is its layer-wise distributed form
        # (arguments.py: newer releases read it as --optimizer muon with --use-distributed-optimizer)
        return [("--optimizer", "dist_muon" if zero >= 1 else "muon"), ("--overlap-grad-reduce",)]
    if zero == 0:
        return [("--overlap-grad-reduce",)] + _offload(view)
    flags: list[Flag] = []
    if zero >= 2:
        # ZeRO-2/3 exist in Megatron only as Megatron-FSDP; these are its required companions per the
        # Megatron-FSDP user guide (fsdp_dtensor checkpoints, no gradient-accumulation fusion).
        flags += [
            ("--use-megatron-fsdp",),
            ("--data-parallel-sharding-strategy", _mcore.FSDP_STRATEGY[zero]),
            ("--no-gradient-accumulation-fusion",),
            ("--ckpt-format", "fsdp_dtensor"),
        ]
    flags += [("--use-distributed-optimizer",), ("--overlap-grad-reduce",), ("--overlap-param-gather",)]
    return flags + _offload(view)


def _offload(view: PlanView) -> list[Flag]:
    """Optimizer states in CPU memory and bf16 moments: both run through the precision-aware optimizer
    (arguments.py: --optimizer-cpu-offload requires --use-precision-aware-optimizer; --exp-avg(-sq)-dtype)."""
    flags: list[Flag] = []
    if view.optimizer_offload > 0:
        flags += [("--optimizer-cpu-offload",), ("--optimizer-offload-fraction", f"{view.optimizer_offload:g}")]
    if view.optimizer_moments == "bf16":  # precision-aware optimizer with bf16 moments (arguments.py)
        flags += [("--exp-avg-dtype", "bf16"), ("--exp-avg-sq-dtype", "bf16")]
    if flags:
        flags.append(("--use-precision-aware-optimizer",))
    return flags


def _precision(view: PlanView) -> list[Flag]:
    flags: list[Flag] = [("--bf16",)]
    if view.precision == "fp4":
        # NVFP4 GEMMs through Transformer Engine on top of bf16 parameters: Megatron-LM
        # megatron/training/arguments.py (_add_transformer_engine_args) defines --fp4-format {e2m1} and
        # --fp4-recipe {nvfp4}; FP4 and FP8 are mutually exclusive there (ecosystem.md section 1.2). The same recipe
        # as Megatron-Bridge's bf16_with_nvfp4_mixed preset, which leaves the parameter all-gather in bf16.
        return flags + [("--fp4-format", "e2m1"), ("--fp4-recipe", "nvfp4")]
    if view.precision == "fp8":
        # Same recipe as Megatron's llama3 fp8 example and Bridge's bf16_with_fp8_delayed_scaling_mixed, or per-tensor
        # current scaling where the recompute modules need it (_mcore.fp8_recipe).
        recipe = _mcore.fp8_recipe(view)
        flags += [("--fp8-format", "hybrid"), ("--fp8-recipe", recipe)]
        if recipe == "delayed":
            flags += [("--fp8-amax-history-len", "1024"), ("--fp8-amax-compute-algo", "max")]
        if view.layout.zero >= 1 and view.optimizer != "muon":  # needs the distributed optimizer or FSDP
            flags.append(("--fp8-param-gather",))
    return flags
