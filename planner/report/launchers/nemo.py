"""Megatron-Bridge (NeMo) recipe overrides for one plan, one Hydra-style `key=value` per line.

Target: Megatron-Bridge of 2026-08, whose `scripts/training/run_recipe.py --recipe <name>` accepts trailing
`section.field=value` overrides of its ConfigContainer (`model.*`, `train.*`, `ddp.*`, ...; ecosystem.md section 4).
Every knob a recipe may have set differently is written out, so the recipe's own layout cannot leak through.
"""

from __future__ import annotations

from planner.report.launchers import _mcore
from planner.report.launchers._plan import PlanView, header, placement_note, refuse

TARGET = "Megatron-Bridge 2026-08 (run_recipe.py overrides)"
NAME = "Megatron-Bridge"

# Bridge mixed-precision presets (training/mixed_precision.py). The fp8 preset matches the Megatron-LM flags
# emitted for fp8: hybrid format, delayed scaling, amax history 1024, max, fp8 parameter all-gather. The fp4 preset
# (NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/training/mixed_precision.py, bf16_with_nvfp4_mixed) sets
# fp4 "e2m1" and fp4_recipe "nvfp4", the Megatron-LM flags emitted for fp4.
PRECISION = {"bf16": "bf16_mixed", "fp8": "bf16_with_fp8_delayed_scaling_mixed", "fp4": "bf16_with_nvfp4_mixed"}

Item = tuple[str, object]


def render(view: PlanView) -> str:
    _mcore.check(view, NAME)
    if view.layout.fsdp_shard_group is not None:
        refuse(view, NAME, "fsdp_shard_group", "hybrid sharding (ZeRO-3 inside a node, replicated across nodes) has "
               "no Megatron-FSDP flag in the targeted release", "re-plan with --fix zero=3, or use --format torchtitan")
    if view.precision == "fp8" and view.layout.zero == 0 and view.optimizer != "muon":
        refuse(view, NAME, "zero", "Bridge's fp8 preset gathers fp8 parameters, which needs the distributed "
               "optimizer or FSDP (zero >= 1)", "re-plan with zero >= 1, or use --format megatron")
    preset = PRECISION[view.precision]
    if view.precision == "fp8" and _mcore.fp8_recipe(view) == "tensorwise":
        preset = "bf16_with_fp8_current_scaling_mixed"
    if view.precision == "fp8" and _mcore.fp8_recipe(view) == "blockwise":  # Bridge training/mixed_precision.py
        preset = "bf16_with_fp8_subchannel_scaling_mixed"
    items = _model(view) + _train(view) + _data_parallel(view) + [("mixed_precision", preset),
                                                                  ("mixed_precision.grad_reduce_in_fp32",
                                                                   view.optimizer == "muon")]
    if view.attention_kernel == "fp8":  # Bridge MixedPrecisionConfig (training/mixed_precision.py)
        items.append(("mixed_precision.fp8_dot_product_attention", True))
    if view.precision == "fp8" and view.optimizer == "muon":  # the gather needs the distributed optimizer
        items.append(("mixed_precision.fp8_param_gather", False))
    if view.layout.dp_outermost:  # Bridge DistributedInitConfig: rank order tp-cp-ep-pp-dp
        items.append(("dist.use_tp_pp_dp_mapping", True))
    lines = [header(view, TARGET),
             f"# append to: torchrun ... scripts/training/run_recipe.py --recipe <the {view.model.name} recipe>",
             _mcore.offload_env_note(view), placement_note(view)]
    lines += [f"{key}={_value(value)}" for key, value in items]
    return "\n".join(line for line in lines if line) + "\n"


def _model(view: PlanView) -> list[Item]:
    lay = view.layout
    granularity, method, num_layers = _mcore.RECOMPUTE[lay.recompute]
    emb_loss = lay.stage_split == "embedding_loss"
    items: list[Item] = [
        ("model.tensor_model_parallel_size", lay.tp),
        ("model.pipeline_model_parallel_size", lay.pp),
        ("model.virtual_pipeline_model_parallel_size", lay.vpp if lay.vpp > 1 else None),
        ("model.context_parallel_size", lay.cp),
        ("model.expert_model_parallel_size", lay.ep),
    ]
    if lay.cp > 1 and lay.cp_comm == "a2a":
        items.append(("model.cp_comm_type", "a2a"))
    if lay.cp > 1 and lay.cp_comm == "a2a+p2p" and lay.cp_hierarchy:
        items.append(("model.cp_comm_type", "a2a+p2p"))
        items.append(("model.hierarchical_context_parallel_sizes", "[{},{}]".format(*lay.cp_hierarchy)))
    if _mcore.recompute_modules(view):
        items.append(("model.recompute_modules", "[" + ",".join(_mcore.recompute_modules(view)) + "]"))
    if view.model.is_moe:
        items.append(("model.expert_tensor_parallel_size", lay.expert_tp or lay.tp))
        score, pre = _mcore.router_gate(view.model)
        if score:
            items.append(("model.moe_router_score_function", score))
        if pre:
            items.append(("model.moe_router_pre_softmax", True))
        groups = _mcore.router_groups(view.model)
        if groups:
            items += [("model.moe_router_num_groups", groups[0]), ("model.moe_router_group_topk", groups[1])]
        # written either way: the model recipes leave it off and the performance scripts turn it on
        items.append(("model.moe_router_fusion", view.moe_router_fusion))
        drop = _mcore.token_drop(view)
        if _mcore.deepep_dispatch(view):
            items += [("model.moe_token_dispatcher_type", "flex"), ("model.moe_flex_dispatcher_backend", "deepep")]
        elif view.moe_dispatcher == "alltoall" and not drop:  # stated, not left to the recipe's preset
            items.append(("model.moe_token_dispatcher_type", "alltoall"))
        if drop:  # as Megatron-Bridge's apply_moe_token_drop sets them, on the alltoall dispatcher it asserts
            items += [("model.moe_token_dispatcher_type", "alltoall"), *((f"model.{k}", v) for k, v in drop)]
        if _mcore.ep_overlap(view):  # Megatron-Bridge CommOverlapConfig (training/comm_overlap.py)
            items += [("comm_overlap.overlap_moe_expert_parallel_comm", True),
                      ("comm_overlap.delay_wgrad_compute", True)]
    if view.model.mtp_layers is not None:  # the depth priced, whatever the recipe's default (TransformerConfig)
        items.append(("model.mtp_num_layers", view.model.mtp_layers or None))
    items += [
        ("model.sequence_parallel", lay.sequence_parallel),
        # written either way, so a recipe's own userbuffers setting cannot leak through (CommOverlapConfig)
        ("comm_overlap.tp_comm_overlap", _mcore.tp_comm_overlap(view)),
        # Recipes such as the 405B one count embedding/loss as layers or carry a custom layout; both are set to
        # the plan's split explicitly (Megatron-Core refuses the count keys together with the embedding/loss ones).
        ("model.pipeline_model_parallel_layout",
         _layout(_mcore.layer_types_per_chunk(view)) if view.layout.pipeline_layout is not None else None),
        ("model.account_for_embedding_in_pipeline_split", emb_loss),
        ("model.account_for_loss_in_pipeline_split", emb_loss),
        ("model.num_layers_in_first_pipeline_stage", None if emb_loss else lay.first_stage_layers),
        ("model.num_layers_in_last_pipeline_stage", None if emb_loss else lay.last_stage_layers),
        ("model.recompute_granularity", granularity),
        ("model.recompute_method", method),
        ("model.recompute_num_layers", num_layers),
        *_offload_items(view),
        *_graph_items(view),
        # Bridge asserts model.seq_length == dataset.seq_length, so both are set.
        ("model.seq_length", view.seq_len),
        ("dataset.seq_length", view.seq_len),
    ]
    return items


def _graph_items(view: PlanView) -> list[Item]:
    """The CUDA graphs the plan was priced with, as Megatron-Core's TransformerConfig takes them (Bridge's performance
    configs set cuda_graph_impl and cuda_graph_scope); written either way, since recipes differ in their own."""
    graphs = _mcore.cuda_graphs(view)
    if graphs is None:
        return [("model.cuda_graph_impl", "none")]
    return [("model.cuda_graph_impl", graphs[0]), ("model.cuda_graph_scope", "[" + ",".join(graphs[1]) + "]")]


def _offload_items(view: PlanView) -> list[Item]:
    """Megatron-Core's layer-level activation offloading (TransformerConfig cpu_offloading*), activations only, or its
    fine-grained offloading of some modules' saved tensors."""
    if _mcore.offload_modules(view):  # fine-grained: Megatron-Bridge perf recipes set the same two fields
        return [("model.fine_grained_activation_offloading", True),
                ("model.offload_modules", "[" + ",".join(_mcore.offload_modules(view)) + "]")]
    if view.layout.recompute != "offload":
        return []
    return [("model.cpu_offloading", True), ("model.cpu_offloading_num_layers", _mcore.offload_layers(view)),
            ("model.cpu_offloading_activations", True), ("model.cpu_offloading_weights", False)]


def _train(view: PlanView) -> list[Item]:
    return [("train.micro_batch_size", view.layout.micro_batch), ("train.global_batch_size", view.global_batch)]


def _data_parallel(view: PlanView) -> list[Item]:
    zero = view.layout.zero
    if view.optimizer == "muon":  # as recipes/kimi/h100/kimi_k2.py _apply_kimi_k2_optimizer sets Muon up
        return [("optimizer.optimizer", "dist_muon" if zero >= 1 else "muon"),
                ("ddp.use_distributed_optimizer", False), ("optimizer.use_distributed_optimizer", False),
                ("ddp.overlap_grad_reduce", True), ("ddp.overlap_param_gather", False),
                ("ddp.grad_reduce_in_fp32", True), ("dist.use_megatron_fsdp", False),
                ("ddp.use_megatron_fsdp", False)]
    # Bridge switches the distributed optimizer on in both ddp and optimizer if either asks for it, so zero=0
    # has to turn both off.
    items: list[Item] = [
        ("ddp.use_distributed_optimizer", zero >= 1),
        ("optimizer.use_distributed_optimizer", zero >= 1),
        ("ddp.overlap_grad_reduce", True),
        ("ddp.overlap_param_gather", zero >= 1),  # Megatron asserts a sharded optimizer for this
        # bf16 gradient buffers and reduction, as Bridge's performance recipes run and the nemo profile prices
        # (the mixed-precision preset's own flag follows the preset, below)
        ("ddp.grad_reduce_in_fp32", False),
        ("dist.use_megatron_fsdp", zero >= 2),
        ("ddp.use_megatron_fsdp", zero >= 2),
    ]
    if zero >= 2:
        items += [
            ("ddp.data_parallel_sharding_strategy", _mcore.FSDP_STRATEGY[zero]),
            ("checkpoint.ckpt_format", "fsdp_dtensor"),  # the only format Megatron-FSDP saves and loads
        ]
    if view.optimizer_offload > 0:  # Megatron-Core OptimizerConfig: the CPU offload needs the precision-aware optimizer
        items += [("optimizer.optimizer_cpu_offload", True),
                  ("optimizer.optimizer_offload_fraction", view.optimizer_offload)]
    if view.optimizer_moments == "bf16":  # OptimizerConfig exp_avg_dtype / exp_avg_sq_dtype
        items += [("optimizer.exp_avg_dtype", "bf16"), ("optimizer.exp_avg_sq_dtype", "bf16")]
    if view.optimizer_offload > 0 or view.optimizer_moments == "bf16":
        items.append(("optimizer.use_precision_aware_optimizer", True))
    return items


def _layout(chunks: list[list[str]]) -> str:
    """A list of lists of layer types in Hydra's override grammar: [[embedding,decoder],[decoder,loss]]."""
    return "[" + ",".join("[" + ",".join(chunk) + "]" for chunk in chunks) + "]"


def _value(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
