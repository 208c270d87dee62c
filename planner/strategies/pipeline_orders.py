"""Per-rank operation orders of the hand-specified pipeline schedules (1F1B, interleaved, ZB-H1/H2, Seq1F1B).

Each function returns, for every rank, the order in which it runs forward (F), backward (B) and weight-gradient (W)
passes; planner.strategies.pipeline_sim replays an order with per-op times. ZB-V's order comes from a greedy
scheduler that needs op times, so it stays with the simulator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from planner.strategies.pipeline_ops import Key, Op, Spec, op_deps, op_duration, op_mem_delta, op_sends


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


def orders_zb_v(spec: Spec, m: int) -> list[list[Op]]:
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


def _greedy_orders(spec: Spec, m: int, cap: float) -> list[list[Op]]:
    p, v = spec.p, spec.v
    next_f = [[0] * v for _ in range(p)]
    next_b = [[0] * v for _ in range(p)]
    pending_w: list[list[Op]] = [[] for _ in range(p)]
    mem = [0.0] * p
    clock = [0.0] * p
    done: dict[Key, float] = {}
    orders: list[list[Op]] = [[] for _ in range(p)]
    remaining = [3 * m * v] * p

    def ready_at(s: int, op: Op) -> float | None:
        t = 0.0
        for key, delay in op_deps(spec, s, op):
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
        end = clock[s] + op_duration(spec, op)
        done[(s, op)] = end
        clock[s] = end + (spec.t_comm if spec.p2p_blocking and op_sends(spec, s, op) else 0.0)
        orders[s].append(op)
        remaining[s] -= 1
        mem[s] += op_mem_delta(spec, op)
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


class _DualPipeRank:
    """One rank's op list while `orders_dualpipe` walks dualpipe.py's steps: F/B counters per direction, deferred W."""

    def __init__(self, second_half: int, half_m: int) -> None:
        self.second, self.half_m = second_half, half_m
        self.next_f, self.next_b = [0, 0], [0, 0]
        self.pending_w: list[Op] = []
        self.order: list[Op] = []

    def f(self, phase: int) -> None:
        d = phase ^ self.second
        self.order.append(Op("F", d * self.half_m + self.next_f[d], d))
        self.next_f[d] += 1

    def b(self, phase: int, defer_w: bool) -> None:
        d = phase ^ self.second
        op = Op("B", d * self.half_m + self.next_b[d], d)
        self.next_b[d] += 1
        self.order.append(op)
        (self.pending_w if defer_w else self.order).append(Op("W", op.mb, op.chunk))

    def w(self) -> None:
        self.order.append(self.pending_w.pop(0))


def orders_dualpipe(p: int, m: int) -> list[list[Op]]:
    """DualPipe (DeepSeek-V3 report §3.2.1; deepseek-ai/DualPipe dualpipe.py `step`, read at bb214e8): p ranks (even),
    m micro-batches (even, >= 2p), half fed from each end. Rank r holds stage r of the downward pipeline (chunk 0)
    and stage r of the upward one (chunk 1, virtual stage 2p-1-r). The eight steps of `step` per rank, with
    h = p/2 and j = min(r, p-1-r): nF0 (2(h-j-1)), nF0F1 (j+1), nB1W1F1 (h-j-1, backward split), main nF0B1F1B0
    (m/2 - p + j + 1), nB1F1B0 (h-j-1), nB1B0 (j+1, second half split), nWB0 (h-j-1), nW (j+1). A paired "F&B" is
    an F then a B here; the time model prices their overlap. Phase 0 is the downward direction on the first half of
    the ranks and the upward one on the second half (dualpipe.py `phase ^= is_in_second_half`).
    """
    if p % 2 or m % 2 or m < 2 * p:
        raise ValueError(f"DualPipe needs even p, even m and m >= 2p (p={p}, m={m})")
    half = p // 2
    orders = []
    for r in range(p):
        j, rank = min(r, p - 1 - r), _DualPipeRank(int(r >= half), m // 2)
        for _ in range(2 * (half - j - 1)):
            rank.f(0)
        for _ in range(j + 1):
            rank.f(0)
            rank.f(1)
        for _ in range(half - j - 1):
            rank.b(1, True)
            rank.w()
            rank.f(1)
        for _ in range(m // 2 - p + j + 1):
            rank.f(0)
            rank.b(1, False)
            rank.f(1)
            rank.b(0, False)
        for _ in range(half - j - 1):
            rank.b(1, False)
            rank.f(1)
            rank.b(0, False)
        split = False
        for i in range(j + 1):
            split = split or (i == (j + 1) // 2 and j % 2 == 1)
            rank.b(1, split)
            split = split or (i == (j + 1) // 2 and j % 2 == 0)
            rank.b(0, split)
        for _ in range(half - j - 1):
            rank.w()
            rank.b(0, True)
        while rank.pending_w:
            rank.w()
        orders.append(rank.order)
    return orders
