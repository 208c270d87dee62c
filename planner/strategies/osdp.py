"""Optimal Sharded Data Parallel: shard some layers ZeRO-3-style, replicate the rest, as memory allows.

Jiang, Miao, Nie, Cui, "OSDP: Optimal Sharded Data Parallel for Distributed Deep Learning" (IJCAI 2023;
HAET@ICML 2022): instead of one sharding strategy for the whole model, pick per operator whether its parameters are
sharded over the data-parallel ranks (gathered before every use, gradients reduce-scattered every micro-batch) or
replicated (gradients reduced once per step), so the memory left over by full sharding buys back communication.
Their operator splitting cuts a large Linear along its input features into `s` slices run one after another (partial
outputs summed); the first `f` slices are sharded and the rest replicated, a finer sharding fraction per operator
whose gathered buffer is one slice, not the whole operator (cost_model.md §6).

Their search engine is a multiple-choice-knapsack DP over layers with a memory budget in MB; here the same knapsack
is solved with CP-SAT: one Boolean per (item, option), exactly one option per item, states plus the largest gathered
buffer within the budget, minimise the step time. Times are integers in microseconds and memory in MiB (rounded up for
what is used, down for the budget, so a plan CP-SAT accepts always fits).

Cost terms, all from planner.cost so that the uniform ends agree with `plan explain`:
- per-layer compute, exposed TP/CP/EP time, LM head time, activations and logits come from
  `planner.cost.step.layer_terms` (the per-layer terms `evaluate` composes, so whatever step.py charges per layer is
  what OSDP sees; see `layer_costs`), the runtime reserve from `price_layout`;
- gathers and reduce-scatters use `comm.all_gather_time` on the dp x cp group strided by tp (as step.py's ZeRO-3),
  the per-step reduction of replicated gradients `comm.all_reduce_time` (affine in the bytes, so linear in CP-SAT);
- model states use `memory.state_bytes` with ZeRO-1 for replicated parts (optimizer sharded, as in step.py's zero=1)
  and ZeRO-3 for sharded parts.
Simplifications (documented where they bite):
- a layer's forward is a third of its forward + backward compute (backward = 2 x forward, Narayanan et al. 2021);
  step.py's attention backward is 2.5 x, so the forward share is slightly overstated;
- a gather hides behind the compute of the item it feeds (the prefetch of unit k+1 runs under unit k), as in step.py;
  the embedding's gathers have no compute to hide behind, the LM head's hide behind the head's GEMM;
- splitting adds one kernel launch per slice and pass and the partial-sum traffic of the forward; the lower
  efficiency of thinner GEMMs is not charged;
- the gradient-reduction window is the all-replicated layout's micro-batch time (step.py's window also grows with
  exposed gathers), and what-if compression (`problem.compress`) is not applied to OSDP's own collectives;
- dense models only: MoE experts reduce over a different group (step.py's expert_ranks).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from ortools.sat.python import cp_model

from planner.cost import device_memory, memory
from planner.cost.fabric import overlapped_exposed
from planner.errors import NoFeasiblePlan
from planner.inputs.layout import Layout, Zero
from planner.inputs.problem import Problem
from planner.search.search import price_layout
from planner.strategies.osdp_table import MIB, US, OsdpTable, osdp_table
from planner.strategies.solver import deterministic_solver


@dataclass(frozen=True)
class Priced:
    step_time_s: float
    memory_gib: float  # device total, as memory_peak_gib
    exposed_gather_s: float  # per step
    dp_exposed_s: float
    fits: bool


def price_choice(table: OsdpTable, choice: Sequence[int]) -> Priced:
    """Step time and peak memory of one option per item (indices into each item's options)."""
    opts = [item.options[c] for item, c in zip(table.items, choice, strict=True)]
    exposed = sum(o.exposed_s for o in opts)
    reduce_bytes = sum(o.reduce_bytes for o in opts)
    reduce = table.reduce_latency_s + table.reduce_s_per_byte * reduce_bytes if reduce_bytes > 0 else 0.0
    dp_exposed = float(overlapped_exposed(reduce, table.dp_window_s, table.sm_share))
    step = table.micro_batches * (table.base_microbatch_s + exposed) + dp_exposed + table.optimizer_s
    alloc = sum(o.state_bytes for o in opts) + max(o.buffer_bytes for o in opts) + table.act_bytes
    mem = float(device_memory.device_bytes(alloc, table.fixed_bytes)) / memory.GIB
    return Priced(step, mem, table.micro_batches * exposed, dp_exposed, mem <= table.capacity_gib * (1 + 1e-12))


@dataclass(frozen=True)
class Solved:
    choice: tuple[int, ...]
    optimal: bool


def solve_table(table: OsdpTable, time_limit_s: float = 10.0) -> Solved:
    """CP-SAT multiple-choice knapsack: minimise step time, then (ties) the number of gathered units."""
    items = table.items
    model = cp_model.CpModel()
    x = [[model.new_bool_var(f"x{i}_{o}") for o in range(len(it.options))] for i, it in enumerate(items)]
    for xs in x:
        model.add_exactly_one(xs)

    def per_item(coef) -> list:
        """The chosen option's integer coefficient, one linear expression per item."""
        return [sum(coef(o) * v for o, v in zip(it.options, xs, strict=True)) for it, xs in zip(items, x, strict=True)]

    # Memory (MiB): states of every item + the largest gathered buffer <= what activations and reserve leave.
    buf = model.new_int_var(0, max(math.ceil(o.buffer_bytes / MIB) for it in items for o in it.options), "buffer")
    for expr in per_item(lambda o: math.ceil(o.buffer_bytes / MIB)):
        model.add(buf >= expr)
    model.add(sum(per_item(lambda o: math.ceil(o.state_bytes / MIB))) + buf <= math.floor(
        table.alloc_budget_bytes() / MIB))
    # Time (us): exposed gathers per micro-batch x micro-batches + the exposed part of the per-step all-reduce.
    micro = table.micro_batches
    gathers = sum(per_item(lambda o: round(micro * o.exposed_s / US)))
    reduce = sum(per_item(lambda o: round(table.reduce_s_per_byte * o.reduce_bytes / US)))
    latency_us, window_us = round(table.reduce_latency_s / US), round(table.dp_window_s / US)
    dp_ub = latency_us + sum(round(table.reduce_s_per_byte * max(o.reduce_bytes for o in it.options) / US)
                             for it in items)
    dp_exposed = model.new_int_var(0, max(dp_ub, 0), "dp_exposed")
    # fabric.overlapped_exposed: max(e, s·(T - e)), e = max(T - w, 0) the part no window hides (s as a fraction)
    late = model.new_int_var(0, max(dp_ub, 0), "dp_late")
    model.add_max_equality(late, [latency_us - window_us + reduce, 0])
    share = Fraction(table.sm_share).limit_denominator(1000)  # CP-SAT takes integer coefficients
    model.add(dp_exposed >= late)
    model.add(share.denominator * dp_exposed >= share.numerator * (latency_us + reduce - late))
    units = sum(per_item(lambda o: len(o.units)))
    weight = 1 + sum(max(len(o.units) for o in it.options) for it in items)
    model.minimize((gathers + dp_exposed) * weight + units)
    # Identical neighbouring items are interchangeable: order their choices to cut symmetric search.
    for i in range(len(items) - 1):
        if items[i].options == items[i + 1].options:
            model.add(sum(o * v for o, v in enumerate(x[i])) >= sum(o * v for o, v in enumerate(x[i + 1])))
    solver = deterministic_solver(time_limit_s)
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise NoFeasiblePlan("OSDP: no mix of sharded and replicated layers fits the memory budget "
                             f"({table.capacity_gib:g} GiB)")
    choice = tuple(next(o for o, v in enumerate(xs) if solver.value(v)) for xs in x)
    return Solved(choice, status == cp_model.OPTIMAL)


# --- the plan -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ItemDecision:
    name: str
    label: str
    sharded_fraction: float
    split: int
    sharded_slices: int
    rest_sharded: bool
    exposed_s: float  # per micro-batch
    state_gib: float


@dataclass(frozen=True)
class Uniform:
    name: str
    step_time_s: float
    memory_gib: float
    fits: bool
    cost_model_step_s: float  # price_layout of the same uniform layout (zero=1 / zero=3), for cross-reference
    cost_model_memory_gib: float


@dataclass(frozen=True)
class OsdpPlan:
    layout: Layout
    capacity_gib: float
    decisions: tuple[ItemDecision, ...]
    step_time_s: float
    memory_gib: float
    exposed_gather_s: float
    dp_exposed_s: float
    zero1: Uniform  # every item replicated
    zero3: Uniform  # every item sharded whole
    beats_uniform: bool
    speedup_vs_best_uniform: float  # fastest uniform that fits / OSDP (inf when neither fits)
    optimal: bool


def _uniform(problem: Problem, layout: Layout, table: OsdpTable, pick: int, name: str, zero: Zero) -> Uniform:
    priced = price_choice(table, [pick] * len(table.items))
    ref = price_layout(problem, layout.replace(zero=zero))
    return Uniform(name, priced.step_time_s, priced.memory_gib, priced.fits, ref["step_time_s"],
                   ref["memory_peak_gib"])


def plan_osdp(problem: Problem, layout: Layout, split_choices: Sequence[int] = (1, 2, 4),
              capacity_gib: float | None = None, time_limit_s: float = 10.0) -> OsdpPlan:
    """Per-layer shard/replicate (and split) decisions for a pp = 1 layout under the per-GPU memory capacity
    (`capacity_gib`, default the GPU's HBM; counted like `memory_peak_gib`)."""
    lay = layout
    table = osdp_table(problem, lay, split_choices, capacity_gib)
    solved = solve_table(table, time_limit_s)
    priced = price_choice(table, solved.choice)
    zero1 = _uniform(problem, lay, table, 0, "zero1 (all replicated)", Zero.OPTIMIZER)
    zero3 = _uniform(problem, lay, table, 1, "zero3 (all sharded)", Zero.PARAMETERS)
    fitting = [u.step_time_s for u in (zero1, zero3) if u.fits]
    best = min(fitting) if fitting else math.inf
    decisions = tuple(
        ItemDecision(it.name, o.label, o.sharded_fraction, o.split, o.sharded_slices, o.rest_sharded, o.exposed_s,
                     o.state_bytes / memory.GIB)
        for it, o in ((it, it.options[c]) for it, c in zip(table.items, solved.choice, strict=True)))
    return OsdpPlan(lay, table.capacity_gib, decisions, priced.step_time_s, priced.memory_gib,
                    priced.exposed_gather_s, priced.dp_exposed_s, zero1, zero3,
                    beats_uniform=priced.step_time_s < best * (1 - 1e-9),
                    speedup_vs_best_uniform=best / priced.step_time_s, optimal=solved.optimal)
