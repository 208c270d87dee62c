"""Every layout rule, defined once.

A rule names the knobs it reads and a vectorised predicate over candidate columns (numpy arrays) that is True where
the layout is allowed. The search filters with these predicates (counting what each one prunes), `explain` lists the
ones a layout breaks, and `planner.search.cpsat` compiles the same predicates into CP-SAT table constraints to find
which rules conflict when nothing is feasible. Sources: ../shared/reference/ecosystem.md §1.3 (Megatron-LM asserts,
numbered M1..M32 there) and §2.2 (torchtitan).

size: over 400 lines because this is the one table of rules: each is defined here, once, with its source.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from planner.cost.groups import domain_group
from planner.cost.host import captured, dropless
from planner.cost.memory import distinct_pairs
from planner.cost.profiles import stack_profile, tp_mode
from planner.cost.tensor import sp_never_slower
from planner.inputs.frameworks import capabilities_for
from planner.inputs.layout import (
    SEQ1F1B_SEGMENTS,
    CpComm,
    ExpertTp,
    RankOrder,
    Recompute,
    Schedule,
    Zero,
    stage_split_launchable,
)
from planner.inputs.problem import Problem
from planner.inputs.specs import ModelSpec
from planner.search.framework_rules import FRAMEWORK_RULES
from planner.search.rule_base import Cols, Rule, _among, _caps, _same_expert_dp, _trusted


def _mixer_heads(m: ModelSpec) -> int:
    """gcd of the head counts non-attention mixers shard over tp (0 when the model has none: any tp divides)."""
    kinds = set(m.mixer_kinds)
    heads = [m.linear_num_key_heads, m.linear_num_value_heads] if "linear_attention" in kinds else []
    heads += [h for h in (m.mamba_num_heads, m.n_groups) if h] if "mamba" in kinds else []
    return math.gcd(*heads) if heads else 0


def _mamba_cp_split(c: Mapping[str, np.ndarray], m: ModelSpec) -> np.ndarray:
    """Mamba-2 layers under context parallelism: each TP rank's heads split over cp, and its groups either split over
    cp or repeat across it (groups per TP rank g: cp % g == 0 when g < cp, else g % cp == 0)."""
    tp, cp = c["tp"], c["cp"]
    if "mamba" not in m.mixer_kinds or not m.mamba_num_heads:
        return np.ones(len(cp), dtype=bool)
    groups = m.n_groups or 1
    local = np.maximum(groups // np.maximum(tp, 1), 1)
    spread = np.where(local < cp, cp % local, local % cp) == 0
    return (cp == 1) | (_divides(tp * cp, m.mamba_num_heads) & spread)


def _mixer_features(m: ModelSpec) -> tuple[str, ...]:
    return (("sparse_attention",) if m.index_topk else ()) + (
        ("linear_attention",) if "linear_attention" in m.mixer_kinds else ())


def _divides(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    """a divides b (elementwise), safe for a == 0."""
    a = np.asarray(a)
    return (a > 0) & (np.asarray(b) % np.maximum(a, 1) == 0)


def _domain_peers(c: Cols, p: Problem) -> np.ndarray:
    """Data-parallel ranks (strided by tp) that tile one NVLink domain (comm.domain_group)."""
    return domain_group(p.cluster.nvlink_domain, c["tp"], c["dp"] * c["cp"])


def _where_hsdp(c: Cols, test: Callable[[Cols], np.ndarray]) -> np.ndarray:
    """True where zero is not HSDP, else `test` of the row (run on the HSDP rows alone: the table is at its largest
    when ZeRO joins it)."""
    rows = np.flatnonzero(c["zero"] == Zero.HSDP)
    ok = np.ones(len(c["zero"]), dtype=bool)
    ok[rows] = test({k: c[k].take(rows) for k in ("tp", "dp", "cp")})
    return ok


def _cp_a2a(c: Cols, p: Problem) -> np.ndarray:
    """CP ranks that exchange by all-to-all: all of them for Ulysses, those inside one NVLink domain for hybrid."""
    inside = domain_group(p.cluster.nvlink_domain, c["tp"], c["cp"])
    return np.where(c["cp_comm"] == CpComm.HYBRID, inside, np.where(c["cp_comm"] == CpComm.A2A, c["cp"], 1))


def _split_ok(c: Cols, p: Problem) -> np.ndarray:
    caps, layers = _caps(p), p.model.num_hidden_layers
    pairs, index = distinct_pairs(c["pp"], c["vpp"])
    ok = np.array([stage_split_launchable(layers, pp, v, caps.uneven_pipeline, caps.embedding_loss_split,
                                          caps.pipeline_layout) for pp, v in pairs], dtype=bool)
    return ok[index] if ok.size else np.ones(len(c["pp"]), dtype=bool)


def _microbatches(c: Cols, p: Problem) -> np.ndarray:
    per_step = c["mbs"] * c["dp"]
    return np.where(per_step > 0, p.training.global_batch // np.maximum(per_step, 1), 0)


RULES: tuple[Rule, ...] = (
    Rule("world_size", ("tp", "pp", "cp", "dp"),
         lambda c, p: c["tp"] * c["pp"] * c["cp"] * c["dp"] == p.num_gpus,
         "tp x pp x cp x dp must equal the number of GPUs", "pick sizes whose product is the GPU count",
         "Megatron M1 (world % (tp*pp*cp) == 0, dp derived)"),
    Rule("heads_divisible_by_tp", ("tp",),
         lambda c, p: _divides(c["tp"], p.model.num_attention_heads),
         "attention heads must divide evenly across tensor-parallel ranks", "use a tp that divides the head count",
         "Megatron M4"),
    Rule("kv_heads_divisible_by_tp", ("tp",),
         lambda c, p: p.model.is_mla | _divides(c["tp"], p.model.kv_heads),
         "key/value heads (query groups) must divide evenly across tensor-parallel ranks",
         "use tp <= num_key_value_heads and dividing it", "Megatron M5 (core_v0.15: num_query_groups % tp == 0)"),
    Rule("mixer_heads_divisible_by_tp", ("tp",),
         lambda c, p: _divides(c["tp"], _mixer_heads(p.model)),
         "linear-attention key/value heads and Mamba heads and groups must divide evenly across tensor-parallel ranks",
         "use a tp that divides them", "Megatron-Core transformer_config.py (linear_num_key_heads and "
         "linear_num_value_heads % tp == 0); ssm/mamba_mixer.py (nheads and ngroups % tp == 0)"),
    Rule("mamba_heads_divisible_by_cp", ("tp", "cp"), lambda c, p: _mamba_cp_split(c, p.model),
         "context parallelism splits each tensor-parallel rank's Mamba heads, and its groups or their copies, over cp",
         "use a cp dividing the Mamba heads per TP rank (or cp=1)",
         "Megatron-Core ssm/mamba_context_parallel.py (core_v0.16.1: heads % (tp x cp) == 0; groups per TP rank "
         "divide cp or are divided by it)"),
    Rule("framework_cp_mixers", ("cp",),
         lambda c, p: (c["cp"] == 1) | (not set(_mixer_features(p.model)) & set(_caps(p).cp_excludes)),
         "the chosen training framework runs no context parallelism for this model's token mixer (DeepSeek "
         "sparse attention, Gated DeltaNet)", "use cp=1 (tensor or pipeline parallelism instead)",
         "Megatron-Core transformer_config.py: DSAttention and gated_delta_net assert context_parallel_size == 1"),
    Rule("framework_mamba_stack", ("vpp", "recompute"),
         lambda c, p: (not (_caps(p).mamba_stack and "mamba" in p.model.mixer_kinds))
         | ((c["vpp"] == 1) & ~_among(c["recompute"], [Recompute.FULL, Recompute.OFFLOAD])),
         "the chosen training framework runs Mamba hybrids on a layer stack without virtual pipeline stages, full "
         "recompute or activation offloading", "use vpp=1 and recompute=none|selective",
         "Megatron-Core core_v0.16 ssm/mamba_block.py: asserts virtual_pipeline_model_parallel_size is None; no "
         "checkpointed or offloaded forward"),
    Rule("framework_moe_bias_whole_experts", ("tp", "etp"),
         lambda c, p: (not (p.model.is_moe and p.model.mlp_bias and _caps(p).moe_bias_whole_experts))
         | (c["tp"] == 1) | (c["etp"] == ExpertTp.ONE),
         "the chosen training framework runs experts with biases (gpt-oss) only whole: expert tensor parallelism 1",
         "use etp=1 (or tp=1)", "Megatron-Core transformer_config.py: \"Bias in Moe is only supported when ETP==1\""),
    Rule("tp_within_nvlink_domain", ("tp",),
         lambda c, p: p.allow_tp_across_nodes | _divides(c["tp"], p.cluster.nvlink_domain),
         "tensor parallelism must stay inside one NVLink domain", "lower tp, or pass --allow-tp-across-nodes",
         "Megatron rank order tp-cp-ep-dp-pp puts TP innermost; Narayanan et al. 2021 takeaway 1"),
    Rule("layers_fill_stages", ("pp", "vpp"),
         lambda c, p: c["pp"] * c["vpp"] <= p.model.num_hidden_layers + 2 * (c["pp"] > 1),
         "every pipeline model chunk needs a layer (pp x vpp <= layers, +2 when embedding and loss count as layers)",
         "lower pp or vpp",
         "Megatron M10-M16: even splits, or uneven ones (first/last-stage counts, --pipeline-model-parallel-layout)"),
    Rule("sequence_divisible_by_2cp", ("cp",),
         lambda c, p: (c["cp"] == 1) | _divides(2 * c["cp"], p.training.seq_len),
         "with context parallelism the sequence must split into 2 x cp chunks", "use a cp with seq_len % (2*cp) == 0",
         "Megatron M7 (load-balanced causal split)"),
    Rule("global_batch_divisible", ("mbs", "dp"),
         lambda c, p: _divides(c["mbs"] * c["dp"], p.training.global_batch),
         "global batch must be a multiple of micro-batch x data-parallel size",
         "change --global-batch, the micro-batch or dp", "Megatron M9"),
    Rule("vpp_needs_pipeline", ("pp", "vpp"),
         lambda c, p: (c["vpp"] == 1) | (c["pp"] > 1),
         "virtual pipeline stages need pipeline parallelism (pp > 1)", "set vpp=1 or pp > 1", "Megatron M13"),
    Rule("schedule_matches_vpp", ("vpp", "schedule", "pp"),
         lambda c, p: np.where(c["schedule"] == Schedule.INTERLEAVED, c["vpp"] > 1,
                               np.where(_among(c["schedule"], [Schedule.ZB_V, Schedule.DUALPIPE_V]), c["vpp"] == 2,
                                        np.where(c["schedule"] == Schedule.COMBINED_1F1B,
                                                 (c["vpp"] > 1) | ((c["pp"] == 1) & (c["vpp"] == 1)),
                                                 c["vpp"] == 1))),
         "interleaved needs vpp > 1, zb-v and dualpipe-v exactly 2 chunks per rank (their V shape), combined-1f1b "
         "vpp > 1 once pp > 1, every other schedule vpp = 1", "match vpp to the schedule",
         "Megatron schedules.py (VPP selects interleaved 1F1B; EP overlap with PP needs VPP, transformer_config.py); "
         "torchtitan: V schedules need 2 stages per rank"),
    Rule("ep_overlap_needs_experts", ("ep", "schedule", "recompute"),
         lambda c, p: (c["schedule"] != Schedule.COMBINED_1F1B) | ((c["ep"] > 1) & (c["recompute"] != Recompute.FULL)),
         "combined-1f1b (Megatron's --overlap-moe-expert-parallel-comm) needs expert parallelism and no full "
         "recomputation", "use ep > 1 and recompute=none|selective, or another schedule",
         "Megatron-Core transformer_config.py EP-overlap asserts (frontier_facts.md §A3)"),
    Rule("ep_overlap_mtp_needs_pipeline", ("schedule", "pp"),
         lambda c, p: (c["schedule"] != Schedule.COMBINED_1F1B) | (p.model.num_nextn_predict_layers == 0)
         | ((p.model.num_nextn_predict_layers == 1) & (c["pp"] > 1)),
         "combined-1f1b with a multi-token-prediction block runs only one MTP layer, and only with pipeline "
         "parallelism", "use pp > 1 (and one MTP layer), or another schedule",
         "Megatron-Core transformer_config.py overlap_moe_expert_parallel_comm asserts: mtp_num_layers None or 1; "
         "with MTP, pipeline_model_parallel_size > 1"),
    Rule("per_layer_graphs_need_selective_recompute", ("recompute",),
         lambda c, p: (p.training.cuda_graphs != "per-layer")
         | ~_among(c["recompute"], [int(Recompute.FULL), int(Recompute.OFFLOAD)]),
         "per-layer CUDA graphs run neither with full recomputation nor with layer-level CPU activation offloading "
         "(only the full-iteration graph captures those)",
         "use recompute=none|selective|offload-modules, or --cuda-graphs full-iteration",
         "Megatron-Core transformer_config.py __post_init__: \"full recompute is only supported with full iteration "
         "CUDA graph\", \"CUDA graphs not supported with CPU offloading\""),
    Rule("ep_overlap_graphs_skip_mlp", ("schedule",),
         lambda c, p: (c["schedule"] != Schedule.COMBINED_1F1B) | (p.training.cuda_graphs != "per-layer")
         | not_graphed_mlp(p),
         "combined 1F1B (EP overlap) runs the MoE and MLP blocks as its own schedule nodes, so per-layer CUDA graphs "
         "may not capture them (modules moe or mlp)", "drop moe and mlp from --cuda-graph-modules, or another "
         "schedule",
         "Megatron-Core transformer_config.py: \"CUDA graph scope on moe and mlp is not supported with "
         "overlap_moe_expert_parallel_comm\""),
    Rule("ep_overlap_graphs_skip_attention_bias", ("schedule", "dp"),
         lambda c, p: (c["schedule"] != Schedule.COMBINED_1F1B) | (p.training.cuda_graphs != "per-layer")
         | (c["dp"] == 1) | (not p.model.attention_bias) | (not captured(p, "attn")),
         "combined 1F1B delays the weight gradients (delay_wgrad_compute), and with the gradient reduction overlapped "
         "Megatron-Core's per-layer CUDA graphs may then capture no attention with biases (gpt-oss's q/k/v/o "
         "biases)", "drop attn from --cuda-graph-modules, or another schedule",
         "Megatron-LM arguments.py (NVIDIA/Megatron-LM@d98e8a64, since #3074): \"CUDA graph with delay_wgrad_compute "
         "doesn't support attn bias for now\""),
    Rule("offload_needs_one_stage", ("recompute", "pp", "schedule"),
         lambda c, p: (c["recompute"] != Recompute.OFFLOAD)
         | ((c["pp"] == 1) & (c["schedule"] != Schedule.COMBINED_1F1B) & (p.model.num_hidden_layers >= 3)),
         "CPU activation offloading schedules its copies for one micro-batch's forward, then its backward: no "
         "pipeline parallelism and no paired schedule (combined-1f1b), and at least two layers' activations stay on "
         "the GPU so that copies overlap compute", "use pp=1 and schedule=1f1b, or recompute=none|selective|full",
         "Megatron-Core transformer_config.py (\"no support for Pipeline parallelism with CPU offloading\"; "
         "ecosystem.md M30); Transformer Engine cpu_offloading docs: the default schedule assumes all forwards then "
         "all backwards, num_layers <= model_layers - 2 for overlap"),
    Rule("offload_modules_needs_mcore_schedule", ("recompute", "schedule"),
         lambda c, p: (c["recompute"] != Recompute.OFFLOAD_MODULES)
         | _among(c["schedule"], [int(Schedule.ONE_F_ONE_B), int(Schedule.INTERLEAVED),
                                  int(Schedule.COMBINED_1F1B)]),
         "fine-grained activation offloading (offload-modules) is driven by Megatron-Core's own schedules: 1F1B, "
         "interleaved 1F1B and the combined 1F1B", "use schedule=1f1b|interleaved|combined-1f1b, or another recompute",
         "Megatron-Core core_v0.16.1 pipeline_parallel/schedules.py (its three forward-backward functions reset the "
         "offload manager of fine_grained_activation_offload.py); combined 1F1B through "
         "models/gpt/fine_grained_callables.py"),
    Rule("dualpipe_shape", ("pp", "schedule", "mbs", "dp"),
         lambda c, p: ~_among(c["schedule"], [Schedule.DUALPIPE, Schedule.DUALPIPE_V])
         | ((c["pp"] % 2 == 0) & (_microbatches(c, p) % 2 == 0) & (_microbatches(c, p) >= 2 * c["pp"])),
         "DualPipe needs an even number of pipeline ranks and an even number of micro-batches, at least 2 x pp",
         "use an even pp and raise --global-batch or lower the micro-batch",
         "deepseek-ai/DualPipe dualpipe.py step(): num_ranks % 2 == 0, num_chunks % 2 == 0, num_chunks >= 2 x ranks"),
    Rule("seq1f1b_segments_divide", ("cp", "schedule"),
         lambda c, p: (c["schedule"] != Schedule.SEQ1F1B)
         | _divides(SEQ1F1B_SEGMENTS * 2 * c["cp"], p.training.seq_len),
         f"Seq1F1B splits each sequence into {SEQ1F1B_SEGMENTS} segments (each split again by 2 x cp)",
         f"use a sequence length divisible by {2 * SEQ1F1B_SEGMENTS} x cp", "Sun et al. 2024 (Seq1F1B)"),
    Rule("schedule_needs_pipeline", ("pp", "schedule"),
         lambda c, p: (c["pp"] > 1) | _among(c["schedule"], [Schedule.ONE_F_ONE_B, Schedule.COMBINED_1F1B]),
         "pipeline schedules other than 1f1b (and combined-1f1b, which also pairs micro-batches without a pipeline) "
         "need pp > 1", "use schedule=1f1b when pp = 1",
         "a schedule orders pipeline stages; with one stage there is none"),
    Rule("interleaved_microbatches", ("pp", "schedule", "mbs", "dp", "vpp"),
         lambda c, p: ((c["schedule"] != Schedule.INTERLEAVED)
                       & ((c["schedule"] != Schedule.COMBINED_1F1B) | (c["vpp"] == 1)))
         | ((_microbatches(c, p) >= c["pp"]) & _divides(c["pp"], _microbatches(c, p))),
         "the interleaved schedule needs a multiple of pp micro-batches (zb-v, with its fixed V of 2 chunks, takes any "
         "count: torch.distributed.pipelining ScheduleZBVZeroBubble pads to 2pp - 1 and drops the extras)",
         "raise --global-batch or lower the micro-batch so that micro-batches are a multiple of pp",
         "Megatron M14 (schedules.py microbatch group = pp)"),
    Rule("sequence_parallel_needs_tp", ("tp", "sp"),
         lambda c, p: (c["sp"] == 0) | (c["tp"] > 1),
         "sequence parallelism needs tensor parallelism (tp > 1)", "set sp=false or tp > 1", "Megatron M17"),
    Rule("expert_parallel_needs_moe", ("ep",),
         lambda c, p: (c["ep"] == 1) | p.model.is_moe,
         "expert parallelism needs a mixture-of-experts model", "set ep=1", "Megatron M21"),
    Rule("experts_divisible_by_ep", ("ep",),
         lambda c, p: (c["ep"] == 1) | _divides(c["ep"], max(p.model.num_local_experts, 1)),
         "experts must divide evenly across expert-parallel ranks", "use an ep that divides the expert count",
         "Megatron M21"),
    Rule("ep_divides_data_ranks", ("ep", "dp", "cp", "tp"),
         lambda c, p: _divides(c["ep"], c["dp"] * c["cp"] * c["tp"]),
         "expert-parallel groups are carved out of the tp x dp x cp ranks of a stage, so ep must divide them",
         "lower ep or raise dp", "Megatron M2 (world % (etp*ep*pp) == 0; etp = tp, or 1 with MoE parallel folding)"),
    Rule("expert_tp_fits_data_ranks", ("ep", "etp", "tp", "dp", "cp"),
         lambda c, p: ((c["etp"] == ExpertTp.ONE) | (c["ep"] == 1) | (c["tp"] == 1)
                       | _divides(c["ep"], c["dp"] * c["cp"])),
         "with experts split like the attention (etp = tp), each expert-parallel rank is a whole TP group, so ep "
         "must divide dp x cp", "use etp=1 (MoE parallel folding) or lower ep",
         "Megatron M2 (world % (etp*ep*pp) == 0, parallel_state.initialize_model_parallel)"),
    Rule("ep_with_tp_needs_sp", ("ep", "tp", "sp"),
         lambda c, p: (c["ep"] == 1) | (c["tp"] == 1) | (c["sp"] == 1),
         "expert parallelism together with tensor parallelism needs sequence parallelism", "set sp=true",
         "Megatron M19"),
    Rule("sharding_needs_replicas", ("zero", "dp", "cp"),
         lambda c, p: (c["zero"] == Zero.NONE) | (c["dp"] * c["cp"] > 1),
         "ZeRO/FSDP sharding needs more than one data-parallel rank", "set zero=0 when dp x cp = 1",
         "ZeRO partitions states over data-parallel ranks (Rajbhandari et al. 2020)"),
    Rule("hsdp_spans_domains", ("zero", "tp", "dp", "cp"),
         lambda c, p: _where_hsdp(c, lambda sub: _domain_peers(sub, p) < sub["dp"] * sub["cp"]),
         "HSDP (zero=4) shards inside an NVLink domain and replicates across domains, so its data ranks must span "
         "more than one domain (otherwise it is zero=3)", "use zero=3",
         "PyTorch FSDP HYBRID_SHARD / FSDP2 2-D device mesh (torchtitan docs/fsdp.md)"),
    Rule("cp_comm_needs_cp", ("cp", "cp_comm"),
         lambda c, p: (c["cp_comm"] == CpComm.RING) | (c["cp"] > 1),
         "an all-to-all (Ulysses) context-parallel exchange needs cp > 1", "set cp_comm=ring or cp > 1",
         "a communication pattern for a dimension of size 1 is the same layout"),
    Rule("hybrid_cp_spans_domains", ("tp", "cp", "cp_comm"),
         lambda c, p: (c["cp_comm"] != CpComm.HYBRID) | ((_cp_a2a(c, p) > 1) & (_cp_a2a(c, p) < c["cp"])),
         "hybrid context parallelism needs CP ranks both inside one NVLink domain and across domains",
         "use cp_comm=ring or cp_comm=a2a",
         "Megatron --cp-comm-type a2a+p2p with --hierarchical-context-parallel-sizes (arguments.py M583)"),
    Rule("ulysses_heads_divisible", ("tp", "cp", "cp_comm"),
         lambda c, p: (c["cp_comm"] == CpComm.RING) | (_divides(c["tp"] * _cp_a2a(c, p), p.model.num_attention_heads)
                                             & (p.model.is_mla | _divides(c["tp"] * _cp_a2a(c, p), p.model.kv_heads))),
         "all-to-all context parallelism shards heads, so query and key/value heads must divide by tp x cp",
         "use ring context parallelism (cp_comm=ring) or a smaller cp",
         "DeepSpeed-Ulysses (Jacobs et al. 2023): sequence-parallel degree must divide the head count"),
    Rule("stage_split_launchable", ("pp", "vpp"),
         lambda c, p: (c["pp"] == 1) | _split_ok(c, p) | _trusted("pp", p),
         "the layers do not split into equal model chunks, and no first/last-stage layer counts or pipeline layout "
         "the framework can emit fix the split", "use a pp (and vpp) that divides the layer count",
         "Megatron --decoder-first/last-pipeline-num-layers, with VPP --account-for-embedding/loss-in-pipeline-split "
         "or --pipeline-model-parallel-layout (transformer_config.py); torchtitan stage modules"),
    *FRAMEWORK_RULES,
)

MEMORY_RULE = Rule(
    "memory_fits", ("*",), lambda c, p: np.ones(len(c["tp"]), dtype=bool),
    "predicted peak memory per GPU exceeds the GPU's capacity",
    "more GPUs, recompute, a higher ZeRO stage, a smaller micro-batch, or fp8", "cost model (planner.cost.memory)")

# Not framework rules: knob values the cost model never prefers, dropped before pricing unless pinned (a pinned value
# is priced as asked). Each is weakly dominated in every term: time, memory and what the framework accepts.
DOMINANCE: tuple[Rule, ...] = (
    Rule("redundant_expert_tp", ("etp", "tp", "ep"),
         lambda c, p: (c["etp"] == ExpertTp.TP) | ((c["tp"] > 1) & p.model.is_moe) | ("etp" in p.fixed),
         "etp=1 is the same layout as etp=tp without tensor parallelism or experts", "nothing to change",
         "planner.cost.groups.expert_tp (etp only differs from tp when tp > 1)"),
    Rule("redundant_rank_order", ("order", "pp", "dp", "tp", "cp", "ep", "etp"),
         lambda c, p: (c["order"] == RankOrder.PP_OUTER) | ("order" in p.fixed)
         | ((c["pp"] > 1) & ((c["dp"] > 1) | (p.model.is_moe & ~_same_expert_dp(c, p)))),
         "with pp = 1, or dp = 1 (and, with experts, as many expert data ranks), both rank orders build the same "
         "groups",
         "nothing to change", "planner.cost.groups.Placement (the orders differ only in where pp and dp sit)"),
    Rule("dominated_no_sp", ("tp", "sp"),
         lambda c, p: (c["tp"] == 1) | (c["sp"] == 1) | ("sp" in p.fixed)
         | (not sp_never_slower(tp_mode(stack_profile(p.training)))) | (not _caps(p).sequence_parallel),
         "with tp > 1, sequence parallelism moves the same TP bytes (reduce-scatter + all-gather instead of "
         "all-reduce) and, where the stack's TP collectives all block or all pair with their GEMMs, hides as much "
         "of them; it shards the norms and dropout and holds less memory: sp=0 is never better there",
         "pin sp=0 with --fix to price it", "Korthikanti et al. 2022 §4.2.2; planner.cost.tensor/compute/memory"),
    Rule("dominated_zero0", ("zero", "dp", "cp"),
         lambda c, p: (c["zero"] != Zero.NONE) | (c["dp"] * c["cp"] == 1) | ("zero" in p.fixed)
         | (Zero.OPTIMIZER not in capabilities_for(p.training.framework).zero),
         "where the framework has ZeRO-1 (the distributed optimizer), it reduces the same gradient bytes "
         "(reduce-scatter + all-gather), hides more of them, updates a shard and holds less: zero=0 is never better",
         "pin zero=0 with --fix to price it",
         "Megatron dist_optimizer.md; planner.cost.data (reduction window, optimizer shard)"),
    Rule("dominated_1f1b", ("pp", "schedule"),
         lambda c, p: (c["schedule"] != Schedule.ONE_F_ONE_B) | (c["pp"] == 1) | ("schedule" in p.fixed)
         | (Schedule.ZB_H1 not in capabilities_for(p.training.framework).schedules)
         | (p.schedule_choices is not None and int(Schedule.ZB_H1) not in p.schedule_choices),
         "where the framework ships ZB-H1 (and the problem may choose it), it keeps 1F1B's order and memory and fills "
         "part of its bubble with weight-gradient passes: 1f1b with pp > 1 is never better",
         "pin schedule=1f1b with --fix to price it",
         "Qi et al. 2024 §2.1 (ZB-H1 bubble (p-1)(F + B - W) at 1F1B's activation memory)"),
)

# Applied by the search after the memory check: time grows with recomputation (none < selective < full) and nothing
# else changes, so among layouts that differ only in recompute the least that fits (and the least that fits with
# headroom) are the only candidates for a rank.
RECOMPUTE_DOMINANCE = Rule(
    "dominated_recompute", ("*",), lambda c, p: np.ones(len(c["tp"]), dtype=bool),
    "more recomputation than the layout needs to fit: the same layout with less recompute fits and is faster",
    "pin recompute with --fix to price it", "planner.cost.compute.recompute_time (recompute only adds time)")

RULES_BY_NAME = {r.name: r for r in (*RULES, *DOMINANCE)} | {MEMORY_RULE.name: MEMORY_RULE,
                                                             RECOMPUTE_DOMINANCE.name: RECOMPUTE_DOMINANCE}


def broken_rules(cols: Cols, problem: Problem) -> list[Rule]:
    """Rules a single layout (columns of length 1) breaks."""
    return [rule for rule in RULES if not bool(rule.check(cols, problem)[0])]


def not_graphed_mlp(p: Problem) -> bool:
    """Per-layer CUDA graphs leave the MLP and MoE blocks eager: the run names its modules and neither is among them
    (with no list a dense layer is captured whole)."""
    modules = p.training.cuda_graph_modules
    if modules is None:
        return p.model.is_moe and dropless(p)
    return not ({"mlp", "moe"} & set(modules))
