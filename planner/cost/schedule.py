"""Pipeline schedules: bubble time and how many micro-batches' activations the busiest stage holds.

p stages, m micro-batches, v model chunks per rank; t_f, t_b forward/backward time of one micro-batch on one stage,
t_w the weight-gradient part of t_b (zero-bubble schedules split backward into B = input grad and W).
"""

from __future__ import annotations

import numpy as np

from planner.inputs.layout import SCHEDULES, SEQ1F1B_SEGMENTS

S_1F1B, S_INTERLEAVED, S_ZBH1, S_ZBH2, S_ZBV, S_SEQ1F1B = (
    SCHEDULES.index(s) for s in ("1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "seq1f1b"))


def bubble_time(schedule: np.ndarray, p: np.ndarray, v: np.ndarray, t_f: np.ndarray, t_b: np.ndarray,
                t_w: np.ndarray, m: np.ndarray | float = np.inf) -> np.ndarray:
    """Idle time per step on the critical path.

    1F1B: (p-1)(t_f+t_b) (Narayanan et al. 2021 §2.2.1); interleaved: divided by v (ibid. §2.2.2);
    ZB-H1: (p-1)(t_f + t_B - t_W) with t_B = t_b - t_W (Qi et al. 2024, arXiv 2401.10241 §2.1);
    ZB-H2: fills the warm-up with W passes, leaving (p-1) * max(0, t_f + t_B - 2 t_W) (ibid. §2.2).
    ZB-V: two chunks per rank in a V, same zero-bubble condition as ZB-H2 at 1F1B's memory (ibid. §6; the
    zero-bubble repository README).
    Seq1F1B: segments of a sequence flow as micro-batches; with the paper's computation-wise partition (segment
    lengths chosen so each costs 1/k of the sequence despite causal attention) warm-up and cool-down shrink to
    (p-1)(t_f+t_b)/k (Sun et al. 2024, arXiv 2406.03488 §3.3). Equal-length segments would instead stall on the
    heaviest last segment; planner.strategies.pipeline_sim shows both.
    """
    t_bi = t_b - t_w
    base = (p - 1) * (t_f + t_b)
    out = np.where(schedule == S_INTERLEAVED, base / np.maximum(v, 1), base)
    # Zero-bubble schedules fill idle slots with deferred W passes; with fewer micro-batches than the fill needs
    # (p - 1 for ZB-H1, 2p - 1 for ZB-H2 / ZB-V) only that share of the saving is available.
    zb1 = (p - 1) * np.maximum(t_f + t_bi - t_w, 0.0)
    zb2 = (p - 1) * np.maximum(t_f + t_bi - 2 * t_w, 0.0)
    fill1 = np.minimum(1.0, m / np.maximum(p - 1, 1))
    fill2 = np.minimum(1.0, m / np.maximum(2 * p - 1, 1))
    out = np.where(schedule == S_ZBH1, base - (base - zb1) * fill1, out)
    out = np.where((schedule == S_ZBH2) | (schedule == S_ZBV), base - (base - zb2) * fill2, out)
    out = np.where(schedule == S_SEQ1F1B, base / SEQ1F1B_SEGMENTS, out)
    return np.where(p > 1, out, 0.0)


def inflight_microbatches(schedule: np.ndarray, p: np.ndarray, v: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Micro-batches of one stage's layers whose activations the first stage holds at its peak.

    1F1B: min(m, p) (Megatron schedules.py warm-up p - rank - 1, plus one); interleaved: times
    1 + (p-1)/(p v) (Korthikanti et al. 2022 §4.2.3; Megatron theoretical_memory_usage.py); ZB-H1 keeps 1F1B's peak;
    ZB-H2 holds up to 2p - 1 (Qi et al. 2024 §2.2); ZB-V keeps 1F1B's p; Seq1F1B holds p + k - 1 segments of 1/k
    of a sequence, (p + k - 1)/k micro-batches (its warm-up, checked by planner.strategies.pipeline_sim).
    No pipeline: one micro-batch at a time.
    """
    base = np.minimum(m, p).astype(float)
    out = np.where(schedule == S_INTERLEAVED, base * (1 + (p - 1) / (p * np.maximum(v, 1))), base)
    out = np.where(schedule == S_ZBH2, np.minimum(m, 2 * p - 1).astype(float), out)
    k = SEQ1F1B_SEGMENTS
    out = np.where(schedule == S_SEQ1F1B, np.minimum(m * k, p + k - 1) / k, out)
    return np.where(p > 1, out, 1.0)
