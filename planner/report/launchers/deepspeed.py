"""DeepSpeed as its users launch it: a Hugging Face Trainer script under the `deepspeed` launcher, with a ds_config
(DeepSpeed 0.19 keys, ecosystem.md section 3; frontier_facts §H).

The output is a shell script. A here-document writes ds_config.json: ZeRO stage, optimizer and (ZeRO-3) parameter
offload, AutoTP tensor parallelism (`tensor_parallel.autotp_size`, ZeRO 0-2), the Ulysses degree
(`sequence_parallel_size`, which DeepSpeed divides the world by for its batch arithmetic) and the batch keys. Then
the launch, with the Trainer arguments that switch on what the config cannot: `--gradient_checkpointing` (the model
checkpoints every decoder layer: full recompute), `--torch_compile`, `--bf16`, the per-device batch and the
accumulation. Ulysses sequence parallelism is switched on through accelerate's parallelism config (transformers docs
deepspeed_alst.md: `sp_backend: deepspeed`, `sp_size`), so with cp > 1 a second here-document writes the accelerate
config and `accelerate launch` runs the script. `plan explain --from` reads the script back (its here-documents
included). Pipeline and expert parallelism need model code a Trainer script does not have, so such plans are
refused, as are selective recompute, activation offloading, fp8 and bf16 Adam moments.
"""

from __future__ import annotations

import json

from planner.report.launchers._plan import PlanView, header, refuse, refuse_token_drop

TARGET = "DeepSpeed 0.19 + Hugging Face Trainer (transformers >= 4.50.1; accelerate >= 1.12 with Ulysses)"
NAME = "DeepSpeed"
CONFIG = "ds_config.json"
ACCELERATE_CONFIG = "accelerate_config.yaml"


def render(view: PlanView) -> str:
    _check(view)
    lay = view.layout
    nodes, per_node = _nodes(view)
    lines = [header(view, TARGET),
             "# train.py is your Trainer script (model, data, optimizer); the arguments below switch on what the plan "
             "priced",
             f"# sequences of {view.seq_len} tokens: set the length in your data pipeline (e.g. --model_max_length in "
             "Alpaca-style scripts)",
             f"cat > {CONFIG} <<'EOF'", json.dumps(ds_config(view), indent=2, sort_keys=True), "EOF"]
    if lay.cp > 1:
        lines += [f"cat > {ACCELERATE_CONFIG} <<'EOF'", *_accelerate_config(view, nodes), "EOF",
                  "# run on every node with its --machine_rank (and --main_process_ip of node 0)",
                  f"accelerate launch --config_file {ACCELERATE_CONFIG} train.py \\"]
    else:
        lines.append(f"deepspeed --num_nodes {nodes} --num_gpus {per_node} train.py \\")
    args = _trainer_args(view)
    lines += [f"  {arg} \\" for arg in args[:-1]] + [f"  {args[-1]}"]
    return "\n".join(lines) + "\n"


def ds_config(view: PlanView) -> dict[str, object]:
    """The ds_config of the plan: ZeRO (and its offloads), AutoTP, the Ulysses degree, the batch keys, bf16."""
    lay = view.layout
    zero: dict[str, object] = {"stage": lay.zero}
    if lay.zero >= 1:
        # The cost model overlaps gradient reduction with backward; DeepSpeed only does so with overlap_comm.
        zero.update(overlap_comm=True, contiguous_gradients=True)
    if view.optimizer_offload > 0:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}  # ZeRO-Offload (Ren et al. 2021)
    if view.param_offload:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}  # ZeRO-Infinity, stage 3
    config: dict[str, object] = {
        # DeepSpeed asserts train_batch_size == micro x accumulation x data-parallel world (the world over the
        # AutoTP and Ulysses degrees).
        "train_batch_size": lay.micro_batch * lay.num_microbatches * lay.dp,
        "train_micro_batch_size_per_gpu": lay.micro_batch,
        "gradient_accumulation_steps": lay.num_microbatches,
        "zero_optimization": zero,
        "bf16": {"enabled": True},
    }
    if lay.tp > 1:
        config["tensor_parallel"] = {"autotp_size": lay.tp}  # AutoTP training (DeepSpeed >= 0.16.4)
    if lay.cp > 1:
        config["sequence_parallel_size"] = lay.cp  # DeepSpeed's batch arithmetic: world / sequence_parallel_size
    return config


def _trainer_args(view: PlanView) -> list[str]:
    lay = view.layout
    args = [f"--deepspeed {CONFIG}", f"--per_device_train_batch_size {lay.micro_batch}",
            f"--gradient_accumulation_steps {lay.num_microbatches}", "--bf16"]
    if lay.recompute == "full":  # PreTrainedModel.gradient_checkpointing_enable: every decoder layer
        args.append("--gradient_checkpointing")
    if view.torch_compile:
        args.append("--torch_compile")
    return args


def _accelerate_config(view: PlanView, nodes: int) -> list[str]:
    """accelerate's config for DeepSpeed with Ulysses sequence parallelism (accelerate ParallelismConfig as
    transformers' deepspeed_alst.md spells it in a config file): dp_replicate x sp = world."""
    lay = view.layout
    return ["distributed_type: DEEPSPEED", "deepspeed_config:", f"  deepspeed_config_file: {CONFIG}",
            f"num_machines: {nodes}", f"num_processes: {lay.world_size}", "parallelism_config:",
            "  parallelism_config_sp_backend: deepspeed", f"  parallelism_config_sp_size: {lay.cp}",
            f"  parallelism_config_dp_replicate_size: {lay.dp}",
            "  parallelism_config_sp_seq_length_is_variable: true",
            "  parallelism_config_sp_attn_implementation: flash_attention_2"]


def _nodes(view: PlanView) -> tuple[int, int]:
    world = view.layout.world_size
    per_node = min(view.gpus_per_node, world)
    if world % per_node:
        refuse(view, NAME, "dp", f"world size {world} does not fill whole nodes of {view.gpus_per_node} GPUs",
               "re-plan on a whole number of nodes")
    return world // per_node, per_node


def _check(view: PlanView) -> None:
    lay = view.layout
    missing = [f"{what}={size}" for what, size in (("pipeline parallel pp", lay.pp), ("expert parallel ep", lay.ep))
               if size > 1]
    if missing:
        refuse(view, NAME, "pp" if lay.pp > 1 else "ep", "a Trainer script has no " + ", no ".join(missing)
               + " (Hugging Face models have no pipeline stages; DeepSpeed's PipelineModule and MoE layers are "
               "model code)", "re-plan with --format deepspeed (it plans for DeepSpeed), or use --format "
               "megatron/torchtitan/nemo")
    if lay.tp > 1 and lay.zero >= 3:
        refuse(view, NAME, "zero", "AutoTP tensor parallelism trains with ZeRO 0-2 (DeepSpeed AutoTP training "
               "tutorial)", "re-plan with --format deepspeed, or --fix zero=2")
    if lay.tp > 1 and lay.sequence_parallel:
        refuse(view, NAME, "sequence_parallel", "AutoTP shards the Linear layers only; it has no sequence "
               "parallelism of the norms", "re-plan with --format deepspeed (sp=0)")
    if lay.cp > 1 and (lay.cp_comm != "a2a" or lay.tp > 1):
        refuse(view, NAME, "cp_comm", "DeepSpeed's sequence parallelism is Ulysses all-to-all (cp_comm=a2a), "
               "beside data parallelism only", "re-plan with --format deepspeed")
    if lay.fsdp_shard_group is not None:
        refuse(view, NAME, "fsdp_shard_group", "ZeRO-3 hybrid sharding is not a ds_config setting (ZeRO++ hpZ only "
               "keeps a secondary copy of weights)", "re-plan with --fix zero=3, or use --format torchtitan")
    if lay.recompute not in ("none", "full"):
        refuse(view, NAME, "recompute", f"the plan needs {lay.recompute} recomputation; a Hugging Face model "
               "checkpoints whole decoder layers (--gradient_checkpointing) or nothing", "re-plan with --format "
               "deepspeed (recompute none or full)")
    if view.precision in ("fp8", "fp4"):
        refuse(view, NAME, "inputs.training.precision", f"a ds_config has no {view.precision} training switch (it "
               "needs Transformer Engine layers in the model)", "re-plan with --precision bf16")
    refuse_token_drop(view, NAME)
    if view.optimizer != "adam":
        refuse(view, NAME, "inputs.training.optimizer", f"the planner writes {NAME}'s AdamW only",
               "re-plan with --optimizer adam, or use --format megatron / nemo")
    if view.optimizer_moments != "fp32":
        refuse(view, NAME, "inputs.training.optimizer_moments", f"{NAME} has no switch for bf16 Adam moments",
               "re-plan with --optimizer-moments fp32, or use --format megatron / nemo")
    if view.optimizer_offload > 0 and (lay.zero == 0 or view.optimizer_offload < 1):
        refuse(view, NAME, "inputs.training.optimizer_offload", "DeepSpeed offloads the whole optimizer "
               "(offload_optimizer), and only under ZeRO >= 1", "re-plan with --optimizer-offload 1 --fix zero=1")
    if view.param_offload and lay.zero != 3:
        refuse(view, NAME, "inputs.training.param_offload", "offload_param moves ZeRO-3 partitions; the plan is "
               f"ZeRO-{lay.zero}", "re-plan with --fix zero=3")
