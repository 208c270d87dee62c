"""Dynamic Sequence Parallelism for transformers with more than one sequence dimension.

Zhao, Cheng, Chen, Zheng, Liu, Yang, You, "DSP: Dynamic Sequence Parallelism for Multi-Dimensional Transformers"
(ICML 2025; arXiv 2403.10266). A video transformer's tokens form a grid, e.g. (T frames) x (S patches per frame), and
its blocks alternate temporal attention (along T, once per spatial position) and spatial attention (along S, once per
frame). Existing sequence parallelism is "embedded": it shards one fixed sequence dimension and communicates inside
every attention that needs it. DSP instead keeps the activations sharded along a dimension the current block does
not attend over, so each attention is local, and re-shards with one all-to-all only when the next block attends over
the sharded dimension (paper, Sec. 3-4; cost_model.md §5 quotes "<25% communication volume" against embedded SP).

Counting rules (forward pass, one micro-batch; M = b * prod(dims) * h * bytes is one block's activations, all GPUs
together, so each of the N ranks holds M/N):
- Ulysses embedded (DeepSpeed-Ulysses inside every attention, the sequence treated as flat 1-D): 4 all-to-alls per
  attention block (Q, K and V to the head-sharded full-sequence layout, the output back), each on M/N per rank.
  Backward = forward (each all-to-all's gradient is the inverse all-to-all of the same size).
- Ring embedded (ring attention / context parallelism over one fixed sharded dimension `ring_dim`): a block that
  attends over `ring_dim` circulates K and V around the ring, N - 1 steps each sending 2 * M/N per rank; a block that
  attends over another dimension sees whole sequences locally and communicates nothing. Backward = 2 x forward (K, V
  go round again and dK, dV travel back, as Megatron-CP's re-gather + reduce-scatter).
- DSP: one all-to-all on M/N per rank per switch of the sharded dimension; the number of switches is the minimum
  over all sharding schedules (dynamic programme below), with the initial sharding free (the input has to be split
  anyway, as for the embedded strategies). Alternating two dimensions over B blocks: B - 1 switches.
  Backward = forward (the reverse switches).
Bytes per GPU are what one rank sends: an all-to-all ships (N-1)/N of its M/N (it keeps its own slice); a ring step
ships the whole 2 * M/N. The initial split and final gather, the MLPs (token-wise: local in all three) and the
gradient reductions are the same for all three and are left out. GQA/MQA (smaller K, V) is not modelled: K and V are
h wide, as in the video DiTs the paper evaluates.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from planner.cost import fabric as comm
from planner.errors import PlanInputError
from planner.inputs.specs import ClusterSpec

ULYSSES_A2A_PER_BLOCK = 4  # Q, K, V in and the attention output back (DeepSpeed-Ulysses)
RING_TENSORS = 2  # K and V circulate
A2A_BACKWARD_FACTOR = 1.0
RING_BACKWARD_FACTOR = 2.0


@dataclass(frozen=True)
class MultiDimSequence:
    """A multi-dimensional transformer's sequence: dims in layout order (name -> length), and which dimension each
    block attends over (default: cycle through the dims in order, T, S, T, S, ... for {"T": ..., "S": ...})."""

    dims: Mapping[str, int]
    hidden: int
    heads: int
    blocks: int
    pattern: Sequence[str] | None = None
    batch: int = 1
    bytes_per_element: int = 2

    def __post_init__(self) -> None:
        dims = dict(self.dims)
        if len(dims) < 2:
            raise PlanInputError("DSP needs at least two sequence dimensions", field="dims",
                                 fix="give e.g. T=16,S=4096; a 1-D sequence is plain Ulysses/ring CP")
        for name, length in dims.items():
            if not isinstance(length, int) or isinstance(length, bool) or length < 1:
                raise PlanInputError(f"length of '{name}' must be a positive integer, got {length!r}", field="dims")
        for key in ("hidden", "heads", "blocks", "batch", "bytes_per_element"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise PlanInputError(f"must be a positive integer, got {value!r}", field=key)
        names = tuple(dims)
        pattern = tuple(self.pattern) if self.pattern is not None else tuple(
            names[i % len(names)] for i in range(self.blocks))
        if len(pattern) != self.blocks:
            raise PlanInputError(f"pattern has {len(pattern)} entries for {self.blocks} blocks", field="pattern")
        unknown = sorted(set(pattern) - set(names))
        if unknown:
            raise PlanInputError(f"pattern names unknown dimension(s) {unknown}", field="pattern",
                                 fix=f"use {list(names)}")
        object.__setattr__(self, "dims", dims)  # a private copy: plain dict so dataclasses.asdict / JSON work
        object.__setattr__(self, "pattern", pattern)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.dims)

    @property
    def attends(self) -> tuple[str, ...]:
        """The resolved per-block pattern."""
        return tuple(self.pattern or ())

    @property
    def tokens(self) -> int:
        return math.prod(self.dims.values())

    @property
    def activation_bytes(self) -> int:
        """M: one block's input activations over all ranks, b * prod(dims) * h * bytes."""
        return self.batch * self.tokens * self.hidden * self.bytes_per_element


def parse_dims(text: str) -> dict[str, int]:
    """'T=16,S=4096' -> {'T': 16, 'S': 4096} (for the CLI)."""
    dims: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, length = part.partition("=")
        if not sep or not name.strip() or not length.strip().isdigit():
            raise PlanInputError(f"'{part}' is not NAME=LENGTH", field="dims", fix="e.g. T=16,S=4096")
        if name.strip() in dims:
            raise PlanInputError(f"dimension '{name.strip()}' given twice", field="dims")
        dims[name.strip()] = int(length)
    return dims


@dataclass(frozen=True)
class Switch:
    """Before block `block` runs, the sharded dimension moves from `src` to `dst` (one all-to-all)."""

    block: int
    src: str
    dst: str


def dsp_schedule(spec: MultiDimSequence) -> tuple[str, tuple[Switch, ...]]:
    """A sharding schedule with the fewest switches: the initial sharded dimension and the switches.

    The sharded dimension must differ from the attended one at every block (so attention is local, DSP Sec. 3.2).
    Exact DP over (block, sharded dim); ties keep the current dimension, else take the earliest in `dims` order.
    """
    names, pattern = spec.names, spec.attends
    inf = len(pattern) + 1
    # cost[i][d]: fewest switches for blocks i.. when block i runs sharded on d.
    cost = [[0] * len(names) for _ in range(len(pattern) + 1)]
    for i in range(len(pattern) - 1, -1, -1):
        for j, d in enumerate(names):
            if d == pattern[i]:
                cost[i][j] = inf
                continue
            nxt = cost[i + 1]
            cost[i][j] = min(nxt[j], 1 + min(nxt)) if i + 1 < len(pattern) else 0
    start = min(range(len(names)), key=lambda j: (cost[0][j], j))
    cur, switches = start, []
    for i in range(1, len(pattern)):
        if cost[i][cur] <= 1 + min(cost[i]):  # staying is optimal (never when block i attends over cur: inf)
            continue
        new = min(range(len(names)), key=lambda j: (cost[i][j], j))
        switches.append(Switch(i, names[cur], names[new]))
        cur = new
    return names[start], tuple(switches)


def default_ring_dim(spec: MultiDimSequence) -> str:
    """Embedded ring's fixed sharded dimension: the one the fewest blocks attend over (the most local attention);
    ties go to the longest (easiest to split N ways), then to `dims` order."""
    counts = {d: spec.attends.count(d) for d in spec.names}
    return min(spec.names, key=lambda d: (counts[d], -spec.dims[d], spec.names.index(d)))


@dataclass(frozen=True)
class StrategyComm:
    """One strategy's sequence-parallel communication for one micro-batch on one GPU."""

    name: str
    collective: str
    forward_bytes_per_gpu: float
    forward_collectives: int
    forward_time_s: float
    backward_factor: float
    issues: tuple[str, ...] = ()

    @property
    def feasible(self) -> bool:
        return not self.issues

    @property
    def step_bytes_per_gpu(self) -> float:
        return self.forward_bytes_per_gpu * (1 + self.backward_factor)

    @property
    def step_collectives(self) -> int:
        return round(self.forward_collectives * (1 + self.backward_factor))

    @property
    def step_time_s(self) -> float:
        return self.forward_time_s * (1 + self.backward_factor)


def _a2a_time(nbytes: float, n: int, cluster: ClusterSpec) -> float:
    return float(comm.all_to_all_time(nbytes, n, 1, cluster))


def _split_issue(spec: MultiDimSequence, dim: str, n: int) -> list[str]:
    return [] if spec.dims[dim] % n == 0 else [f"{dim}={spec.dims[dim]} does not split evenly {n} ways"]


def ulysses_embedded(spec: MultiDimSequence, n: int, cluster: ClusterSpec) -> StrategyComm:
    """DeepSpeed-Ulysses inside every attention: 4 all-to-alls of M/N per rank per block."""
    per_rank = spec.activation_bytes / n
    count = ULYSSES_A2A_PER_BLOCK * spec.blocks if n > 1 else 0
    issues = [] if spec.heads % n == 0 else [f"{spec.heads} heads do not split {n} ways (Ulysses degree <= heads)"]
    if n > 1 and spec.tokens % n:
        issues.append(f"{spec.tokens} tokens do not split evenly {n} ways")
    return StrategyComm("Ulysses embedded", "all-to-all", count * per_rank * (n - 1) / n, count,
                        count * _a2a_time(per_rank, n, cluster), A2A_BACKWARD_FACTOR, tuple(issues))


def ring_embedded(spec: MultiDimSequence, n: int, cluster: ClusterSpec, ring_dim: str | None = None) -> StrategyComm:
    """Ring attention over a fixed sharded dimension: N-1 K+V ring steps for each block attending over it."""
    dim = ring_dim or default_ring_dim(spec)
    if dim not in spec.dims:
        raise PlanInputError(f"ring dimension '{dim}' is not one of {list(spec.names)}", field="ring_dim")
    step_bytes = RING_TENSORS * spec.activation_bytes / n
    steps = spec.attends.count(dim) * (n - 1)
    step_time = float(comm.p2p_time(step_bytes, comm.span_tier(n, cluster), cluster)) if steps else 0.0
    issues = tuple(_split_issue(spec, dim, n)) if n > 1 else ()
    return StrategyComm(f"Ring embedded (shard {dim})", "ring p2p step", steps * step_bytes, steps,
                        steps * step_time, RING_BACKWARD_FACTOR, issues)


def dsp(spec: MultiDimSequence, n: int, cluster: ClusterSpec) -> StrategyComm:
    """DSP: one all-to-all of M/N per rank per switch of the sharded dimension."""
    start, switches = dsp_schedule(spec)
    per_rank = spec.activation_bytes / n
    count = len(switches) if n > 1 else 0
    used = sorted({start, *(s.dst for s in switches)}, key=spec.names.index)
    issues = tuple(i for d in used for i in _split_issue(spec, d, n)) if n > 1 else ()
    return StrategyComm("DSP", "all-to-all", count * per_rank * (n - 1) / n, count,
                        count * _a2a_time(per_rank, n, cluster), A2A_BACKWARD_FACTOR, issues)


@dataclass(frozen=True)
class DspComparison:
    spec: MultiDimSequence
    n: int
    cluster: str
    ulysses: StrategyComm
    ring: StrategyComm
    dsp: StrategyComm
    initial_dim: str
    switches: tuple[Switch, ...]
    ratio_vs_ulysses: float | None  # DSP / embedded step bytes; None where the embedded strategy sends nothing
    ratio_vs_ring: float | None

    @property
    def strategies(self) -> tuple[StrategyComm, ...]:
        return (self.ulysses, self.ring, self.dsp)


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def compare(spec: MultiDimSequence, n: int, cluster: ClusterSpec, ring_dim: str | None = None) -> DspComparison:
    """The three strategies for sequence-parallel degree `n` on `n` consecutive ranks of `cluster`."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise PlanInputError(f"must be a positive integer, got {n!r}", field="sp")
    if n > cluster.num_gpus:
        raise PlanInputError(f"degree {n} exceeds the {cluster.num_gpus} GPUs of {cluster.name}", field="sp")
    start, switches = dsp_schedule(spec)
    u, r, d = ulysses_embedded(spec, n, cluster), ring_embedded(spec, n, cluster, ring_dim), dsp(spec, n, cluster)
    return DspComparison(spec, n, cluster.name, u, r, d, start, switches,
                         _ratio(d.step_bytes_per_gpu, u.step_bytes_per_gpu),
                         _ratio(d.step_bytes_per_gpu, r.step_bytes_per_gpu))


def _gib(x: float) -> str:
    return f"{x / 2**30:9.3f} GiB"


def _pattern_text(pattern: tuple[str, ...], shown: int = 16) -> str:
    sep = "" if all(len(d) == 1 for d in pattern) else ","
    text = sep.join(pattern[:shown]) + (f"{sep}... ({len(pattern)} blocks)" if len(pattern) > shown else "")
    return text


def render_dsp(c: DspComparison) -> str:
    s = c.spec
    dims = " x ".join(f"{k}={v}" for k, v in s.dims.items())
    lines = [f"DSP (Zhao et al., ICML 2025) for {dims}, h={s.hidden}, heads={s.heads}, b={s.batch}, {s.blocks} blocks, "
             f"sp={c.n} on {c.cluster}; per GPU, one micro-batch, forward + backward",
             f"  pattern {_pattern_text(s.attends)}; "
             f"DSP shards {c.initial_dim} first, {len(c.switches)} switch(es) per forward"]
    for st in c.strategies:
        note = "" if st.feasible else "  [" + "; ".join(st.issues) + "]"
        lines.append(f"  {st.name:<26} {st.step_collectives:6d} x {st.collective:<14} {_gib(st.step_bytes_per_gpu)}"
                     f"  {st.step_time_s * 1e3:10.3f} ms{note}")
    for label, ratio in (("Ulysses", c.ratio_vs_ulysses), ("ring", c.ratio_vs_ring)):
        lines.append(f"  DSP volume / {label} embedded: " + ("n/a (it sends nothing)" if ratio is None
                                                              else f"{ratio:.1%}"))
    return "\n".join(lines)
