"""Startup rules of Megatron-Core that both the Megatron-LM and the Megatron-Bridge (NeMo) renderers share.

Both launchers run the same Megatron-Core code, so a plan that would trip one of its start-up asserts is refused
here with the reason, instead of printing flags that die after the job has queued for an hour.
Rule numbers refer to shared/reference/ecosystem.md section 1.3.
"""

from __future__ import annotations

from planner.cost.bands import generation
from planner.cost.tensor import ep_overlap_serialises_tp
from planner.inputs.frameworks import offload_modules as _modules
from planner.report.launchers._plan import ModelShape, PlanView, refuse, require_stage_split

# Recompute as Megatron spells it: granularity, method, layers per recompute unit.
# "full" with method uniform and one layer per unit checkpoints every layer input, which is what the cost model
# prices as full recomputation; selective recomputes core attention only and forbids method/num-layers (rule 26).
RECOMPUTE = {
    "none": (None, None, None),
    "selective": ("selective", None, None),
    "full": ("full", "uniform", 1),
    "offload": (None, None, None),  # no recomputation: activations go to host memory (offload_layers)
    "offload-modules": (None, None, None),  # no recomputation: some modules' saved tensors go to host memory
}

# Data-parallel sharding for ZeRO stages 2 and 3: Megatron has it only through Megatron-FSDP.
FSDP_STRATEGY = {2: "optim_grads", 3: "optim_grads_params"}


def recompute_modules(view: PlanView) -> list[str]:
    """The modules selective recompute re-runs where the planner prices more than Megatron's default core_attn:
    MoE models re-run norms and the expert activation, MLA models also their up-projections
    (transformer_config.py recompute_modules; planner.cost.compute.recompute_time)."""
    m = view.model
    if view.layout.recompute != "selective" or not (m.is_moe or m.is_mla):
        return []
    return ["layernorm", *(["moe_act"] if m.is_moe else []), *(["mla_up_proj"] if m.is_mla else [])]


def fp8_recipe(view: PlanView) -> str:
    """Megatron's --fp8-recipe for an fp8 plan: blockwise where the plan asks for block scales; else delayed scaling,
    except where selective recompute re-runs the norms or
    the expert activation, which Megatron-Core refuses under delayed scaling ("Delayed scaling does not support
    moe_act and layernorm recompute for fp8", transformer_config.py __post_init__): per-tensor current scaling
    (tensorwise, Bridge's bf16_with_fp8_current_scaling_mixed) runs them."""
    if view.fp8_recipe == "blockwise":  # the plan was priced with block scales (--fp8-recipe blockwise)
        return "blockwise"
    if {"layernorm", "moe_act"} & set(recompute_modules(view)):
        return "tensorwise"
    return "delayed"


def tp_comm_overlap(view: PlanView) -> bool:
    """The plan was priced with Transformer Engine's userbuffers TP overlap, which runs only with sequence
    parallelism (Megatron-LM arguments.py asserts it) and TP > 1, and not beside EP overlap on Hopper and older GPUs,
    whose several hardware queues leave TP's communication beside no GEMM (planner.cost.tensor
    SINGLE_QUEUE_GENERATIONS; Megatron-Bridge's Qwen3-235B H100 recipe turns it off for that reason)."""
    if ep_overlap(view) and ep_overlap_serialises_tp(generation(view.gpu_key)):
        return False
    return view.tp_comm_overlap and view.layout.sequence_parallel and view.layout.tp > 1


def ep_overlap(view: PlanView) -> bool:
    """The plan pairs micro-batches to hide the expert all-to-all (`--overlap-moe-expert-parallel-comm`)."""
    return view.layout.schedule == "combined-1f1b"


def deepep_dispatch(view: PlanView) -> bool:
    """The expert-parallel group leaves the node, where the planner prices node-deduplicated (DeepEP) dispatch:
    Megatron-Core's flex dispatcher with the deepep backend (transformer_config.py moe_flex_dispatcher_backend).
    Not with token dropping, which runs on the alltoall dispatcher (planner.cost.expert.dispatcher_profile)."""
    lay = view.layout
    if not view.model.is_moe or view.moe_capacity_factor is not None or view.moe_dispatcher == "alltoall":
        return False
    return view.moe_dispatcher == "flex" or lay.ep * (lay.expert_tp or lay.tp) > view.gpus_per_node


def cuda_graphs(view: PlanView) -> tuple[str, list[str]] | None:
    """(implementation, captured modules) of the CUDA graphs the plan was priced with (planner.cost.host.captured),
    as Megatron-Core's cuda_graph_impl / cuda_graph_modules take them; None without graphs. Per-layer capture runs
    Transformer Engine's graphs; with no list it takes whole layers, except a dropless MoE layer, whose attention,
    router and dispatch preprocessing it names (the expert dispatch has dynamic shapes)."""
    if view.cuda_graphs == "full-iteration":
        return "full_iteration", []
    if view.cuda_graphs != "per-layer":
        return None
    if view.cuda_graph_modules is not None:
        return "transformer_engine", list(view.cuda_graph_modules)
    dropless = view.model.is_moe and not (view.moe_capacity_factor is not None and view.moe_pad_to_capacity)
    return "transformer_engine", ["attn", "moe_router", "moe_preprocess"] if dropless else []


def token_drop(view: PlanView) -> list[tuple[str, str | float | bool]]:
    """(TransformerConfig field, value) of a token-dropping plan: moe_expert_capacity_factor and
    moe_pad_expert_input_to_capacity (transformer_config.py); empty for a dropless one."""
    if not view.model.is_moe or view.moe_capacity_factor is None:
        return []
    out: list[tuple[str, str | float | bool]] = [("moe_expert_capacity_factor", view.moe_capacity_factor)]
    return out + ([("moe_pad_expert_input_to_capacity", True)] if view.moe_pad_to_capacity else [])


def router_gate(m: ModelShape) -> tuple[str | None, bool]:
    """(score function to state, softmax before top-k) for Megatron-Core's router: the model's sigmoid gate, and for a
    softmax top-1 router the pre-top-k softmax Megatron-Core requires ("Please use --moe-router-pre-softmax when
    topk is 1", transformer_config.py)."""
    if m.scoring_func == "sigmoid":
        return "sigmoid", False
    return None, m.experts_per_token == 1


def router_groups(m: ModelShape) -> tuple[int, int] | None:
    """(groups, groups per token) of group-limited routing, which the expert all-to-all is priced with
    (planner.cost.expert: node-limited dispatch); Megatron-Core --moe-router-num-groups / --moe-router-group-topk."""
    return (m.n_group, m.topk_group) if m.n_group > 1 and m.topk_group else None


def router_flags(m: ModelShape) -> list[tuple[str, ...]]:
    """Megatron-LM flags of router_gate and router_groups."""
    score, pre = router_gate(m)
    flags = ([("--moe-router-score-function", score)] if score else []) + ([("--moe-router-pre-softmax",)] if pre
                                                                           else [])
    groups = router_groups(m)
    if groups:
        flags += [("--moe-router-num-groups", str(groups[0])), ("--moe-router-group-topk", str(groups[1]))]
    return flags


def offload_layers(view: PlanView) -> int:
    """Layers whose activations the plan keeps in host memory (recompute=offload; plan document offload_layers)."""
    assert view.layout.offload_layers is not None  # check() refuses an offload plan without it
    return view.layout.offload_layers


def offload_modules(view: PlanView) -> list[str]:
    """TransformerConfig.offload_modules of a recompute=offload-modules plan (planner.cost.module_offload); empty
    for other plans (fine_grained_activation_offloading off)."""
    return list(_modules(view.model.is_moe)) if view.layout.recompute == "offload-modules" else []


def offload_env_note(view: PlanView) -> str:
    """The environment fine-grained offloading needs: with Transformer Engine >= 2.10 Megatron-LM asserts
    NVTE_CPU_OFFLOAD_V1=1 (arguments.py validate_args, so TE does not offload weights too)."""
    return "# env: export NVTE_CPU_OFFLOAD_V1=1 (fine-grained activation offloading with TE >= 2.10)" \
        if offload_modules(view) else ""


def check(view: PlanView, launcher: str) -> None:
    """Refuse plans Megatron-Core would reject at start-up (or run differently from the plan)."""
    lay, m = view.layout, view.model
    if m.is_moe and m.scoring_func not in ("softmax", "sigmoid"):
        refuse(view, launcher, "inputs.model.scoring_func",
               f"Megatron-Core's router gates with softmax or sigmoid, not {m.scoring_func[:40]}",
               "launch with a model that uses one of them, or use --format env")
    if lay.recompute == "offload" and (lay.pp > 1 or not lay.offload_layers or lay.offload_layers >= m.num_layers):
        refuse(view, launcher, "offload_layers",
               "Megatron-Core offloads activations only without pipeline parallelism and for 1 to L - 1 layers "
               "(transformer_config.py)", "re-plan with pp=1, or another recompute")
    if lay.dp_outermost and lay.zero > 1:
        refuse(view, launcher, "rank_order", "data parallelism outermost (--use-tp-pp-dp-mapping) does not run with "
               "Megatron-FSDP (ZeRO-2/3)", "re-plan with zero=1, or the default order")
    etp = lay.expert_tp or lay.tp if m.is_moe else lay.tp
    if lay.dp_outermost and etp * lay.ep != lay.tp * lay.cp:  # parallel_state.py: expert dp == dp unless pp-last
        refuse(view, launcher, "rank_order", "with data parallelism outermost and pp > 1 Megatron-Core needs the "
               "experts' data-parallel size equal to the dense one (etp x ep = tp x cp)",
               "re-plan with the default order, or cp = 1 for a dense model")
    if lay.schedule not in ("1f1b", "interleaved", "combined-1f1b"):
        refuse(view, launcher, "schedule",
               f"Megatron-Core has no {lay.schedule} pipeline schedule; it runs 1F1B, interleaved 1F1B when there "
               "are virtual stages, and the EP-overlap combined 1F1B",
               "re-plan with the schedule limited to 1f1b, interleaved or combined-1f1b")
    if m.num_heads % lay.tp:
        refuse(view, launcher, "tp", f"{m.num_heads} attention heads do not split over tp={lay.tp}",
               "re-plan; tp must divide the head count")
    # Rule 5: core_v0.15 still asserts num_query_groups % tp == 0 (relaxed only on later main).
    if not m.is_mla and m.num_kv_heads % lay.tp:
        refuse(view, launcher, "tp", f"{m.num_kv_heads} key/value heads do not split over tp={lay.tp} "
               "(core_v0.15 requires num_query_groups % tp == 0)", "re-plan with tp dividing the KV-head count")
    if lay.cp > 1 and view.seq_len % (2 * lay.cp):
        refuse(view, launcher, "cp", f"seq_len {view.seq_len} is not a multiple of 2 x cp = {2 * lay.cp}",
               "pick a sequence length divisible by 2 x cp, or re-plan")
    if m.max_position_embeddings is not None and view.seq_len > m.max_position_embeddings:
        refuse(view, launcher, "inputs.training.seq_len", f"seq_len {view.seq_len} exceeds max_position_embeddings "
               f"{m.max_position_embeddings}", "train with a shorter sequence or a model with longer positions")
    if m.is_moe and m.num_experts % lay.ep:
        refuse(view, launcher, "ep", f"{m.num_experts} experts do not split over ep={lay.ep}",
               "re-plan with ep dividing the expert count")
    require_stage_split(view, launcher)  # rule 10: without first/last stage sizes, layers % pp == 0
    if lay.vpp > 1:
        _check_interleaving(view, launcher)


def _check_interleaving(view: PlanView, launcher: str) -> None:
    lay = view.layout
    # Rule 14 with the default microbatch group size (= pp): M >= pp and M % pp == 0.
    if lay.num_microbatches < lay.pp or lay.num_microbatches % lay.pp:
        refuse(view, launcher, "num_microbatches",
               f"interleaving needs the microbatch count ({lay.num_microbatches}) to be a multiple of pp={lay.pp}",
               "re-plan with a global batch that gives a multiple of pp microbatches")
    # Rules 11 and 15: every pipeline rank's layers split evenly into its virtual stages; with the embedding and
    # the loss counted as layers, the first and last ranks count one more (transformer_config.py).
    if lay.pipeline_layout is not None:  # a layout states every chunk: no per-rank division to check
        return
    counts = view.stage_layers()
    if lay.stage_split == "embedding_loss":
        counts = [n + (i in (0, lay.pp - 1)) for i, n in enumerate(counts)]
    for stage, layers in enumerate(counts):
        if layers % lay.vpp:
            refuse(view, launcher, "vpp",
                   f"pipeline rank {stage} holds {layers} layers, not a multiple of vpp={lay.vpp}",
                   "re-plan with vpp dividing the layers of every pipeline stage")


def layer_types_per_chunk(view: PlanView) -> list[list[str]]:
    """The plan's pipeline layout as Megatron-Core's layer types per model chunk (pipeline_parallel_layer_layout.py:
    "embedding" on the first chunk, "decoder" per layer, the MTP block and "loss" on the last), the list
    Megatron-Bridge's recipes set as model.pipeline_model_parallel_layout (recipes/kimi/h100/kimi_k2.py)."""
    chunks = view.layout.pipeline_layout or ()
    out = [["decoder"] * n for n in chunks]
    out[0].insert(0, "embedding")
    out[-1] += ["mtp"] * (view.model.mtp_layers or 0) + ["loss"]
    return out


def layout_text(view: PlanView) -> str:
    """layer_types_per_chunk in --pipeline-model-parallel-layout's notation: E, t (x*n for n of them), m, L,
    stages split by | (parse_str_to_list)."""
    letters = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}
    stages = []
    for chunk in layer_types_per_chunk(view):
        text = ""
        for kind in dict.fromkeys(chunk):  # each kind's run, in order
            n = chunk.count(kind)
            text += letters[kind] + (f"*{n}" if n > 1 else "")
        stages.append(text)
    return "|".join(stages)
