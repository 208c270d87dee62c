"""A planning problem: what is trained, on what, and which knobs the user pinned."""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.inputs.specs import ClusterSpec, ModelSpec, TrainingSpec

# Knob names shared by `--fix` and `explain --layout` (README, "Layout keys").
KNOBS = ("tp", "pp", "dp", "cp", "ep", "vpp", "mbs", "zero", "recompute", "sp", "schedule", "cp_comm")
# Megatron --cp-comm-type p2p (ring attention) | a2a (DeepSpeed-Ulysses) | a2a+p2p (Ulysses inside the NVLink
# domain, ring across domains)
CP_COMM = ("ring", "a2a", "a2a+p2p")
RECOMPUTE = ("none", "selective", "full")
ZERO_STAGES = (0, 1, 2, 3, 4)  # 4 = HSDP: ZeRO-3 within the NVLink domain, replicated across domains
HSDP = 4
SCHEDULES = ("1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "seq1f1b")
SEQ1F1B_SEGMENTS = 4  # Seq1F1B splits each sequence into this many segments (Sun et al. 2024 evaluate 2-8)


@dataclass(frozen=True)
class Problem:
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    fixed: dict[str, int] = field(default_factory=dict)  # knob -> encoded value (categoricals as indices)
    allow_tp_across_nodes: bool = False
    enforce_memory: bool = True
    compress: dict[str, float] = field(default_factory=dict)  # what-if compression ratio per parallel dimension

    @property
    def num_gpus(self) -> int:
        return self.cluster.num_gpus
