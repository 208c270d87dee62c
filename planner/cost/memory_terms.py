"""The memory numbers `evaluate` returns, one function each, in GiB per GPU (planner.cost.terms names them).

Like Megatron-LM's theoretical_memory_usage.py, one function per printed number; here every number is read from
the priced stages' allocations (planner.cost.allocations, whose formulas are in planner.cost.memory) and the
device total over them (planner.cost.device_memory). The per-kind numbers are the busiest stage's: the one of the
first, second and last with the largest allocations, so that they add up to memory_allocated_gib.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from planner.cost import device_memory
from planner.cost.allocations import StageMemory, activation_side, stage_memories, state_side
from planner.cost.memory import GIB
from planner.inputs.problem import Problem


@dataclass(frozen=True)
class Busiest:
    """The priced stages (first, second, last), the largest of their allocations per row, and what the GPU holds
    outside the allocator (device_memory.outside_allocator_bytes of `groups` communicators)."""

    stages: Sequence[StageMemory]
    allocated: np.ndarray
    outside: np.ndarray
    groups: np.ndarray | None = None

    @cached_property
    def index(self) -> np.ndarray:
        """Which stage is the busiest, per row (the first of equals)."""
        return np.argmax(np.stack([st.total for st in self.stages]), axis=0)

    def pick(self, get: Callable[[StageMemory], np.ndarray]) -> np.ndarray:
        """`get` of the busiest stage, per row."""
        return np.choose(self.index, [np.broadcast_to(get(st), self.index.shape) for st in self.stages])


def busiest(stages: Sequence[StageMemory], groups: np.ndarray | None = None,
            outside: np.ndarray | None = None) -> Busiest:
    """Busiest of `stages`, with `groups` active communicators (device_memory.active_groups), or, where only the
    peak is read, `outside` bytes."""
    first, second, last = stages
    allocated = np.maximum(np.maximum(first.total, second.total), last.total)
    if outside is None:
        outside = device_memory.outside_allocator_bytes(groups)
    return Busiest(stages, allocated, outside, groups)


def peak_gib(b: Busiest) -> np.ndarray:
    """memory_peak_gib, the device total the fit check uses: device_memory.device_bytes of the busiest stage's
    allocations = allocated + 5 % fragmentation + CUDA context + NCCL buffers per communicator."""
    return device_memory.device_bytes(b.allocated, b.outside) / GIB


def reserved_gib(b: Busiest) -> np.ndarray:
    """memory_reserved_gib: allocated + fragmentation (Megatron theoretical_memory_usage.py's 5 %), what
    torch.cuda.max_memory_reserved reports (torchtitan's step log)."""
    return device_memory.device_bytes(b.allocated, 0.0) / GIB


def allocated_gib(b: Busiest) -> np.ndarray:
    """memory_allocated_gib: the largest of the first, second and last stage's allocations, what
    torch.cuda.max_memory_allocated reports (Megatron's "max allocated", DeepSpeed's "Max_MA")."""
    return b.allocated / GIB


def weights_gib(b: Busiest) -> np.ndarray:
    """mem_weights_gib: params·(weight bytes + 1 fp8 copy), /shard at ZeRO-3 (memory.state_bytes; ZeRO §5)."""
    return b.pick(lambda st: st.states["weights"]) / GIB


def grads_gib(b: Busiest) -> np.ndarray:
    """mem_grads_gib: params·grad bytes, /shard at ZeRO >= 2 (memory.state_bytes; ZeRO §5)."""
    return b.pick(lambda st: st.states["grads"]) / GIB


def optimizer_gib(b: Busiest) -> np.ndarray:
    """mem_optimizer_gib: params·optimizer bytes, /shard at ZeRO >= 1 (memory.state_bytes; ZeRO §5)."""
    return b.pick(lambda st: st.states["optimizer"]) / GIB


def activations_gib(b: Busiest) -> np.ndarray:
    """mem_activations_gib: bytes one layer keeps per micro-batch (memory.layer_activation_bytes; Korthikanti et al.
    2022 §4) x the stage's layers x micro-batches in flight (pipeline.inflight_microbatches) + the recompute working
    set, less what offloading moves to the host (allocations.stage_memories)."""
    return b.pick(lambda st: st.activations) / GIB


def logits_gib(b: Busiest) -> np.ndarray:
    """mem_logits_gib: tokens·V·(the stack's bytes per logit, 6 for Megatron) / tp on the last stage
    (memory.logits_bytes; Korthikanti §4.3)."""
    return b.pick(lambda st: st.logits) / GIB


def buffers_gib(b: Busiest) -> np.ndarray:
    """mem_buffers_gib: ZeRO-3 gathered layers (memory.fsdp_buffer_bytes) + pipeline send/recv hidden states
    (memory.p2p_buffer_bytes) + fp8 amax histories (memory.fp8_meta_bytes)."""
    return b.pick(lambda st: st.buffers) / GIB


def fragmentation_gib(b: Busiest) -> np.ndarray:
    """mem_fragmentation_gib: reserved - allocated, 5 % of allocated (device_memory.fragmentation_bytes)."""
    return device_memory.fragmentation_bytes(b.allocated) / GIB


def context_gib(b: Busiest) -> np.ndarray:
    """mem_context_gib: 1 GiB of CUDA context and kernels outside the allocator (device_memory.CONTEXT_BYTES)."""
    return device_memory.CONTEXT_BYTES / GIB + 0 * b.allocated


def nccl_gib(b: Busiest) -> np.ndarray:
    """mem_nccl_gib: per active communicator 2 connections x 32 channels x 9.2 MiB of protocol buffers
    (device_memory.nccl_bytes)."""
    return device_memory.nccl_bytes(b.groups) / GIB + 0 * b.allocated


def reserve_gib(b: Busiest) -> np.ndarray:
    """mem_reserve_gib: what the device holds beyond model states, activations and logits: fragmentation + CUDA
    context + NCCL buffers + transient buffers."""
    return (device_memory.fragmentation_bytes(b.allocated) + b.outside + b.pick(lambda st: st.buffers)) / GIB


def first_stage_gib(b: Busiest) -> np.ndarray:
    """mem_first_stage_gib: the first stage's device total, device_memory.device_bytes of its allocations."""
    return device_memory.device_bytes(b.stages[0].total, b.outside) / GIB


def last_stage_gib(b: Busiest) -> np.ndarray:
    """mem_last_stage_gib: the last stage's device total, device_memory.device_bytes of its allocations."""
    return device_memory.device_bytes(b.stages[-1].total, b.outside) / GIB


def report(stages: Sequence[StageMemory], groups: np.ndarray) -> dict[str, np.ndarray]:
    """Every memory number of the first, second and last stage (allocations.PRICED) with `groups` communicators,
    under evaluate's keys."""
    b = busiest(stages, groups)
    return {"memory_peak_gib": peak_gib(b), "memory_reserved_gib": reserved_gib(b),
            "memory_allocated_gib": allocated_gib(b), "mem_weights_gib": weights_gib(b), "mem_grads_gib": grads_gib(b),
            "mem_optimizer_gib": optimizer_gib(b), "mem_activations_gib": activations_gib(b),
            "mem_logits_gib": logits_gib(b), "mem_buffers_gib": buffers_gib(b),
            "mem_fragmentation_gib": fragmentation_gib(b), "mem_context_gib": context_gib(b),
            "mem_nccl_gib": nccl_gib(b), "mem_reserve_gib": reserve_gib(b), "mem_first_stage_gib": first_stage_gib(b),
            "mem_last_stage_gib": last_stage_gib(b)}


def memory_peak_gib(problem: Problem, c: Mapping[str, np.ndarray]) -> np.ndarray:
    """`evaluate`'s memory_peak_gib alone (no time terms), for a layout table."""
    stages = stage_memories(problem, activation_side(problem, c), state_side(problem, c))
    return peak_gib(busiest(stages, device_memory.table_groups(c)))
