"""Pipeline parallelism: bubble time, how many micro-batches' activations the busiest stage holds, the stage's
micro-batch time and its p2p hand-offs, and the step they add up to.

p stages, m micro-batches, v model chunks per rank; t_f, t_b forward/backward time of one micro-batch on one stage,
t_w the weight-gradient part of t_b (zero-bubble schedules split backward into B = input grad and W).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cost.compute import LayerTimes
from planner.cost.fabric import Fabric, group_tier
from planner.inputs.layout import DUALPIPES, SEQ1F1B_SEGMENTS, Schedule


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
    Combined 1F1B (Megatron-Core EP overlap) keeps 1F1B's or, with vpp > 1, interleaving's bubble.
    DualPipe: (p/2 - 1)(F&B + B - 3W), F&B the overlapped forward+backward pair, here t_f + t_b with the
    all-to-all already hidden (DeepSeek-V3 report Table 2; deepseek-ai/DualPipe README). DualPipe-V: the same with
    PP = 2p stages of half a rank's work each, (p - 1)(F&B + B - 3W)/2 in rank times.
    """
    schedule, p, v, t_f, t_b, t_w, m = np.broadcast_arrays(schedule, p, v, t_f, t_b, t_w, m)
    base = (p - 1) * (t_f + t_b)
    out = base.astype(float)  # 1F1B, ZB-H1's ceiling, and every schedule's fallback
    # each schedule's formula on its own rows (elementwise, so each row gets the bits the whole column would)
    for code in present_codes(schedule):
        if code == Schedule.ONE_F_ONE_B:
            continue
        rows = np.flatnonzero(schedule == code)
        out[rows] = _schedule_bubble(Schedule(int(code)), *(x.take(rows) for x in (base, p, v, t_f, t_b, t_w, m)))
    return np.where(p > 1, out, 0.0)


def present_codes(codes: np.ndarray) -> np.ndarray:
    """np.unique of a column of small non-negative integer codes, by counting instead of sorting (the same values,
    ascending; a few ms on the search's million-row columns, and numpy.unique's import of numpy.ma avoided)."""
    if codes.dtype.kind in "iu" and (codes.size == 0 or int(codes.min()) >= 0):
        return np.flatnonzero(np.bincount(codes.ravel()))
    return np.unique(codes)


def _schedule_bubble(schedule: Schedule, base: np.ndarray, p: np.ndarray, v: np.ndarray, t_f: np.ndarray,
                     t_b: np.ndarray, t_w: np.ndarray, m: np.ndarray) -> np.ndarray:
    """bubble_time of the rows that run `schedule` (base: 1F1B's)."""
    t_bi = t_b - t_w
    if schedule in (Schedule.INTERLEAVED, Schedule.COMBINED_1F1B):
        return base / np.maximum(v, 1)
    # Zero-bubble schedules fill idle slots with deferred W passes; with fewer micro-batches than the fill needs
    # (p - 1 for ZB-H1, 2p - 1 for ZB-H2 / ZB-V) only that share of the saving is available.
    if schedule == Schedule.ZB_H1:
        zb1 = (p - 1) * np.maximum(t_f + t_bi - t_w, 0.0)
        return base - (base - zb1) * np.minimum(1.0, m / np.maximum(p - 1, 1))
    if schedule in (Schedule.ZB_H2, Schedule.ZB_V):
        zb2 = (p - 1) * np.maximum(t_f + t_bi - 2 * t_w, 0.0)
        return base - (base - zb2) * np.minimum(1.0, m / np.maximum(2 * p - 1, 1))
    if schedule == Schedule.SEQ1F1B:
        return base / SEQ1F1B_SEGMENTS
    pair = np.maximum(t_f + 2 * t_b - 3 * t_w, 0.0)
    if schedule == Schedule.DUALPIPE:
        return np.maximum(p / 2 - 1, 0.0) * pair
    if schedule == Schedule.DUALPIPE_V:  # folds 2p stages onto p ranks: the table's PP is 2p, half a rank's work each
        return (p - 1) * pair / 2
    return base


def interleaved_inflight_chunks(p: np.ndarray, v: np.ndarray, m: np.ndarray, rank: np.ndarray | int = 0,
                                group: np.ndarray | None = None, extra: np.ndarray | int = 0) -> np.ndarray:
    """Model chunks' activations rank `rank` holds at its peak under Megatron's interleaved 1F1B.

    Megatron-Core schedules.py `get_pp_rank_microbatches` warms rank r up with 2(p - r - 1) + (v - 1)·N
    chunk-forwards, N the micro-batch group size (--microbatch-group-size-per-virtual-pipeline-stage, default p),
    capped at m·v, when every forward runs in the warm-up; the steady state's first forward adds one more:
    min(2(p - r - 1) + (v - 1)·N + 1, m·v). Each chunk is 1/v of the rank's layers. `extra` = 1 under
    `--overlap-moe-expert-parallel-comm` (the combined schedule warms up one more chunk, same function).
    """
    n = p if group is None else group
    return np.minimum(2 * (p - rank - 1) + (v - 1) * n + 1 + extra, m * v).astype(float)


def inflight_microbatches(schedule: np.ndarray, p: np.ndarray, v: np.ndarray, m: np.ndarray,
                          rank: np.ndarray | int = 0) -> np.ndarray:
    """Micro-batches of one stage's layers whose activations rank `rank` holds at its peak (0: the first stage).

    1F1B: min(m, p - r) (Megatron schedules.py warm-up p - r - 1, plus one); interleaved:
    interleaved_inflight_chunks / v, which for m·v >= p·v + p - 1 on rank 0 equals Korthikanti et al. 2022 §4.2.3's
    p·(1 + (p-1)/(p v)) (Megatron theoretical_memory_usage.py) and is less when the m·v cap binds (m = p);
    ZB-H1 keeps 1F1B's peak; ZB-H2 holds up to 2(p - r) - 1 (Qi et al. 2024 §2.2); ZB-V keeps 1F1B's p on every
    rank; Seq1F1B holds p - r + k - 1 segments of 1/k of a sequence (its warm-up, checked by
    planner.strategies.pipeline_sim; rank > 0 checked there for 1F1B and interleaved only). Combined 1F1B: as
    1F1B / interleaved with one more chunk in warm-up. DualPipe / DualPipe-V: p + 1 (DeepSeek-V3 report Table 2).
    No pipeline: one micro-batch at a time, under combined 1F1B too: its pairs run the forward of layer i of one
    micro-batch beside the backward of layer N - 1 - i of the other (Megatron-Core model_chunk_schedule_plan.py
    TransformerModelChunkSchedulePlan.run, combined_1f1b.py combined_1f1b_schedule_for_no_pipelining), and the
    backward frees each layer's activations as the forward allocates the next, so a pair holds N + 1 layers: one
    micro-batch and the one layer planner.cost.allocations adds (PAIR_LAYERS).
    """
    base = np.minimum(m, p - rank).astype(float)
    vv = np.maximum(v, 1)
    combined = schedule == Schedule.COMBINED_1F1B
    out = np.where(schedule == Schedule.INTERLEAVED, interleaved_inflight_chunks(p, vv, m, rank) / vv, base)
    out = np.where(combined & (vv > 1), interleaved_inflight_chunks(p, vv, m, rank, extra=1) / vv,
                   np.where(combined, np.minimum(m, p - rank + 1), out))
    out = np.where(np.isin(schedule, DUALPIPES), np.minimum(m, p + 1).astype(float), out)
    out = np.where(schedule == Schedule.ZB_H2, np.minimum(m, 2 * (p - rank) - 1).astype(float), out)
    out = np.where(schedule == Schedule.ZB_V, np.minimum(m, p).astype(float), out)
    k = SEQ1F1B_SEGMENTS
    out = np.where(schedule == Schedule.SEQ1F1B, np.minimum(m * k, p - rank + k - 1) / k, out)
    return np.where(p > 1, out, 1.0)


def microbatches(global_batch: int, mbs: np.ndarray, dp: np.ndarray) -> np.ndarray:
    """Micro-batches per step per pipeline: global batch / (mbs·dp)."""
    return global_batch / (mbs * dp)


def hand_off_time(fab: Fabric, act_bytes: np.ndarray, tp: np.ndarray, sp: np.ndarray, pp: np.ndarray,
                  n_gpus: float, stride: np.ndarray | None = None) -> np.ndarray:
    """One p2p hand-off between stages: one activation tensor per micro-batch (/tp with scatter-gather or SP).
    Neighbours are `stride` ranks apart (planner.cost.groups.Placement.pp_stride; world/pp in the default rank order).
    It leaves the NVLink domain when a stage fills one (stride >= the domain; Narayanan et al. 2021 §4.1), and a
    pipeline whose stages span domains of the tiers beyond the first network tier runs at the pace of its slowest
    hop there (every micro-batch passes every hop): the outermost such tier (fabric.group_tier) prices it."""
    stride = n_gpus / pp if stride is None else stride
    g = fab.geometry(pp, stride)[0]
    tier = (stride >= fab.levels.sizes[0]).astype(np.intp)
    if len(g) > 2:  # a third tier: a hop past the first network tier decides
        beyond = group_tier(g[1:], pp)
        tier = np.where(beyond > 0, 1 + beyond, tier)
    hand_off = act_bytes / np.where(sp == 1, tp, 1.0)
    return np.where(pp > 1, fab.send(hand_off, tier, "pp"), 0.0)


def hand_offs_exposed(p2p: np.ndarray, vpp: np.ndarray, schedule: np.ndarray) -> np.ndarray:
    """Per micro-batch, one send each way; interleaving sends v times as many (Narayanan et al. 2021 §4.1).
    DualPipe's paired chunks hide the pipeline sends as they hide the all-to-all (DeepSeek-V3 report §3.2.1)."""
    return np.where(np.isin(schedule, DUALPIPES), 0.0, 2 * p2p * vpp)


def pp_comm_time(micro: np.ndarray, exposed: np.ndarray) -> np.ndarray:
    """pp_comm_s: m·(hand-offs exposed per micro-batch, hand_offs_exposed) = m·2·p2p·v (Narayanan et al. 2021
    §4.1)."""
    return micro * exposed


@dataclass(frozen=True)
class LayerComm:
    """Exposed communication of one average layer per micro-batch: forward + backward totals and forward shares."""

    tp: np.ndarray
    tp_f: np.ndarray
    cp: np.ndarray
    cp_f: np.ndarray
    ep: np.ndarray
    ep_f: np.ndarray
    fsdp_f: np.ndarray
    fsdp_b: np.ndarray
    nic: np.ndarray | float = 0.0  # what the shared network links add beyond the rest (planner.cost.links)

    def total(self) -> np.ndarray:
        return self.tp + self.cp + self.ep + self.fsdp_f + self.fsdp_b + self.nic


@dataclass(frozen=True)
class StageTimes:
    """One micro-batch through the busiest stage."""

    per_layer_f: np.ndarray  # kernels + exposed communication, forward
    per_layer_b: np.ndarray  # the same for the backward, recomputation included
    fwd: np.ndarray
    bwd: np.ndarray
    wgrad: np.ndarray


def stage_times(layers: np.ndarray, lt: LayerTimes, recompute_b: np.ndarray, lc: LayerComm | None,
                head_f: np.ndarray, edges: tuple[np.ndarray, np.ndarray], schedule: np.ndarray) -> StageTimes:
    """One micro-batch through the busiest rank. Per layer: t_f = layer fwd + exposed fwd comm, t_b = layer bwd +
    recompute + the rest of the exposed comm. The busiest stage is the slower of a middle stage, ceil(L/pp) layers,
    and the last stage, its layers in the launched split (`edges`) + the LM head (and MTP): forward 1x head,
    backward 2x, W 1x; with an even split both are ceil(L/pp) layers + head (e.g. the Zero Bubble runs, Qi et al.
    2024: 22 layers on 8 stages, 2 + head on the last, 3 in the middle). DualPipe runs half the micro-batches through
    each of a rank's two
    stages, first with last on rank 0 (`edges`: the launcher's first/last counts, planner.cost.memory.
    stage_layer_counts), so its busiest rank is
    max(middle, (first + last layers + head) / 2) (DeepSeek-V3 report §3.2.1: the head and embedding share a rank).
    `lc` None: no exposed communication (step_time_floor's cheap form; the same values as zeros, without the adds)."""
    if lc is None:
        per_layer_f, per_layer_b = lt.fwd, lt.bwd + recompute_b
    else:
        per_layer_f = lt.fwd + lc.tp_f + lc.cp_f + lc.ep_f + lc.fsdp_f
        per_layer_b = (lt.bwd + recompute_b + (lc.tp - lc.tp_f) + (lc.cp - lc.cp_f)
                       + (lc.ep - lc.ep_f) + lc.fsdp_b + lc.nic)
    return StageTimes(per_layer_f, per_layer_b, stage_forward_time(layers, per_layer_f, head_f, edges, schedule),
                      stage_backward_time(layers, per_layer_b, head_f, edges, schedule),
                      stage_wgrad_time(layers, lt.wgrad, head_f, edges, schedule))


def busiest_stage_time(layers: np.ndarray, per_layer: np.ndarray, head: np.ndarray,
                       edges: tuple[np.ndarray, np.ndarray], schedule: np.ndarray) -> np.ndarray:
    """One pass of one micro-batch through the busiest rank (stage_times): max(L·t, L_last·t + head), and under
    DualPipe max(L·t, (L_first + L_last)·t/2 + head/2), t the pass's time per layer, `edges` (L_first, L_last)."""
    first, last = edges
    single = np.maximum(layers * per_layer, last * per_layer + head)
    paired = np.maximum(layers * per_layer, 0.5 * ((first + last) * per_layer + head))
    return np.where(schedule == Schedule.DUALPIPE, paired, single)


def binding_rank_layers(layers: np.ndarray, per_layer: np.ndarray, head: np.ndarray,
                        edges: tuple[np.ndarray, np.ndarray], schedule: np.ndarray) -> np.ndarray:
    """The layers of the rank `busiest_stage_time` prices, so that the step's parts are counted on one rank: a middle
    rank's L, or the last rank's (under DualPipe half the first and last ranks') where its layers and the head take
    longer."""
    first, last = edges
    single = np.where(last * per_layer + head > layers * per_layer, last, layers)
    paired = np.where(0.5 * ((first + last) * per_layer + head) > layers * per_layer, 0.5 * (first + last), layers)
    return np.where(schedule == Schedule.DUALPIPE, paired, single)


def compute_time(micro: np.ndarray, layers: np.ndarray, lt: LayerTimes, recompute_b: np.ndarray,
                 head_f: np.ndarray, edges: tuple[np.ndarray, np.ndarray], schedule: np.ndarray) -> np.ndarray:
    """compute_s: kernel time per step on the busiest rank, the rank stage_times prices: m·busiest(L·(t_f + t_b +
    recompute), 3·head forward) (`busiest_stage_time`: under DualPipe the rank holding the first and last stages
    runs half the micro-batches through each, and the head's share with them)."""
    return micro * busiest_stage_time(layers, lt.fwd + lt.bwd + recompute_b, 3 * head_f, edges, schedule)


def stage_forward_time(layers: np.ndarray, per_layer_f: np.ndarray, head_f: np.ndarray,
                       edges: tuple[np.ndarray, np.ndarray], schedule: np.ndarray) -> np.ndarray:
    """stage_fwd_s, t_f: L·(layer forward + exposed forward communication) + LM head forward, on the busiest rank
    (busiest_stage_time; Narayanan et al. 2021)."""
    return busiest_stage_time(layers, per_layer_f, head_f, edges, schedule)


def stage_backward_time(layers: np.ndarray, per_layer_b: np.ndarray, head_f: np.ndarray,
                        edges: tuple[np.ndarray, np.ndarray], schedule: np.ndarray) -> np.ndarray:
    """stage_bwd_s, t_b: L·(layer backward + recompute + exposed backward communication) + 2·head forward, on the
    busiest rank (busiest_stage_time; backward = 2x forward FLOPs, Narayanan et al. 2021)."""
    return busiest_stage_time(layers, per_layer_b, 2 * head_f, edges, schedule)


def stage_wgrad_time(layers: np.ndarray, wgrad: np.ndarray, head_f: np.ndarray,
                     edges: tuple[np.ndarray, np.ndarray], schedule: np.ndarray) -> np.ndarray:
    """stage_wgrad_s, t_w: L·weight-gradient GEMMs + head forward, on the busiest rank: the W passes zero-bubble
    schedules defer (Qi et al. 2024 §2)."""
    return busiest_stage_time(layers, wgrad, head_f, edges, schedule)


def first_stage_microbatch_time(pp: np.ndarray, layers: np.ndarray, st: StageTimes) -> np.ndarray:
    """first_stage_mb_s: forward + backward of one micro-batch on the first stage, L·(t_f + t_b per layer) (the
    embedding lookup is negligible); without a pipeline the one stage's t_f + t_b."""
    return np.where(pp > 1, layers * (st.per_layer_f + st.per_layer_b), st.fwd + st.bwd)


def last_stage_microbatch_time(st: StageTimes) -> np.ndarray:
    """last_stage_mb_s: forward + backward of one micro-batch on the last stage, t_f + t_b (its layers + LM head and
    loss)."""
    return st.fwd + st.bwd


def microbatch_time(st: StageTimes, p2p_exposed: np.ndarray, schedule: np.ndarray, lt: LayerTimes,
                    layers: np.ndarray) -> np.ndarray:
    """t_f + t_b + hand-offs; Seq1F1B runs every layer's kernels once per segment: k times the launches."""
    t_mb = st.fwd + st.bwd + p2p_exposed
    seg_launch = np.where(schedule == Schedule.SEQ1F1B, (SEQ1F1B_SEGMENTS - 1) * 3 * lt.launch_f * layers, 0.0)
    return t_mb + seg_launch


def step_time(micro: np.ndarray, t_mb: np.ndarray, bubble: np.ndarray, dp_exposed: np.ndarray,
              optimizer: np.ndarray) -> np.ndarray:
    """step = m·t_mb + bubble(schedule) + exposed DP reduction + optimizer update."""
    return micro * t_mb + bubble + dp_exposed + optimizer


def exposed_comm_time(micro: np.ndarray, p2p_exposed: np.ndarray, layers: np.ndarray, lc: LayerComm,
                      dp_exposed: np.ndarray) -> np.ndarray:
    """All exposed communication per step: m·(hand-offs + L_stage·per-layer exposed) + exposed DP reduction."""
    return micro * (p2p_exposed + layers * lc.total()) + dp_exposed
