"""Pipeline schedules simulated op by op: bubble and activation memory from a per-stage timeline.

The closed forms in `schedule.py` are the steady-state answers; this module derives the same quantities by playing the
schedule's actual order of operations through a dependency-driven list scheduler, so that uneven F/B/W times, p2p
latency, segment imbalance (Seq1F1B) and hand-crafted W placement (zero bubble) show up as they would on the machine.

Model
-----
p pipeline ranks ("stages"), m micro-batches. A rank holds `v` model chunks; the network is cut into p*v "virtual
stages" placed on (rank, chunk) pairs (looping for interleaved 1F1B, V-shaped for ZB-V). Every rank executes an ordered
list of ops:

- F(i, c): forward of micro-batch i through chunk c;
- B(i, c): backward. In split schedules (zero bubble, Qi et al. 2024, arXiv 2401.10241 §2) it is only the input-gradient
  part; otherwise it is the full backward (input- plus weight-gradient);
- W(i, c): the weight-gradient part (split schedules only).

Dependencies: F on virtual stage j needs F on j-1; B on j needs B on j+1 (the last virtual stage's B needs its own F);
W needs its own B. A dependency that crosses ranks adds `t_comm` (p2p latency). An op starts when its rank is free and
its dependencies are done; ranks never reorder their list (Megatron and the zero-bubble runtime both execute a static
per-rank order). The result is exact for the given order and durations; no closed form is used.

Durations: `t_f`, `t_b`, `t_w` are the times of one micro-batch through *all* the layers one rank holds (what the zero
bubble paper profiles as T_F, T_B, T_W per stage); an op on one of v chunks takes 1/v of that. `t_b` is the input-grad
part, `t_w` the weight-grad part; non-split schedules run B = t_b + t_w. Comparing schedules at equal (t_f, t_b, t_w)
therefore compares them at equal work.

Time metrics
------------
`makespan` is the longest per-rank span (first op start to last op end). For 1F1B and interleaved 1F1B that is rank
0's span, i.e. the classic flushed step time. For zero-bubble schedules it is the step time when consecutive iterations
overlap at the rank level, which the ZB paper's optimizer post-validation (no pre-step global synchronisation) allows:
each rank starts the next step as soon as its own work is done. `flush_time` is the global first-start-to-last-end
span. `bubble = makespan - max(busy)`.

Memory metric
-------------
Per rank, the peak weighted count of micro-batch-chunks whose activations are alive: +1 at F (1/k for a Seq1F1B
segment), -1 at a non-split B. Split schedules free only the share not needed by W at B and keep `w_share` until W:
a linear layer's weight gradient dA = X^T dY needs its input X. The zero-bubble authors' own memory model uses
M_B = 34bsh + 5as^2b per layer alive from F, of which M_W = 32bsh stays until W (sail-sg/zero-bubble-pipeline-
parallelism, scheduler playground script; Korthikanti et al. 2022 Table 2 for M_B). With fused attention (no s^2
scores stored) the share is 32/34 (W_SHARE_FUSED_ATTENTION); with them, 32h / (34h + 5as). Because a rank runs its
ops one at a time, the peak depends only on the order, not on the times.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from planner.inputs.layout import SEQ1F1B_SEGMENTS, Layout, Schedule
from planner.strategies.pipeline_ops import (
    W_SHARE_FUSED_ATTENTION,
    Key,
    Spec,
    op_deps,
    op_duration,
    op_mem_delta,
    op_sends,
)
from planner.strategies.pipeline_orders import (
    Op,
    orders_1f1b,
    orders_dualpipe,
    orders_interleaved,
    orders_seq1f1b,
    orders_zb_h1,
    orders_zb_h2,
    orders_zb_v,
)

SIM_SCHEDULES = Schedule.labels()
SPLIT_SCHEDULES = frozenset({Schedule.ZB_H1.label, Schedule.ZB_H2.label, Schedule.ZB_V.label,
                             Schedule.DUALPIPE.label, Schedule.DUALPIPE_V.label})
# Combined 1F1B runs Megatron's 1F1B / interleaved order (it pairs F and B of neighbouring micro-batches in time, which
# the time model prices); DualPipe-V is DualPipe folded onto p/2 ranks in a V (deepseek-ai/DualPipe README), whose
# placement and W filling the ZB-V order reproduces.
_ORDER_OF = {Schedule.COMBINED_1F1B.label: "interleaved", Schedule.DUALPIPE_V.label: "zb-v"}


class Slot(NamedTuple):
    """One executed op in the timeline."""

    stage: int
    op: str
    microbatch: int
    chunk: int
    start: float
    end: float
    segment: int = 0


@dataclass(frozen=True)
class PipelineSimResult:
    schedule: str
    p: int
    m: int
    v: int
    k: int
    makespan: float  # longest per-rank span (see module docstring)
    flush_time: float  # global first start to last end
    bubble: float  # makespan - busiest rank's busy time
    busy: tuple[float, ...]  # per-rank busy time
    peak_inflight: tuple[float, ...]  # per-rank peak alive micro-batch-chunks (weighted, see module docstring)
    timeline: tuple[Slot, ...]

    @property
    def peak_activations(self) -> tuple[float, ...]:
        """Peak in units of one micro-batch's activations for all layers a rank holds (peak_inflight / v)."""
        return tuple(x / self.v for x in self.peak_inflight)

    @property
    def bubble_fraction(self) -> float:
        return self.bubble / self.makespan if self.makespan > 0 else 0.0


# ---------------------------------------------------------------------------------------------------------------
# Problem description: placement of virtual stages, durations, dependencies
# ---------------------------------------------------------------------------------------------------------------
def _run_orders(spec: Spec, orders: Sequence[Sequence[Op]]) -> list[list[tuple[float, float]]]:
    """Play fixed per-rank orders: each op starts at max(rank free, dependencies done + delay).

    Returns (start, end) per op, aligned with `orders`. Raises on deadlock.
    """
    # Per-op constants first (dependencies, duration, hold time after the op), so the sweep below stays cheap.
    # They depend on the micro-batch only through the keys, so they are computed once per (rank, kind, chunk, seg).
    templates: dict[tuple[int, str, int, int], tuple[list[tuple[int, str, int, int, float]], float, float]] = {}

    def template(s: int, op: Op) -> tuple[list[tuple[int, str, int, int, float]], float, float]:
        got = templates.get((s, op[0], op[2], op[3]))
        if got is None:
            deps = [(s2, k2, c2, g2, delay) for (s2, (k2, _, c2, g2)), delay in op_deps(spec, s, op)]
            hold = spec.t_comm if spec.p2p_blocking and op_sends(spec, s, op) else 0.0
            got = templates[(s, op[0], op[2], op[3])] = (deps, op_duration(spec, op), hold)
        return got

    plan = []
    for s, order in enumerate(orders):
        row = []
        for op in order:
            deps, dur, hold = template(s, op)
            mb = op[1]
            row.append((op, [((s2, (k2, mb, c2, g2)), d) for s2, k2, c2, g2, d in deps], dur, hold))
        plan.append(row)
    slots: list[list[tuple[float, float]]] = [[] for _ in orders]
    free = [0.0] * spec.p
    end: dict[Key, float] = {}
    total = sum(len(o) for o in orders)
    while len(end) < total:
        progressed = False
        for s, ops in enumerate(plan):
            out = slots[s]
            i = before = len(out)
            t_free = free[s]
            while i < len(ops):
                op, deps, dur, hold = ops[i]
                ready = t_free
                for key, delay in deps:
                    done = end.get(key)
                    if done is None:
                        break
                    ready = max(ready, done + delay)
                else:
                    end[(s, op)] = ready + dur
                    out.append((ready, ready + dur))
                    # A synchronous send (Megatron's blocking p2p between compute ops) holds the rank for t_comm.
                    t_free = ready + dur + hold
                    i += 1
                    continue
                break
            progressed |= i > before
            free[s] = t_free
        if not progressed:
            stuck = {s: orders[s][len(slots[s])] for s in range(spec.p) if len(slots[s]) < len(orders[s])}
            raise ValueError(f"schedule deadlocks; next ops waiting forever: {stuck}")
    return slots


def _peak_inflight(spec: Spec, order: Sequence[Op]) -> float:
    delta = {kind: op_mem_delta(spec, Op(kind, 0)) for kind in "FBW"}
    return max(0.0, *itertools.accumulate(delta[op[0]] for op in order)) if order else 0.0


def simulate_orders(orders: Sequence[Sequence[Op]], *, schedule: str, m: int, t_f: float, t_b: float,
                    t_w: float = 0.0, t_comm: float = 0.0, v: int = 1, k: int = 1, split: bool = False,
                    v_shape: bool = False, attn_frac: float = 0.0, w_share: float = W_SHARE_FUSED_ATTENTION,
                    p2p_blocking: bool = False) -> PipelineSimResult:
    """Simulate explicit per-rank op lists (one list per rank) and measure the timeline."""
    spec = Spec(p=len(orders), v=v, k=k, split=split, v_shape=v_shape, t_f=t_f, t_b=t_b, t_w=t_w, t_comm=t_comm,
                 attn_frac=attn_frac, w_share=w_share, p2p_blocking=p2p_blocking)
    return _measure(spec, schedule, m, orders, _run_orders(spec, orders))


def _measure(spec: Spec, schedule: str, m: int, orders: Sequence[Sequence[Op]],
             slots: list[list[tuple[float, float]]]) -> PipelineSimResult:
    make = tuple.__new__  # builds the NamedTuple without its Python-level __new__ (hot path: one per op)
    timeline = [make(Slot, (s, op[0], op[1], op[2], t0, t1, op[3]))
                for s, (order, times) in enumerate(zip(orders, slots, strict=True))
                for op, (t0, t1) in zip(order, times, strict=True)]
    used = [s for s in range(spec.p) if slots[s]]
    busy = [sum(t1 - t0 for t0, t1 in times) for times in slots]
    makespan = max((slots[s][-1][1] - slots[s][0][0] for s in used), default=0.0)
    flush = max(slots[s][-1][1] for s in used) - min(slots[s][0][0] for s in used) if used else 0.0
    return PipelineSimResult(
        schedule=schedule, p=spec.p, m=m, v=spec.v, k=spec.k, makespan=makespan, flush_time=flush,
        bubble=makespan - max(busy), busy=tuple(busy),
        peak_inflight=tuple(_peak_inflight(spec, o) for o in orders), timeline=tuple(timeline))


def simulate_schedule(schedule: str, p: int, m: int, *, t_f: float, t_b: float, t_w: float = 0.0,
                      t_comm: float = 0.0, v: int = 1, k: int = 1, attn_frac: float = 0.0,
                      w_share: float = W_SHARE_FUSED_ATTENTION, p2p_blocking: bool = False) -> PipelineSimResult:
    """Build `schedule`'s per-rank op order and simulate it.

    schedule: one of SIM_SCHEDULES. p ranks, m micro-batches (sequences for Seq1F1B). t_f, t_b, t_w: time of one
    micro-batch through all layers of one rank for forward, input-grad backward and weight-grad backward (non-split
    schedules run B = t_b + t_w). t_comm: p2p latency between ranks; with p2p_blocking the sending rank is also held for
    t_comm (Megatron's synchronous send/recv between compute ops). v: chunks per rank (interleaved; ZB-V forces 2).
    k: segments per sequence (Seq1F1B). attn_frac: causal-attention share of compute (Seq1F1B segment imbalance).
    w_share: activation share kept from B until W in split schedules.
    """
    if schedule not in SIM_SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; expected one of {SIM_SCHEDULES}")
    if p < 1 or m < 1:
        raise ValueError("need p >= 1 and m >= 1")
    if schedule == Schedule.COMBINED_1F1B.label and v == 1:
        schedule_order = "1f1b"
    else:
        schedule_order = _ORDER_OF.get(schedule, schedule)
    if schedule_order in ("zb-v", "dualpipe"):
        v = 2
    elif schedule_order != "interleaved":
        v = 1
    if schedule != "seq1f1b":
        k = 1
    spec = Spec(p=p, v=v, k=k, split=schedule in SPLIT_SCHEDULES, v_shape=schedule_order == Schedule.ZB_V.label,
                bidirectional=schedule_order == Schedule.DUALPIPE.label, t_f=t_f,
                 t_b=t_b, t_w=t_w, t_comm=t_comm, attn_frac=attn_frac, w_share=w_share, p2p_blocking=p2p_blocking)
    builders: dict[str, Callable[[], list[list[Op]]]] = {
        "1f1b": lambda: orders_1f1b(p, m),
        "interleaved": lambda: orders_interleaved(p, m, v),
        "zb-h1": lambda: orders_zb_h1(p, m),
        "zb-h2": lambda: orders_zb_h2(p, m),
        "zb-v": lambda: orders_zb_v(spec, m),
        "seq1f1b": lambda: orders_seq1f1b(p, m, k),
        "dualpipe": lambda: orders_dualpipe(p, m),
    }
    orders = builders[schedule_order]()
    return _measure(spec, schedule, m, orders, _run_orders(spec, orders))


def simulate_layout(lay: Layout, metrics: dict[str, float], max_microbatches: int | None = None
                    ) -> PipelineSimResult | None:
    """Simulate a priced layout's schedule with its own stage times (`evaluate`'s stage_fwd_s, stage_bwd_s,
    stage_wgrad_s, p2p_s); None without a pipeline, or for DualPipe on an odd number of ranks. `max_microbatches`
    caps m to bound the simulation's cost (the steady state repeats, so a capped run shows the same warm-up, cool-down
    and bubble); interleaved (and combined-1f1b with chunks) keeps a multiple of pp, as Megatron requires, and
    DualPipe an even count of at least 2 pp."""
    name = lay.schedule.label
    p, v = lay.pp, lay.vpp
    if p < 2 or (name == "dualpipe" and p % 2):
        return None
    m = max(1, int(round(metrics["num_microbatches"])))
    if max_microbatches is not None:
        m = min(m, max(max_microbatches, 1))
    if name == "interleaved" or (name == "combined-1f1b" and v > 1):
        m = max(p, m - m % p)
    if name == "dualpipe":
        m = max(2 * p, m - m % 2)
    t_f, t_b, t_w = metrics["stage_fwd_s"], metrics["stage_bwd_s"], metrics["stage_wgrad_s"]
    kwargs = {"t_b": t_b - t_w, "t_w": t_w} if name in SPLIT_SCHEDULES else {"t_b": t_b}
    k = SEQ1F1B_SEGMENTS if name == "seq1f1b" else 1
    return simulate_schedule(name, p, m, t_f=t_f, v=v, k=k, t_comm=metrics["p2p_s"], **kwargs)
