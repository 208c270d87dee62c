"""Uneven pipeline partition: layers and full-recompute counts per stage, balanced with CP-SAT.

An even split of L layers over p stages leaves the first stage with the embedding and the last with the LM head and
loss, so those two run longer than the rest and set the pace of the whole pipeline: in 1F1B's steady state every stage
waits for the slowest one (Narayanan et al. 2021, arXiv 2104.04473 §2.2). Megatron-LM therefore lets the first and
last stages hold fewer layers (--decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers); Llama 3 405B
ran 126 layers on 16 stages with one layer fewer on the first and the last (Dubey et al. 2024, arXiv 2407.21783
§3.3.2); the Zero Bubble authors advise L = k·p − 2 for the same reason (cost_model.md §4).

Memory pulls the other way: under 1F1B stage s holds the activations of min(m, p − s) micro-batches (Megatron
schedules.py warm-up p − s − 1, plus the one in flight), so stage 0 holds the most and may have to recompute layers
(full recompute keeps only each layer's input; Korthikanti et al. 2022, arXiv 2205.05198 §5), which costs it one more
forward per recomputed layer.

Model (integers for CP-SAT): n_s layers and r_s <= n_s fully recomputed layers on stage s;
  time_s   = n_s·t_layer + r_s·t_recompute + [s = 0]·t_embedding + [s = p−1]·t_head
  memory_s = static(n_s, edges) + inflight_s·((n_s − r_s)·a + r_s·a_ckpt) + [r_s > 0]·a_working + [s = p−1]·logits
             <= capacity.
Objective, lexicographic (three solves): the bottleneck max_s time_s; then the total recompute (no stage recomputes
more than it must, which also minimises the fill/drain time Σ time_s); then the peak stage memory (headroom).
Times are scaled so one layer is ~10^5 units and memory to ~10^6 units of the capacity (usage rounded up, capacity
down, so an accepted partition always fits).
Layers of different kinds (dense and MoE, attention and Mamba, block_configs widths) weigh time_s by their forward
FLOPs and the static memory by the parameters they keep per GPU (layer_time_weights, layer_static_weights, mean 1):
the counts n_s become boundaries b_s and each stage pays the prefix-sum difference (CP-SAT element constraints).
Simplifications: activations and recompute cost the mean layer's, the schedule is 1F1B (or ZB-H1, same peak), no
interleaving; the pipeline hand-off time is the same on every stage and left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from planner.cost import device_memory, flops, memory
from planner.cost import fabric as comm
from planner.cost.groups import expert_tp
from planner.errors import NoFeasiblePlan, PlanInputError
from planner.inputs.hardware import HBM_EFFICIENCY
from planner.inputs.layout import Layout, Schedule, Zero
from planner.inputs.problem import Problem
from planner.search.search import price_layout
from planner.strategies.osdp_table import layer_costs
from planner.strategies.solver import deterministic_solver

TIME_TICKS = 100_000  # integer units per (largest) per-layer time
MEMORY_TICKS = 1_000_000  # integer units per capacity


@dataclass(frozen=True)
class Partition:
    layers: tuple[int, ...]  # per stage
    recomputed: tuple[int, ...]  # fully recomputed layers per stage
    stage_times_s: tuple[float, ...]  # per micro-batch, forward + backward
    stage_memory_bytes: tuple[float, ...]
    bottleneck_s: float
    even_layers: tuple[int, ...]
    even_recomputed: tuple[int, ...]  # the fewest that fit, stage by stage
    even_stage_times_s: tuple[float, ...]
    even_bottleneck_s: float  # inf when the even split does not fit even with every layer recomputed
    capacity_bytes: float
    optimal: bool

    @property
    def speedup_vs_even(self) -> float:
        return self.even_bottleneck_s / self.bottleneck_s


@dataclass(frozen=True)
class PartitionInputs:
    """Per-stage cost terms (see `partition_layers` for their meaning); `stage_time`/`stage_memory` price a stage."""

    num_layers: int
    pp: int
    layer_time: float
    head_time: float
    embed_time: float
    act_bytes: float
    act_bytes_recompute: float
    recompute_time: float
    layer_static_bytes: float
    embed_static_bytes: float
    head_static_bytes: float
    head_act_bytes: float
    working_bytes: float
    stage_fixed_bytes: float
    capacity_bytes: float
    inflight: tuple[int, ...]
    layer_time_weights: tuple[float, ...] | None = None  # per layer, mean 1 (None: every layer alike)
    layer_static_weights: tuple[float, ...] | None = None

    @staticmethod
    def _weight(weights: tuple[float, ...] | None, start: int | None, n: int) -> float:
        return float(n) if weights is None or start is None else math.fsum(weights[start:start + n])

    def stage_time(self, s: int, n: int, r: int, start: int | None = None) -> float:
        """Stage s holding n layers from `start` (None: n mean layers), r of them fully recomputed."""
        return (self._weight(self.layer_time_weights, start, n) * self.layer_time + r * self.recompute_time
                + (self.embed_time if s == 0 else 0.0) + (self.head_time if s == self.pp - 1 else 0.0))

    def static(self, s: int) -> float:
        """Memory of stage s that does not depend on its layer count."""
        out = self.stage_fixed_bytes
        if s == 0:
            out += self.embed_static_bytes
        if s == self.pp - 1:
            out += self.head_static_bytes + self.head_act_bytes
        return out

    def stage_memory(self, s: int, n: int, r: int, start: int | None = None) -> float:
        acts = self.inflight[s] * ((n - r) * self.act_bytes + r * self.act_bytes_recompute)
        states = self._weight(self.layer_static_weights, start, n) * self.layer_static_bytes
        return self.static(s) + states + acts + (self.working_bytes if r > 0 else 0.0)

    def fits(self, s: int, n: int, r: int, start: int | None = None) -> bool:
        return self.stage_memory(s, n, r, start) <= self.capacity_bytes * (1 + 1e-12)


def _starts(layers: Sequence[int]) -> list[int]:
    return [sum(layers[:s]) for s in range(len(layers))]


def _even(inp: PartitionInputs) -> tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...], float]:
    """As equal as possible (the first L mod p stages one more, numpy.array_split), each stage recomputing the
    fewest layers that fit."""
    p, total = inp.pp, inp.num_layers
    layers = tuple(total // p + (1 if s < total % p else 0) for s in range(p))
    recomputed, feasible, starts = [], True, _starts(layers)
    for s, n in enumerate(layers):
        r = next((r for r in range(n + 1) if inp.fits(s, n, r, starts[s])), None)
        feasible &= r is not None
        recomputed.append(n if r is None else r)
    times = tuple(inp.stage_time(s, n, r, starts[s]) for s, (n, r) in enumerate(zip(layers, recomputed, strict=True)))
    return layers, tuple(recomputed), times, max(times) if feasible else math.inf


def _model(inp: PartitionInputs, min_layers: int):
    """CP-SAT variables n_s, r_s, [r_s > 0], the bottleneck, and each stage's memory in capacity ticks."""
    p, total = inp.pp, inp.num_layers
    t_unit = max(inp.layer_time, inp.recompute_time, inp.head_time, inp.embed_time) / TIME_TICKS
    rt = round(inp.recompute_time / t_unit)
    et, ht = round(inp.embed_time / t_unit), round(inp.head_time / t_unit)
    model = cp_model.CpModel()
    n = [model.new_int_var(min_layers, total, f"n{s}") for s in range(p)]
    r = [model.new_int_var(0, total, f"r{s}") for s in range(p)]
    any_r = [model.new_bool_var(f"b{s}") for s in range(p)]
    model.add(sum(n) == total)
    for s in range(p):
        model.add(r[s] <= n[s])
        model.add(r[s] <= total * any_r[s])
    time_ticks = [round(inp.layer_time * w / t_unit) for w in inp.layer_time_weights or (1.0,) * total]
    layer_ticks = _segments(model, n, time_ticks, "t")
    bottleneck = model.new_int_var(0, sum(time_ticks) + total * rt + et + ht, "bottleneck")
    for s in range(p):
        model.add(layer_ticks[s] + r[s] * rt + (et if s == 0 else 0) + (ht if s == p - 1 else 0) <= bottleneck)
    memory_terms = []
    if math.isfinite(inp.capacity_bytes):
        unit = inp.capacity_bytes / MEMORY_TICKS

        def up(x: float) -> int:
            return math.ceil(x / unit - 1e-9)

        static_ticks = [up(inp.layer_static_bytes * w) for w in inp.layer_static_weights or (1.0,) * total]
        states = _segments(model, n, static_ticks, "m")
        for s in range(p):
            k = inp.inflight[s]
            a, ac = up(k * inp.act_bytes), up(k * inp.act_bytes_recompute)
            expr = (up(inp.static(s)) + states[s] + n[s] * a + r[s] * (ac - a)
                    + any_r[s] * up(inp.working_bytes))
            model.add(expr <= MEMORY_TICKS)
            memory_terms.append(expr)
    return model, n, r, any_r, bottleneck, rt, memory_terms


def _segments(model: cp_model.CpModel, n: list, ticks: list[int], tag: str) -> list:
    """Each stage's sum of per-layer `ticks` over its contiguous run of n_s layers: prefix sums read at the stage
    boundaries (element constraints); with equal ticks this is n_s x tick, as a plain linear term."""
    if len(set(ticks)) <= 1:
        return [v * (ticks[0] if ticks else 0) for v in n]
    prefix = [0]
    for t in ticks:
        prefix.append(prefix[-1] + t)
    bounds = [model.new_constant(0)]
    for s, v in enumerate(n):
        b = model.new_int_var(0, len(ticks), f"{tag}b{s + 1}")
        model.add(b == bounds[-1] + v)
        bounds.append(b)
    at = [model.new_int_var(0, prefix[-1], f"{tag}p{s}") for s in range(len(bounds))]
    for b, p_b in zip(bounds, at, strict=True):
        model.add_element(b, prefix, p_b)
    return [at[s + 1] - at[s] for s in range(len(n))]


def solve_partition(inp: PartitionInputs, min_layers: int = 1, time_limit_s: float = 10.0) -> Partition:
    """Lexicographic CP-SAT: bottleneck, then total recompute, then peak stage memory (each level kept)."""
    if inp.pp < 1 or inp.num_layers < inp.pp * min_layers:
        raise PlanInputError(f"{inp.num_layers} layers cannot fill {inp.pp} stages with at least {min_layers} each",
                             field="pp", fix="use fewer pipeline stages")
    if inp.layer_time <= 0:
        raise PlanInputError("layer_time must be positive", field="layer_time")
    model, n, r, any_r, bottleneck, rt, memory_terms = _model(inp, min_layers)
    objectives = [bottleneck, sum(v * rt for v in r)]
    if memory_terms:
        peak = model.new_int_var(0, MEMORY_TICKS, "peak_memory")
        for expr in memory_terms:
            model.add(expr <= peak)
        objectives.append(peak)
    solver = deterministic_solver(time_limit_s)
    optimal = True
    for objective in objectives:
        model.minimize(objective)
        status = solver.solve(model)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            raise NoFeasiblePlan("no layer split fits every stage in memory, even with every layer recomputed")
        optimal &= status == cp_model.OPTIMAL
        model.add(objective <= int(solver.objective_value))  # keep this level while optimising the next
        model.clear_hints()
        for v in n + r + any_r:
            model.add_hint(v, solver.value(v))
    layers = tuple(solver.value(v) for v in n)
    recomputed = tuple(solver.value(v) for v in r)
    starts = _starts(layers)
    times = tuple(inp.stage_time(s, k, j, starts[s]) for s, (k, j) in enumerate(zip(layers, recomputed, strict=True)))
    mem = tuple(inp.stage_memory(s, k, j, starts[s]) for s, (k, j) in enumerate(zip(layers, recomputed, strict=True)))
    even_layers, even_rc, even_times, even_bottleneck = _even(inp)
    return Partition(layers, recomputed, times, mem, max(times), even_layers, even_rc, even_times, even_bottleneck,
                     inp.capacity_bytes, optimal)


def partition_layers(num_layers: int, pp: int, layer_time: float, head_time: float, embed_time: float, *,
                     act_bytes: float = 0.0, act_bytes_recompute: float = 0.0, recompute_time: float = 0.0,
                     layer_static_bytes: float = 0.0, embed_static_bytes: float = 0.0,
                     head_static_bytes: float = 0.0, head_act_bytes: float = 0.0,
                     working_bytes: float | None = None, stage_fixed_bytes: float = 0.0,
                     capacity_bytes: float = math.inf, micro_batches: int | None = None,
                     inflight: Sequence[int] | None = None, min_layers: int = 1,
                     time_limit_s: float = 10.0) -> Partition:
    """Layers and full-recompute counts per pipeline stage minimising the slowest stage's time per micro-batch.

    Times are per micro-batch, forward + backward (recompute_time: the extra cost of fully recomputing one layer);
    act_bytes / act_bytes_recompute: what one layer keeps per in-flight micro-batch without / with full recompute;
    working_bytes: one layer's activations while it is recomputed (default act_bytes); layer/embed/head_static_bytes:
    weights, grads and optimizer states; head_act_bytes: logits on the last stage; stage_fixed_bytes: per-stage
    memory independent of the split. In-flight micro-batches default to 1F1B's min(m, p − s).
    """
    if inflight is None:
        inflight = [min(micro_batches, pp - s) if micro_batches else pp - s for s in range(max(pp, 0))]
    inp = PartitionInputs(num_layers, pp, layer_time, head_time, embed_time, act_bytes, act_bytes_recompute,
                          recompute_time, layer_static_bytes, embed_static_bytes, head_static_bytes, head_act_bytes,
                          act_bytes if working_bytes is None else working_bytes, stage_fixed_bytes, capacity_bytes,
                          tuple(int(k) for k in inflight))
    return solve_partition(inp, min_layers, time_limit_s)


def partition_inputs(problem: Problem, layout: Layout, capacity_gib: float | None = None
                     ) -> PartitionInputs:
    """Per-stage cost terms of a pipelined layout, from planner.cost.

    Per-layer compute, exposed TP/CP/EP (and ZeRO-3) time, recompute cost, LM head time, activations and states come
    from `layer_costs` (planner.cost.step.layer_terms, see planner.strategies.osdp). The embedding's time is not in
    step.py; here it
    is its HBM traffic (write the looked-up rows, read the gradient and scatter-add it: 3 x tokens x h x 2 bytes) plus
    the vocabulary-parallel embedding's all-reduce over TP (Megatron VocabParallelEmbedding). The capacity is turned
    into an allocation budget the way memory_peak_gib is built: (1 + fragmentation) x allocations + CUDA context +
    NCCL buffers of the layout's groups; a ZeRO-3 layout's gather buffer is a fixed per-stage allocation.
    """
    m, cl = problem.model, problem.cluster
    lay = layout
    if lay.vpp > 1 or lay.schedule not in (Schedule.ONE_F_ONE_B, Schedule.ZB_H1):
        raise PlanInputError("the partition models 1F1B (or ZB-H1) without virtual stages", field="--layout",
                             fix="set vpp=1 and schedule=1f1b")
    pp = lay.pp
    cost = layer_costs(problem, lay)
    tok = lay.mbs * problem.training.seq_len / lay.cp
    hbm = cl.gpu.hbm_tbps * 1e12 * HBM_EFFICIENCY
    act = tok * m.hidden_size * 2.0
    embed_time = 3 * act / hbm + float(comm.all_reduce_time(np.array(act), np.array(lay.tp), np.array(1), cl))

    emb_p = flops.embedding_params(m)
    head_p = flops.lm_head_params(m)
    per_param = cost.edge_state_bytes / (emb_p + head_p)
    head_copy = head_p if head_p else emb_p  # tied: the last stage keeps its own copy of the table (Megatron)
    gib = memory.GIB

    below_z3 = price_layout(problem, lay.replace(zero=min(lay.zero, Zero.GRADIENTS)))
    fixed = device_memory.plan_fixed_bytes(below_z3)  # context + NCCL + buffers, in bytes
    # ZeRO-3's gather buffer: an allocation of each stage (scaled by the fragmentation share with the rest)
    z3_buffer = ((price_layout(problem, lay)["mem_buffers_gib"] - below_z3["mem_buffers_gib"]) * gib
                 if lay.zero == Zero.PARAMETERS else 0.0)
    cap = (cl.gpu.memory_gib if capacity_gib is None else capacity_gib) * gib
    micro = int(cost.micro_batches)
    return PartitionInputs(
        num_layers=m.num_hidden_layers, pp=pp,
        layer_time=cost.layer_compute_s + cost.layer_comm_s + cost.layer_fsdp_s + cost.recompute_s,
        head_time=cost.head_s, embed_time=embed_time, act_bytes=cost.act_bytes,
        act_bytes_recompute=cost.checkpoint_bytes, recompute_time=cost.full_recompute_s - cost.recompute_s,
        layer_static_bytes=cost.layer_state_bytes, embed_static_bytes=per_param * emb_p,
        head_static_bytes=per_param * head_copy, head_act_bytes=cost.logits_bytes, working_bytes=cost.working_bytes,
        stage_fixed_bytes=z3_buffer, capacity_bytes=device_memory.allocation_budget(cap, fixed),
        inflight=tuple(min(micro, pp - s) for s in range(pp)), **layer_weights(problem, lay))


def layer_weights(problem: Problem, lay: Layout) -> dict[str, tuple[float, ...] | None]:
    """Per-layer time and static-memory weights (mean 1): forward FLOPs, and parameters per GPU (non-expert / tp,
    routed experts / (expert-tp x ep)); None when every layer is alike."""
    m = problem.model
    fwd = flops.layer_forward_flops(m, problem.training.seq_len)
    etp = float(expert_tp({k: np.array(int(getattr(lay, k))) for k in ("tp", "dp", "cp", "ep", "etp")}))
    held = [ne / lay.tp + ex / (etp * lay.ep) for ne, ex in flops.layer_params(m)]

    def normalised(values: Sequence[float]) -> tuple[float, ...] | None:
        mean = math.fsum(values) / len(values)
        return None if mean <= 0 or max(values) - min(values) <= 1e-9 * mean else tuple(v / mean for v in values)

    return {"layer_time_weights": normalised(fwd), "layer_static_weights": normalised(held)}


def partition_for(problem: Problem, layout: Layout, capacity_gib: float | None = None,
                  time_limit_s: float = 10.0) -> Partition:
    """`partition_inputs` for the layout, solved (capacity defaults to the GPU's HBM, counted as memory_peak_gib)."""
    return solve_partition(partition_inputs(problem, layout, capacity_gib), time_limit_s=time_limit_s)


def megatron_flags(p: Partition) -> list[str]:
    """Megatron-LM arguments for the split, where they can express it."""
    n = p.layers
    flags = []
    middle = set(n[1:-1])
    if len(n) > 2 and len(middle) == 1 and (n[0] != n[1] or n[-1] != n[1]):
        flags.append(f"--decoder-first-pipeline-num-layers {n[0]} --decoder-last-pipeline-num-layers {n[-1]}")
    elif len(middle) > 1:
        flags.append("(middle stages differ: needs an explicit pipeline layout, not first/last-stage counts)")
    if any(p.recomputed):
        # --recompute-method block recomputes the first N layers of every stage; per-stage counts need more.
        flags.append(f"--recompute-granularity full --recompute-method block --recompute-num-layers "
                     f"{max(p.recomputed)}  (uniform N; the plan needs {list(p.recomputed)} per stage)")
    return flags


def render_partition(p: Partition) -> str:
    gib = memory.GIB
    lines = [f"Pipeline partition over {len(p.layers)} stages (1F1B; bottleneck = slowest stage per micro-batch)",
             f"  {'stage':>5} {'layers':>6} {'recompute':>9} {'time ms':>9} {'memory GiB':>10}"
             f"   even: {'layers':>6} {'recompute':>9} {'time ms':>9}"]
    for s in range(len(p.layers)):
        mem = p.stage_memory_bytes[s] / gib
        lines.append(f"  {s:>5} {p.layers[s]:>6} {p.recomputed[s]:>9} {p.stage_times_s[s] * 1e3:>9.2f} {mem:>10.2f}"
                     f"         {p.even_layers[s]:>6} {p.even_recomputed[s]:>9} {p.even_stage_times_s[s] * 1e3:>9.2f}")
    even = "does not fit" if math.isinf(p.even_bottleneck_s) else f"{p.even_bottleneck_s * 1e3:.2f} ms"
    lines.append(f"  bottleneck {p.bottleneck_s * 1e3:.2f} ms vs even split {even}"
                 + ("" if math.isinf(p.even_bottleneck_s) else f" ({p.speedup_vs_even:.3f}x)")
                 + ("" if p.optimal else "; time limit hit, not proven optimal"))
    if math.isfinite(p.capacity_bytes):
        lines.append(f"  allocation budget per GPU {p.capacity_bytes / gib:.2f} GiB")
    lines += [f"  {f}" for f in megatron_flags(p)]
    return "\n".join(lines)
