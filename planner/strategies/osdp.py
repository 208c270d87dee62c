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

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from planner.cost import fabric as comm
from planner.cost import flops, memory
from planner.cost.profiles import profile_for
from planner.cost.step import layer_terms
from planner.errors import NoFeasiblePlan, PlanInputError
from planner.inputs.hardware import HBM_EFFICIENCY, KERNEL_OVERHEAD_S
from planner.inputs.layout import KNOBS, RECOMPUTE
from planner.inputs.problem import Problem
from planner.search.search import price_layout

US = 1e-6  # CP-SAT time unit (s)
MIB = 2.0**20  # CP-SAT memory unit (bytes)
FULL = RECOMPUTE.index("full")
_ONE_KNOBS = ("tp", "pp", "dp", "cp", "ep", "vpp", "mbs")
_GATHER_BYTES = 2.0  # bf16 compute copy gathered per use (as step.py's ZeRO-3 term)
_PREFETCH = 2  # gathered units alive at once: the running one and the prefetched next one (step.py's z3 buffer)


def full_layout(layout: Mapping[str, int], **changes: int) -> dict[str, int]:
    """Every knob of `planner.inputs.problem.KNOBS`: the given ones, `changes`, and 1 (sizes) or 0 (choices) for the
    rest."""
    lay = {k: (1 if k in _ONE_KNOBS else 0) for k in KNOBS}
    lay.update({k: int(v) for k, v in layout.items() if k in KNOBS})
    lay.update(changes)
    return lay


@dataclass(frozen=True)
class LayerCosts:
    """Per-layer terms of planner.cost.step for one layout: one GPU, one micro-batch, one (average) layer."""

    micro_batches: float  # per step per pipeline
    layer_compute_s: float  # forward + backward kernels, no recomputation, no exposed communication
    layer_comm_s: float  # exposed TP + CP + EP collectives
    layer_fsdp_s: float  # exposed ZeRO-3 gathers/reduce-scatters (layout zero = 3 only)
    recompute_s: float  # recomputation in the layout's mode (none or selective)
    full_recompute_s: float  # recomputation were the layer fully recomputed (+ its 2 extra TP collectives)
    head_s: float  # LM head + loss, forward + backward
    act_bytes: float  # activations kept per in-flight micro-batch (layout's mode; full read as none)
    checkpoint_bytes: float  # kept per in-flight micro-batch under full recompute (the layer input)
    working_bytes: float  # full recompute: one layer's activations while it is recomputed
    layer_state_bytes: float  # weights + grads + optimizer of one layer (layout's ZeRO stage)
    edge_state_bytes: float  # the same for the embedding and LM head together
    logits_bytes: float  # last stage's logits (+ fp32 copy for the loss)


def _layer_terms(problem: Problem, layout: Mapping[str, int]) -> dict[str, float]:
    cols = {k: np.array([layout[k]], dtype=np.int64) for k in KNOBS}
    return {k: float(v[0]) for k, v in layer_terms(problem, cols).items()}


def layer_costs(problem: Problem, layout: Mapping[str, int]) -> LayerCosts:
    """Per-layer terms of the layout at pp = 1 from `planner.cost.step.layer_terms` (the same terms `evaluate`
    composes), in the layout's recompute mode (full read as none) and under full recompute."""
    base_rc = int(layout.get("recompute", 0))
    base_rc = 0 if base_rc == FULL else base_rc
    lay = full_layout(layout, pp=1, vpp=1, schedule=0, recompute=base_rc)
    a, af = _layer_terms(problem, lay), _layer_terms(problem, {**lay, "recompute": FULL})
    return LayerCosts(
        micro_batches=a["micro_batches"],
        layer_compute_s=a["fwd_s"] + a["bwd_s"],
        layer_comm_s=a["comm_s"],
        layer_fsdp_s=a["fsdp_s"],
        recompute_s=a["recompute_s"],
        full_recompute_s=af["recompute_s"] + af["tp_comm_s"] - a["tp_comm_s"],
        head_s=a["head_s"],
        act_bytes=a["act_bytes"],
        checkpoint_bytes=af["act_bytes"],
        working_bytes=af["working_bytes"],
        layer_state_bytes=a["state_bytes"],
        edge_state_bytes=a["edge_state_bytes"],
        logits_bytes=a["logits_bytes"],
    )


# --- the knapsack items -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Option:
    """One way to hold one item (a transformer layer, the embedding or the LM head)."""

    label: str
    sharded_fraction: float  # of the item's parameters
    split: int  # slices the layer's largest Linear is cut into (1: not split)
    sharded_slices: int  # of those slices, sharded
    rest_sharded: bool  # the layer's other parameters
    units: tuple[float, ...]  # parameters (per GPU, i.e. /tp) of each separately gathered piece
    exposed_s: float  # per micro-batch: gathers + reduce-scatters not hidden by compute, + split overhead
    reduce_bytes: float  # gradient bytes this item adds to the per-step data-parallel all-reduce
    state_bytes: float  # weights + grads + optimizer on one GPU
    buffer_bytes: float  # gathered weights alive while it runs (current + prefetched) + one unsharded gradient


@dataclass(frozen=True)
class Item:
    name: str
    params: float  # per GPU (/tp), unsharded
    options: tuple[Option, ...]  # options[0] replicated, options[1] sharded whole


@dataclass(frozen=True)
class OsdpTable:
    """Everything the knapsack needs; `price_choice` evaluates any choice of one option per item."""

    items: tuple[Item, ...]
    micro_batches: float
    base_microbatch_s: float  # one micro-batch, everything replicated (no gathers)
    optimizer_s: float
    dp_window_s: float  # backward time that hides the per-step gradient all-reduce
    reduce_latency_s: float  # all-reduce time = latency + bytes x slope (comm.all_reduce_time is affine)
    reduce_s_per_byte: float
    act_bytes: float  # activations + logits (fixed by the layout)
    fixed_bytes: float  # CUDA context + NCCL buffers (memory.runtime_reserve without the fragmentation share)
    capacity_gib: float

    def alloc_budget_bytes(self) -> float:
        """Bytes states + buffer may take: capacity = (1 + fragmentation) x allocations + fixed reserve."""
        return (self.capacity_gib * memory.GIB - self.fixed_bytes) / (1 + memory.FRAGMENTATION) - self.act_bytes


def _largest_linear_params(problem: Problem) -> float:
    """The MLP down projection (F x h): the largest Linear of a dense layer (as large as the up/gate ones), and split
    along its input features its partial outputs are only h wide."""
    m = problem.model
    return float(m.intermediate_size * m.hidden_size)


@dataclass(frozen=True)
class _Pricing:
    """Collective and state costs of one layout, as functions of a unit's parameter count (per GPU)."""

    gather: Callable[[float], float]  # all-gather of its bf16 weights
    scatter: Callable[[float], float]  # reduce-scatter of its gradients
    states: Callable[[float, int], float]  # weights + grads + optimizer under ZeRO stage 1 or 3
    grad_bytes: float  # per gradient element reduced
    split_cost_s: float  # per extra slice per micro-batch


def _option(c: _Pricing, params: float, fwd_s: float, bwd_s: float, label: str, split: int, f: int, rest: bool,
            units: tuple[float, ...]) -> Option:
    sharded = sum(units)
    frac = sharded / params if params else 0.0
    ag = sum(c.gather(u) for u in units)
    rs = sum(c.scatter(u) for u in units)
    exposed = (max(ag - fwd_s, 0.0) + max(ag + rs - bwd_s, 0.0)) if units else 0.0
    big = max(units) if units else 0.0
    return Option(label, frac, split, f, rest, units, exposed + (split - 1) * c.split_cost_s,
                  reduce_bytes=(params - sharded) * c.grad_bytes,
                  state_bytes=(1 - frac) * c.states(params, 1) + frac * c.states(params, 3),
                  buffer_bytes=_PREFETCH * big * _GATHER_BYTES + big * c.grad_bytes)


def _item(c: _Pricing, name: str, params: float, fwd_s: float, bwd_s: float, splits: Sequence[int] = (),
          big_fraction: float = 0.0) -> Item:
    """All options of one item; fwd_s/bwd_s: the compute its gathers hide behind."""
    opts = [_option(c, params, fwd_s, bwd_s, "replicated", 1, 0, False, ()),
            _option(c, params, fwd_s, bwd_s, "sharded", 1, 1, True, (params,))]
    if big_fraction <= 0 or not splits:
        return Item(name, params, tuple(opts))
    # The largest Linear as its own unit (s = 1) or cut into s slices, f of them sharded; the rest of the layer is
    # one more unit, sharded or replicated.
    big, rest = big_fraction * params, (1 - big_fraction) * params
    for s in sorted({max(int(x), 1) for x in splits}):
        for rest_sharded, f in itertools.product((False, True), range(s + 1)):
            if f == 0 and not rest_sharded:
                continue  # nothing sharded: the replicated option without the split's cost
            units = ((rest,) if rest_sharded else ()) + (big / s,) * f
            if s == 1:
                what = "largest Linear sharded" if f else "largest Linear replicated"
            else:
                what = f"{f}/{s} slices of largest Linear sharded"
            label = what + (", rest sharded" if rest_sharded else ", rest replicated")
            opts.append(_option(c, params, fwd_s, bwd_s, label, s, f, rest_sharded, units))
    return Item(name, params, tuple(_prune(opts)))


def _prune(opts: list[Option]) -> list[Option]:
    """Drop split options no better than another option on every count (the two uniform ones always stay)."""

    def key(o: Option) -> tuple[float, ...]:
        return (o.exposed_s, o.reduce_bytes, o.state_bytes, o.buffer_bytes)

    kept = opts[:2]
    for i, o in enumerate(opts[2:], start=2):
        dominated = any(all(a <= b for a, b in zip(key(p), key(o), strict=True)) and key(p) != key(o)
                        for j, p in enumerate(opts) if j != i)
        duplicate = any(key(p) == key(o) for p in kept)
        if not dominated and not duplicate:
            kept.append(o)
    return kept


def osdp_table(problem: Problem, layout: Mapping[str, int], split_choices: Sequence[int] = (1, 2, 4),
               capacity_gib: float | None = None) -> OsdpTable:
    """The knapsack for a data-parallel layout (pp = 1): one item per transformer layer, the embedding and LM head."""
    m, cl = problem.model, problem.cluster
    lay = full_layout(layout)
    if lay["pp"] != 1:
        raise PlanInputError("OSDP plans data-parallel layouts only (pp = 1)", field="--layout", fix="set pp=1")
    if m.is_moe:
        raise PlanInputError("OSDP here models dense layers only (experts reduce over a different group)",
                             field="--model", fix="use a dense model")
    prof = profile_for(problem.training.framework)
    fp8 = problem.training.precision in ("fp8", "fp4")
    repl = full_layout(lay, zero=1)
    cost = layer_costs(problem, repl)
    priced = price_layout(problem, repl)
    micro = priced["num_microbatches"]
    base_mb = (priced["step_time_s"] - priced["dp_comm_s"] - priced["optimizer_s"]) / micro
    tp = float(lay["tp"])
    ranks = np.array(float(lay["dp"] * lay["cp"]))
    stride = np.array(tp)

    def gather(p: float) -> float:
        return float(comm.all_gather_time(np.array(p * _GATHER_BYTES), ranks, stride, cl))

    def scatter(p: float) -> float:
        return float(comm.all_gather_time(np.array(p * prof.grad_reduce_bytes), ranks, stride, cl))

    def states(p: float, zero: int) -> float:
        return float(sum(memory.state_bytes(np.array(p), np.array(zero), ranks, prof, fp8).values()))

    # Split overhead per micro-batch: one more kernel per slice in forward, input-grad and weight-grad (and in the
    # recomputed forward), plus reading two partial outputs and writing their sum (bf16, tok x h per slice boundary).
    tok = lay["mbs"] * problem.training.seq_len / lay["cp"]
    forwards = 2 if lay["recompute"] == FULL else 1
    hbm = cl.gpu.hbm_tbps * 1e12 * HBM_EFFICIENCY
    split_cost = (2 + forwards) * KERNEL_OVERHEAD_S + forwards * 3 * 2.0 * tok * m.hidden_size / tp / hbm
    c = _Pricing(gather, scatter, states, prof.grad_reduce_bytes, split_cost)

    layer_p = flops.dense_layer_params(m) / tp
    fwd = cost.layer_compute_s / 3
    big_fraction = min(_largest_linear_params(problem) / flops.dense_layer_params(m), 1.0)
    items = [_item(c, f"layer {i}", layer_p, fwd, cost.layer_compute_s - fwd, split_choices, big_fraction)
             for i in range(m.num_hidden_layers)]
    emb_p = flops.embedding_params(m) / tp
    head_p = flops.lm_head_params(m) / tp
    head_fwd = cost.head_s / 3
    if head_p:  # the lookup has no compute to hide a gather behind; the head has its GEMM
        items.insert(0, _item(c, "embedding", emb_p, 0.0, 0.0))
        items.append(_item(c, "lm head", head_p, head_fwd, cost.head_s - head_fwd))
    else:  # tied: one table, gathered for the lookup and again for the head
        items.append(_item(c, "embedding + lm head (tied)", emb_p, head_fwd, cost.head_s - head_fwd))

    latency = float(comm.all_reduce_time(np.array(0.0), ranks, stride, cl))
    probe = 2.0**30
    slope = (float(comm.all_reduce_time(np.array(probe), ranks, stride, cl)) - latency) / probe
    alloc = priced["memory_allocated_gib"]
    fixed = (priced["mem_reserve_gib"] - memory.FRAGMENTATION * alloc) * memory.GIB
    acts = (priced["mem_activations_gib"] + priced["mem_logits_gib"]) * memory.GIB
    return OsdpTable(
        items=tuple(items), micro_batches=micro, base_microbatch_s=base_mb, optimizer_s=priced["optimizer_s"],
        dp_window_s=prof.dp_overlap * base_mb, reduce_latency_s=latency, reduce_s_per_byte=slope, act_bytes=acts,
        fixed_bytes=fixed, capacity_gib=problem.cluster.gpu.memory_gib if capacity_gib is None else capacity_gib)


# --- pricing and solving ----------------------------------------------------------------------------------------
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
    dp_exposed = max(reduce - table.dp_window_s, 0.0)
    step = table.micro_batches * (table.base_microbatch_s + exposed) + dp_exposed + table.optimizer_s
    alloc = sum(o.state_bytes for o in opts) + max(o.buffer_bytes for o in opts) + table.act_bytes
    mem = ((1 + memory.FRAGMENTATION) * alloc + table.fixed_bytes) / memory.GIB
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
    model.add(dp_exposed >= latency_us - window_us + reduce)
    units = sum(per_item(lambda o: len(o.units)))
    weight = 1 + sum(max(len(o.units) for o in it.options) for it in items)
    model.minimize((gathers + dp_exposed) * weight + units)
    # Identical neighbouring items are interchangeable: order their choices to cut symmetric search.
    for i in range(len(items) - 1):
        if items[i].options == items[i + 1].options:
            model.add(sum(o * v for o, v in enumerate(x[i])) >= sum(o * v for o, v in enumerate(x[i + 1])))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = 1  # deterministic
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
    layout: dict[str, int]
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

    @property
    def sharded_layers(self) -> int:
        return sum(d.sharded_fraction > 0 for d in self.decisions if d.name.startswith("layer "))


def _uniform(problem: Problem, layout: dict[str, int], table: OsdpTable, pick: int, name: str, zero: int) -> Uniform:
    priced = price_choice(table, [pick] * len(table.items))
    ref = price_layout(problem, full_layout(layout, zero=zero))
    return Uniform(name, priced.step_time_s, priced.memory_gib, priced.fits, ref["step_time_s"],
                   ref["memory_peak_gib"])


def plan_osdp(problem: Problem, layout: dict[str, int], split_choices: Sequence[int] = (1, 2, 4),
              capacity_gib: float | None = None, time_limit_s: float = 10.0) -> OsdpPlan:
    """Per-layer shard/replicate (and split) decisions for a pp = 1 layout under the per-GPU memory capacity
    (`capacity_gib`, default the GPU's HBM; counted like `memory_peak_gib`)."""
    lay = full_layout(layout)
    table = osdp_table(problem, lay, split_choices, capacity_gib)
    solved = solve_table(table, time_limit_s)
    priced = price_choice(table, solved.choice)
    zero1 = _uniform(problem, lay, table, 0, "zero1 (all replicated)", 1)
    zero3 = _uniform(problem, lay, table, 1, "zero3 (all sharded)", 3)
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


def _runs(decisions: Sequence[ItemDecision]) -> list[tuple[str, str]]:
    """Group consecutive layers with the same decision: [("layers 0-17", "replicated"), ...]."""
    out: list[tuple[str, str]] = []
    start = None
    for i, d in enumerate(decisions):
        nxt = decisions[i + 1] if i + 1 < len(decisions) else None
        is_layer = d.name.startswith("layer ")
        if is_layer and start is None:
            start = d.name.split()[1]
        same_next = nxt is not None and is_layer and nxt.name.startswith("layer ") and nxt.label == d.label
        if is_layer and same_next:
            continue
        if is_layer:
            end = d.name.split()[1]
            out.append((f"layers {start}-{end}" if start != end else f"layer {start}", d.label))
            start = None
        else:
            out.append((d.name, d.label))
    return out


def render_osdp(plan: OsdpPlan) -> str:
    lay = plan.layout
    lines = [f"OSDP (Jiang et al., IJCAI 2023) for tp{lay['tp']} dp{lay['dp']} mbs{lay['mbs']} "
             f"recompute={RECOMPUTE[lay['recompute']]}, budget {plan.capacity_gib:g} GiB per GPU"]
    for u in (plan.zero1, plan.zero3):
        fit = "fits" if u.fits else "does not fit"
        lines.append(f"  {u.name:<24} step {u.step_time_s:8.3f} s  memory {u.memory_gib:7.2f} GiB  ({fit}; "
                     f"cost model {u.cost_model_step_s:.3f} s, {u.cost_model_memory_gib:.2f} GiB)")
    lines.append(f"  {'OSDP':<24} step {plan.step_time_s:8.3f} s  memory {plan.memory_gib:7.2f} GiB  "
                 f"(gathers exposed {plan.exposed_gather_s:.3f} s, DP reduce exposed {plan.dp_exposed_s:.3f} s"
                 f"{'' if plan.optimal else '; time limit hit, not proven optimal'})")
    if math.isinf(plan.speedup_vs_best_uniform):
        lines.append("  neither uniform strategy fits; OSDP does")
    else:
        lines.append(f"  speedup vs best uniform that fits: {plan.speedup_vs_best_uniform:.3f}x")
    fracs = [d.sharded_fraction for d in plan.decisions if d.name.startswith("layer ")]
    lines.append(f"  layers: {sum(f >= 1 for f in fracs)} sharded, {sum(0 < f < 1 for f in fracs)} partly sharded, "
                 f"{sum(f == 0 for f in fracs)} replicated")
    for where, label in _runs(plan.decisions):
        lines.append(f"    {where:<28} {label}")
    return "\n".join(lines)
