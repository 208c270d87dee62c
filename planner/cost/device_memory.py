"""The device total: what a GPU holds beyond its live tensors, and the one formula that adds it to them.

    device = allocated + FRAGMENTATION·allocated + CUDA context + NCCL buffers per communicator

`device_bytes` is that formula and `allocation_budget` its inverse (the allocations a device total leaves room for).
Every device total the planner prints or compares comes from them: memory_peak_gib and the first and last stage's
totals (planner.cost.memory_terms), every pipeline rank's total (planner.cost.stages), the layers activation
offloading moves (planner.cost.activation_offload), the strategies' budgets (planner.strategies.partition, osdp) and,
summed in another order, the search's fit test (planner.cost.fit_check, whose module docstring gives the algebra).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from planner.cost.memory import GIB, MIB

# Outside the PyTorch allocator, so in neither max_memory_allocated nor max_memory_reserved:
# - CUDA context and loaded kernels: 0.5-2 GiB; A100 80GB with torch 2.1.1 eager-loaded 0.92 GiB, lazy 0.47 GiB
#   (stas00/ml-engineering training/performance/README.md "Preloaded CUDA kernels memory usage"; "1-2 GB",
#   Ultra-Scale Playbook, First Steps). 1 GiB, the eager-loaded figure rounded up for newer kernel libraries. Measured
#   here: 0.75 GiB on an H100 with torch 2.11 / CUDA 13 in a plain PyTorch process (device used minus reserved,
#   bench/results/h100-2026-11-27), which loads neither NCCL nor Transformer Engine; a training stack loads more.
CONTEXT_BYTES = 1.0 * GIB
# - NCCL buffers, per communicator: each channel's connection holds a buffer per protocol, Simple NCCL_BUFFSIZE
#   4 MiB + LL 8x512x8x16 B = 512 KiB + LL128 120x640x8x8 B = 4.69 MiB (nccl src/include/device.h, init.cc); a ring
#   needs a send and a receive connection per channel regardless of scale (sjeaugey, NVIDIA/nccl#986); 32 channels
#   on NVLink-class fabrics. 2 x 32 x 9.2 MiB = 0.58 GiB, as measured: 544 MB (2 ranks) / 688 MB per group on A100
#   (NVIDIA/nccl#964). More communicators, more buffers (nccl#864: ~1.6 GB with one vs ~6 GB with >= 3).
NCCL_CHANNELS = 32
NCCL_CONNECTIONS = 2
NCCL_PROTOCOL_BYTES = 4 * MIB + 8 * 512 * 8 * 16 + 120 * 640 * 8 * 8
NCCL_BYTES_PER_GROUP = NCCL_CONNECTIONS * NCCL_CHANNELS * NCCL_PROTOCOL_BYTES
# Inside the allocator, reserved but not allocated: the caching allocator keeps freed blocks per stream and splits
# cached segments, so reserved >= allocated; Megatron's estimator adds 5% for it (theoretical_memory_usage.py).
# `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (recommended by Megatron's MoE README, set by torchtitan's
# run_train.sh) grows one segment per stream instead of one per > 2 MB allocation and avoids unusable slivers
# (PyTorch docs/source/notes/cuda.md); no published figure quantifies that, so the 5% stands for both. Measured on
# one H100 (bench/results/h100-2026-11-27, a 1.2B model): reserved was 1.5-9 % above allocated without recompute
# and 5-26 % with full recompute, and expandable segments did not narrow it there.
FRAGMENTATION = 0.05


def active_groups(tp: np.ndarray, pp: np.ndarray, dp: np.ndarray, cp: np.ndarray, ep: np.ndarray) -> np.ndarray:
    """Communicators with more than one rank (each holds NCCL buffers): tp, pp, dp·cp, cp, ep."""
    return sum((x > 1).astype(float) for x in (tp, pp, dp * cp, cp, ep))


def table_groups(c: Mapping[str, np.ndarray]) -> np.ndarray:
    """active_groups of a layout table's columns."""
    return active_groups(*(c[x].astype(float) for x in ("tp", "pp", "dp", "cp", "ep")))


def nccl_bytes(groups: np.ndarray) -> np.ndarray:
    """NCCL buffers of `groups` communicators (active_groups): NCCL_BYTES_PER_GROUP each."""
    return NCCL_BYTES_PER_GROUP * groups


def outside_allocator_bytes(groups: np.ndarray) -> np.ndarray:
    """What every GPU holds outside the allocator: the CUDA context and the NCCL buffers of `groups` communicators."""
    return CONTEXT_BYTES + nccl_bytes(groups)


def fragmentation_bytes(allocated: np.ndarray) -> np.ndarray:
    """The caching allocator's slack over `allocated` bytes: reserved - allocated = FRAGMENTATION·allocated."""
    return FRAGMENTATION * allocated


def device_bytes(allocated: np.ndarray | float, outside: np.ndarray | float) -> np.ndarray:
    """The device total of a GPU whose live tensors take `allocated` bytes and which holds `outside` bytes outside
    the allocator (outside_allocator_bytes): allocated + fragmentation + outside. With `outside` = 0, the
    allocator's reserved bytes (torch.cuda.max_memory_reserved)."""
    return allocated + fragmentation_bytes(allocated) + outside


def allocation_budget(device: np.ndarray | float, outside: np.ndarray | float) -> np.ndarray:
    """device_bytes' inverse: the allocations whose device total is `device` bytes, (device - outside) /
    (1 + FRAGMENTATION) (equal up to rounding: the two sum in different orders)."""
    return (device - outside) / (1 + FRAGMENTATION)


def plan_fixed_bytes(priced: Mapping[str, float]) -> float:
    """For strategies that re-price a plan's model states, activations and logits and keep the rest: the bytes the
    priced plan holds beyond those, outside the allocator (its CUDA context and NCCL buffers, from the printed
    GiB) plus its transient buffers with their fragmentation share, so that device_bytes(states + activations +
    logits, this) is the plan's device total."""
    outside = (priced["mem_context_gib"] + priced["mem_nccl_gib"]) * GIB
    return float(device_bytes(priced["mem_buffers_gib"] * GIB, outside))
