"""Capacity planning (`plan sweep`): the best layout at every (GPU kind, GPU count) point, and what training a token
budget there takes in days, GPU-hours and money, with the points nobody should pick (dominated) told apart. Days
are wall-clock days: the steps' time divided by the expected goodput (planner.cost.goodput), since a larger job is
interrupted more often and every interruption costs a restart and the work since the last checkpoint.

Every point is one exhaustive search (planner.search.search) of the `{gpu}x{count}` catalog cluster with a global
batch that follows a tokens-per-batch target (planner.inputs.sweep_args.global_batch_for), so that larger clusters
keep feasible layouts instead of running out of data-parallel work.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from planner import __version__
from planner.cost.goodput import goodput
from planner.errors import NoFeasiblePlan
from planner.inputs.catalog import load_cluster
from planner.inputs.frameworks import DEFAULT_FRAMEWORK
from planner.inputs.layout import Layout
from planner.inputs.problem import Problem
from planner.inputs.specs import ModelSpec, TrainingSpec
from planner.inputs.sweep_args import global_batch_for
from planner.report.document import goodput_dict, layout_dict, metrics_dict, sig
from planner.search.search import search

# 2: days with goodput, each point's goodput block and days_without_failures; each layout states its rank_order;
# 3: the recipe's `optimizer` (adam | muon), and a layout's `pipeline_layout` where its split needs one
SWEEP_SCHEMA_VERSION = 3
SECONDS_PER_DAY = 86_400.0
FRONTIER_TIE = 0.005  # relative cost difference treated as a tie when deciding dominance


@dataclass(frozen=True)
class SweepSpec:
    """What is swept: the model, each GPU kind and count, and the training run the points are priced for."""

    model: ModelSpec
    gpus: list[str]
    counts: list[int]
    train_tokens: int
    tokens_per_batch: int
    seq_len: int = 8192
    precision: str = "bf16"
    framework: str = DEFAULT_FRAMEWORK
    prices: dict[str, float] = field(default_factory=dict)  # dollars per GPU-hour, by GPU key
    # The training recipe beyond precision (fp8 scaling, Adam moments and offload, token dropping): TrainingSpec
    # fields other than seq_len, global_batch, precision and framework, as `plan` takes them.
    recipe: dict[str, Any] = field(default_factory=dict)

    def clusters(self) -> list[tuple[str, int]]:
        return [(gpu, count) for gpu in self.gpus for count in self.counts]


@dataclass
class SweepPoint:
    """One (GPU kind, count): its best layout and what the token budget costs there (None where nothing fits)."""

    gpu: str
    count: int
    global_batch: int
    layout: Layout | None = None
    metrics: dict[str, float] | None = None
    capacity_gib: float = 0.0
    steps: int = 0
    days: float | None = None  # wall-clock: the steps' time / goodput
    days_without_failures: float | None = None  # the steps' time alone
    goodput: dict[str, Any] | None = None  # planner.report.document.goodput_dict
    gpu_hours: float | None = None
    cost_usd: float | None = None
    reason: str | None = None  # why nothing is feasible
    binding: list[str] = field(default_factory=list)  # the rules that leave nothing feasible
    frontier: bool = False

    @property
    def cluster(self) -> str:
        return f"{self.gpu}x{self.count}"

    @property
    def feasible(self) -> bool:
        return self.layout is not None


def _problem(spec: SweepSpec, gpu: str, count: int, global_batch: int) -> Problem:
    training = TrainingSpec(seq_len=spec.seq_len, global_batch=global_batch, precision=spec.precision,
                            framework=spec.framework, **spec.recipe)
    return Problem(spec.model, load_cluster(f"{gpu}x{count}"), training)


def price_point(spec: SweepSpec, gpu: str, count: int) -> SweepPoint:
    """Search one cluster and turn its best step time into days, GPU-hours and dollars for the token budget."""
    gbs = global_batch_for(spec.tokens_per_batch, spec.seq_len, count)
    problem = _problem(spec, gpu, count, gbs)
    point = SweepPoint(gpu, count, gbs, capacity_gib=problem.cluster.gpu.memory_gib)
    try:
        best = search(problem, top=1).plans[0]
    except NoFeasiblePlan as exc:
        from planner.search.diagnosis import explain_infeasible

        diagnosis = explain_infeasible(problem)
        point.binding = list(diagnosis.get("binding", []))
        point.reason = "; ".join(diagnosis.get("reasons", [])) or exc.message
        return point
    kept = goodput(problem, best.metrics["step_time_s"]).goodput  # > 0: a catalog cluster has the defaults
    point.layout, point.metrics = best.layout, best.metrics
    point.steps = math.ceil(spec.train_tokens / (gbs * spec.seq_len))
    point.goodput = goodput_dict(problem, best.metrics)
    busy = point.steps * best.metrics["step_time_s"]
    point.days_without_failures = busy / SECONDS_PER_DAY
    point.days = busy / kept / SECONDS_PER_DAY
    seconds = busy / kept
    point.gpu_hours = count * seconds / 3600.0
    if gpu in spec.prices:
        point.cost_usd = point.gpu_hours * spec.prices[gpu]
    return point


def frontier_axis(points: list[SweepPoint]) -> str:
    """What the frontier trades time against: dollars when every feasible point has a price, else GPU-hours."""
    feasible = [p for p in points if p.feasible]
    return "cost_usd" if feasible and all(p.cost_usd is not None for p in feasible) else "gpu_hours"


def mark_frontier(points: list[SweepPoint]) -> str:
    """Mark the points no other point beats: q dominates p when it takes no more days, costs no more (within
    FRONTIER_TIE: a cost model is not that precise, so 0.01 % cheaper at 8x the days is no reason to pick p), and is
    strictly better in one of the two."""
    axis = frontier_axis(points)
    feasible = [p for p in points if p.feasible]
    for p in feasible:
        p_cost = getattr(p, axis)
        p.frontier = not any(
            q.days <= p.days and getattr(q, axis) <= p_cost * (1 + FRONTIER_TIE)
            and (q.days < p.days or getattr(q, axis) < p_cost)
            for q in feasible if q is not p
        )
    return axis


def run_sweep(spec: SweepSpec, on_point: Callable[[int, int, str], None] | None = None) -> list[SweepPoint]:
    """Every point of the sweep, in GPU then count order, with the frontier marked. `on_point(done, total, name)` is
    called before each search (progress reporting)."""
    todo = spec.clusters()
    points = []
    for i, (gpu, count) in enumerate(todo):
        if on_point is not None:
            on_point(i, len(todo), f"{gpu}x{count}")
        points.append(price_point(spec, gpu, count))
    if on_point is not None:
        on_point(len(todo), len(todo), "")
    mark_frontier(points)
    return points


def _round(x: float | None, digits: int = 6) -> float | None:
    return None if x is None else sig(x, digits)


def point_dict(point: SweepPoint, layers: int, framework: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "gpu": point.gpu, "count": point.count, "cluster": point.cluster, "global_batch": point.global_batch,
        "feasible": point.feasible, "frontier": point.frontier,
    }
    if point.layout is None or point.metrics is None:
        return {**out, "reason": point.reason, "binding": point.binding}
    return {
        **out,
        "layout": layout_dict(point.layout, point.metrics, layers, framework=framework),
        "metrics": metrics_dict(point.metrics, point.capacity_gib),
        "steps": point.steps, "days": _round(point.days), "gpu_hours": _round(point.gpu_hours),
        "cost_usd": _round(point.cost_usd), "days_without_failures": _round(point.days_without_failures),
        "goodput": point.goodput,
    }


RECIPE_KEYS = ("fp8_recipe", "optimizer_offload", "optimizer_moments", "moe_capacity_factor", "moe_pad_to_capacity",
               "cuda_graphs", "optimizer")


def recipe_inputs(spec: SweepSpec) -> dict[str, Any]:
    """The recipe keys of the sweep's inputs, every one present (defaults where the sweep set none): a stable schema."""
    defaults = TrainingSpec()
    return {key: spec.recipe.get(key, getattr(defaults, key)) for key in RECIPE_KEYS}


def sweep_document(spec: SweepSpec, points: list[SweepPoint]) -> dict[str, Any]:
    """The sweep for scripts (`plan sweep --format json|yaml`): deterministic, no timings."""
    return {
        "schema_version": SWEEP_SCHEMA_VERSION,
        "kind": "plan-sweep",
        "planner_version": __version__,
        "inputs": {
            "model": spec.model.model_dump(exclude_none=True), "gpus": list(spec.gpus), "counts": list(spec.counts),
            "train_tokens": spec.train_tokens, "tokens_per_batch": spec.tokens_per_batch, "seq_len": spec.seq_len,
            "precision": spec.precision, "framework": spec.framework, **recipe_inputs(spec),
            "gpu_hour_price_usd": dict(sorted(spec.prices.items())),
        },
        "frontier_axis": frontier_axis(points),
        "points": [point_dict(p, spec.model.num_hidden_layers, spec.framework) for p in points],
    }
