"""Optimizer-state offload: the share of the optimizer kept in CPU memory, and what crossing the host link costs.

Megatron-Core's `--optimizer-cpu-offload --optimizer-offload-fraction f` (HybridDeviceOptimizer) keeps fraction f of
the fp32 master weights and Adam moments on the CPU and steps them there; DeepSpeed's `offload_optimizer` (ZeRO-
Offload, Ren et al. 2021) moves all of them. Every step the offloaded share's gradients go to the host and its
updated weights come back (ZeRO-Offload §4: fp16 gradients down, fp16 parameters up): on PCIe Gen5 x16 that is
64 GB/s per direction, on Grace parts NVLink-C2C (clusters/gpus.yaml [PCIE]/[C2C]), at the copy engines' achieved
share (HOST_COPY_EFFICIENCY). The transfers are priced as
exposed (the update needs all gradients, the next forward needs the weights); the CPU Adam itself is not priced.
"""

from __future__ import annotations

import numpy as np

from planner.cost.profiles import FrameworkProfile
from planner.inputs.hardware import HOST_COPY_EFFICIENCY
from planner.inputs.layout import Zero


def offloaded_share(fraction: float) -> float:
    """Fraction of the optimizer states that leaves the GPU."""
    return min(max(fraction, 0.0), 1.0)


def offload_time(stage_p: np.ndarray, zero: np.ndarray, shard_group: np.ndarray, prof: FrameworkProfile,
                 fraction: float, host_link_gbps: float) -> np.ndarray:
    """Seconds per step on the host link: fraction x (this rank's optimizer shard of) params x (gradient bytes
    down + weight bytes up, as the profile keeps them), down and up in sequence."""
    share = offloaded_share(fraction)
    shard = np.where(zero >= Zero.OPTIMIZER, np.maximum(shard_group, 1), 1.0)
    per_rank = share * stage_p / shard
    return per_rank * (prof.grad_bytes + prof.weight_bytes) / (host_link_gbps * 1e9 * HOST_COPY_EFFICIENCY)
