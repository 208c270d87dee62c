"""What each training framework can run: the knobs and values it supports, and the launcher format that emits it.

The search only walks layouts the chosen `--framework` can launch (planner.search.rules reads this table), and a
launcher format implies its framework (`--format deepspeed` plans for DeepSpeed). Behaviour that changes the cost of
a layout (kernel efficiency, overlap, bytes per state) lives in planner.cost.profiles; this table only says yes/no.
Sources: ../shared/reference/frontier_facts.md §B-C (Megatron-Core, torchtitan, DeepSpeed at their newest commits
read) and ecosystem.md §1-2; the paper-era Megatron-LM is Narayanan et al. 2021 (TP + PP + interleaving + DP only).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.inputs.layout import CpComm, RankOrder, Recompute, Schedule, Zero

_ALL_SCHEDULES = tuple(Schedule)
_ALL_ZERO = tuple(Zero)
_ALL_CP = tuple(CpComm)
_ALL_RECOMPUTE = tuple(Recompute)
# Layer-level CPU activation offloading (transformer_block.py get_cpu_offload_context, through Transformer Engine)
# and fine-grained module offloading (pipeline_parallel/fine_grained_activation_offload.py, core_v0.16) are
# Megatron-Core's; paper-era Megatron-LM, torchtitan (activation_checkpoint modes only) and DeepSpeed's pipe
# engine have no such switch.
_RECOMPUTE_NO_OFFLOAD = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)
# Fine-grained offloading (recompute=offload-modules) states one module set (planner.cost.module_offload says why):
# the attention pair on every layer, expert fc1 on MoE layers; MCORE_OFFLOAD_MODULES is every name core_v0.16.1
# accepts (transformer_config.py __post_init__ asserts).
OFFLOAD_ATTENTION_MODULES = ("core_attn", "attn_proj")
OFFLOAD_EXPERT_MODULES = ("expert_fc1",)
MCORE_OFFLOAD_MODULES = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act")
_ALL_PRECISIONS = ("bf16", "fp8", "fp4")
_MEGATRON_SCHEDULES = (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED)  # schedules.py get_forward_backward_func
# Megatron-Core adds the EP-overlap "combined 1F1B" (pipeline_parallel/combined_1f1b.py) for MoE.
_MCORE_SCHEDULES = (*_MEGATRON_SCHEDULES, Schedule.COMBINED_1F1B)
_ALL_ORDERS = tuple(RankOrder)
_DEFAULT_ORDER = (RankOrder.PP_OUTER,)
# Data parallelism outermost (--use-tp-pp-dp-mapping, Megatron-Bridge dist.use_tp_pp_dp_mapping) only beside the
# distributed optimizer: "use_tp_pp_dp_mapping is not supported with Megatron FSDP" (Megatron-Bridge docs, Megatron
# FSDP); HSDP runs on a fixed device mesh with pp outermost (torchtitan parallel_dims.py) in every stack.
_MCORE_ORDER_ZERO = (Zero.NONE, Zero.OPTIMIZER)
_ORDER_ZERO = (Zero.NONE, Zero.OPTIMIZER, Zero.GRADIENTS, Zero.PARAMETERS)


@dataclass(frozen=True)
class Capabilities:
    """One framework's supported layout space. Empty `cp_comm` means no context parallelism."""

    name: str
    zero: tuple[Zero, ...] = _ALL_ZERO
    schedules: tuple[Schedule, ...] = _ALL_SCHEDULES
    cp_comm: tuple[CpComm, ...] = _ALL_CP
    tensor_parallel: bool = True
    pipeline_parallel: bool = True
    expert_parallel: bool = True
    # ZeRO stages that may be combined with pp > 1 (DeepSpeed's pipe engine asserts stage < 2; torch FSDP2 under
    # Megatron is refused with PP; Megatron-FSDP v2 rejects PP).
    zero_with_pipeline: tuple[Zero, ...] = _ALL_ZERO
    # Replicated data parallelism (zero 0) only when data parallelism is the only dimension (torchtitan applies DDP
    # only then; FSDP2 is its data-parallel path otherwise).
    ddp_only_alone: bool = False
    # First/last pipeline stages may hold a different layer count than the middle ones (Megatron
    # --decoder-first/last-pipeline-num-layers; torchtitan per-stage module lists).
    uneven_pipeline: bool = True
    # Activation recomputation the framework switches on by itself (a ds_config cannot: checkpointing is model code).
    recompute: tuple[Recompute, ...] = _ALL_RECOMPUTE
    # Training precisions (--precision) the framework has a recipe for.
    precisions: tuple[str, ...] = _ALL_PRECISIONS
    # fp8 for mixture-of-experts grouped GEMMs (torchtitan's float8 converter needs per-model MoE module names).
    fp8_moe: bool = True
    # fp8 needs zero >= 1 (Megatron-Bridge's fp8 preset gathers fp8 parameters through the distributed optimizer).
    fp8_needs_zero: bool = False
    # Optimizer states in CPU memory (--optimizer-offload): "fraction" any share (Megatron-Core
    # --optimizer-cpu-offload --optimizer-offload-fraction, arguments.py; it needs --use-precision-aware-optimizer),
    # "all" only the whole optimizer (DeepSpeed zero_optimization.offload_optimizer), "none" no switch for it
    # (torchtitan's FSDP2 CPUOffloadPolicy moves parameters and gradients too, a different trade the planner does
    # not price).
    optimizer_offload: str = "fraction"
    # bf16 Adam moments (--optimizer-moments bf16): Megatron-Core's precision-aware optimizer
    # (--use-precision-aware-optimizer --exp-avg-dtype/--exp-avg-sq-dtype bf16, arguments.py). No switch for it in a
    # ds_config, torchtitan's job config or paper-era Megatron-LM.
    bf16_moments: bool = True
    # Selective recompute re-makes a dense layer's norm outputs and MLP activation output. Not in Megatron-Core: its
    # Transformer Engine layer spec fuses both norms into the next linear (input_layernorm and pre_mlp_layernorm are
    # IdentityOp, models/gpt/gpt_layer_specs.py), `--recompute-modules layernorm` skips an IdentityOp
    # (transformer_layer.py), and the only activation module, moe_act, is for routed experts (transformer_config.py
    # recompute_modules). Its dense selective recompute is core_attn, which with fused attention frees nothing.
    selective_dense: bool = True
    # Layer split that counts the embedding and the loss as one layer each (Megatron-Core
    # --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split, transformer_config.py): with
    # (L + 2) % (pp x vpp) == 0 the first and last ranks hold one layer fewer, also under interleaving, where the
    # first/last-stage layer flags need counts divisible by vpp. The split Llama 3 ran (arXiv 2407.21783 §3.3.2).
    embedding_loss_split: bool = False
    # Any layer count per model chunk, stated chunk by chunk (Megatron-Core --pipeline-model-parallel-layout,
    # pipeline_parallel_layer_layout.py; Megatron-Bridge model.pipeline_model_parallel_layout, which its Kimi K2 and
    # DeepSeek-V3 recipes set for 61 layers): an interleaved split that does not divide runs the layout
    # planner.inputs.layout.chunk_layers gives, chunk s on rank s % pp. Not torchtitan: its V schedules (ZB-V,
    # DualPipe-V) place chunks in a V, which that split does not balance.
    pipeline_layout: bool = False
    # The Muon optimizer (--optimizer muon): Megatron-Core's layer-wise distributed Muon (--optimizer dist_muon,
    # optimizer/muon.py with emerging_optimizers; Megatron-Bridge's Kimi K2 recipes run it). Not torchtitan's,
    # DeepSpeed's or paper-era Megatron-LM's launch configs, which the planner writes.
    muon: bool = False
    # fp8 training keeps the model weights in fp8 where the optimizer is sharded (Megatron-Core --fp8-param-gather,
    # which the megatron launcher emits with zero >= 1; every Megatron-Bridge fp8 preset sets fp8_param_gather).
    fp8_param_gather: bool = False
    # Block-scaled fp8 (--fp8-recipe blockwise: 1x128 / 128x128 scales, DeepSeek-V3 report §3.3.2): Megatron-Core
    # --fp8-recipe blockwise (arguments.py), Megatron-Bridge's bf16_with_fp8_subchannel_scaling_mixed preset
    # (training/mixed_precision.py). torchtitan's float8 recipes are tensorwise and rowwise, not 128x128 blocks.
    blockwise_fp8: bool = False
    # ZeRO stages that may be combined with tp > 1 (DeepSpeed AutoTP training runs with ZeRO 0-2: DeepSpeed tutorial
    # "Automatic Tensor Parallelism (Training)").
    zero_with_tensor_parallel: tuple[Zero, ...] = _ALL_ZERO
    # Sequence parallelism beside TP (norms and dropout sharded over the sequence). DeepSpeed's AutoTP shards the
    # Linear layers only (module_inject LinearLayer / LinearAllreduce) and keeps every other activation whole.
    sequence_parallel: bool = True
    # TP and context parallelism in one layout. DeepSpeed documents AutoTP and Ulysses SP each with data
    # parallelism (the AutoTP training tutorial; transformers deepspeed_alst.md: dp_replicate x dp_shard x sp = world),
    # never together.
    tp_with_cp: bool = True
    # ZeRO-3 parameters kept in host memory and fetched per layer (--param-offload): DeepSpeed's
    # zero_optimization.offload_param (ZeRO-Infinity, Rajbhandari et al. 2021), "valid only with stage 3".
    param_offload: bool = False
    # The MoE router as Transformer Engine's fused kernels (--moe-router-fusion, Megatron-Core transformer_config.py):
    # the stacks built on Megatron-Core's MoE layer; the others route with their own code.
    moe_router_fusion: bool = False
    # CUDA graph capture the framework has a switch for (--cuda-graphs): Megatron-Core's cuda_graph_impl
    # (transformer_engine / local per layer, full_iteration); the others launch eagerly.
    cuda_graphs: tuple[str, ...] = ("none",)
    # Token mixers whose kernels run no context parallelism here: "sparse_attention" (DeepSeek sparse attention's
    # indexer, index_topk), "linear_attention" (Gated DeltaNet).
    cp_excludes: tuple[str, ...] = ()
    # The attention core in fp8 (Transformer Engine's fp8_dot_product_attention, an fp8 recipe's; Megatron-Bridge
    # mixed_precision.fp8_dot_product_attention): the stacks on Transformer Engine's attention.
    fp8_attention: bool = False
    # Context-parallel exchanges that run attention with learnable sinks (gpt-oss); None: every one the framework has.
    # Transformer Engine takes a learnable softmax under context parallelism only in its fused attention with the
    # all-to-all exchange (attention/dot_product_attention/utils.py get_attention_backend: FlashAttention never,
    # unfused never with CP, FusedAttention only with cp_comm_type "a2a"; Megatron-Bridge's gpt-oss recipe sets
    # cp_comm_type "a2a" for that reason, recipes/gpt_oss/gpt_oss.py).
    sink_cp_comm: tuple[CpComm, ...] | None = None
    # Experts with biases only whole (expert TP 1): Megatron-Core asserts "Bias in Moe is only supported when ETP==1".
    moe_bias_whole_experts: bool = False
    # Token dropping with a capacity factor (Megatron-Core --moe-expert-capacity-factor, optionally padded with
    # --moe-pad-expert-input-to-capacity). torchtitan's MoE routes dropless only; the other targets run no experts.
    token_drop: bool = True
    # Models with Mamba layers run on Megatron-Core's MambaStack (pretrain_mamba.py), which in core_v0.16 asserts no
    # virtual pipeline stages and has no full-layer recompute or activation offloading (ssm/mamba_block.py:172-176;
    # the block builds no checkpointed forward).
    mamba_stack: bool = False
    # Rank orders the framework lays ranks out in (planner.inputs.layout.RankOrder), the ZeRO stages it runs with one
    # other than its default, and whether it then needs the experts' data-parallel size equal to the dense one
    # (Megatron-Core parallel_state.py asserts it when the order is not pp-last and pp > 1: etp x ep = tp x cp).
    rank_orders: tuple[RankOrder, ...] = _ALL_ORDERS
    rank_order_zero: tuple[Zero, ...] = _ORDER_ZERO
    rank_order_same_expert_dp: bool = False
    launcher: str | None = None  # the --format that emits this framework's launch configuration
    source: str = ""


# Megatron-Core transformer_config.py asserts context_parallel_size == 1 for experimental_attention_variant "dsa"
# ("context parallelism is not supported by DSAttention") and "gated_delta_net" ("does not support context parallel
# for now").
_MCORE_CP_EXCLUDES = ("sparse_attention", "linear_attention")
_ALL_GRAPHS = ("none", "per-layer", "full-iteration")

FRAMEWORKS: dict[str, Capabilities] = {
    "generic": Capabilities("generic", embedding_loss_split=True, pipeline_layout=True, muon=True, blockwise_fp8=True,
                            moe_router_fusion=True, cuda_graphs=_ALL_GRAPHS, fp8_attention=True,
                            source="every knob; launch through --format env"),
    "megatron": Capabilities(
        "megatron", zero=(Zero.NONE, Zero.OPTIMIZER), schedules=_MEGATRON_SCHEDULES, cp_comm=(), bf16_moments=False,
        expert_parallel=False, token_drop=False, zero_with_pipeline=(Zero.NONE, Zero.OPTIMIZER), uneven_pipeline=False,
        optimizer_offload="none", recompute=_RECOMPUTE_NO_OFFLOAD, precisions=("bf16",), rank_orders=_DEFAULT_ORDER,
        source="Megatron-LM as published in 2021-22 (Narayanan et al. 2021; Korthikanti et al. 2022): TP, PP with "
               "interleaving, DP and the distributed optimizer in 16-bit mixed precision; no context or expert "
               "parallelism, no ZeRO-2/3, no fp8 (Transformer Engine's fp8 arrived with Hopper and Megatron-Core)"),
    "megatron-core": Capabilities(
        "megatron-core", zero=(Zero.NONE, Zero.OPTIMIZER, Zero.GRADIENTS, Zero.PARAMETERS),
        schedules=_MCORE_SCHEDULES, zero_with_pipeline=(Zero.NONE, Zero.OPTIMIZER), launcher="megatron",
        selective_dense=False, embedding_loss_split=True, pipeline_layout=True, muon=True, fp8_param_gather=True,
        blockwise_fp8=True,
        cp_excludes=_MCORE_CP_EXCLUDES, moe_bias_whole_experts=True, mamba_stack=True, moe_router_fusion=True,
        rank_order_zero=_MCORE_ORDER_ZERO, rank_order_same_expert_dp=True, cuda_graphs=_ALL_GRAPHS,
        sink_cp_comm=(CpComm.A2A,), fp8_attention=True,
        source="Megatron-Core: distributed optimizer (ZeRO-1); ZeRO-2/3 only through Megatron-FSDP, which does not "
               "combine with PP (mcore_fsdp_adapter.py); no HSDP flag in core_v0.15; 1F1B and interleaved only"),
    "nemo": Capabilities(
        "nemo", zero=(Zero.NONE, Zero.OPTIMIZER, Zero.GRADIENTS, Zero.PARAMETERS), schedules=_MCORE_SCHEDULES,
        zero_with_pipeline=(Zero.NONE, Zero.OPTIMIZER), fp8_needs_zero=True, launcher="nemo",
        selective_dense=False, embedding_loss_split=True, pipeline_layout=True, muon=True, fp8_param_gather=True,
        blockwise_fp8=True,
        cp_excludes=_MCORE_CP_EXCLUDES, moe_bias_whole_experts=True, moe_router_fusion=True,
        rank_order_zero=_MCORE_ORDER_ZERO, rank_order_same_expert_dp=True, cuda_graphs=_ALL_GRAPHS,
        sink_cp_comm=(CpComm.A2A,), fp8_attention=True,
        source="Megatron-Bridge recipes on Megatron-Core: the same parallelisms and limits"),
    "torchtitan": Capabilities(
        "torchtitan", zero=(Zero.NONE, Zero.GRADIENTS, Zero.PARAMETERS, Zero.HSDP),
        schedules=(Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED, Schedule.ZB_V, Schedule.DUALPIPE_V),
        cp_comm=(CpComm.RING,), ddp_only_alone=True, precisions=("bf16", "fp8"), fp8_moe=False,
        launcher="torchtitan", optimizer_offload="none", bf16_moments=False, recompute=_RECOMPUTE_NO_OFFLOAD,
        token_drop=False, rank_orders=_DEFAULT_ORDER,
        source="torchtitan: FSDP2 (reshard after forward = ZeRO-3, never = ZeRO-2), HSDP replicate x shard, TP, "
               "ring CP, torch.distributed.pipelining schedules; DDP only without other parallelism"),
    "deepspeed": Capabilities(
        "deepspeed", zero=(Zero.NONE, Zero.OPTIMIZER, Zero.GRADIENTS, Zero.PARAMETERS), bf16_moments=False,
        schedules=(Schedule.ONE_F_ONE_B,), cp_comm=(CpComm.A2A,), pipeline_parallel=False,
        expert_parallel=False, recompute=(Recompute.NONE, Recompute.FULL), precisions=("bf16",),
        launcher="deepspeed", optimizer_offload="all", token_drop=False, rank_orders=_DEFAULT_ORDER,
        zero_with_tensor_parallel=(Zero.NONE, Zero.OPTIMIZER, Zero.GRADIENTS), sequence_parallel=False,
        tp_with_cp=False, param_offload=True,
        source="DeepSpeed as its users run it, a Hugging Face Trainer (or accelerate) with a ds_config "
               "(frontier_facts §H): ZeRO 0-3 with CPU offload of the optimizer and (ZeRO-3) the parameters; the "
               "model's gradient checkpointing (--gradient_checkpointing: every decoder layer, full recompute); "
               "AutoTP tensor parallelism (tensor_parallel.autotp_size, DeepSpeed >= 0.16.4, ZeRO 0-2, no sequence "
               "parallelism); Ulysses sequence parallelism (ALST: accelerate's parallelism_config sp_backend "
               "deepspeed, the planner's all-to-all context parallelism); no pipeline for Hugging Face models, no "
               "expert parallelism, bf16 only"),
    "megatron-deepspeed": Capabilities(
        "megatron-deepspeed", schedules=(Schedule.ONE_F_ONE_B,), cp_comm=(), expert_parallel=False, bf16_moments=False,
        token_drop=False,
        zero=(Zero.NONE, Zero.OPTIMIZER, Zero.GRADIENTS, Zero.PARAMETERS),
        zero_with_pipeline=(Zero.NONE, Zero.OPTIMIZER), uneven_pipeline=False, optimizer_offload="all",
        recompute=_RECOMPUTE_NO_OFFLOAD, rank_orders=_DEFAULT_ORDER,
        source="Megatron-DeepSpeed: Megatron TP/PP under DeepSpeed's pipe engine (TrainSchedule 1F1B; "
               "runtime/pipe/engine.py asserts ZeRO stage < 2)"),
    "llm-foundry": Capabilities(
        "llm-foundry", zero=(Zero.NONE, Zero.GRADIENTS, Zero.PARAMETERS, Zero.HSDP), schedules=(Schedule.ONE_F_ONE_B,),
        bf16_moments=False, recompute=_RECOMPUTE_NO_OFFLOAD,
        cp_comm=(), tensor_parallel=False, pipeline_parallel=False, expert_parallel=False, optimizer_offload="none",
        token_drop=False, rank_orders=_DEFAULT_ORDER,
        source="llm-foundry (Composer + PyTorch FSDP): FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD, NO_SHARD"),
}
# Stacks that appear in published runs but are not planning targets: as permissive as the generic planner.
for _name in ("automodel", "gpt-neox", "metaseq", "other"):
    FRAMEWORKS[_name] = Capabilities(_name, blockwise_fp8=True, cuda_graphs=_ALL_GRAPHS, fp8_attention=True,
                                     source="validation cases only: no launcher; every knob allowed")

# The stack `plan`, `plan report`, `plan explain` and `plan sweep` plan for when neither --framework nor a launcher
# format names one: a shipped one, so that the default answer launches (`--format megatron` writes its #1 as the
# table prints it). `generic` (every knob, best published practice) stays a what-if with no launcher.
DEFAULT_FRAMEWORK = "megatron-core"

# The framework a launcher format plans for when --framework is not given, and the frameworks each can launch
# (the env format prints plain sizes for any stack).
FRAMEWORK_FOR_FORMAT = {"megatron": "megatron-core", "nemo": "nemo", "torchtitan": "torchtitan",
                        "deepspeed": "deepspeed"}
LAUNCHES = {"megatron": ("megatron-core", "megatron", "nemo"), "nemo": ("nemo", "megatron-core"),
            "torchtitan": ("torchtitan",), "deepspeed": ("deepspeed",)}


# Other spellings of the stacks above, as papers, tables and launch scripts name them.
_ALIASES = {
    "megatron-lm": "megatron", "megatronlm": "megatron", "mcore": "megatron-core", "megatroncore": "megatron-core",
    "nemo2": "nemo", "megatron-bridge": "nemo", "megatronbridge": "nemo", "nemo-framework": "nemo",
    "megatrondeepspeed": "megatron-deepspeed", "llmfoundry": "llm-foundry", "composer": "llm-foundry",
    "nemo-automodel": "automodel", "gptneox": "gpt-neox",
}


def canonical_framework(name: str) -> str | None:
    """The framework row `name` means, ignoring case, '_' vs '-' and an owner prefix ('NVIDIA/Megatron-LM',
    'pytorch/torchtitan'); None for a stack the planner has no row for."""
    key = name.strip().lower().replace("_", "-").split("/")[-1].replace(" ", "-")
    if key in FRAMEWORKS:
        return key
    return _ALIASES.get(key, _ALIASES.get(key.replace("-", "")))


def capabilities_for(framework: str) -> Capabilities:
    """The capability row for `framework`; unknown names get the permissive generic row."""
    return FRAMEWORKS.get(framework, FRAMEWORKS["generic"])


def precision_refusal(framework: str, precision: str, is_moe: bool) -> str | None:
    """Why `framework` cannot train at `precision` (None when it can): precision is an input, not a searched knob."""
    caps = capabilities_for(framework)
    if precision not in caps.precisions:
        return f"{framework} has no {precision} training recipe (it runs {', '.join(caps.precisions)})"
    if precision == "fp8" and is_moe and not caps.fp8_moe:
        return f"{framework} has no fp8 recipe for mixture-of-experts layers"
    return None


# Stacks whose profile models one era of a framework, and the profile of the framework as it runs today.
SUCCESSOR = {"megatron": "megatron-core"}


def beyond_era(framework: str, precision: str, cp: int, ep: int) -> list[str]:
    """What a run states that only the successor (SUCCESSOR) of `framework`'s profile runs: a precision or a
    parallelism that arrived with the later stack (fp8, context and expert parallelism came with Megatron-Core), so a
    published run labelled with the framework's name that states one ran the later stack. Not ZeRO-3: the 2021
    papers ran it beside Megatron through DeepSpeed. Empty when the profile covers the run."""
    if framework not in SUCCESSOR:
        return []
    caps, later = capabilities_for(framework), capabilities_for(SUCCESSOR[framework])
    stated = []
    if precision not in caps.precisions and precision in later.precisions:
        stated.append(precision)
    if cp > 1 and not caps.cp_comm and later.cp_comm:
        stated.append(f"cp={cp}")
    if ep > 1 and not caps.expert_parallel and later.expert_parallel:
        stated.append(f"ep={ep}")
    return stated


def optimizer_refusal(framework: str, optimizer: str) -> str | None:
    """Why `framework` cannot run `optimizer` (None when it can)."""
    if optimizer == "adam" or capabilities_for(framework).muon:
        return None
    return f"{framework} has no {optimizer} optimizer the planner can launch"


def moments_refusal(framework: str, moments: str) -> str | None:
    """Why `framework` cannot keep Adam's moments in `moments` precision (None when it can)."""
    if moments == "fp32" or capabilities_for(framework).bf16_moments:
        return None
    return f"{framework} has no switch for {moments} optimizer moments"


def offload_refusal(framework: str, fraction: float) -> str | None:
    """Why `framework` cannot keep `fraction` of its optimizer states in CPU memory (None when it can)."""
    caps = capabilities_for(framework)
    if fraction <= 0 or caps.optimizer_offload == "fraction":
        return None
    if caps.optimizer_offload == "all" and fraction >= 1:
        return None
    if caps.optimizer_offload == "all":
        return (f"{framework} offloads the whole optimizer or none of it (offload_optimizer), "
                f"not a share of {fraction:g}")
    return f"{framework} has no optimizer-state offload switch"


def _labels(values: tuple, empty: str = "-") -> str:
    return ", ".join(v.label for v in values) if values else empty


def offload_modules(moe: bool) -> tuple[str, ...]:
    """TransformerConfig.offload_modules for recompute=offload-modules on a model with (`moe`) or without routed
    experts."""
    return OFFLOAD_ATTENTION_MODULES + (OFFLOAD_EXPERT_MODULES if moe else ())


def capability_table() -> str:
    """docs/commands.md's framework table (markdown), one row per planning target; tests/test_top_pick_launches.py
    keeps the copy there equal to it."""
    head = ("| framework | ZeRO stages | schedules | CP | TP / PP / EP | ZeRO with PP | uneven split | recompute "
            "| precision | launcher format |")
    rows = [head, "|" + " --- |" * 10]
    for c in FRAMEWORKS.values():
        if c.source.startswith("validation cases only"):
            continue
        dims = " / ".join("yes" if on else "no" for on in (c.tensor_parallel, c.pipeline_parallel, c.expert_parallel))
        if c.tensor_parallel and c.zero_with_tensor_parallel != _ALL_ZERO:
            dims += f" (TP with ZeRO {_labels(c.zero_with_tensor_parallel)}" + (
                "" if c.sequence_parallel else ", no SP") + ("" if c.tp_with_cp else ", not with CP") + ")"
        with_pp = _labels(tuple(z for z in c.zero if z in c.zero_with_pipeline)) if c.pipeline_parallel else "-"
        schedules = _labels(c.schedules) if c.pipeline_parallel else "-"
        zero = _labels(c.zero) + (" (0 only without TP/PP/CP)" if c.ddp_only_alone else "")
        precision = ", ".join(c.precisions) + ("" if c.fp8_moe or "fp8" not in c.precisions else " (no fp8 MoE)")
        if c.fp8_needs_zero:
            precision += " (fp8 needs ZeRO >= 1)"
        uneven = "yes" if c.uneven_pipeline and c.pipeline_parallel else "no"
        with_vpp = [name for name, on in (("embedding/loss as layers", c.embedding_loss_split),
                                          ("a pipeline layout", c.pipeline_layout)) if on]
        if with_vpp and c.pipeline_parallel:
            uneven += f" (+ {' or '.join(with_vpp)} with vpp)"
        recompute = _labels(c.recompute)
        if not c.selective_dense and Recompute.SELECTIVE in c.recompute:
            recompute += " (selective frees no dense-layer memory)"
        rows.append(f"| {c.name} | {zero} | {schedules} | {_labels(c.cp_comm, 'no')} | {dims} | {with_pp} "
                    f"| {uneven} | {recompute} | {precision} | {'`' + c.launcher + '`' if c.launcher else '-'} |")
    return "\n".join(rows) + "\n"
