"""A planning problem: what is trained, on what, and which knobs the user pinned."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from planner.errors import PlanInputError
from planner.inputs.specs import ClusterSpec, ModelSpec, TrainingSpec

# Parallel dimensions whose traffic `--compress` can shrink (planner.cost.fabric prices them).
COMPRESS_DIMENSIONS = ("tp", "cp", "ep", "dp", "pp")
COMPRESS_RANGE = (1.0, 1000.0)  # a ratio of 4 sends a quarter of the bytes; below 1 would send more


DEFAULT_MEMORY_HEADROOM = 0.05


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
    # Schedules the search may choose (codes); None: every schedule the framework ships. Validation narrows it when
    # a case does not state its schedule (opt-in schedules are priced only when a run names them).
    schedule_choices: tuple[int, ...] | None = None
    # Recompute modes the search may choose (codes); None: all. Validation leaves out the opt-in fine-grained
    # activation offloading where a case states no recompute, as it does the opt-in schedules.
    recompute_choices: tuple[int, ...] | None = None
    # Share of GPU memory a plan should leave free: plans predicted above (1 - headroom) x capacity are "tight",
    # ranked after every plan with room, and marked (planner.search.search). The memory model's median error on
    # published runs is ~7% (plan validate), so a plan within 5% of the capacity may well not fit.
    memory_headroom: float = DEFAULT_MEMORY_HEADROOM
    # The loss runs under torch.compile (a run's torch_compile knob with the loss in its scope: torchtitan compiles it
    # with the model from components/loss.py build_cross_entropy_loss on; a plan that compiles, where
    # planner.cost.profiles.plan_compiles_loss): its logits take planner.cost.memory.COMPILED_LOSS_BYTES per logit.
    # The compiled model's speed is the training's torch_compile (planner.cost.profiles.kernel_efficiency).
    compiled_loss: bool = False

    def __post_init__(self) -> None:
        check_pipeline_layout(self, self.training.pipeline_layout, "training.pipeline_layout")

    @property
    def num_gpus(self) -> int:
        return self.cluster.num_gpus


def _compress_pairs(raw: Iterable[str] | Mapping[object, object]) -> Iterable[tuple[object, object]]:
    if isinstance(raw, Mapping):
        return raw.items()
    pairs = []
    for item in raw:
        for part in filter(None, (p.strip() for p in item.split(","))):
            key, _, value = part.partition("=")
            pairs.append((key.strip().lower(), value))
    return pairs


def parse_compress(raw: Iterable[str] | Mapping[object, object] | None, where: str = "--compress",
                   source: str | None = None) -> dict[str, float]:
    """The what-if compression ratios, the one place they are checked: `--compress dp=4,tp=1.5` (a list of such
    strings) or a plan document's `inputs.options.compress` mapping. Each key is a dimension of COMPRESS_DIMENSIONS
    and each ratio a number within COMPRESS_RANGE; one PlanInputError otherwise."""
    low, high = COMPRESS_RANGE
    cli = where.startswith("--")
    ratios: dict[str, float] = {}
    for key, value in _compress_pairs(raw or []):
        name = str(key)
        if name not in COMPRESS_DIMENSIONS:
            fix = "e.g. --compress dp=4,tp=1.5" if cli else "e.g. dp: 4"
            raise PlanInputError(f"unknown dimension {name[:40]!r}", field=where, source=source,
                                 fix=f"use {', '.join(COMPRESS_DIMENSIONS)}, {fix}")
        field_name = where if cli else f"{where}.{name}"
        if isinstance(value, bool):
            value = str(value)
        try:
            ratio = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise PlanInputError(f"ratio for {name} must be a number (got {str(value)[:60]!r})", field=field_name,
                                 source=source, fix="e.g. --compress dp=4" if cli else "e.g. dp: 4") from None
        if not (math.isfinite(ratio) and low <= ratio <= high):
            raise PlanInputError(f"ratio for {name} must be between {low:g} and {high:g} (got {str(value)[:60]})",
                                 field=field_name, source=source, fix="a ratio of 4 sends a quarter of the bytes")
        ratios[name] = ratio
    return ratios


def check_pipeline_layout(problem: Problem, chunks: tuple[int, ...] | None, where: str) -> None:
    """A stated pipeline layout places every decoder layer of the model once (Megatron-Core validate_layer_layout
    asserts the same)."""
    if chunks is not None and sum(chunks) != problem.model.num_hidden_layers:
        raise PlanInputError(f"the pipeline layout places {sum(chunks)} decoder layers; the model has "
                             f"{problem.model.num_hidden_layers}", field=where,
                             fix="one count per model chunk, summing to the model's layers")


def stated_layout(problem: Problem, chunks: tuple[int, ...], where: str) -> Problem:
    """The problem priced with a run's own pipeline layout (TrainingSpec.pipeline_layout); `where` names the flag
    or key that states it, for the error."""
    check_pipeline_layout(problem, chunks, where)
    return replace(problem, training=problem.training.model_copy(update={"pipeline_layout": tuple(chunks)}))
