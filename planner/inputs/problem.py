"""A planning problem: what is trained, on what, and which knobs the user pinned."""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.inputs.specs import ClusterSpec, ModelSpec, TrainingSpec


@dataclass(frozen=True)
class Problem:
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    fixed: dict[str, int] = field(default_factory=dict)  # knob -> encoded value (categoricals as indices)
    allow_tp_across_nodes: bool = False
    enforce_memory: bool = True
    # Pinned knobs come from a run that happened (validation): framework capability rules do not judge them.
    trust_pins: bool = False
    compress: dict[str, float] = field(default_factory=dict)  # what-if compression ratio per parallel dimension

    @property
    def num_gpus(self) -> int:
        return self.cluster.num_gpus
