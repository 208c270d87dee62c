"""Shell variables for one plan: `KEY=value` lines that `eval` or `source` accepts (values shlex-quoted).

Names follow the launch scripts people already have (Megatron examples use TP/PP/CP sizes, MBS/GBS; torchrun takes
NNODES and NPROC_PER_NODE), so a script can do `eval "$(plan ... --format env)"` and use its own launcher.
Only a world size torchrun cannot lay out (not whole nodes) is refused: the variables restate the plan, they do not
claim any particular launcher can run it.
"""

from __future__ import annotations

import shlex

from planner.errors import PlanInputError
from planner.report.launchers._plan import PlanView, header, placement_note

TARGET = "shell variables (eval or source; any launcher)"


def render(view: PlanView) -> str:
    lay = view.layout
    world = lay.world_size
    per_node = min(view.gpus_per_node, world)  # a plan smaller than one node runs on one node
    if world % per_node:
        raise PlanInputError(f"world size {world} does not fill whole nodes of {view.gpus_per_node} GPUs",
                             field=view.field("dp"), fix="re-plan on a whole number of nodes")
    values: list[tuple[str, object]] = [
        ("MODEL", view.model.name),
        ("CLUSTER", view.cluster_name),
        ("PLAN_RANK", view.rank),
        ("TP", lay.tp),
        ("PP", lay.pp),
        ("VPP", lay.vpp),
        ("CP", lay.cp),
        ("EP", lay.ep),
        ("DP", lay.dp),
        ("MBS", lay.micro_batch),
        ("GBS", view.global_batch),
        ("NUM_MICROBATCHES", lay.num_microbatches),
        ("SEQ_LEN", view.seq_len),
        ("ZERO", lay.zero),
        ("FSDP_SHARD_GROUP", lay.fsdp_shard_group or (lay.dp * lay.cp if lay.zero == 3 else 0)),
        ("CP_COMM", lay.cp_comm),
        ("RANK_ORDER", lay.rank_order),
        ("RECOMPUTE", lay.recompute),
        ("SP", int(lay.sequence_parallel)),
        ("SCHEDULE", lay.schedule),
        ("PRECISION", view.precision),
        ("OPTIMIZER", view.optimizer),
    ]
    if lay.offload_layers is not None:
        values.append(("OFFLOAD_LAYERS", lay.offload_layers))
    if lay.first_stage_layers is not None:
        values.append(("FIRST_STAGE_LAYERS", lay.first_stage_layers))
    if lay.last_stage_layers is not None:
        values.append(("LAST_STAGE_LAYERS", lay.last_stage_layers))
    if lay.stage_split is not None:  # the first/last counts assume the embedding and the loss as one layer each
        values.append(("STAGE_SPLIT", lay.stage_split))
    if lay.pipeline_layout is not None:  # decoder layers per model chunk, in model order
        values.append(("PIPELINE_LAYOUT", ",".join(str(n) for n in lay.pipeline_layout)))
    values += [
        ("NNODES", world // per_node),
        ("NPROC_PER_NODE", per_node),
        ("WORLD_SIZE", world),
    ]
    lines = [header(view, TARGET), placement_note(view)] + [f"{key}={shlex.quote(str(value))}" for key, value in values]
    return "\n".join(line for line in lines if line) + "\n"
