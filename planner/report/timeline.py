"""The simulated pipeline timeline as an ASCII Gantt chart (`plan explain`)."""

from __future__ import annotations

import numpy as np

from planner.strategies.pipeline_sim import PipelineSimResult


def render_timeline(result: PipelineSimResult, width: int = 100) -> str:
    """ASCII Gantt chart, one row per rank: F/B/W for chunk 0 (lower case f/b/w for chunks >= 1), '.' idle.

    Each column covers flush_time / width; it shows the op that overlaps it most, or '.' when the rank computes for
    less than half of the column (p2p hold time and waiting count as idle).
    """
    t0 = min((x.start for x in result.timeline), default=0.0)
    dt = max(result.flush_time, 1e-12) / width
    edges = t0 + dt * np.arange(width + 1)
    rows = []
    for s in range(result.p):
        covered = np.zeros(width)
        best = np.zeros(width)
        row = ["."] * width
        for x in (x for x in result.timeline if x.stage == s):
            lo, hi = int((x.start - t0) // dt), min(int(np.ceil((x.end - t0) / dt)), width)
            cols = np.arange(max(lo, 0), hi)
            overlap = np.minimum(edges[cols + 1], x.end) - np.maximum(edges[cols], x.start)
            covered[cols] += overlap
            ch = x.op if x.chunk == 0 else x.op.lower()
            for col, ov in zip(cols, overlap, strict=True):
                if ov > best[col]:
                    best[col], row[col] = ov, ch
        rows.append("".join(c if covered[i] >= 0.5 * dt else "." for i, c in enumerate(row)))
    head = (f"{result.schedule}: p={result.p} m={result.m} v={result.v}"
            + (f" k={result.k}" if result.k > 1 else "")
            + f"  makespan={result.makespan:.4g} bubble={result.bubble:.4g} ({100 * result.bubble_fraction:.1f}%)"
            + f"  peak in-flight rank0={result.peak_inflight[0]:.3g}")
    w = len(str(result.p - 1))
    return "\n".join([head, *(f"s{s:<{w}} |{r}|" for s, r in enumerate(rows))])
