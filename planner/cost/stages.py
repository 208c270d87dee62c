"""Memory of every pipeline stage of one layout, split by kind (the report's per-stage chart).

`evaluate` prices only the first and the last stage (the two that can be the busiest); this walks all pp ranks with
the same building blocks: each holds ceil(L/pp) layers' states (twice for DualPipe; planner.cost.sharding.stage_params,
routed experts sharded over the expert data-parallel group), the first adds the embedding, the last the LM head (and
its logits), and rank r keeps the activations of
`inflight_microbatches(rank=r)` micro-batches (Megatron's warm-up depth, planner.cost.pipeline). The runtime reserve
is the one `memory.report` charges, from the busiest stage's allocations, on every rank.
"""

from __future__ import annotations

import numpy as np

from planner.cost import compute, memory, pipeline
from planner.cost.profiles import profile_for
from planner.cost.sharding import (
    expert_shard_group,
    sharding,
    split_state_bytes,
    stage_expert_params,
    stage_params,
)
from planner.inputs.layout import KNOBS
from planner.inputs.problem import Problem

STAGE_KINDS = ("weights", "grads", "optimizer", "activations", "logits", "reserve")


def stage_memory_gib(problem: Problem, layout: dict[str, int]) -> list[dict[str, float]]:
    """GiB per GPU on each pipeline rank (0 = first stage), by kind: STAGE_KINDS, plus `total`."""
    c = {k: np.array([layout[k]], dtype=np.int64) for k in KNOBS}
    tr, m = problem.training, problem.model
    tp, pp, dp, cp, ep, mbs = (c[k].astype(float) for k in ("tp", "pp", "dp", "cp", "ep", "mbs"))
    zero, _, shard = sharding(problem, c)
    params = stage_params(problem, c)
    prof = profile_for(tr.framework)
    fp8 = compute.is_fp8(problem)
    tok = compute.tokens_per_gpu(mbs, float(tr.seq_len), cp)
    per_layer_act, working = memory.layer_activation_bytes(problem, tok, tp, c["sp"], c["recompute"])
    micro = np.floor(pipeline.microbatches(tr.global_batch, mbs, dp))
    buffer = memory.fsdp_buffer_bytes(zero, params["per_layer"], prof)
    logits = memory.logits_bytes(tok, m, tp)
    layers = params["layers_per_stage"]
    p = int(layout["pp"])
    rows = []
    experts, expert_shard = stage_expert_params(params), expert_shard_group(c, shard)
    middle = params["held_layers"] * params["per_layer"]
    for r in range(p):
        stage_p = params["first"] if r == 0 else params["last"] if r == p - 1 else middle
        states = split_state_bytes(stage_p, experts, zero, shard, expert_shard, prof, fp8)
        inflight = pipeline.inflight_microbatches(c["schedule"], pp, c["vpp"], micro, rank=r)
        acts = per_layer_act * layers * inflight + working
        lg = logits if r == p - 1 else np.zeros(1)
        rows.append({**states, "activations": acts, "logits": lg, "buffer": buffer})
    alloc = max(float((sum(row[k] for k in ("weights", "grads", "optimizer", "activations", "logits", "buffer")))[0])
                for row in rows)
    groups = memory.active_groups(tp, pp, dp, cp, ep)
    reserve = memory.runtime_reserve(groups, np.array([alloc]))
    out = []
    for row in rows:
        gib = {k: float(row[k][0]) / memory.GIB for k in STAGE_KINDS if k != "reserve"}
        gib["reserve"] = float((reserve + row["buffer"])[0]) / memory.GIB
        gib["total"] = sum(gib[k] for k in STAGE_KINDS)
        out.append(gib)
    return out
