"""The report's charts as SVG (matplotlib, headless Agg backend): search-space scatter with its Pareto front, the time
breakdown of the top plans, and memory per pipeline stage. The pipeline timeline is in timeline_chart.

Each `draw_*` fills one matplotlib Axes (call them inside `style()`), so the HTML report and `plan explain --svg`
compose the same drawings.
Text is drawn as glyph paths so that a chart looks the same in every browser, with or without the font installed;
dense point clouds are rasterised inside the SVG so the file stays small however many layouts were priced.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure

RC = {"svg.fonttype": "path", "svg.hashsalt": "plan-report", "font.size": 9, "axes.titlesize": 10,
      "axes.spines.top": False, "axes.spines.right": False, "figure.dpi": 100}
# Time terms of one step, in the order they stack; their sum is step_time_s up to Seq1F1B's extra segment launches
# ("other"). compute_s includes recomputation, so the bar shows kernels without it plus recompute_s.
TIME_TERMS: tuple[tuple[str, str, str], ...] = (
    ("kernels", "compute", "#4C72B0"), ("recompute_s", "recompute", "#8FAADC"),
    ("offload_s", "activation offload", "#64B5CD"), ("tp_comm_s", "TP comm", "#DD8452"),
    ("cp_comm_s", "CP comm", "#C44E52"), ("ep_comm_s", "EP comm", "#8172B3"),
    ("fsdp_comm_s", "ZeRO-3 gathers", "#937860"), ("nic_comm_s", "shared-NIC contention", "#00665E"),
    ("pp_comm_s", "PP hand-offs", "#DA8BC3"), ("dp_comm_s", "DP reduction", "#CCB974"),
    ("bubble_s", "pipeline bubble", "#B0B0B0"), ("optimizer_s", "optimizer", "#55A868"), ("other", "other", "#404040"),
)
MEMORY_KINDS: tuple[tuple[str, str, str], ...] = (
    ("weights", "weights", "#4C72B0"), ("grads", "gradients", "#DD8452"), ("optimizer", "optimizer states", "#55A868"),
    ("activations", "activations", "#C44E52"), ("logits", "logits", "#8172B3"),
    ("buffers", "buffers (ZeRO-3, p2p, fp8)", "#CCB974"), ("reserve", "context, NCCL, fragmentation", "#B0B0B0"),
)
# The seven parallelism mixes with the fastest layouts get a colour each; the rest are grey.
FAMILY_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")
OTHER_COLOUR = "#C7C7C7"
SCATTER_GRID = (320, 220)  # one kept point per family and cell of this grid: the cloud looks the same, 100x fewer


@contextmanager
def style() -> Iterator[None]:
    """The charts' look (fonts, spines, glyphs as paths, stable ids); draw and save inside it."""
    with matplotlib.rc_context(RC):
        yield


def new_figure(width: float, height: float) -> Figure:
    """A figure with no pyplot state (nothing global, nothing to close), laid out without overlaps."""
    return Figure(figsize=(width, height), layout="constrained")


def to_svg(fig: Figure) -> str:
    """The figure as one <svg> element (no XML prolog), byte-stable across runs."""
    buf = io.StringIO()
    with style():
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, dpi=150)
    text = buf.getvalue()
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, count=1, flags=re.S)  # RDF boilerplate, no content
    return text[text.index("<svg"):]


# --- search-space scatter -------------------------------------------------------------------------
def families(priced: dict[str, np.ndarray]) -> np.ndarray:
    """Each layout's parallelism mix, e.g. 'TP+PP+DP': the dimensions larger than one."""
    dims = ("tp", "pp", "cp", "ep", "dp")
    codes = sum((priced[d] > 1).astype(np.int64) << i for i, d in enumerate(dims))
    names = ["+".join(d.upper() for i, d in enumerate(dims) if code >> i & 1) or "single GPU"
             for code in range(1 << len(dims))]
    return np.array(names, dtype=object)[codes]


def pareto_front(memory: np.ndarray, tput: np.ndarray) -> np.ndarray:
    """Indices of the layouts no other beats on both axes (less memory and more throughput), by memory."""
    order = np.lexsort((-tput, memory))
    best = np.maximum.accumulate(tput[order])
    keep = np.r_[True, best[1:] > best[:-1]]
    return order[keep]


def thin(x: np.ndarray, y: np.ndarray, fam: np.ndarray) -> np.ndarray:
    """One index per (family, grid cell): what a reader can tell apart at the chart's resolution."""
    gx = np.floor((x - x.min()) / max(np.ptp(x), 1e-12) * (SCATTER_GRID[0] - 1))
    gy = np.floor((y - y.min()) / max(np.ptp(y), 1e-12) * (SCATTER_GRID[1] - 1))
    _, fam_code = np.unique(fam, return_inverse=True)
    key = (fam_code * SCATTER_GRID[0] + gx) * SCATTER_GRID[1] + gy
    return np.unique(key, return_index=True)[1]


def _draw_families(ax: Axes, mem: np.ndarray, tput: np.ndarray, fam: np.ndarray) -> tuple[list[str], int]:
    """The cloud, faint, one colour per parallelism mix (the best mixes on top, the rest grey underneath), and each
    coloured mix's own Pareto front as a line of its colour: what each mix can reach at each memory budget.
    Returns the coloured mixes, best first, and how many points were drawn."""
    kept = thin(mem, tput, fam)
    names = sorted(set(fam), key=lambda n: -tput[fam == n].max())
    shown = names[:len(FAMILY_COLOURS)]
    rest = kept[~np.isin(fam[kept], shown)]
    alpha = 0.35 if len(kept) > 20_000 else 0.6  # a dense cloud fainter, so the lines stay visible through it
    if len(rest):
        ax.scatter(mem[rest], tput[rest], s=5, color=OTHER_COLOUR, alpha=0.4, linewidths=0, rasterized=True,
                   label="other mixes")
    for i, name in reversed(list(enumerate(shown))):
        sel = kept[fam[kept] == name]
        ax.scatter(mem[sel], tput[sel], s=5, color=FAMILY_COLOURS[i], alpha=alpha, linewidths=0, rasterized=True,
                   label=name)
        members = np.flatnonzero(fam == name)
        own = members[pareto_front(mem[members], tput[members])]
        ax.step(mem[own], tput[own], where="post", color=FAMILY_COLOURS[i], lw=1.1)
    return shown, len(kept)


def draw_scatter(ax: Axes, priced: dict[str, np.ndarray], top: dict[str, float], capacity: float) -> dict[str, int]:
    """Throughput vs peak memory of every feasible layout, by parallelism mix; Pareto front and top pick marked.
    Returns counts (layouts, drawn points, front size) for the caption."""
    mem, tput = priced["memory_peak_gib"], priced["tokens_per_s_per_gpu"]
    shown, points = _draw_families(ax, mem, tput, families(priced))
    front = pareto_front(mem, tput)
    line = ax.step(mem[front], tput[front], where="post", color="black", lw=1.6, label="Pareto front")[0]
    line.set_gid("pareto-front")
    ax.plot(mem[front], tput[front], "o", color="black", ms=3)
    star = ax.plot([top["memory_peak_gib"]], [top["tokens_per_s_per_gpu"]], marker="*", ms=15, color="#E3242B",
                   markeredgecolor="black", ls="none", label="top pick (#1)", zorder=5)[0]
    star.set_gid("top-pick")
    ax.axvline(capacity, color="#E3242B", ls="--", lw=1, label=f"GPU memory ({capacity:g} GiB)")
    ax.set_xlabel("peak memory per GPU (GiB)")
    ax.set_ylabel("tokens/s per GPU")
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: (labels[i] not in shown, shown.index(labels[i])
                                                      if labels[i] in shown else i))
    legend = ax.legend([handles[i] for i in order], [labels[i] for i in order], loc="upper left",
                       bbox_to_anchor=(1.01, 1.0), frameon=False, title="parallelism mix\n(best first)", fontsize=8)
    for handle in legend.legend_handles:  # legend dots readable, whatever the cloud's point size and alpha
        if isinstance(handle, PathCollection):
            handle.set_sizes([30])
            handle.set_alpha(1.0)
    return {"layouts": len(mem), "points": points, "front": len(front)}


# --- time breakdown -------------------------------------------------------------------------------
def time_terms(metrics: dict[str, float]) -> dict[str, float]:
    """Seconds per step by TIME_TERMS key; 'other' closes the sum to step_time_s (Seq1F1B segment launches)."""
    out = {"kernels": metrics["compute_s"] - metrics["recompute_s"]}
    out.update({k: metrics[k] for k, _, _ in TIME_TERMS if k not in ("kernels", "other")})
    out["other"] = max(metrics["step_time_s"] - sum(out.values()), 0.0)
    return out


def draw_breakdown(ax: Axes, plans: Sequence[tuple[str, dict[str, float]]]) -> None:
    """Stacked horizontal bars, one per plan (best on top): where each step's time goes."""
    terms = [time_terms(m) for _, m in plans]
    y = np.arange(len(plans))[::-1]
    left = np.zeros(len(plans))
    for key, label, colour in TIME_TERMS:
        widths = np.array([t[key] for t in terms])
        if widths.max() <= 1e-4 * max(m["step_time_s"] for _, m in plans):
            continue  # a term no plan spends time on stays out of the legend
        ax.barh(y, widths, left=left, color=colour, label=label, height=0.7, edgecolor="white", linewidth=0.5)
        left += widths
    for yi, (_, m) in zip(y, plans, strict=True):
        ax.text(m["step_time_s"], yi, f" {m['step_time_s']:.2f} s", va="center", fontsize=8)
    ax.set_yticks(y, [name for name, _ in plans], fontsize=8)
    ax.set_xlabel("seconds per optimizer step")
    ax.set_xlim(0, max(m["step_time_s"] for _, m in plans) * 1.15)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=6, frameon=False, fontsize=8)


# --- memory per stage -----------------------------------------------------------------------------
def draw_stage_memory(ax: Axes, stages: Sequence[dict[str, float]], capacity: float) -> None:
    """Stacked bars per pipeline rank: weights, gradients, optimizer states, activations, logits, buffers, reserve."""
    x = np.arange(len(stages))
    bottom = np.zeros(len(stages))
    for key, label, colour in MEMORY_KINDS:
        h = np.array([s[key] for s in stages])
        if h.max() <= 0:
            continue
        ax.bar(x, h, bottom=bottom, color=colour, label=label, width=0.8, edgecolor="white",
               linewidth=0.4 if len(stages) <= 32 else 0)
        bottom += h
    pad = max(6 - len(stages), 0) / 2  # a lone pp = 1 bar stays bar-sized, in the middle
    ax.axhline(capacity, color="#E3242B", ls="--", lw=1)
    ax.text(len(stages) - 0.5 + pad, capacity, f"GPU memory {capacity:g} GiB", ha="right", va="bottom", fontsize=8,
            color="#E3242B")
    step = max(1, int(np.ceil(len(stages) / 16)))
    ax.set_xticks(x[::step], [str(i) for i in x[::step]])
    ax.set_xlim(-0.6 - pad, len(stages) - 0.4 + pad)
    ax.set_ylim(0, max(capacity, bottom.max()) * 1.12)
    ax.set_xlabel("pipeline stage (rank)")
    ax.set_ylabel("GiB per GPU")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=8)
