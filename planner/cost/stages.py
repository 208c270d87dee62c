"""Memory of one layout's pipeline stages, split by kind, for the report: explain's priced stages (first, second,
last) and the per-stage chart's every rank.

Both are planner.cost.allocations' one per-stage sum (the chart's ranks: allocations.every_rank, rank r keeping the
activations of `inflight_microbatches(rank=r)` micro-batches); the chart's reserve is what the device total
(device_memory.device_bytes) adds to a rank's allocations: 5 % fragmentation plus the CUDA context and NCCL buffers.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from planner.cost import device_memory
from planner.cost.allocations import activation_side, every_rank, stage_memories, state_side
from planner.cost.memory import GIB
from planner.inputs.layout import KNOBS
from planner.inputs.problem import Problem

STAGE_KINDS = ("weights", "grads", "optimizer", "activations", "logits", "buffers", "reserve")


def stage_memory_gib(problem: Problem, layout: dict[str, int]) -> list[dict[str, float]]:
    """GiB per GPU on each pipeline rank (0 = first stage), by kind: STAGE_KINDS, plus `total` (the device total
    `memory_peak_gib` checks on the busiest rank)."""
    c = {k: np.array([layout[k]], dtype=np.int64) for k in KNOBS}
    places = every_rank(int(layout["pp"]))
    stages = stage_memories(problem, activation_side(problem, c), state_side(problem, c, places), places)
    outside = device_memory.outside_allocator_bytes(device_memory.table_groups(c))
    out = []
    for st in stages:
        gib = {k: float(v[0]) / GIB for k, v in {**st.states, "activations": st.activations, "logits": st.logits,
                                                  "buffers": st.buffers}.items()}
        total = device_memory.device_bytes(st.total, outside)
        gib["reserve"] = float((total - st.total)[0]) / GIB
        gib["total"] = float(total[0]) / GIB
        out.append(gib)
    return out


def memory_stages(problem: Problem, c: Mapping[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """Each priced stage's allocations by kind and in all (`allocated`), GiB (`plan explain`): first, second (rank 1)
    and last stage."""
    stages = stage_memories(problem, activation_side(problem, c), state_side(problem, c))
    out = {}
    for name, st in zip(("first", "second", "last"), stages, strict=True):
        kinds = {**st.states, "activations": st.activations, "logits": st.logits, "buffers": st.buffers,
                 "allocated": st.total}
        out[name] = {kind: v / GIB for kind, v in kinds.items()}
    return out
