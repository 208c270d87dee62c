"""DeepSpeed `ds_config` JSON for one plan (DeepSpeed 0.17 era keys, ecosystem.md section 3).

JSON has no comments, so unlike the other formats there is no header line. A plain ds_config describes data
parallelism (ZeRO), batch sizes and precision only; tensor, pipeline, context and expert parallelism need model
code (Megatron-DeepSpeed, PipelineModule, Ulysses) that a config file cannot switch on, so such plans are refused.
"""

from __future__ import annotations

import json

from planner.report.launchers._plan import PlanView, refuse, refuse_token_drop

NAME = "DeepSpeed ds_config"


def render(view: PlanView) -> str:
    _check(view)
    if view.layout.fsdp_shard_group is not None:
        refuse(view, NAME, "fsdp_shard_group", "ZeRO-3 hybrid sharding is not a ds_config setting (ZeRO++ hpZ only "
               "keeps a secondary copy of weights)", "re-plan with --fix zero=3, or use --format torchtitan")
    lay = view.layout
    zero: dict[str, object] = {"stage": lay.zero}
    if lay.zero >= 1:
        # The cost model overlaps gradient reduction with backward; DeepSpeed only does so with overlap_comm.
        zero.update(overlap_comm=True, contiguous_gradients=True)
    refuse_token_drop(view, NAME)
    if view.optimizer_moments != "fp32":
        refuse(view, NAME, "inputs.training.optimizer_moments", f"{NAME} has no switch for bf16 Adam moments",
               "re-plan with --optimizer-moments fp32, or use --format megatron / nemo")
    if view.optimizer_offload > 0:
        if lay.zero == 0 or view.optimizer_offload < 1:
            refuse(view, NAME, "inputs.training.optimizer_offload", "DeepSpeed offloads the whole optimizer "
                   "(offload_optimizer), and only under ZeRO >= 1", "re-plan with --optimizer-offload 1 --fix zero=1")
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}  # ZeRO-Offload (Ren et al. 2021)
    config: dict[str, object] = {
        # DeepSpeed asserts train_batch_size == micro x accumulation x data-parallel world size.
        "train_batch_size": lay.micro_batch * lay.num_microbatches * lay.dp,
        "train_micro_batch_size_per_gpu": lay.micro_batch,
        "gradient_accumulation_steps": lay.num_microbatches,
        "zero_optimization": zero,
        "bf16": {"enabled": True},
    }
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def _check(view: PlanView) -> None:
    lay = view.layout
    missing = [
        f"{what}={size}"
        for what, size in (("tensor parallel tp", lay.tp), ("pipeline parallel pp", lay.pp),
                           ("context parallel cp", lay.cp), ("expert parallel ep", lay.ep))
        if size > 1
    ]
    if missing:
        refuse(view, NAME, "tp",
               "a plain ds_config has no " + ", no ".join(missing)
               + " (those need Megatron-DeepSpeed or PipelineModule model code, and Ulysses is not context parallel)",
               "re-plan with tp, pp, cp and ep fixed to 1 for DeepSpeed, or use --format megatron/torchtitan/nemo")
    if lay.recompute != "none":
        refuse(view, NAME, "recompute",
               f"the plan needs {lay.recompute} activation recomputation, which a ds_config cannot switch on (its "
               "activation_checkpointing block only tunes checkpoint calls the model code makes)",
               "enable per-layer checkpointing in the model code and take the layout from --format env, "
               "or re-plan with recompute fixed to none")
    if view.precision in ("fp8", "fp4"):
        refuse(view, NAME, "inputs.training.precision", f"a ds_config has no {view.precision} training switch (it "
               "needs Transformer Engine layers in the model)", "re-plan with --precision bf16")
