"""What one pipeline operation costs: its duration, the ops it waits for, the memory it holds or frees.

Shared by the replaying simulator (pipeline_sim) and the greedy ZB-V scheduler (pipeline_orders). Sources are in
pipeline_sim's module docstring (Narayanan et al. 2021; Qi et al. 2024; Sun et al. 2024).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

W_SHARE_FUSED_ATTENTION = 32 / 34  # M_W / M_B without the s^2 attention-score term (ZB paper memory model)


class Op(NamedTuple):
    """One scheduled operation on a rank. `seg` is the sequence segment (Seq1F1B), 0 otherwise."""

    kind: str  # "F" | "B" | "W"
    mb: int
    chunk: int = 0
    seg: int = 0


@dataclass(frozen=True)
class Spec:
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
    bidirectional: bool = False  # DualPipe: chunk 0 carries one half of the micro-batches down, chunk 1 the rest up

    @cached_property
    def vstages(self) -> tuple[tuple[int, ...], ...]:
        """vstages[rank][chunk]: looping placement c*p + s (Narayanan et al. 2021 §2.2.2), or the V shape (ZB paper,
        ZB-V): chunk 0 runs down the ranks, chunk 1 back up, so rank 0 holds the first and the last layers."""
        if self.v_shape or self.bidirectional:
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

    def starts(self, vs: int) -> bool:
        """A micro-batch enters here: virtual stage 0, or p for DualPipe's second direction."""
        return vs == 0 or (self.bidirectional and vs == self.p)

    def ends(self, vs: int) -> bool:
        """A micro-batch's last stage: the last virtual stage, or p - 1 for DualPipe's first direction."""
        return vs == self.n_virtual - 1 or (self.bidirectional and vs == self.p - 1)


def segment_factor(seg: int, k: int, attn_frac: float) -> float:
    """Share of a whole sequence's compute spent on segment `seg` (0-based) of k equal-length segments.

    Explicit approximation for Seq1F1B (Sun et al. 2024, arXiv 2406.03488): token-linear work (GEMMs, norms) splits
    evenly, 1/k per segment; causal attention of segment j (1-based) attends to j-1 full earlier blocks plus half its
    own diagonal block, so its share of the attention work is (2j-1)/k^2 (sums to 1 over j). `attn_frac` is the share
    of causal attention in the layer's compute (for MHA 2sh / (8h^2 + 4hF + 2sh), cost_model.md §1.2). Applied to F
    and to the input-grad B; the weight-grad part (no attention weights) always splits 1/k. Seq1F1B's own
    computation-wise partition (unequal segment lengths) would flatten this imbalance; we model the simpler
    equal-token split.
    """
    j = seg + 1
    return (1.0 - attn_frac) / k + attn_frac * (2 * j - 1) / k**2


def op_duration(spec: Spec, op: Op) -> float:
    fac = segment_factor(op.seg, spec.k, spec.attn_frac)
    if op.kind == "F":
        t = spec.t_f * fac
    elif op.kind == "B":
        t = spec.t_b * fac + (0.0 if spec.split else spec.t_w / spec.k)
    else:
        t = spec.t_w / spec.k
    # A DualPipe chunk is a whole stage of its direction's pipeline; other schedules cut a rank's layers into v.
    return t if spec.bidirectional else t / spec.v


Key = tuple[int, tuple[str, int, int, int]]  # (rank, op); Op is such a tuple, and hashes like one


def op_deps(spec: Spec, stage: int, op: Op) -> list[tuple[Key, float]]:
    """(dependency, extra delay) pairs for `op` on `stage`. Keys use plain tuples (equal to, and hashing like, Op)."""
    kind, mb, chunk, seg = op
    vs = spec.vstage(stage, chunk)
    out: list[tuple[Key, float]] = []
    if kind == "F":
        if not spec.starts(vs):
            s2, c2 = spec.owner(vs - 1)
            out.append(((s2, ("F", mb, c2, seg)), spec.t_comm if s2 != stage else 0.0))
        if seg > 0:  # Seq1F1B: attention of segment j reads the keys/values of segments < j
            out.append(((stage, ("F", mb, chunk, seg - 1)), 0.0))
    elif kind == "B":
        if not spec.ends(vs):
            s2, c2 = spec.owner(vs + 1)
            out.append(((s2, ("B", mb, c2, seg)), spec.t_comm if s2 != stage else 0.0))
        else:
            out.append(((stage, ("F", mb, chunk, seg)), 0.0))
        if seg < spec.k - 1:  # Seq1F1B: dK/dV of segment j collect gradients from the later segments
            out.append(((stage, ("B", mb, chunk, seg + 1)), 0.0))
    else:
        out.append(((stage, ("B", mb, chunk, seg)), 0.0))
    return out


def op_sends(spec: Spec, stage: int, op: Op) -> bool:
    """Whether the op's output crosses to another rank (used by the blocking-p2p option)."""
    vs = spec.vstage(stage, op.chunk)
    if op.kind == "F" and not spec.ends(vs):
        return spec.owner(vs + 1)[0] != stage
    if op.kind == "B" and not spec.starts(vs):
        return spec.owner(vs - 1)[0] != stage
    return False


def op_mem_delta(spec: Spec, op: Op) -> float:
    a = 1.0 / spec.k
    if op.kind == "F":
        return a
    if op.kind == "B":
        return -a * (1.0 - spec.w_share) if spec.split else -a
    return -a * spec.w_share


# ---------------------------------------------------------------------------------------------------------------
# The list scheduler
# ---------------------------------------------------------------------------------------------------------------
