"""OSDP's decision table: for each layer (and the embedding / head), the sharding options with their time and memory.

Per-layer costs come from the cost model's layer terms (planner.cost.step.layer_terms); the solver that picks one
option per item lives in planner.strategies.osdp (Jiang et al., IJCAI 2023).
"""


from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from planner.cost import device_memory, flops, memory
from planner.cost import fabric as comm
from planner.cost.profiles import stack_profile
from planner.cost.step import layer_terms
from planner.errors import PlanInputError
from planner.inputs.hardware import HBM_EFFICIENCY, KERNEL_OVERHEAD_S
from planner.inputs.layout import KNOBS, Layout, Recompute, Schedule, Zero
from planner.inputs.problem import Problem
from planner.search.search import price_layout

US = 1e-6  # CP-SAT time unit (s)
MIB = 2.0**20  # CP-SAT memory unit (bytes)
_ONE_KNOBS = ("tp", "pp", "dp", "cp", "ep", "vpp", "mbs")
_GATHER_BYTES = 2.0  # bf16 compute copy gathered per use (as step.py's ZeRO-3 term)
_PREFETCH = 2  # gathered units alive at once: the running one and the prefetched next one (step.py's z3 buffer)


def full_layout(knobs: Mapping[str, int], **changes: int) -> Layout:
    """A layout from some encoded knobs: the given ones, `changes`, and 1 (sizes) or 0 (choices) for the rest."""
    lay = {k: (1 if k in _ONE_KNOBS else 0) for k in KNOBS}
    lay.update({k: int(v) for k, v in knobs.items() if k in KNOBS})
    lay.update(changes)
    return Layout.from_dict(lay)


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


def _layer_terms(problem: Problem, layout: Layout) -> dict[str, float]:
    return {k: float(v[0]) for k, v in layer_terms(problem, layout.columns()).items()}


def layer_costs(problem: Problem, layout: Layout) -> LayerCosts:
    """Per-layer terms of the layout at pp = 1 from `planner.cost.step.layer_terms` (the same terms `evaluate`
    composes), in the layout's recompute mode (full read as none) and under full recompute."""
    base_rc = Recompute.NONE if layout.recompute == Recompute.FULL else layout.recompute
    lay = layout.replace(pp=1, vpp=1, schedule=Schedule.ONE_F_ONE_B, recompute=base_rc)
    a, af = _layer_terms(problem, lay), _layer_terms(problem, lay.replace(recompute=Recompute.FULL))
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
    sm_share: float  # SMs a running collective takes from the compute it overlaps (fabric.collective_sm_share)
    act_bytes: float  # activations + logits (fixed by the layout)
    fixed_bytes: float  # the rest of the device total (device_memory.plan_fixed_bytes)
    capacity_gib: float

    def alloc_budget_bytes(self) -> float:
        """Bytes states + buffer may take: the allocations whose device total is the capacity, less the
        activations."""
        return device_memory.allocation_budget(self.capacity_gib * memory.GIB, self.fixed_bytes) - self.act_bytes


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
    sm_share: float  # fabric.collective_sm_share: what a gather hidden behind compute still costs it


def _option(c: _Pricing, params: float, fwd_s: float, bwd_s: float, label: str, split: int, f: int, rest: bool,
            units: tuple[float, ...]) -> Option:
    sharded = sum(units)
    frac = sharded / params if params else 0.0
    ag = sum(c.gather(u) for u in units)
    rs = sum(c.scatter(u) for u in units)
    # as sharding.fsdp_exposed: what the item's compute does not hide, or the SMs the collectives take from it
    exposed = float(comm.overlapped_exposed(ag, fwd_s, c.sm_share)
                    + comm.overlapped_exposed(ag + rs, bwd_s, c.sm_share)) if units else 0.0
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


def osdp_table(problem: Problem, layout: Layout, split_choices: Sequence[int] = (1, 2, 4),
               capacity_gib: float | None = None) -> OsdpTable:
    """The knapsack for a data-parallel layout (pp = 1): one item per transformer layer, the embedding and LM head."""
    m, cl = problem.model, problem.cluster
    lay = layout
    if lay.pp != 1:
        raise PlanInputError("OSDP plans data-parallel layouts only (pp = 1)", field="--layout", fix="set pp=1")
    if m.is_moe:
        raise PlanInputError("OSDP here models dense layers only (experts reduce over a different group)",
                             field="--model", fix="use a dense model")
    prof = stack_profile(problem.training)
    fp8 = problem.training.precision in ("fp8", "fp4")
    repl = lay.replace(zero=Zero.OPTIMIZER)
    cost = layer_costs(problem, repl)
    priced = price_layout(problem, repl)
    micro = priced["num_microbatches"]
    base_mb = (priced["step_time_s"] - priced["dp_comm_s"] - priced["optimizer_s"]) / micro
    tp = float(lay.tp)
    ranks = np.array(float(lay.dp * lay.cp))
    stride = np.array(tp)

    def gather(p: float) -> float:
        return float(comm.all_gather_time(np.array(p * _GATHER_BYTES), ranks, stride, cl))

    def scatter(p: float) -> float:
        return float(comm.all_gather_time(np.array(p * prof.grad_reduce_bytes), ranks, stride, cl))

    def states(p: float, zero: int) -> float:
        return float(sum(memory.state_bytes(np.array(p), np.array(zero), ranks, prof, fp8,
                                            fp8_params=memory.fp8_param_gather(problem)).values()))

    # Split overhead per micro-batch: one more kernel per slice in forward, input-grad and weight-grad (and in the
    # recomputed forward), plus reading two partial outputs and writing their sum (bf16, tok x h per slice boundary).
    tok = lay.mbs * problem.training.seq_len / lay.cp
    forwards = 2 if lay.recompute == Recompute.FULL else 1
    hbm = cl.gpu.hbm_tbps * 1e12 * HBM_EFFICIENCY
    split_cost = (2 + forwards) * KERNEL_OVERHEAD_S + forwards * 3 * 2.0 * tok * m.hidden_size / tp / hbm
    c = _Pricing(gather, scatter, states, prof.grad_reduce_bytes, split_cost, comm.collective_sm_share(cl))

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
    fixed = device_memory.plan_fixed_bytes(priced)
    acts = (priced["mem_activations_gib"] + priced["mem_logits_gib"]) * memory.GIB
    return OsdpTable(
        items=tuple(items), micro_batches=micro, base_microbatch_s=base_mb, optimizer_s=priced["optimizer_s"],
        dp_window_s=prof.dp_overlap * base_mb, reduce_latency_s=latency, reduce_s_per_byte=slope,
        sm_share=c.sm_share, act_bytes=acts,
        fixed_bytes=fixed, capacity_gib=problem.cluster.gpu.memory_gib if capacity_gib is None else capacity_gib)


# --- pricing and solving ----------------------------------------------------------------------------------------
