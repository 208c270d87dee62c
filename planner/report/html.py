"""`plan report`: one self-contained HTML page (inline SVG charts, inline CSS, no network at view time) with the
inputs, the ranked plans, every feasible layout the search priced, the top plans' time breakdown, the top pick's
memory per pipeline stage and its simulated pipeline timeline; and `plan explain --svg`'s one-layout chart.

The page is rendered with Jinja2 (autoescaped: model and cluster names come from user files) from report.html.j2.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from planner.cost.stages import stage_memory_gib
from planner.inputs.layout import SEQ1F1B_SEGMENTS, Layout, Schedule
from planner.inputs.problem import Problem
from planner.report import charts, document
from planner.report.ranking import band_line, why_first
from planner.report.table import compact_layout, legend, precision_label, tiers_text, why
from planner.report.timeline_chart import draw_timeline, timeline_figure, timeline_height
from planner.search.search import SearchResult, price_layout
from planner.strategies.pipeline_sim import SPLIT_SCHEDULES, PipelineSimResult, simulate_layout

BREAKDOWN_PLANS = 8  # bars in the time-breakdown chart
# Simulated ops the timeline may cost (~1 s of simulation per 60k ops on one core); above it the micro-batches are
# capped and the chart says so. The greedy order builder of ZB-V and DualPipe-V (strategies/pipeline_orders.py) grows
# faster than pp^2 (pp = 32: 3 s; pp = 64: over 20 s even for 16 micro-batches), so they get a smaller budget.
SIM_OPS_BUDGET = 70_000
SIM_OPS_BUDGET_ZB_V = 12_000


def layout_text(lay: Layout) -> str:
    """A layout as the ranked table writes it ('tp4 pp16 dp4 cp8h m1 z1 norc sp 1f1b'; the page prints the legend)."""
    return compact_layout(lay)[0]


@dataclass(frozen=True)
class Chart:
    """One figure of the page: its anchor id, heading, inline SVG and caption."""

    id: str
    title: str
    svg: str
    caption: str


def sim_microbatch_cap(lay: Layout) -> int:
    """Micro-batches the timeline simulates at most, so that pp x m x v x ops-per-micro-batch stays in budget."""
    sched = lay.schedule
    chunks = 2 if sched in (Schedule.ZB_V, Schedule.DUALPIPE, Schedule.DUALPIPE_V) else max(lay.vpp, 1)
    per_mb = lay.pp * chunks * (3 if sched.label in SPLIT_SCHEDULES else 2)
    per_mb *= SEQ1F1B_SEGMENTS if sched == Schedule.SEQ1F1B else 1
    budget = SIM_OPS_BUDGET_ZB_V if sched in (Schedule.ZB_V, Schedule.DUALPIPE_V) else SIM_OPS_BUDGET
    return max(lay.pp if sched == Schedule.INTERLEAVED else 1, budget // per_mb)


def simulate(lay: Layout, metrics: dict[str, float]) -> PipelineSimResult | None:
    return simulate_layout(lay, metrics, max_microbatches=sim_microbatch_cap(lay))


def _pipelined(result: SearchResult) -> tuple[str, Layout, dict[str, float]] | None:
    """The layout whose timeline the page shows: the top pick, or when it has no pipeline the fastest layout with one
    (from the ranked plans, else from every priced layout)."""
    top = result.plans[0]
    if top.layout.pp > 1:
        return "the top pick (#1)", top.layout, top.metrics
    for i, plan in enumerate(result.plans[1:], start=2):
        if plan.layout.pp > 1:
            return f"#{i}, the best plan with a pipeline (the top pick has pp = 1)", plan.layout, plan.metrics
    priced = result.priced
    if priced is None or not (priced["pp"] > 1).any():
        return None
    idx = np.flatnonzero(priced["pp"] > 1)
    best = int(idx[np.argmax(priced["tokens_per_s_per_gpu"][idx])])
    lay = Layout.from_columns(priced, best)
    return ("the fastest layout with a pipeline (the top pick has pp = 1)", lay,
            price_layout(result.problem, lay))


def timeline_chart(lay: Layout, metrics: dict[str, float], who: str) -> Chart | None:
    sim = simulate(lay, metrics)
    if sim is None:
        return None
    m_total = int(round(metrics["num_microbatches"]))
    with charts.style():
        svg = charts.to_svg(timeline_figure(sim, m_total))
    dense = len(sim.timeline) > 2500
    how = ("Each column is a slice of time whose colour mixes forward (blue), backward (orange) and weight-gradient "
           "(green) by the share of the slice each fills, and white by the idle share, so the bubble is white. The two "
           "panels below zoom into the warm-up and the cool-down." if dense
           else "One box per forward / backward op, numbered by micro-batch.")
    caption = (f"Simulated op by op ({sim.schedule}, planner.strategies.pipeline_sim) with the per-stage times the "
               f"cost model priced for {who}: {layout_text(lay)}. {how}")
    return Chart("timeline", "Pipeline timeline", svg, caption)


def _charts(result: SearchResult) -> list[Chart]:
    problem = result.problem
    cap = problem.cluster.gpu.memory_gib
    top = result.plans[0]
    out = []
    with charts.style():
        if result.priced is not None:
            fig = charts.new_figure(11, 5.0)
            counts = charts.draw_scatter(fig.add_subplot(), result.priced, top.metrics, cap)
            out.append(Chart("scatter", "Every feasible layout", charts.to_svg(fig), (
                f"All {counts['layouts']:,} layouts that satisfy every rule and fit in memory, priced by the cost "
                f"model ({counts['points']:,} distinct points at this resolution), coloured by which parallel "
                "dimensions are larger than one; each coloured line is the best that mix reaches within a memory "
                f"budget. The black staircase is the Pareto front ({counts['front']} layouts: no other is both faster "
                "and smaller); the star is the top pick.")))
        plans = [(f"#{i + 1} {layout_text(p.layout)}", p.metrics)
                 for i, p in enumerate(result.plans[:BREAKDOWN_PLANS])]
        fig = charts.new_figure(11, 1.3 + 0.42 * len(plans))
        charts.draw_breakdown(fig.add_subplot(), plans)
        out.append(Chart("breakdown", "Where the step time goes", charts.to_svg(fig), (
            "Seconds per optimizer step on the busiest pipeline stage, split into the cost model's terms: kernels, "
            "recomputation, the communication each parallel dimension leaves exposed (not hidden behind compute), "
            "the pipeline bubble and the optimizer update (docs/architecture.md names every formula).")))
        stages = stage_memory_gib(problem, top.layout.as_dict())
        fig = charts.new_figure(11, 3.8)
        charts.draw_stage_memory(fig.add_subplot(), stages, cap)
        out.append(Chart("memory", "Memory per pipeline stage (top pick)", charts.to_svg(fig), (
            (f"Peak GiB per GPU on each of the {len(stages)} pipeline ranks of " if len(stages) > 1 else
             "Peak GiB per GPU (no pipeline: one stage) of ") + f"{layout_text(top.layout)}: model "
            "states after ZeRO sharding (the first and last stage hold the layers of the launched split plus the "
            "embedding / LM head), the activations of the micro-batches each rank holds at its peak, the last "
            "rank's logits, buffers (ZeRO-3 gathers, pipeline send/receive, fp8 scaling) and the CUDA context, NCCL "
            "and fragmentation reserve.")))
    chosen = _pipelined(result)
    if chosen is not None:
        chart = timeline_chart(chosen[1], chosen[2], chosen[0])
        if chart is not None:
            out.append(chart)
    return out


def _inputs(problem: Problem, doc: dict[str, Any]) -> tuple[list[tuple[str, list[tuple[str, str]]]], str]:
    """The input cards (title, [(key, value)]) and the rules' prune counts, largest first."""
    m, c, tr = problem.model, problem.cluster, problem.training
    ms = doc["model_summary"]
    opts = doc["inputs"]["options"]
    fixed = ", ".join(f"{k}={v}" for k, v in opts["fix"].items()) or "none"
    search = doc["search"]
    pruned = " · ".join(f"{k} {v:,}" for k, v in sorted(search["pruned"].items(), key=lambda kv: -kv[1]) if v)
    return [
        ("Model", [("name", m.name), ("parameters", f"{ms['params'] / 1e9:.1f} B"
                                      + (f" ({ms['active_params'] / 1e9:.1f} B active)" if m.is_moe else "")),
                   ("layers", str(m.num_hidden_layers)), ("hidden size", str(m.hidden_size)),
                   ("heads / KV heads", f"{m.num_attention_heads} / {m.kv_heads}"),
                   ("vocabulary", f"{m.vocab_size:,}")]),
        ("Cluster", [("name", c.name), ("GPU", c.gpu.name), ("GPUs", f"{c.num_gpus:,}"),
                     *([("network", tiers_text(problem))] if c.tiered else [
                         ("NVLink domain", f"{c.nvlink_domain} GPUs"),
                         ("scale-out", f"{c.network_gbps:g} GB/s per GPU")]),
                     ("GPU memory", f"{c.gpu.memory_gib:g} GiB")]),
        ("Training", [("sequence length", f"{tr.seq_len:,}"), ("global batch", f"{tr.global_batch:,} sequences"),
                      ("precision", precision_label(tr)), ("framework", tr.framework), ("pinned knobs", fixed)]),
        ("Search", [("candidates", f"{search['candidates']:,}"), ("feasible", f"{search['feasible']:,}"),
                    ("proven best", "yes" if search["proven_best"] else "no (time limit)")]),
        ("Goodput (top pick)", _goodput_card(doc["plans"][0]["goodput"])),
    ], pruned or "nothing"


def _goodput_card(g: dict[str, Any]) -> list[tuple[str, str]]:
    """Failures, checkpoints and restarts of the top pick (planner.cost.goodput), as the report's input card."""
    loss = g["loss"]
    if g["mtbf_h"] is None:
        return [("expected goodput", "100% (no failures expected)")]
    return [("expected goodput", f"{g['goodput']:.1%}"),
            ("interrupted every", f"{g['mtbf_h']:.3g} h ({g['failures_per_gpu_hour']:.3g} per GPU-hour)"),
            ("checkpoint", f"{g['checkpoint_gb_per_gpu']:.3g} GB per GPU in {g['checkpoint_write_s']:.3g} s, "
                           f"every {g['interval_steps']} steps" + (" (async)" if g["async_save"] else "")),
            ("restart", f"{g['restart_s'] / 60:.3g} min"),
            ("lost to", f"restarts {loss['restart']:.1%}, checkpoints {loss['checkpoints']:.1%}, "
                        f"redone work {loss['lost_work']:.1%}")]


def _rows(result: SearchResult, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The ranked plans' table rows; `band` is the tokens/s band (planner.report.ranking), its regime the tooltip;
    days per trillion tokens are wall-clock, the throughput times goodput (planner.cost.goodput); `placement` the
    rank order and the innermost network tier holding each group (the document's plans[].placement)."""
    best, gpus = result.plans[0], result.problem.num_gpus

    def placed(lay: Layout, placement: dict[str, str]) -> str:
        groups = " · ".join(f"{dim} {within}" for dim, within in placement.items())
        return f"{lay.order.label}: {groups}" if groups else lay.order.label

    rows = []
    for i, (p, entry) in enumerate(zip(result.plans, doc["plans"], strict=True)):
        band, kept = entry["band"], entry["goodput"]["tokens_per_s_per_gpu"] * gpus
        lo, hi = band["tokens_per_s_per_gpu"]
        rows.append({"rank": i + 1, "layout": layout_text(p.layout), "step": f"{p.metrics['step_time_s']:.3f}",
                     "tput": f"{p.metrics['tokens_per_s_per_gpu']:,.0f}", "band": f"{lo:,.0f}-{hi:,.0f}",
                     "regime": band["regime"], "mfu": f"{p.metrics['mfu']:.1%}",
                     "mem": f"{p.metrics['memory_peak_gib']:.1f}", "goodput": f"{entry['goodput']['goodput']:.1%}",
                     "days": f"{1e12 / kept / 86_400:.3g}" if kept > 0 else "-",
                     "placement": placed(p.layout, entry["placement"]), "why": why(p, best)})
    return rows


def render_report(result: SearchResult, options: dict[str, Any]) -> str:
    """The whole page as one string."""
    import jinja2
    from markupsafe import Markup

    from planner import __version__

    doc = document.build(result, options)
    p = result.problem
    template = resources.files("planner.report").joinpath("report.html.j2").read_text(encoding="utf-8")
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    charts_ = _charts(result)
    cards, pruned = _inputs(p, doc)
    shown = [plan.layout for plan in result.plans]
    chosen = _pipelined(result)
    used = set().union(*(compact_layout(lay)[1] for lay in shown + ([chosen[1]] if chosen else [])))
    return env.from_string(template).render(
        title=f"plan: {p.model.name} on {p.cluster.name}", version=__version__, inputs=cards, pruned=pruned,
        rows=_rows(result, doc), legend=legend(used), band_line=band_line(p, result.plans[0].layout,
                                                                           result.plans[0].metrics),
        why_first=why_first(result, layout_text), charts=[(c.id, c.title, Markup(c.svg), c.caption)
                                    for c in charts_],
        capacity=f"{p.cluster.gpu.memory_gib:g}")


def layout_svg(problem: Problem, lay: Layout, metrics: dict[str, float]) -> str:
    """`plan explain --svg`: one layout's simulated pipeline timeline (when pp > 1) above its memory per stage."""
    stages = stage_memory_gib(problem, lay.as_dict())
    sim = simulate(lay, metrics)
    mem_h = 3.4
    with charts.style():
        fig = charts.new_figure(11, mem_h + (timeline_height(sim) if sim is not None else 0.0))
        if sim is None:
            charts.draw_stage_memory(fig.add_subplot(), stages, problem.cluster.gpu.memory_gib)
        else:
            top, bottom = fig.subfigures(2, 1, height_ratios=[timeline_height(sim), mem_h])
            draw_timeline(top, sim, int(round(metrics["num_microbatches"])))
            charts.draw_stage_memory(bottom.add_subplot(), stages, problem.cluster.gpu.memory_gib)
        fig.suptitle(f"{problem.model.name} on {problem.cluster.name}: "
                     f"{layout_text(lay)}", x=0.01, ha="left", fontsize=11)
        return charts.to_svg(fig)
