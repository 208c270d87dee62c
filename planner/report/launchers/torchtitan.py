"""torchtitan v0.2.2 TOML job-config keys for one plan.

v0.2.2 is the last torchtitan release driven by TOML (later main moved to Python config functions). The output is
an overlay: its sections go into the model's own `train_configs/*.toml`, which keeps model name, flavor, tokenizer,
data and optimizer. Key names follow `torchtitan/config/job_config.py` of that release (ecosystem.md section 2).
"""

from __future__ import annotations

import json

from planner.report.launchers._plan import (
    PlanView,
    header,
    placement_note,
    refuse,
    refuse_token_drop,
    require_stage_split,
)

TARGET = "torchtitan v0.2.2 (TOML job config)"
NAME = "torchtitan"

# Plan schedule -> torch.distributed.pipelining schedule name, keyed by whether a rank holds several stages.
# PyTorch's zero-bubble schedules are multi-stage only; nothing there reproduces ZB-H2's extra warm-up memory.
SCHEDULES = {
    ("1f1b", False): "1F1B",
    ("interleaved", True): "Interleaved1F1B",
    ("zb-h1", True): "InterleavedZeroBubble",
    ("zb-v", True): "ZBVZeroBubble",
    ("dualpipe-v", True): "DualPipeV",  # torch.distributed.pipelining ScheduleDualPipeV (frontier_facts.md §B)
}

Value = int | bool | str | list


def render(view: PlanView) -> str:
    _check(view)
    if view.optimizer != "adam":
        refuse(view, NAME, "inputs.training.optimizer", f"the planner writes {NAME}'s AdamW only",
               "re-plan with --optimizer adam, or use --format megatron / nemo")
    if view.optimizer_moments != "fp32":
        refuse(view, NAME, "inputs.training.optimizer_moments", f"{NAME} has no switch for bf16 Adam moments",
               "re-plan with --optimizer-moments fp32, or use --format megatron / nemo")
    refuse_token_drop(view, NAME)
    if view.fp8_recipe == "blockwise":
        refuse(view, NAME, "inputs.training.fp8_recipe", f"{NAME}'s float8 recipes scale per tensor or per row, not "
               "in 128 x 128 blocks", "re-plan with --fp8-recipe tensorwise, or use --format megatron / nemo")
    if view.optimizer_offload > 0:
        refuse(view, NAME, "inputs.training.optimizer_offload", "torchtitan's CPU offload (FSDP2 CPUOffloadPolicy) "
               "moves parameters and gradients too, not the optimizer share the plan prices",
               "re-plan with --optimizer-offload 0, or use --format megatron")
    if view.layout.recompute in ("offload", "offload-modules"):
        refuse(view, NAME, "recompute", f"{NAME} has no activation offloading to host memory (its "
               "activation_checkpoint modes are none, selective and full)",
               "re-plan with --framework torchtitan, or use --format megatron")
    lay = view.layout
    notes = ["# merge into the model's train_configs/*.toml; model, tokenizer, data and optimizer keys stay yours",
             *filter(None, [placement_note(view)])]
    if lay.zero in (1, 2) and _shard_degree(view) > 1:
        notes.append(f"# ZeRO-{lay.zero} runs as FSDP2 without resharding after forward: grads are sharded too, so"
                     " memory is at or below the plan")
    if lay.recompute == "selective":
        notes.append("# selective AC here is torchtitan's per-op policy, not Megatron's core-attention recompute;"
                     " its memory and time differ from the estimate")
    sections: list[tuple[str, dict[str, Value]]] = [
        ("training", _training(view)),
        ("parallelism", _parallelism(view)),
        ("activation_checkpoint", _activation_checkpoint(view)),
    ]
    if view.precision == "fp8":
        sections += _float8(view)
    # written either way, so the model's own train_configs value cannot leak through; the plan was priced with the
    # compiled or the eager kernel rate (planner.cost.profiles compile_speedup)
    sections.append(("compile", {"enable": view.torch_compile, "components": ["model", "loss"]}))
    if view.precision == "fp8" and not view.torch_compile:
        notes.append("# float8 without torch.compile runs its casts unfused (torchtitan's float8 docs): slower than "
                     "the plan")
    body = "\n\n".join(_section(name, keys) for name, keys in sections)
    return "\n".join([header(view, TARGET), *notes, "", body]) + "\n"


def _check(view: PlanView) -> None:
    lay, m = view.layout, view.model
    if lay.pp > 1 and (lay.schedule, lay.vpp > 1) not in SCHEDULES:
        refuse(view, NAME, "schedule",
               f"torch.distributed.pipelining has no schedule matching {lay.schedule} with vpp={lay.vpp} "
               "(its zero-bubble schedules need 2+ stages per rank, and none has ZB-H2's memory profile)",
               "re-plan with schedule 1f1b, interleaved, or zb-h1 with vpp >= 2")
    if lay.dp_outermost:
        refuse(view, NAME, "rank_order", "torchtitan builds its device mesh in one order, pp outermost (pp, "
               "dp_replicate, dp_shard, cp, tp: parallel_dims.py); data parallelism cannot go outside the pipeline",
               "re-plan with --framework torchtitan, or use --format megatron / nemo (--use-tp-pp-dp-mapping)")
    if lay.cp > 1 and lay.cp_comm != "ring":
        refuse(view, NAME, "cp_comm", "torchtitan's context parallelism is ring attention only",
               "re-plan with --fix cp_comm=ring for torchtitan")
    if lay.zero == 0 and max(lay.tp, lay.pp, lay.cp, lay.ep) > 1:
        refuse(view, NAME, "zero",
               "replicated data parallel (zero=0) is plain DDP in torchtitan, which it applies only when data "
               "parallel is the only dimension", "re-plan with zero fixed to 1, 2 or 3 for torchtitan")
    if view.precision == "fp4":
        refuse(view, NAME, "inputs.training.precision", "the targeted torchtitan release has no fp4 training recipe "
               "(its low-precision converters are float8 and mxfp8)", "re-plan with --precision fp8 or bf16, or use "
               "--format megatron or nemo")
    if view.precision == "fp8" and m.is_moe:
        refuse(view, NAME, "inputs.training.precision",
               "float8 for MoE grouped GEMMs needs per-model module names the plan does not carry",
               "re-plan with precision bf16, or use --format megatron")
    if m.num_heads % lay.tp or m.num_kv_heads % lay.tp:
        refuse(view, NAME, "tp", f"tp={lay.tp} must divide both {m.num_heads} heads and {m.num_kv_heads} KV heads",
               "re-plan with tp dividing the KV-head count")
    if view.seq_len % (2 * lay.tp * lay.cp):
        refuse(view, NAME, "inputs.training.seq_len",
               f"seq_len {view.seq_len} is not a multiple of 2 x tp x cp = {2 * lay.tp * lay.cp}",
               "pick a sequence length divisible by 2 x tp x cp")
    require_stage_split(view, NAME)
    if lay.pipeline_layout is not None and lay.schedule in ("zb-v", "dualpipe-v"):
        refuse(view, NAME, "pipeline_layout", f"the pipeline layout balances chunks placed in a loop, and {NAME}'s "
               f"{lay.schedule} places them in a V", "re-plan with --framework torchtitan")
    for stage, layers in enumerate(view.stage_layers()):
        if layers % lay.vpp and lay.pipeline_layout is None:
            refuse(view, NAME, "vpp", f"pipeline rank {stage} holds {layers} layers, not a multiple of vpp={lay.vpp}",
                   "re-plan with vpp dividing the layers of every pipeline stage")


def _shard_degree(view: PlanView) -> int:
    # zero >= 1 shards over all data-parallel ranks; zero 0 replicates (DDP). HSDP shards over its group, which
    # counts the cp ranks too (torchtitan applies FSDP over dp_shard x cp).
    lay = view.layout
    if lay.fsdp_shard_group is not None:
        return max(lay.fsdp_shard_group // lay.cp, 1)
    return lay.dp if lay.zero >= 1 else 1


def _training(view: PlanView) -> dict[str, Value]:
    lay = view.layout
    # With PP, one step's microbatches are the pipeline's microbatches: local batch = micro x M, no accumulation.
    # Without PP, torchtitan accumulates global / (local x dp) = M microbatches of local_batch_size each.
    local = lay.micro_batch * lay.num_microbatches if lay.pp > 1 else lay.micro_batch
    return {
        "local_batch_size": local,
        "global_batch_size": view.global_batch,
        "seq_len": view.seq_len,
        "mixed_precision_param": "bfloat16",
    }


def _parallelism(view: PlanView) -> dict[str, Value]:
    lay = view.layout
    shard = _shard_degree(view)
    keys: dict[str, Value] = {
        "data_parallel_replicate_degree": lay.dp // shard,
        "data_parallel_shard_degree": shard,
    }
    if shard * lay.cp > 1:  # FSDP is applied over dp_shard x cp
        keys["fsdp_reshard_after_forward"] = "always" if lay.zero == 3 else "never"
    keys["tensor_parallel_degree"] = lay.tp
    # PyTorch's micro-pipelined TP where the plan priced it (planner.cost.tensor "async-tp"); it needs compile
    keys["enable_async_tensor_parallel"] = view.tp_comm_overlap and lay.tp > 1
    keys["context_parallel_degree"] = lay.cp
    keys["pipeline_parallel_degree"] = lay.pp
    if lay.pp > 1:
        keys["pipeline_parallel_schedule"] = SCHEDULES[(lay.schedule, lay.vpp > 1)]
        keys["pipeline_parallel_microbatch_size"] = lay.micro_batch
        keys.update(_stage_split(view))
    if view.model.is_moe:
        keys["expert_parallel_degree"] = lay.ep
        # torchtitan's ParallelDims takes etp = tp (experts TP-sharded like dense layers, EP inside dp x cp) or 1
        # (EP borrows the TP ranks too), the two values the planner's etp knob has.
        keys["expert_tensor_parallel_degree"] = lay.expert_tp or lay.tp
    return keys


def _stage_split(view: PlanView) -> dict[str, Value]:
    lay, layers = view.layout, view.model.num_layers
    if not lay.stated_split:
        # Even split: every (virtual) stage gets L / (pp x vpp) layers. The embedding and output weights are set to
        # count as zero layers, otherwise torchtitan's default weights (1 each) shift layers between stages.
        return {
            "pipeline_parallel_layers_per_stage": layers // (lay.pp * lay.vpp),
            "pipeline_parallel_first_stage_less_layers": 0,
            "pipeline_parallel_last_stage_less_layers": 0,
        }
    # Uneven split: spell out each stage's modules. Stage s runs on rank s % pp (looped placement) and gets
    # that rank's layers divided by vpp, the same assignment Megatron makes.
    per_rank = view.stage_layers()
    parts: list[list[str]] = []
    next_layer = 0
    for stage in range(lay.pp * lay.vpp):
        count = (lay.pipeline_layout[stage] if lay.pipeline_layout is not None
                 else per_rank[stage % lay.pp] // lay.vpp)
        parts.append([f"layers.{i}" for i in range(next_layer, next_layer + count)])
        next_layer += count
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "output"]
    return {"module_fqns_per_model_part": parts}


def _activation_checkpoint(view: PlanView) -> dict[str, Value]:
    if view.layout.recompute == "selective":
        return {"mode": "selective", "selective_ac_option": "op"}
    return {"mode": view.layout.recompute}


def _float8(view: PlanView) -> list[tuple[str, dict[str, Value]]]:
    fp8: dict[str, Value] = {"filter_fqns": ["output"]}
    if _shard_degree(view) * view.layout.cp > 1:
        # Recommended with FSDP and tensorwise scaling: all-gather weights in float8, one scale all-reduce.
        fp8 = {"enable_fsdp_float8_all_gather": True, "precompute_float8_dynamic_scale_for_fsdp": True, **fp8}
    return [
        ("model", {"converters": ["quantize.linear.float8"]}),
        ("quantize.linear.float8", fp8),
    ]


def _section(name: str, keys: dict[str, Value]) -> str:
    return "\n".join([f"[{name}]", *(f"{key} = {_value(value)}" for key, value in keys.items())])


def _value(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string of plain ASCII is a valid TOML basic string
    if value and isinstance(value[0], list):
        return "[\n" + "".join(f"  {_value(item)},\n" for item in value) + "]"
    return "[" + ", ".join(_value(item) for item in value) + "]"
