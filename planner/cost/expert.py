"""Mixture-of-experts terms: the busiest expert's extra load, grouped-GEMM launches and host sync, token all-to-all.

The constants are read at call time (bench/fit_profiles.py --moe sets them while fitting).
"""

from __future__ import annotations

import numpy as np

from planner.cost import flops
from planner.cost.fabric import Fabric
from planner.cost.profiles import FrameworkProfile
from planner.inputs.hardware import KERNEL_OVERHEAD_S
from planner.inputs.specs import ModelSpec

# Dropless MoE: the busiest expert-parallel rank receives more than the average k/E share of tokens and everyone
# waits for it. Factor on the routed-expert GEMM time, fitted on the MoE cases of validation/published_runs.yaml
# (bench/fit_profiles.py --moe); it lands where Switch Transformer's capacity factors do (Fedus et al. 2021 §2.2:
# 1.0-1.25 drops only ~1% of tokens, i.e. the busiest expert sees up to ~1.25x the mean load).
EXPERT_IMBALANCE = 1.2
# Dropless token dispatch copies the per-expert token counts to the host to size the grouped GEMMs (Megatron-Core
# MoEAlltoAllTokenDispatcher: tokens_per_expert.cpu()), stalling the GPU once per MoE layer and pass until the CPU has
# launched the following kernels again: eager PyTorch enqueues the layer's remaining ~50-100 ops at ~10 us each.
# Fitted together with EXPERT_IMBALANCE on the MoE cases (bench/fit_profiles.py --moe): 0.8 ms per layer and pass.
MOE_HOST_SYNC_S = 0.8e-3


def moe_layer_flops(m: ModelSpec, tf: flops.TokenFlops) -> float:
    """Forward GEMM FLOPs per token of a MoE layer as the busiest rank sees them:
    moe_gemm + (EXPERT_IMBALANCE - 1)·routed, routed = 2·k·(expert MLP params)."""
    routed = 2.0 * m.num_experts_per_tok * flops.mlp_params(m, m.expert_ffn) if m.is_moe else 0.0
    return tf.moe_gemm + (EXPERT_IMBALANCE - 1) * routed


def moe_launch_time(m: ModelSpec, ep: np.ndarray) -> np.ndarray:
    """Per average layer and pass: f_moe·(launch·matrices·E/ep + MOE_HOST_SYNC_S) (Megatron-Core GroupedMLP, one
    launch/tail per local expert's GEMM)."""
    frac_moe = m.moe_layers / m.num_hidden_layers
    return frac_moe * (KERNEL_OVERHEAD_S * m.mlp_matrices * m.num_local_experts / ep + MOE_HOST_SYNC_S)


def dispatch_exposed(m: ModelSpec, fab: Fabric, prof: FrameworkProfile, tok: np.ndarray, tp: np.ndarray,
                     ep: np.ndarray, etp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(forward + backward, forward) exposed token all-to-all per average layer: dispatch and combine each way,
    k·h bf16 values per token over the ep group (strided by etp), less the profile's overlap."""
    if not m.is_moe:
        return np.zeros_like(tp), np.zeros_like(tp)
    frac_moe = m.moe_layers / m.num_hidden_layers
    a2a_bytes = tok * m.num_experts_per_tok * m.hidden_size * 2.0 / tp
    a2a = fab.collective("all_to_all", a2a_bytes, ep, etp, "ep") * (1 - prof.ep_overlap)
    return frac_moe * 4 * a2a, frac_moe * 2 * a2a
