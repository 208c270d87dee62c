"""ZeRO / FSDP / HSDP: what each GPU holds of the parameters and what sharded layers exchange.

Rajbhandari et al. 2020 (ZeRO §5): stage k shards the first k of (optimizer, gradients, parameters) over the data
ranks; stage 3 gathers each layer's weights before use and reduce-scatters its gradients after.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from planner.cost import flops, memory
from planner.cost.fabric import Fabric
from planner.cost.groups import expert_tp, hsdp_shard_group
from planner.cost.profiles import FrameworkProfile, profile_for
from planner.inputs.layout import Zero
from planner.inputs.problem import Problem


def stage_params(problem: Problem, c: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Parameters one GPU of the busiest pipeline stage holds (before any ZeRO sharding).

    The busiest stage holds ceil(L/pp) layers (uneven splits via first/last-stage counts or a pipeline layout);
    the first stage adds the embedding, the last the LM head (and the tied embedding's copy) and any MTP modules.
    """
    m = problem.model
    tp, pp, ep = (c[k].astype(float) for k in ("tp", "pp", "ep"))
    etp = expert_tp(c)
    frac_moe = m.moe_layers / m.num_hidden_layers
    dense_p = flops.dense_layer_params(m) / tp
    moe_shared_p = flops.moe_layer_shared_params(m) / tp if m.is_moe else 0.0
    experts_p = flops.expert_params(m) / (etp * ep) if m.is_moe else 0.0
    layers_per_stage = np.ceil(m.num_hidden_layers / pp)
    per_layer_p = (1 - frac_moe) * dense_p + frac_moe * (moe_shared_p + experts_p)
    emb_p = flops.embedding_params(m) / tp
    mtp_p, mtp_experts = flops.mtp_params(m)  # MTP modules live with the LM head (Megatron-Core: last stage)
    head_p = flops.lm_head_params(m) / tp + mtp_p / tp + mtp_experts / (etp * ep)
    first_p = layers_per_stage * per_layer_p + emb_p + np.where(pp == 1, head_p, 0.0)
    last_p = layers_per_stage * per_layer_p + np.where(pp == 1, emb_p, head_p + (emb_p if m.tie_word_embeddings else 0))
    return {"per_layer": per_layer_p, "layer_expert_part": frac_moe * experts_p, "first": first_p, "last": last_p,
            "stage": np.maximum(first_p, last_p), "embedding": emb_p, "head": head_p,
            "layers_per_stage": layers_per_stage}


def sharding(problem: Problem, c: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(effective ZeRO stage 0-3, HSDP flag, shard group size) of each layout.

    HSDP (PyTorch HYBRID_SHARD; FSDP2 2-D mesh) is ZeRO-3 whose shard group is the data ranks tiling one NVLink
    domain; a profile whose stack always shards optimizer states runs "zero 0" as ZeRO-1.
    """
    prof = profile_for(problem.training.framework)
    hsdp = c["zero"] == Zero.HSDP
    zero = np.where(hsdp, Zero.PARAMETERS, c["zero"])
    if prof.optimizer_always_sharded:
        zero = np.maximum(zero, Zero.OPTIMIZER)
    data_ranks = (c["dp"] * c["cp"]).astype(float)
    shard = np.where(hsdp, hsdp_shard_group(problem.cluster.nvlink_domain, c), data_ranks)
    return zero, hsdp, shard


def state_memory_floor_gib(problem: Problem, c: Mapping[str, np.ndarray]) -> np.ndarray:
    """A cheap lower bound on peak memory: model states alone (no activations, no reserve), with the layout's ZeRO
    sharding. The search drops layouts above capacity before pricing them in full; same accounting as `evaluate`."""
    zero, _, shard = sharding(problem, c)
    stage = stage_params(problem, c)["stage"]
    fp8 = problem.training.precision in ("fp8", "fp4")
    states = memory.state_bytes(stage, zero, shard, profile_for(problem.training.framework), fp8)
    return sum(states.values()) / memory.GIB


def fsdp_exposed(fab: Fabric, prof: FrameworkProfile, zero: np.ndarray, per_layer_p: np.ndarray,
                 shard_group: np.ndarray, tp: np.ndarray, layer_f: np.ndarray,
                 layer_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) ZeRO-3 time per layer and micro-batch not hidden by the layer's compute.

    Forward: gather the layer's bf16 weights, max(ag - t_f, 0); backward: gather again and reduce-scatter the grads,
    max(ag + rs - t_b, 0). HSDP: per-layer gathers stay inside the shard group (one NVLink domain); only a per-step
    all-reduce of the sharded gradients crosses domains (planner.cost.data).
    """
    gathered = per_layer_p * 2.0  # gathered size of one layer's bf16 weights
    ag = fab.collective("all_gather", gathered, shard_group, tp, "dp")
    grads = per_layer_p * prof.grad_reduce_bytes
    rs = fab.collective("reduce_scatter", grads, shard_group, tp, "dp")
    z3 = zero == Zero.PARAMETERS
    return np.where(z3, np.maximum(ag - layer_f, 0.0), 0.0), np.where(z3, np.maximum(ag + rs - layer_b, 0.0), 0.0)
