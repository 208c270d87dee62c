"""Tensor-parallel collectives of one layer (Megatron TP: Narayanan et al. 2021 §3.2)."""

from __future__ import annotations

import numpy as np

from planner.cost.fabric import Fabric
from planner.cost.profiles import FrameworkProfile
from planner.inputs.layout import Recompute


def activation_bytes(tok: np.ndarray, hidden: int) -> np.ndarray:
    """One bf16 activation tensor of the micro-batch's tokens: tok·h·2."""
    return tok * hidden * 2.0


def tp_exposed(fab: Fabric, prof: FrameworkProfile, act_bytes: np.ndarray, tp: np.ndarray,
               rc: np.ndarray, mlp_kept: np.ndarray | float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(forward + backward, forward) exposed TP time per layer: n all-reduces of the activation over the adjacent tp
    ranks, one after the attention and one after the MLP per pass, n = 2 fwd + 2 bwd (Narayanan et al. 2021 §3.2),
    +2 when recomputing fully, times (1 - tp_overlap). `mlp_kept`: share of the layers whose MLP is TP-split; MoE
    layers with whole experts (etp = 1) and no shared expert take their sequence-parallel tokens straight to the
    dispatch and back, with no TP collective (Megatron-Core token dispatcher: the TP all-gather/reduce-scatter
    around the experts runs only when the expert TP size is > 1)."""
    one = np.ones_like(tp)
    tp_coll = fab.collective("all_reduce", act_bytes, tp, one, "tp")
    per_pass = 1 + np.asarray(mlp_kept, dtype=float)
    n_tp_coll = (2 + np.where(rc == Recompute.FULL, 1, 0)) * per_pass
    return n_tp_coll * tp_coll * (1 - prof.tp_overlap), per_pass * tp_coll * (1 - prof.tp_overlap)


def tp_comm_time(micro: np.ndarray, layers: np.ndarray, per_layer: np.ndarray) -> np.ndarray:
    """tp_comm_s: exposed TP per step on the busiest stage, m·L·(tp_exposed's forward + backward per layer) =
    m·L·(4, +2 full recompute)·all-reduce(activation)·(1 - overlap) (Narayanan et al. 2021 §3.2)."""
    return micro * layers * per_layer
