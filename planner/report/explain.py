"""`plan explain`: one layout in full, the rules it breaks, and its prediction even when it does not fit."""

from __future__ import annotations

from typing import Any

import numpy as np
from rich.console import Console

from planner.cost import compute, memory, pipeline
from planner.cost.placement import placement_dict, placement_text
from planner.cost.stages import memory_stages
from planner.cost.step import layer_terms
from planner.inputs.frameworks import offload_modules
from planner.inputs.layout import CpComm, Knobs, Layout, Recompute, Schedule, Zero
from planner.inputs.problem import Problem
from planner.report.document import breakdown_dict, goodput_dict, layout_dict, metrics_dict
from planner.report.ranking import band_dict
from planner.search.rules import MEMORY_RULE, broken_rules
from planner.search.search import is_tight, price_layout


def complete_layout(problem: Problem, given: Knobs) -> Layout:
    """The knobs a user gave (encoded, as parse_pairs reads them), the rest filled with the defaults documented in
    docs/commands.md (dp from the GPU count)."""
    lay = dict(given)
    lay.setdefault("tp", 1)
    lay.setdefault("pp", 1)
    lay.setdefault("cp", 1)
    lay.setdefault("ep", 1)
    lay.setdefault("vpp", 1)
    lay.setdefault("mbs", 1)
    lay.setdefault("zero", int(Zero.OPTIMIZER if problem.num_gpus > lay["tp"] * lay["pp"] else Zero.NONE))
    lay.setdefault("recompute", int(Recompute.NONE))
    lay.setdefault("sp", 1 if lay["tp"] > 1 else 0)
    lay.setdefault("schedule", int(Schedule.INTERLEAVED if lay["vpp"] > 1 else Schedule.ONE_F_ONE_B))
    lay.setdefault("cp_comm", int(CpComm.RING))
    if "dp" not in lay:
        denom = lay["tp"] * lay["pp"] * lay["cp"]
        lay["dp"] = max(problem.num_gpus // denom, 1)
    # etp left out: Megatron's default, tp, or 1 where ep does not divide dp x cp (Layout.from_dict)
    return Layout.from_dict(lay)


def timeline(problem: Problem, lay: Layout, metrics: dict[str, float], width: int = 100) -> str:
    """The schedule's order of operations, simulated with this layout's per-stage times
    (planner.strategies.pipeline_sim), and a line saying how its bubble differs from the step's `bubble_s`.

    Capped at 4 x pp micro-batches so the chart stays readable. The two bubbles are measured differently, so the
    text says so: the simulated one is the span less the busiest rank's work over the simulated micro-batches, every
    hand-off between ranks a wait (so hand-offs in the steady state land in it too); `bubble_s` is the schedule's
    closed form (planner.cost.pipeline.bubble_time) over all the step's micro-batches, one hand-off per pass, with
    the steady state's hand-offs priced in `pp_comm_s`. With free hand-offs they are equal for 1F1B, interleaved,
    ZB-H1 and ZB-H2 (tests/test_pipeline_sim.py).
    """
    from planner.report.timeline import render_timeline
    from planner.strategies.pipeline_sim import simulate_layout

    name = lay.schedule.label
    p, v = lay.pp, lay.vpp
    if p < 2:
        return "no pipeline (pp = 1): nothing to schedule"
    if name == "dualpipe" and p % 2:
        return f"dualpipe needs an even number of pipeline ranks (pp = {p}): nothing to simulate"
    sim = simulate_layout(lay, metrics, max_microbatches=4 * p)
    assert sim is not None  # pp > 1 and a schedule it can run, checked above
    m, step_m = sim.m, int(round(metrics["num_microbatches"]))
    if m == step_m:
        over = f"all {m} micro-batches"
    elif m < step_m:
        over = f"{m} of the step's {step_m} micro-batches" + (" (at most 4 x pp)" if m == 4 * p else "")
    else:  # DualPipe simulates at least 2 x pp
        over = f"{m} micro-batches (the step has {step_m}; {name} needs {m})"
    head = (f"{name} timeline, {p} stages x {m} micro-batches (simulated): bubble {sim.bubble * 1e3:.1f} ms, "
            f"peak in-flight on stage 0 {sim.peak_inflight[0] / (1 if name == 'dualpipe' else v):.2f} micro-batches")
    why = (f"that bubble is simulated over {over}, each hand-off a wait; the step's bubble "
           f"{metrics['bubble_s']:.3f} s above is the {name} closed form over all {step_m} "
           "(steady-state hand-offs in pp_comm)")
    return head + "\n" + why + "\n" + render_timeline(sim, width=width)


def explain(problem: Problem, given: Knobs) -> dict[str, Any]:
    """The layout `given` (completed by complete_layout) priced in full, with the rules it breaks."""
    lay = complete_layout(problem, given)
    cols = lay.columns()
    broken = broken_rules(cols, problem)
    metrics = price_layout(problem, lay)
    cap = problem.cluster.gpu.memory_gib
    if metrics["memory_peak_gib"] > cap:
        broken.append(MEMORY_RULE)
    per_stage = memory_stages(problem, cols)
    out = {
        "layout": layout_dict(lay, metrics, problem.model.num_hidden_layers, problem.cluster.nvlink_domain,
                              problem.training.framework, problem.training.pipeline_layout),
        "placement": {"order": lay.order.label, "groups": placement_dict(problem, lay),
                      "text": placement_text(problem, lay)},
        "feasible": not broken,
        "broken_rules": [{"rule": r.name, "message": r.message, "fix": r.fix, "source": r.source} for r in broken],
        "metrics": metrics_dict(metrics, cap),
        "breakdown": breakdown_dict(metrics),
        "goodput": goodput_dict(problem, metrics),
        "timeline": timeline(problem, lay, metrics),
        "memory_tight": bool(is_tight(problem, metrics["memory_peak_gib"])),
        "band": band_dict(problem, lay, metrics),
        "stages": {
            "first": {"memory_gib": round(metrics["mem_first_stage_gib"], 3),
                      "microbatch_fwd_bwd_s": round(metrics["first_stage_mb_s"], 6),
                      "allocations_gib": _rounded(per_stage["first"])},
            "second": {"allocations_gib": _rounded(per_stage["second"])},
            "last": {"memory_gib": round(metrics["mem_last_stage_gib"], 3),
                     "microbatch_fwd_bwd_s": round(metrics["last_stage_mb_s"], 6),
                     "allocations_gib": _rounded(per_stage["last"])},
        },
    }
    if metrics.get("offloaded_layers", 0) > 0:
        out["offload"] = offload_summary(problem, cols, metrics)
    elif int(cols["recompute"][0]) == Recompute.OFFLOAD_MODULES:
        out["offload"] = modules_summary(problem, cols, metrics)
    return out


def modules_summary(problem: Problem, cols: dict[str, np.ndarray], metrics: dict[str, float]) -> dict[str, Any]:
    """recompute=offload-modules: the modules whose saved tensors sit in host memory, their bytes per layer and
    micro-batch, the host memory the busiest rank's in-flight micro-batches take against what the node has per GPU,
    and what the copies cost per step (planner.cost.module_offload, activation_offload.modules_stall)."""
    k = {x: cols[x].astype(float) for x in ("tp", "pp", "vpp", "cp", "mbs", "dp")}
    tok = compute.tokens_per_gpu(k["mbs"], float(problem.training.seq_len), k["cp"])
    moved = float(memory.offloaded_module_bytes(problem, tok, k["tp"], cols["recompute"])[0])
    first, _, last = memory.stage_layer_counts(problem.model.num_hidden_layers, k["pp"], k["vpp"],
                                               problem.training.pipeline_layout)
    micro = np.floor(pipeline.microbatches(problem.training.global_batch, k["mbs"], k["dp"]))
    host = max(float(n[0] * pipeline.inflight_microbatches(cols["schedule"], k["pp"], k["vpp"], micro, rank)[0])
               for n, rank in ((first, 0), (last, int(k["pp"][0]) - 1)))
    return {"modules": list(offload_modules(problem.model.is_moe and problem.model.moe_layers > 0)),
            "per_layer_gib": round(moved / 2**30, 4), "host_gib": round(host * moved / 2**30, 3),
            "host_capacity_gib": problem.cluster.gpu.host_memory_gib, "copies_s": round(metrics["offload_s"], 6)}


def offload_summary(problem: Problem, cols: dict[str, np.ndarray], metrics: dict[str, float]) -> dict[str, Any]:
    """recompute=offload: the layers whose activations sit in host memory, the host memory they take against what
    the node has per GPU, and what their copies cost per step."""
    k = int(round(metrics["offloaded_layers"]))
    per_layer = float(layer_terms(problem, cols)["act_bytes"][0])
    return {"layers": k, "host_gib": round(k * per_layer / 2**30, 3),
            "host_capacity_gib": problem.cluster.gpu.host_memory_gib, "copies_s": round(metrics["offload_s"], 6)}


def _rounded(kinds: dict[str, np.ndarray]) -> dict[str, float]:
    return {k: round(float(v[0]), 3) for k, v in kinds.items()}


def explain_extras(problem: Problem, given: Knobs, osdp: bool, partition: bool) -> dict[str, Any]:
    """`--osdp` / `--partition`: their JSON-safe results by name, and their text under "text"."""
    import dataclasses

    from planner.report.document import jsonable

    lay = complete_layout(problem, given)
    out: dict[str, Any] = {"text": []}
    if osdp:
        from planner.report.osdp_text import render_osdp
        from planner.strategies.osdp import plan_osdp

        plan = plan_osdp(problem, lay)
        out["osdp"] = jsonable({**dataclasses.asdict(plan), "layout": plan.layout.as_dict()})
        out["text"].append(render_osdp(plan))
    if partition:
        from planner.strategies.partition import partition_for, render_partition

        part = partition_for(problem, lay)
        out["partition"] = jsonable(dataclasses.asdict(part))
        out["text"].append(render_partition(part))
    return out


def goodput_text(g: dict[str, Any], step_s: float) -> str:
    """The goodput breakdown (planner.cost.goodput) in four lines."""
    if g["mtbf_h"] is None:
        return "goodput 100%: no failures expected (failures_per_gpu_hour 0), so nothing is checkpointed for them"
    save = "asynchronous: training waits for the copy to host memory" if g["async_save"] else \
        "synchronous: training waits for the write"
    return "\n".join((
        f"goodput {g['goodput']:.1%} ({g['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU kept): interrupted every "
        f"{g['mtbf_h']:.3g} h ({g['failures_per_gpu_hour']:.3g} failures per GPU-hour)",
        f"  checkpoint {g['checkpoint_gb_per_gpu']:.3g} GB per GPU, written in {g['checkpoint_write_s']:.3g} s "
        f"({save}: {g['checkpoint_stall_s']:.3g} s), every {g['interval_steps']} steps "
        f"({g['interval_s'] / 60:.3g} min, Young/Daly)",
        f"  restart {g['restart_s'] / 60:.3g} min (relaunch {g['relaunch_s']:.3g} s + restore {g['restore_s']:.3g} s); "
        f"work redone per interruption {g['lost_work_s'] / 60:.3g} min ({g['lost_work_s'] / step_s:.3g} steps)",
        f"  wall time lost to restarts {g['loss']['restart']:.1%}, checkpoints {g['loss']['checkpoints']:.1%}, "
        f"redone work {g['loss']['lost_work']:.1%}",
    ))


def _term(key: str) -> str:
    """A breakdown key as the text report names it: compute_s -> compute."""
    return key[:-len("_s")] if key.endswith("_s") else key


def render(out: dict[str, Any], texts: list[str], console: Console) -> bool:
    """`plan explain` for humans; True when the layout satisfies every rule."""
    lay = out["layout"]
    console.print(f"[bold]layout[/] {', '.join(f'{k}={v}' for k, v in lay.items())}")
    console.print(f"[bold]placement[/] {out['placement']['text']}", highlight=False)
    mt = out["metrics"]
    console.print(f"step {mt['step_time_s']:.3f} s, {mt['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU, "
                  f"MFU {mt['mfu']:.1%}, peak memory {mt['memory_peak_gib']:.1f} of {mt['memory_capacity_gib']:g} GiB")
    band = out["band"]
    (t_lo, t_hi), (m_lo, m_hi) = band["tokens_per_s_per_gpu"], band["memory_peak_gib"]
    console.print(f"band ({band['coverage']:.0%} of published runs of its regime): {t_lo:,.0f}-{t_hi:,.0f} "
                  f"tokens/s/GPU ({band['regime']}); peak memory {m_lo:.1f}-{m_hi:.1f} GiB "
                  f"({band['memory_regime']}: {band['memory_cases']} cases)", highlight=False)
    for note in band["notes"]:
        console.print(f"  {note}", style="dim", highlight=False)
    bd = out["breakdown"]
    console.print("time (s per step): " + ", ".join(f"{_term(k)} {v:.3f}" for k, v in bd.items() if k.endswith("_s")))
    console.print("memory (GiB, busiest stage): " + ", ".join(f"{k} {v:.2f}" for k, v in bd["memory_gib"].items()))
    first, last = out["stages"]["first"], out["stages"]["last"]
    console.print(f"stages: first {first['memory_gib']:.1f} GiB, {first['microbatch_fwd_bwd_s'] * 1e3:.1f} ms per "
                  f"micro-batch; last {last['memory_gib']:.1f} GiB, {last['microbatch_fwd_bwd_s'] * 1e3:.1f} ms per "
                  "micro-batch (fwd+bwd)")
    for name, stage in out["stages"].items():
        console.print(f"memory, {name} stage (GiB allocated): "
                      + ", ".join(f"{k} {v:.2f}" for k, v in stage["allocations_gib"].items()))
    if out["memory_tight"]:
        console.print("[yellow]tight[/]: the device total leaves less than the memory headroom free")
    if "offload" in out:
        off = out["offload"]
        what = (f"{off['layers']} layers' activations" if "layers" in off else
                f"{', '.join(off['modules'])} inputs ({off['per_layer_gib'] * 1024:.0f} MiB per layer and micro-batch)")
        console.print(f"offload: {what} in host memory, {off['host_gib']:.1f} of "
                      f"{off['host_capacity_gib']:g} GiB per GPU; their copies cost {off['copies_s']:.3f} s per step")
    console.print(goodput_text(out["goodput"], out["metrics"]["step_time_s"]), highlight=False)
    console.print(out["timeline"], highlight=False, markup=False)
    for text in texts:
        console.print(text, highlight=False, markup=False)
    for r in out["broken_rules"]:
        console.print(f"[red]breaks[/] {r['rule']}: {r['message']} (fix: {r['fix']})")
    if out["broken_rules"]:
        return False
    console.print("[green]satisfies every rule[/]")
    return True
