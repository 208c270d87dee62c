"""The simulated pipeline timeline as a chart (planner.strategies.pipeline_sim).

Few ops: a Gantt chart, one row per pipeline rank, one box per forward / backward / weight-gradient op. Many ops (deep
pipelines, hundreds of micro-batches): a heat strip, time cut into HEAT_BINS columns, each cell's colour mixing the op
kinds by the share of the cell each fills, and white by the idle share (so the bubble reads as white wedges, the
warm-up as forward blue, the steady state as the forward/backward mix), plus two zoomed Gantt panels on the warm-up
and the cool-down where the bubble lives. The drawing is
bounded by the bins and the zoom windows, not by pp x micro-batches.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure, FigureBase
from matplotlib.patches import Patch

from planner.report.charts import new_figure
from planner.strategies.pipeline_sim import PipelineSimResult

KINDS = ("F", "B", "W")
KIND_COLOURS = {"F": "#4C72B0", "B": "#DD8452", "W": "#55A868"}
KIND_NAMES = {"F": "forward", "B": "backward", "W": "weight gradients"}
GANTT_MAX_OPS = 2500  # above this the per-op boxes are thinner than a pixel at the overview's width
HEAT_BINS = 800
ZOOM_RASTER_OPS = 1500  # a zoom panel with more boxes than this is embedded as an image to keep the SVG small


class Ops(NamedTuple):
    """The simulated timeline as columns (one row per executed op)."""

    stage: np.ndarray
    kind: np.ndarray  # index into KINDS
    chunk: np.ndarray
    microbatch: np.ndarray
    start: np.ndarray
    end: np.ndarray


def ops_of(sim: PipelineSimResult) -> Ops:
    tl = sim.timeline
    t0 = min((x.start for x in tl), default=0.0)
    return Ops(np.array([x.stage for x in tl], dtype=np.int64), np.array([KINDS.index(x.op) for x in tl]),
               np.array([x.chunk for x in tl]), np.array([x.microbatch for x in tl]),
               np.array([x.start - t0 for x in tl]), np.array([x.end - t0 for x in tl]))


def busy_bins(ops: Ops, p: int, span: float, bins: int) -> np.ndarray:
    """Seconds each rank spends on each op kind in each time bin: array (kinds, p, bins).

    A rank runs one op at a time, so its busy time up to t is piecewise linear in t; its value at the bin edges,
    differenced, is the exact busy time per bin.
    """
    edges = np.linspace(0.0, span, bins + 1)
    out = np.zeros((len(KINDS), p, bins))
    for k in range(len(KINDS)):
        for s in range(p):
            sel = (ops.stage == s) & (ops.kind == k)
            if not sel.any():
                continue
            order = np.argsort(ops.start[sel])
            st, en = ops.start[sel][order], ops.end[sel][order]
            before = np.r_[0.0, np.cumsum(en - st)[:-1]]
            xs = np.column_stack([st, en]).ravel()
            ys = np.column_stack([before, before + (en - st)]).ravel()
            out[k, s] = np.diff(np.interp(edges, xs, ys))
    return out


def heat_image(ops: Ops, p: int, span: float, bins: int = HEAT_BINS) -> np.ndarray:
    """RGB image (p, bins, 3): each cell mixes the op kinds' colours by the share of the cell each fills, and white
    by the idle share. (Painting the dominant kind instead would show a steady 1F1B state as all backward, since B
    is twice F.)"""
    share = busy_bins(ops, p, span, bins) / (span / bins)
    share /= np.maximum(share.sum(axis=0), 1.0)  # float noise: never more than the whole cell
    colours = np.array([to_rgb(KIND_COLOURS[k]) for k in KINDS])
    return 1.0 - np.einsum("kpb,kc->pbc", share, 1.0 - colours)


def _stage_ticks(ax: Axes, p: int) -> None:
    step = max(1, int(np.ceil(p / 16)))
    ticks = list(range(0, p, step))
    ax.set_yticks(ticks, [str(t) for t in ticks])
    ax.set_ylim(p - 0.5, -0.5)  # stage 0 on top, as in the papers' figures
    ax.set_ylabel("pipeline stage")


def draw_gantt(ax: Axes, ops: Ops, p: int, window: tuple[float, float] | None = None, labels: bool = False) -> int:
    """One box per op (later chunks lighter); returns how many boxes were drawn."""
    lo, hi = window if window else (0.0, float(ops.end.max()))
    inside = (ops.end > lo) & (ops.start < hi)
    raster = int(inside.sum()) > ZOOM_RASTER_OPS
    for k, kind in enumerate(KINDS):
        for later in (False, True):
            sel = inside & (ops.kind == k) & ((ops.chunk > 0) == later)
            if not sel.any():
                continue
            colour = np.array(to_rgb(KIND_COLOURS[kind]))
            colour = colour + (1 - colour) * 0.45 if later else colour
            for s in np.unique(ops.stage[sel]):
                row = sel & (ops.stage == s)
                spans = list(zip(ops.start[row] * 1e3, (ops.end[row] - ops.start[row]) * 1e3, strict=True))
                ax.broken_barh(spans, (s - 0.42, 0.84), facecolors=tuple(colour), edgecolor="white",
                               linewidth=0.3 if p <= 16 else 0.15, rasterized=raster)
    if labels:
        for i in np.flatnonzero(inside):
            ax.text((ops.start[i] + ops.end[i]) / 2 * 1e3, ops.stage[i], str(ops.microbatch[i] + 1), ha="center",
                    va="center", fontsize=6, color="white")
    ax.set_xlim(lo * 1e3, hi * 1e3)
    _stage_ticks(ax, p)
    return int(inside.sum())


def _legend(fig: FigureBase, ops: Ops, v: int, dense: bool) -> None:
    present = [k for i, k in enumerate(KINDS) if (ops.kind == i).any()]
    handles = [Patch(color=KIND_COLOURS[k], label=KIND_NAMES[k]) for k in present]
    if dense:  # what a steady-state heat-strip cell looks like: one forward and one twice-as-long backward
        mix = (np.array(to_rgb(KIND_COLOURS["F"])) + 2 * np.array(to_rgb(KIND_COLOURS["B"]))) / 3
        handles.append(Patch(color=tuple(mix), label="mixed (steady state)"))
    if v > 1:
        handles.append(Patch(color="#C8C8C8", label="lighter: model chunks 2..v"))
    handles.append(Patch(facecolor="white", edgecolor="#999999", label="idle (bubble)"))
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), frameon=False, fontsize=8)


def title(sim: PipelineSimResult, m_total: int) -> str:
    capped = f" (first {sim.m} of {m_total} simulated)" if sim.m < m_total else ""
    chunks = f", {sim.v} chunks per rank" if sim.v > 1 else ""
    return (f"{sim.schedule}: {sim.p} stages x {sim.m} micro-batch{'es' if sim.m != 1 else ''}{capped}{chunks}; "
            f"bubble {sim.bubble * 1e3:.0f} ms ({100 * sim.bubble_fraction:.1f} % of {sim.makespan * 1e3:.0f} ms)")


def zoom_windows(ops: Ops, p: int, span: float) -> tuple[tuple[float, float], tuple[float, float]]:
    """Warm-up and cool-down windows: long enough for the last rank's first op and a few steady ops after it."""
    first_last = float(ops.start[ops.stage == p - 1].min())
    op = float(np.median(ops.end - ops.start))
    width = min(span / 2, 1.25 * first_last + 6 * op)
    return (0.0, width), (span - width, span)


def timeline_height(sim: PipelineSimResult) -> float:
    """Inches the chart needs: rows grow with pp up to a cap; the zoom panels only when the ops are too many."""
    top_h = float(np.clip(0.2 * sim.p + 1.2, 2.0, 6.0))
    dense = len(sim.timeline) > GANTT_MAX_OPS
    return top_h + (float(np.clip(0.05 * sim.p + 1.8, 2.2, 4.5)) if dense else 0.0) + 0.6


def draw_timeline(fig: FigureBase, sim: PipelineSimResult, m_total: int) -> None:
    """The whole timeline chart into `fig` (a figure or subfigure): Gantt, or heat strip + warm-up and cool-down zooms
    when there are too many ops to draw one by one."""
    ops = ops_of(sim)
    p, span = sim.p, float(ops.end.max())
    if len(ops.start) > GANTT_MAX_OPS:
        grid = fig.add_gridspec(2, 2, height_ratios=[float(np.clip(0.2 * p + 1.2, 2.0, 6.0)),
                                                     float(np.clip(0.05 * p + 1.8, 2.2, 4.5))])
        ax = fig.add_subplot(grid[0, :])
        img = heat_image(ops, p, span)
        ax.imshow(img, aspect="auto", interpolation="nearest", extent=(0, span * 1e3, p - 0.5, -0.5)).set_gid(
            "timeline-heat")
        _stage_ticks(ax, p)
        ax.set_title(title(sim, m_total) + f"\neach column = {span / HEAT_BINS * 1e3:.2g} ms, coloured by the "
                     "share of it each op kind fills (white: idle)", loc="left")
        for i, (win, name) in enumerate(zip(zoom_windows(ops, p, span), ("warm-up", "cool-down"), strict=True)):
            zax = fig.add_subplot(grid[1, i])
            draw_gantt(zax, ops, p, win)
            zax.set_title(f"zoom: {name}, {win[0] * 1e3:.0f}-{win[1] * 1e3:.0f} ms", loc="left")
            zax.set_xlabel("time (ms)")
            ax.axvspan(win[0] * 1e3, win[1] * 1e3, fill=False, edgecolor="black", ls=":", lw=1.2)
            ax.text(win[i] * 1e3, p - 0.5, f" {name} " if i else f" {name}", va="bottom", ha="right" if i else "left",
                    fontsize=8)
    else:
        ax = fig.add_subplot()
        draw_gantt(ax, ops, p, labels=len(ops.start) <= 300)
        ax.set_title(title(sim, m_total), loc="left")
    ax.set_xlabel("time (ms)")
    _legend(fig, ops, sim.v, len(ops.start) > GANTT_MAX_OPS)


def timeline_figure(sim: PipelineSimResult, m_total: int, width: float = 11.0) -> Figure:
    fig = new_figure(width, timeline_height(sim))
    draw_timeline(fig, sim, m_total)
    return fig
