"""Memory of every pipeline stage of one layout, split by kind (the report's per-stage chart).

`evaluate` prices the first, second and last stage (the ones that can be the busiest; planner.cost.step._stages);
this walks all pp ranks with the same accounting: the launched layer split (memory.stage_layer_counts: the first
and last stage's counts, ceil(L/pp) in between), DualPipe's two stage copies, the embedding on the first and the LM
head (and its logits) on the last stage, routed experts' states sharded over the expert data-parallel group, rank r
keeping the activations of `inflight_microbatches(rank=r)` micro-batches, and the same buffers. The reserve is what
`memory.report` adds to a stage's allocations: 5 % fragmentation plus the CUDA context and NCCL buffers.
"""

from __future__ import annotations

import numpy as np

from planner.cost import activation_offload, compute, memory, pipeline
from planner.cost.profiles import stack_profile
from planner.cost.sharding import expert_shard_group, sharding, split_state_bytes, stage_params
from planner.inputs.layout import KNOBS
from planner.inputs.problem import Problem

STAGE_KINDS = ("weights", "grads", "optimizer", "activations", "logits", "buffers", "reserve")


def stage_memory_gib(problem: Problem, layout: dict[str, int]) -> list[dict[str, float]]:
    """GiB per GPU on each pipeline rank (0 = first stage), by kind: STAGE_KINDS, plus `total` (the device total
    `memory_peak_gib` checks on the busiest rank)."""
    c = {k: np.array([layout[k]], dtype=np.int64) for k in KNOBS}
    tr, m = problem.training, problem.model
    tp, pp, dp, cp, ep, mbs = (c[k].astype(float) for k in ("tp", "pp", "dp", "cp", "ep", "mbs"))
    zero, _, shard = sharding(problem, c)
    params = stage_params(problem, c)
    prof, fp8 = stack_profile(tr), compute.is_fp8(problem)
    tok = compute.tokens_per_gpu(mbs, float(tr.seq_len), cp)
    per_layer = params["per_layer"]
    per_layer_act, working = memory.layer_activation_bytes(problem, tok, tp, c["sp"], c["recompute"])
    micro = np.floor(pipeline.microbatches(tr.global_batch, mbs, dp))
    first_n, middle_n, last_n = memory.stage_layer_counts(m.num_hidden_layers, pp, c["vpp"])
    copies = params["held_layers"] / params["layers_per_stage"]
    edges = (params["first"] - params["held_layers"] * per_layer, params["last"] - params["held_layers"] * per_layer)
    shared = memory.fsdp_buffer_bytes(zero, per_layer, prof) + memory.p2p_buffer_bytes(tok, m.hidden_size, tp,
                                                                                        c["sp"], pp)
    logits = memory.logits_bytes(tok, m, tp)
    expert_shard = expert_shard_group(c, shard)
    p = int(layout["pp"])
    rows = []
    for r in range(p):
        n = first_n if r == 0 else last_n if r == p - 1 else middle_n
        edge = (edges[0] if r == 0 else 0.0) + (edges[1] if r == p - 1 and p > 1 else 0.0)
        held = n * copies
        states = split_state_bytes(edge + held * per_layer, held * params["layer_expert_part"], zero, shard,
                                   expert_shard, prof, fp8, tr.optimizer_offload, memory.fp8_param_gather(problem))
        inflight = pipeline.inflight_microbatches(c["schedule"], pp, c["vpp"], micro, r)
        rows.append({**states, "activations": per_layer_act * n * inflight + working,
                     "logits": logits if r == p - 1 else np.zeros(1),
                     "buffers": shared + memory.fp8_meta_bytes(held, m.mlp_matrices + 4, fp8)})
    allocated = [sum(float(row[k][0]) for k in STAGE_KINDS if k != "reserve") for row in rows]
    fixed = memory.CONTEXT_BYTES + memory.NCCL_BYTES_PER_GROUP * float(memory.active_groups(tp, pp, dp, cp, ep)[0])
    # recompute=offload runs with pp = 1: its one stage keeps k layers' activations fewer (planner.cost.step._stages)
    off = activation_offload.offloaded_layers(problem, c["recompute"], first_n, per_layer_act,
                                              np.array(allocated[:1]), np.array([fixed]))
    if off[0] > 0:
        rows[0]["activations"] = rows[0]["activations"] - off * per_layer_act
        allocated[0] -= float(off[0] * per_layer_act[0])
    out = []
    for row, alloc in zip(rows, allocated, strict=True):
        gib = {k: float(row[k][0]) / memory.GIB for k in STAGE_KINDS if k != "reserve"}
        gib["reserve"] = (memory.FRAGMENTATION * alloc + fixed) / memory.GIB
        gib["total"] = alloc / memory.GIB + gib["reserve"]
        out.append(gib)
    return out
