"""The framework capability rules: what the chosen training stack can launch (planner.inputs.frameworks says which
knobs and values each one runs; these rules hold the search to them). Part of planner.search.rules' RULES."""

from __future__ import annotations

from planner.inputs.layout import RankOrder, Zero
from planner.search.rule_base import Rule, _among, _caps, _same_expert_dp, _trusted

FRAMEWORK_RULES: tuple[Rule, ...] = (
    Rule("framework_schedule", ("schedule",),
         lambda c, p: _among(c["schedule"], [int(s) for s in _caps(p).schedules]) | _trusted("schedule", p),
         "the chosen training framework does not ship this pipeline schedule",
         "use --framework generic to search every schedule",
         "Megatron-Core schedules.py: 1F1B and interleaved only; torchtitan: torch.distributed.pipelining schedules"),
    Rule("framework_zero", ("zero",),
         lambda c, p: _among(c["zero"], [int(z) for z in _caps(p).zero]) | _trusted("zero", p),
         "the chosen training framework cannot run this ZeRO/FSDP stage", "pick a stage the framework runs",
         "frontier_facts.md §B: Megatron dist-opt = ZeRO-1, Megatron-FSDP for 2/3; torchtitan FSDP2/HSDP"),
    Rule("framework_zero_with_pipeline", ("zero", "pp"),
         lambda c, p: (c["pp"] == 1) | _among(c["zero"], [int(z) for z in _caps(p).zero_with_pipeline])
         | _trusted("zero", p),
         "the chosen training framework does not combine this ZeRO/FSDP stage with pipeline parallelism",
         "use zero=1 with pp > 1, or pp=1",
         "DeepSpeed runtime/pipe/engine.py asserts ZeRO < 2; Megatron-FSDP rejects PP (mcore_fsdp_adapter.py)"),
    Rule("muon_without_fsdp", ("zero",),
         lambda c, p: (p.training.optimizer != "muon") | (c["zero"] <= Zero.OPTIMIZER) | _trusted("zero", p),
         "Muon is Megatron-Core's layer-wise distributed optimizer: it shards whole matrices of the optimizer states, "
         "not gradients or parameters", "use zero=0 or 1 with --optimizer muon",
         "Megatron-Core muon.py: 'muon with dist optimizer is not supported'; LayerWiseDistributedOptimizer keeps the "
         "distributed-optimizer and FSDP options off"),
    Rule("framework_context_parallel", ("cp", "cp_comm"),
         lambda c, p: (c["cp"] == 1) | _among(c["cp_comm"], [int(x) for x in _caps(p).cp_comm]) | _trusted("cp", p),
         "the chosen training framework has no context parallelism of this kind", "set cp=1 or another cp_comm",
         "paper-era Megatron-LM and DeepSpeed configs have no CP; torchtitan CP is ring attention only"),
    Rule("framework_sink_attention_cp", ("cp", "cp_comm"),
         lambda c, p: (c["cp"] == 1) | (not p.model.attention_sinks) | (_caps(p).sink_cp_comm is None)
         | _among(c["cp_comm"], [int(x) for x in _caps(p).sink_cp_comm or ()]) | _trusted("cp", p),
         "the chosen training framework runs attention sinks under context parallelism only with the all-to-all "
         "exchange", "set cp_comm=a2a, or cp=1",
         "Transformer Engine get_attention_backend: a learnable softmax with CP has only FusedAttention, and only "
         "with cp_comm_type a2a (Megatron-Bridge recipes/gpt_oss/gpt_oss.py sets it)"),
    Rule("framework_model_parallel", ("tp", "pp", "ep"),
         lambda c, p: (((c["tp"] == 1) | _caps(p).tensor_parallel) | _trusted("tp", p))
         & (((c["pp"] == 1) | _caps(p).pipeline_parallel) | _trusted("pp", p))
         & (((c["ep"] == 1) | _caps(p).expert_parallel) | _trusted("ep", p)),
         "the chosen training framework cannot run this tensor, pipeline or expert parallelism",
         "use --framework megatron-core or torchtitan for model parallelism",
         "a ds_config expresses ZeRO only (TP/PP need Megatron-DeepSpeed); paper-era Megatron had no MoE"),
    Rule("framework_ddp_alone", ("zero", "tp", "pp", "cp", "ep"),
         lambda c, p: (not _caps(p).ddp_only_alone) | (c["zero"] != Zero.NONE)
         | ((c["tp"] == 1) & (c["pp"] == 1) & (c["cp"] == 1) & (c["ep"] == 1)) | _trusted("zero", p),
         "the chosen framework runs replicated data parallelism (zero=0) only when it is the only parallelism",
         "use zero >= 2 with model parallelism", "torchtitan parallelize: DDP is applied only without TP/PP/CP"),
    Rule("framework_recompute", ("recompute",),
         lambda c, p: _among(c["recompute"], [int(r) for r in _caps(p).recompute]) | _trusted("recompute", p),
         "the chosen training framework cannot switch on this activation recomputation or offloading",
         "use a recompute the framework runs (docs/commands.md), or megatron-core / nemo, which run all five",
         "DeepSpeed: activation checkpointing is checkpoint() calls in the model code, not a ds_config switch; "
         "activation offloading is Megatron-Core's (--cpu-offloading-num-layers; --fine-grained-activation-offloading "
         "with --offload-modules, core_v0.16)"),
    Rule("framework_rank_order", ("order",),
         lambda c, p: (c["order"] == RankOrder.PP_OUTER) | _among(c["order"], [int(o) for o in _caps(p).rank_orders])
         | _trusted("order", p),
         "the chosen training framework lays ranks out only in its default order (tp-cp-ep-dp-pp)",
         "use --framework megatron-core or nemo (--use-tp-pp-dp-mapping), or the default order",
         "Megatron-Core parallel_state.py (\"we support tp-dp-pp and tp-pp-dp orders\"; training/initialize.py maps "
         "--use-tp-pp-dp-mapping to tp-cp-ep-pp-dp); torchtitan parallel_dims.py builds a fixed mesh (pp, "
         "dp_replicate, dp_shard, cp, tp); Megatron-DeepSpeed's topology is pipe, data, model"),
    Rule("rank_order_expert_data", ("order", "pp", "tp", "cp", "ep", "etp"),
         lambda c, p: (c["order"] == RankOrder.PP_OUTER) | (not _caps(p).rank_order_same_expert_dp) | (c["pp"] == 1)
         | _same_expert_dp(c, p) | _trusted("order", p),
         "with data parallelism outermost and pp > 1, Megatron-Core needs the experts' data-parallel size equal to the "
         "dense one (etp x ep = tp x cp; so no context parallelism in a dense model)",
         "use the default order, or pp = 1, or an ep/etp with etp x ep = tp x cp",
         "Megatron-Core parallel_state.py initialize_model_parallel: assert order.endswith('pp') or pp == 1 or "
         "expert_data_parallel_size == data_parallel_size"),
    Rule("rank_order_zero", ("order", "zero"),
         lambda c, p: (c["order"] == RankOrder.PP_OUTER) | _among(c["zero"], [int(z) for z in _caps(p).rank_order_zero])
         | _trusted("order", p),
         "data parallelism outermost runs beside the distributed optimizer (ZeRO-1) in Megatron-Core, never with "
         "Megatron-FSDP, and HSDP's device mesh keeps pp outermost in every stack",
         "use zero=1 with order=tp-cp-ep-pp-dp, or the default order",
         "Megatron-Bridge docs (Megatron FSDP: use_tp_pp_dp_mapping is not supported); torchtitan parallel_dims.py "
         "(pp, dp_replicate, dp_shard, cp, tp)"),
    Rule("framework_fp8_needs_zero", ("zero",),
         lambda c, p: (p.training.precision != "fp8") | (not _caps(p).fp8_needs_zero) | (c["zero"] != Zero.NONE)
         | _trusted("zero", p),
         "the chosen framework's fp8 recipe gathers fp8 parameters, which needs the distributed optimizer or FSDP",
         "use zero >= 1 with fp8", "Megatron-Bridge fp8 preset (fp8_param_gather needs use_distributed_optimizer)"),
    Rule("framework_zero_with_tensor_parallel", ("zero", "tp"),
         lambda c, p: (c["tp"] == 1) | _among(c["zero"], [int(z) for z in _caps(p).zero_with_tensor_parallel])
         | _trusted("zero", p),
         "the chosen training framework does not combine this ZeRO stage with tensor parallelism",
         "use zero <= 2 with tp > 1, or tp=1",
         "DeepSpeed tutorial \"Automatic Tensor Parallelism (Training)\": AutoTP with ZeRO stage 0, 1 or 2"),
    Rule("framework_sequence_parallel", ("sp",),
         lambda c, p: (c["sp"] == 0) | _caps(p).sequence_parallel | _trusted("sp", p),
         "the chosen training framework's tensor parallelism has no sequence parallelism",
         "use sp=0", "DeepSpeed AutoTP shards Linear layers only (module_inject/layers.py LinearLayer, "
         "LinearAllreduce)"),
    Rule("framework_tp_with_cp", ("tp", "cp"),
         lambda c, p: _caps(p).tp_with_cp | (c["tp"] == 1) | (c["cp"] == 1) | _trusted("cp", p),
         "the chosen training framework runs tensor parallelism and sequence (context) parallelism each with data "
         "parallelism, not together", "use tp=1 or cp=1",
         "DeepSpeed AutoTP training tutorial; transformers docs deepspeed_alst.md (dp x sp = world)"),
    Rule("param_offload_needs_zero3", ("zero",),
         lambda c, p: (not getattr(p.training, "param_offload", False)) | (c["zero"] == Zero.PARAMETERS),
         "parameters offloaded to host memory are ZeRO-3 partitions", "use zero=3, or drop --param-offload",
         "DeepSpeed config-json.md: offload_param is valid only with stage 3"),
)
