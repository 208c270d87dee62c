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
scores stored) the share is 32/34; `zb_w_share` computes it for a given shape. Because a rank runs its ops one at a
time, the peak depends only on the order, not on the times.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np

from planner.inputs.layout import Schedule

SIM_SCHEDULES = Schedule.labels()
SPLIT_SCHEDULES = frozenset({Schedule.ZB_H1.label, Schedule.ZB_H2.label, Schedule.ZB_V.label})
W_SHARE_FUSED_ATTENTION = 32 / 34  # M_W / M_B without the s^2 attention-score term (ZB paper memory model)


class Op(NamedTuple):
    """One scheduled operation on a rank. `seg` is the sequence segment (Seq1F1B), 0 otherwise."""

    kind: str  # "F" | "B" | "W"
    mb: int
    chunk: int = 0
    seg: int = 0


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
@dataclass(frozen=True)
class _Spec:
    p: int
    v: int
    k: int
    split: bool
    v_shape: bool
    t_f: float
    t_b: float
    t_w: float
    t_comm: float
    attn_frac: float
    w_share: float
    p2p_blocking: bool

    @cached_property
    def vstages(self) -> tuple[tuple[int, ...], ...]:
        """vstages[rank][chunk]: looping placement c*p + s (Narayanan et al. 2021 §2.2.2), or the V shape (ZB paper,
        ZB-V): chunk 0 runs down the ranks, chunk 1 back up, so rank 0 holds the first and the last layers."""
        if self.v_shape:
            return tuple((s, 2 * self.p - 1 - s) for s in range(self.p))
        return tuple(tuple(c * self.p + s for c in range(self.v)) for s in range(self.p))

    @cached_property
    def owners(self) -> tuple[tuple[int, int], ...]:
        """owners[virtual stage] = (rank, chunk)."""
        out = {vs: (s, c) for s, row in enumerate(self.vstages) for c, vs in enumerate(row)}
        return tuple(out[vs] for vs in range(self.n_virtual))

    def vstage(self, stage: int, chunk: int) -> int:
        return self.vstages[stage][chunk]

    def owner(self, vs: int) -> tuple[int, int]:
        return self.owners[vs]

    @property
    def n_virtual(self) -> int:
        return self.p * self.v


def segment_factor(seg: int, k: int, attn_frac: float) -> float:
    """Share of a whole sequence's compute spent on segment `seg` (0-based) of k equal-length segments.

    Explicit approximation for Seq1F1B (Sun et al. 2024, arXiv 2406.03488): token-linear work (GEMMs, norms) splits
    evenly, 1/k per segment; causal attention of segment j (1-based) attends to j-1 full earlier blocks plus half its
    own diagonal block, so its share of the attention work is (2j-1)/k^2 (sums to 1 over j). `attn_frac` is the share
    of causal attention in the layer's compute (see `causal_attention_share`). Applied to F and to the input-grad B;
    the weight-grad part (no attention weights) always splits 1/k. Seq1F1B's own computation-wise partition (unequal
    segment lengths) would flatten this imbalance; we model the simpler equal-token split.
    """
    j = seg + 1
    return (1.0 - attn_frac) / k + attn_frac * (2 * j - 1) / k**2


def causal_attention_share(seq_len: int, hidden: int, ffn_hidden: int) -> float:
    """Causal attention core FLOPs over all layer FLOPs, per token, MHA: 2sh / (8h^2 + 4hF + 2sh) (cost_model.md §1.2,
    Megatron's causal halving)."""
    s, h, f = seq_len, hidden, ffn_hidden
    return 2 * s * h / (8 * h * h + 4 * h * f + 2 * s * h)


def zb_w_share(hidden: int, seq_len: int, heads: int, fused_attention: bool = True) -> float:
    """M_W / M_B of the zero-bubble memory model: 32h / (34h + 5as), or 32/34 when attention scores are not stored."""
    if fused_attention:
        return W_SHARE_FUSED_ATTENTION
    return 32 * hidden / (34 * hidden + 5 * heads * seq_len)


def _duration(spec: _Spec, op: Op) -> float:
    fac = segment_factor(op.seg, spec.k, spec.attn_frac)
    if op.kind == "F":
        t = spec.t_f * fac
    elif op.kind == "B":
        t = spec.t_b * fac + (0.0 if spec.split else spec.t_w / spec.k)
    else:
        t = spec.t_w / spec.k
    return t / spec.v


_Key = tuple[int, tuple[str, int, int, int]]  # (rank, op); Op is such a tuple, and hashes like one


def _deps(spec: _Spec, stage: int, op: Op) -> list[tuple[_Key, float]]:
    """(dependency, extra delay) pairs for `op` on `stage`. Keys use plain tuples (equal to, and hashing like, Op)."""
    kind, mb, chunk, seg = op
    vs = spec.vstage(stage, chunk)
    out: list[tuple[_Key, float]] = []
    if kind == "F":
        if vs > 0:
            s2, c2 = spec.owner(vs - 1)
            out.append(((s2, ("F", mb, c2, seg)), spec.t_comm if s2 != stage else 0.0))
        if seg > 0:  # Seq1F1B: attention of segment j reads the keys/values of segments < j
            out.append(((stage, ("F", mb, chunk, seg - 1)), 0.0))
    elif kind == "B":
        if vs < spec.n_virtual - 1:
            s2, c2 = spec.owner(vs + 1)
            out.append(((s2, ("B", mb, c2, seg)), spec.t_comm if s2 != stage else 0.0))
        else:
            out.append(((stage, ("F", mb, chunk, seg)), 0.0))
        if seg < spec.k - 1:  # Seq1F1B: dK/dV of segment j collect gradients from the later segments
            out.append(((stage, ("B", mb, chunk, seg + 1)), 0.0))
    else:
        out.append(((stage, ("B", mb, chunk, seg)), 0.0))
    return out


def _sends(spec: _Spec, stage: int, op: Op) -> bool:
    """Whether the op's output crosses to another rank (used by the blocking-p2p option)."""
    vs = spec.vstage(stage, op.chunk)
    if op.kind == "F" and vs < spec.n_virtual - 1:
        return spec.owner(vs + 1)[0] != stage
    if op.kind == "B" and vs > 0:
        return spec.owner(vs - 1)[0] != stage
    return False


def _mem_delta(spec: _Spec, op: Op) -> float:
    a = 1.0 / spec.k
    if op.kind == "F":
        return a
    if op.kind == "B":
        return -a * (1.0 - spec.w_share) if spec.split else -a
    return -a * spec.w_share


# ---------------------------------------------------------------------------------------------------------------
# The list scheduler
# ---------------------------------------------------------------------------------------------------------------
def _run_orders(spec: _Spec, orders: Sequence[Sequence[Op]]) -> list[list[tuple[float, float]]]:
    """Play fixed per-rank orders: each op starts at max(rank free, dependencies done + delay).

    Returns (start, end) per op, aligned with `orders`. Raises on deadlock.
    """
    # Per-op constants first (dependencies, duration, hold time after the op), so the sweep below stays cheap.
    # They depend on the micro-batch only through the keys, so they are computed once per (rank, kind, chunk, seg).
    templates: dict[tuple[int, str, int, int], tuple[list[tuple[int, str, int, int, float]], float, float]] = {}

    def template(s: int, op: Op) -> tuple[list[tuple[int, str, int, int, float]], float, float]:
        got = templates.get((s, op[0], op[2], op[3]))
        if got is None:
            deps = [(s2, k2, c2, g2, delay) for (s2, (k2, _, c2, g2)), delay in _deps(spec, s, op)]
            hold = spec.t_comm if spec.p2p_blocking and _sends(spec, s, op) else 0.0
            got = templates[(s, op[0], op[2], op[3])] = (deps, _duration(spec, op), hold)
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
    end: dict[_Key, float] = {}
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


# ---------------------------------------------------------------------------------------------------------------
# Operation orders
# ---------------------------------------------------------------------------------------------------------------
def _one_f_one_b(fwd: Sequence[Op], bwd: Sequence[Op], warmup: int) -> list[Op]:
    """`warmup` forwards, then steady F/B pairs, then the remaining backwards (PipeDream-Flush shape)."""
    warmup = min(warmup, len(fwd))
    order = list(fwd[:warmup])
    for i in range(len(fwd) - warmup):
        order += [fwd[warmup + i], bwd[i]]
    return order + list(bwd[len(fwd) - warmup:])


def orders_1f1b(p: int, m: int) -> list[list[Op]]:
    """PipeDream-Flush / Megatron non-interleaved: rank s runs p-s-1 warm-up forwards (Megatron schedules.py), then
    1F1B, then the cool-down backwards (Narayanan et al. 2021 §2.2.1)."""
    fwd = [Op("F", i) for i in range(m)]
    bwd = [Op("B", i) for i in range(m)]
    return [_one_f_one_b(fwd, bwd, p - s - 1) for s in range(p)]


def orders_interleaved(p: int, m: int, v: int) -> list[list[Op]]:
    """Megatron interleaved 1F1B (Narayanan et al. 2021 §2.2.2): micro-batches advance in groups of p through the v
    chunks; the k-th forward is micro-batch (k // pv)*p + k % p on chunk (k // p) % v, backwards walk the chunks in
    reverse; rank s warms up with 2(p-s-1) + (v-1)p chunk-forwards (Megatron schedules.py). Requires m % p == 0."""
    if m % p:
        raise ValueError(f"interleaved 1F1B needs m % p == 0 (m={m}, p={p})")

    def unit(kind: str, k: int) -> Op:
        c = (k // p) % v
        return Op(kind, (k // (p * v)) * p + k % p, c if kind == "F" else v - 1 - c)

    fwd = [unit("F", k) for k in range(m * v)]
    bwd = [unit("B", k) for k in range(m * v)]
    return [_one_f_one_b(fwd, bwd, 2 * (p - s - 1) + (v - 1) * p) for s in range(p)]


def _zb_handcrafted(p: int, m: int, warmup: Callable[[int], int], lag: Callable[[int], int]) -> list[list[Op]]:
    """1F1B-shaped F/B order with W(i - lag) placed right after B(i); the lagged W's fill the cool-down."""
    orders = []
    for s in range(p):
        w, d = min(warmup(s), m), lag(s)
        order = [Op("F", i) for i in range(w)]
        for i in range(m):
            if w + i < m:
                order.append(Op("F", w + i))
            order.append(Op("B", i))
            if i >= d:
                order.append(Op("W", i - d))
        order += [Op("W", i) for i in range(max(m - d, 0), m)]
        orders.append(order)
    return orders


def orders_zb_h1(p: int, m: int) -> list[list[Op]]:
    """ZB-H1 (Qi et al. 2024 §2.1): same warm-up and F/B order as 1F1B (so the same in-flight bound), but rank s
    delays its W passes by s micro-batches. With T_F = T_B = T_W every rank's B(m-1) then reaches rank 0 at T_B per hop
    and ranks end together after s+1 trailing W's: bubble (p-1)(T_F + T_B - T_W)."""
    return _zb_handcrafted(p, m, lambda s: p - s - 1, lambda s: s)


def orders_zb_h2(p: int, m: int) -> list[list[Op]]:
    """ZB-H2 (Qi et al. 2024 §2.2): 2(p-s-1) warm-up forwards (rank 0 holds up to 2p-1 micro-batches), which fill
    the gap until the first B arrives; W delayed by 2s so the last B chain is covered by W work: no bubble when
    T_F = T_B = T_W (with per-rank spans, i.e. the post-validation optimizer step)."""
    return _zb_handcrafted(p, m, lambda s: 2 * (p - s - 1), lambda s: 2 * s)


def orders_seq1f1b(p: int, m: int, k: int) -> list[list[Op]]:
    """Seq1F1B (Sun et al. 2024, arXiv 2406.03488): each sequence is cut into k segments that run through 1F1B as
    separate units; forwards go segment 0..k-1, backwards k-1..0 (a later segment's backward first, since earlier
    segments' K/V receive gradients from it). Rank s warms up with (p-s-1) + (k-1) segment forwards, so the last rank
    holds one whole sequence and rank 0 p+k-1 segments, about 1/k of 1F1B's p sequences."""
    fwd = [Op("F", u // k, 0, u % k) for u in range(m * k)]
    bwd = [Op("B", u // k, 0, k - 1 - u % k) for u in range(m * k)]
    return [_one_f_one_b(fwd, bwd, (p - s - 1) + (k - 1)) for s in range(p)]


def orders_zb_v(spec: _Spec, m: int) -> list[list[Op]]:
    """ZB-V (Qi et al. 2024, V-shape schedule; sail-sg/zero-bubble-pipeline-parallelism README): two chunks per rank
    in a V, split backward, activation cap of 1F1B's (2p chunk-micro-batches = p whole micro-batches on a rank).

    Built by a greedy event-driven list scheduler in the spirit of the paper's automatic-scheduling heuristic (§3) and
    the repo's V scheduler: when a rank is free it runs, in priority, a ready B (earliest micro-batch, deeper chunk
    first); else a ready F if the memory cap allows, preferring the deeper chunk and reserving room for the same
    micro-batch's later chunk; else a pending W (oldest first), which both fills gaps and frees memory. The resulting
    order is then replayed by the same fixed-order scheduler as every other schedule. With W holding 32/34 of a
    chunk's activations the cap forces W's early and leaves a small tail bubble (below ZB-H1's); with a small
    W share the greedy order reaches the README's zero bubble at T_F = T_B = T_W.
    """
    return _greedy_orders(spec, m, cap=2.0 * spec.p)


def _greedy_orders(spec: _Spec, m: int, cap: float) -> list[list[Op]]:
    p, v = spec.p, spec.v
    next_f = [[0] * v for _ in range(p)]
    next_b = [[0] * v for _ in range(p)]
    pending_w: list[list[Op]] = [[] for _ in range(p)]
    mem = [0.0] * p
    clock = [0.0] * p
    done: dict[_Key, float] = {}
    orders: list[list[Op]] = [[] for _ in range(p)]
    remaining = [3 * m * v] * p

    def ready_at(s: int, op: Op) -> float | None:
        t = 0.0
        for key, delay in _deps(spec, s, op):
            if key not in done:
                return None
            t = max(t, done[key] + delay)
        return t

    def deeper_first(s: int) -> list[int]:
        return sorted(range(v), key=lambda c: -spec.vstage(s, c))

    def pick(s: int) -> tuple[Op | None, float]:
        """The op rank s runs at clock[s], or (None, earliest known future ready time)."""
        future = float("inf")
        cands: list[tuple[int, Op]] = []
        for c in deeper_first(s):
            if next_b[s][c] < min(next_f[s][c], m):
                cands.append((0, Op("B", next_b[s][c], c)))
            if next_f[s][c] < m:
                reserve = sum(1 for c2 in range(v) if spec.vstage(s, c2) > spec.vstage(s, c))
                if mem[s] + 1.0 + reserve <= cap + 1e-9:
                    cands.append((1, Op("F", next_f[s][c], c)))
        cands.sort(key=lambda x: (x[0], x[1].mb))
        for _, op in cands:
            t = ready_at(s, op)
            if t is None:
                continue
            if t <= clock[s] + 1e-12:
                return op, clock[s]
            future = min(future, t)
        if pending_w[s]:
            return pending_w[s][0], clock[s]
        return None, future

    stalled: set[int] = set()  # ranks with nothing to run now, waiting for ranks at the same clock to move
    while any(remaining):
        s = min((i for i in range(p) if remaining[i]), key=lambda i: (clock[i], i in stalled, i))
        op, t = pick(s)
        if op is None:
            if any(remaining[i] and i != s and i not in stalled and clock[i] <= clock[s] for i in range(p)):
                stalled.add(s)
                continue
            later = [clock[i] for i in range(p) if remaining[i] and clock[i] > clock[s]]
            nxt = min([t, *later])
            if nxt == float("inf"):
                raise ValueError("greedy schedule deadlocked (memory cap too small?)")
            clock[s] = nxt
            stalled.discard(s)
            continue
        stalled.clear()
        end = clock[s] + _duration(spec, op)
        done[(s, op)] = end
        clock[s] = end + (spec.t_comm if spec.p2p_blocking and _sends(spec, s, op) else 0.0)
        orders[s].append(op)
        remaining[s] -= 1
        mem[s] += _mem_delta(spec, op)
        if op.kind == "F":
            next_f[s][op.chunk] += 1
        elif op.kind == "B":
            next_b[s][op.chunk] += 1
            pending_w[s].append(Op("W", op.mb, op.chunk))
        else:
            pending_w[s].pop(0)
    return orders


# ---------------------------------------------------------------------------------------------------------------
# Public entry points
# ---------------------------------------------------------------------------------------------------------------
def _peak_inflight(spec: _Spec, order: Sequence[Op]) -> float:
    delta = {kind: _mem_delta(spec, Op(kind, 0)) for kind in "FBW"}
    return max(0.0, *itertools.accumulate(delta[op[0]] for op in order)) if order else 0.0


def simulate_orders(orders: Sequence[Sequence[Op]], *, schedule: str, m: int, t_f: float, t_b: float,
                    t_w: float = 0.0, t_comm: float = 0.0, v: int = 1, k: int = 1, split: bool = False,
                    v_shape: bool = False, attn_frac: float = 0.0, w_share: float = W_SHARE_FUSED_ATTENTION,
                    p2p_blocking: bool = False) -> PipelineSimResult:
    """Simulate explicit per-rank op lists (one list per rank) and measure the timeline."""
    spec = _Spec(p=len(orders), v=v, k=k, split=split, v_shape=v_shape, t_f=t_f, t_b=t_b, t_w=t_w, t_comm=t_comm,
                 attn_frac=attn_frac, w_share=w_share, p2p_blocking=p2p_blocking)
    return _measure(spec, schedule, m, orders, _run_orders(spec, orders))


def _measure(spec: _Spec, schedule: str, m: int, orders: Sequence[Sequence[Op]],
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
    if schedule == "zb-v":
        v = 2
    elif schedule != "interleaved":
        v = 1
    if schedule != "seq1f1b":
        k = 1
    spec = _Spec(p=p, v=v, k=k, split=schedule in SPLIT_SCHEDULES, v_shape=schedule == Schedule.ZB_V.label, t_f=t_f,
                 t_b=t_b, t_w=t_w, t_comm=t_comm, attn_frac=attn_frac, w_share=w_share, p2p_blocking=p2p_blocking)
    builders: dict[str, Callable[[], list[list[Op]]]] = {
        "1f1b": lambda: orders_1f1b(p, m),
        "interleaved": lambda: orders_interleaved(p, m, v),
        "zb-h1": lambda: orders_zb_h1(p, m),
        "zb-h2": lambda: orders_zb_h2(p, m),
        "zb-v": lambda: orders_zb_v(spec, m),
        "seq1f1b": lambda: orders_seq1f1b(p, m, k),
    }
    orders = builders[schedule]()
    return _measure(spec, schedule, m, orders, _run_orders(spec, orders))


def render_timeline(result: PipelineSimResult, width: int = 100) -> str:
    """ASCII Gantt chart, one row per rank: F/B/W for chunk 0 (lower case f/b/w for chunks >= 1), '.' idle.

    Each column covers flush_time / width; it shows the op that overlaps it most, or '.' when the rank computes for
    less than half of the column (p2p hold time and waiting count as idle).
    """
    t0 = min((x.start for x in result.timeline), default=0.0)
    dt = max(result.flush_time, 1e-12) / width
    edges = t0 + dt * np.arange(width + 1)
    rows = []
    for s in range(result.p):
        covered = np.zeros(width)
        best = np.zeros(width)
        row = ["."] * width
        for x in (x for x in result.timeline if x.stage == s):
            lo, hi = int((x.start - t0) // dt), min(int(np.ceil((x.end - t0) / dt)), width)
            cols = np.arange(max(lo, 0), hi)
            overlap = np.minimum(edges[cols + 1], x.end) - np.maximum(edges[cols], x.start)
            covered[cols] += overlap
            ch = x.op if x.chunk == 0 else x.op.lower()
            for col, ov in zip(cols, overlap, strict=True):
                if ov > best[col]:
                    best[col], row[col] = ov, ch
        rows.append("".join(c if covered[i] >= 0.5 * dt else "." for i, c in enumerate(row)))
    head = (f"{result.schedule}: p={result.p} m={result.m} v={result.v}"
            + (f" k={result.k}" if result.k > 1 else "")
            + f"  makespan={result.makespan:.4g} bubble={result.bubble:.4g} ({100 * result.bubble_fraction:.1f}%)"
            + f"  peak in-flight rank0={result.peak_inflight[0]:.3g}")
    w = len(str(result.p - 1))
    return "\n".join([head, *(f"s{s:<{w}} |{r}|" for s, r in enumerate(rows))])
