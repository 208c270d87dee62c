"""`plan sweep --chart FILE.svg`: days to train against dollars (or GPU-hours), one line per GPU kind through its
counts, the same points if nothing failed dotted beside it (goodput's bend), the frontier drawn over it. Byte-stable
SVG (fixed hash salt, no date), matplotlib's Agg backend."""

from __future__ import annotations

from pathlib import Path

from planner.errors import PlanInputError
from planner.report.sweep import SweepPoint, SweepSpec, frontier_axis


def check_chart_path(path: str) -> None:
    """Refuse a chart path that cannot work before a long sweep runs: not .svg, or no such folder."""
    if not path.lower().endswith(".svg"):
        raise PlanInputError(f"'{path[:80]}' is not an .svg file", field="--chart", fix="e.g. --chart sweep.svg")
    if not Path(path).expanduser().resolve().parent.is_dir():
        raise PlanInputError(f"the folder of '{path[:80]}' does not exist", field="--chart",
                             fix="create it, or choose another path")


def write_chart(spec: SweepSpec, points: list[SweepPoint], path: str) -> None:
    """Write the chart to `path` (SVG); a path that cannot be written is a bad input."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    check_chart_path(path)
    axis = frontier_axis(points)
    label = "cost (USD)" if axis == "cost_usd" else "GPU-hours"
    with matplotlib.rc_context({"svg.hashsalt": "plan-sweep", "svg.fonttype": "none"}):
        fig, ax = plt.subplots(figsize=(8, 5))
        for gpu in spec.gpus:
            mine = [p for p in points if p.gpu == gpu and p.days is not None]
            if not mine:
                continue
            line, = ax.plot([p.days for p in mine], [getattr(p, axis) for p in mine], marker="o", label=gpu)
            ideal = [(p.days_without_failures, getattr(p, axis) * p.days_without_failures / p.days) for p in mine
                     if p.days_without_failures is not None]
            ax.plot([d for d, _ in ideal], [c for _, c in ideal], marker="o", markerfacecolor="none", linestyle=":",
                    color=line.get_color(), label=f"{gpu} if nothing failed")
            for p in mine:
                ax.annotate(str(p.count), (p.days, getattr(p, axis)), textcoords="offset points", xytext=(4, 4),
                            fontsize=7)
        front = sorted((p for p in points if p.frontier), key=lambda p: p.days or 0.0)
        if front:
            ax.plot([p.days for p in front], [getattr(p, axis) for p in front], linestyle="--", color="black",
                    linewidth=1, label="frontier")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("days to train")
        ax.set_ylabel(label)
        ax.set_title(f"{spec.model.name}: {spec.train_tokens / 1e12:g}T tokens (labels: GPU count)")
        ax.grid(True, which="both", linewidth=0.3)
        ax.legend()
        try:
            fig.savefig(Path(path).expanduser(), format="svg", metadata={"Date": None})
        except OSError as exc:
            raise PlanInputError(f"cannot write '{path[:80]}': {exc.strerror}", field="--chart",
                                 fix="choose a writable path") from None
        finally:
            plt.close(fig)
