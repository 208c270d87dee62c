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
               rc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(forward + backward, forward) exposed TP time per layer: n all-reduces of the activation over the adjacent tp
    ranks, n = 2 fwd + 2 bwd (Narayanan et al. 2021 §3.2), +2 when recomputing fully, times (1 - tp_overlap)."""
    one = np.ones_like(tp)
    tp_coll = fab.collective("all_reduce", act_bytes, tp, one, "tp")
    n_tp_coll = 4 + np.where(rc == Recompute.FULL, 2, 0)
    return n_tp_coll * tp_coll * (1 - prof.tp_overlap), 2 * tp_coll * (1 - prof.tp_overlap)
