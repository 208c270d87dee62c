"""Issue 25's trust check: the free #1 of the frontier MoE models against the best published run of each model on
each GPU. A #1 priced far above anything anyone has measured on that hardware is a claim the cost model has to carry
alone, so the ratio is worth watching whenever MoE or Blackwell terms change. Markdown on stdout.

    python bench/top1_vs_published.py

Each problem is planned at the published run's GPUs, sequence, batch and precision under `nemo` (the stack that ran
every row here but Maverick's, which DGX Cloud ran on NeMo too), through `plan`'s own entry point. The best published
run is the fastest of every published run of the model on that GPU at that sequence length (`Published.runs`), in any
precision: MFU counts model FLOPs against the dense BF16 peak (planner.cost.compute.mfu), so with the same model, GPU
and sequence the tokens/s ratio is the MFU ratio. Beside the ratio, whether the best published figure lies inside the
#1's band (where 80 % of published runs of its regime landed against their price): a #1 above the target whose band
holds the published figure makes a claim the model cannot tell from what was measured.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's planner, not an installed one

from famous_setups import short  # noqa: E402  (same folder: the layout's short form of that table)

from cli.in_process import run_in_process  # noqa: E402

ARCHIVE = "NVIDIA-NeMo/Megatron-Bridge@4ab94dfad:docs/performance-summary-archive.md"


@dataclass(frozen=True)
class Run:
    """One published run: its tokens/s per GPU and where it is published."""

    tokens_per_s_per_gpu: float
    source: str


@dataclass(frozen=True)
class Published:
    """The published runs of one model on one GPU at one sequence length, and the problem (as `plan` options) the
    free #1 is planned for: the first run's."""

    title: str
    args: tuple[str, ...]
    runs: tuple[Run, ...]

    @property
    def best(self) -> Run:
        return max(self.runs, key=lambda r: r.tokens_per_s_per_gpu)

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.best.tokens_per_s_per_gpu

    @property
    def source(self) -> str:
        return self.best.source


def _p(model: str, cluster: str, seq: int, gbs: int, precision: str, *extra: str) -> tuple[str, ...]:
    return ("--model", model, "--cluster", cluster, "--seq-len", str(seq), "--global-batch", str(gbs),
            "--precision", precision, "--framework", "nemo", *extra)


# Megatron-MoE-ModelZoo's best H100 row of Qwen3-235B-A22B: BF16, DeepEP, EP overlap, 256 H100, sequence 4096,
# global batch 2048, 17.6 s a step (yanring/Megatron-MoE-ModelZoo@e865051 best_practice/qwen3/readme.md#L15):
# 2048 x 4096 / 17.6 / 256 tokens/s per GPU.
ZOO_QWEN3_H100 = 2048 * 4096 / 17.6 / 256

RUNS: tuple[Published, ...] = (
    Published("Qwen3-235B-A22B, 256 H100, fp8", _p("qwen3-235b-a22b", "h100x256", 4096, 8192, "fp8"), (
        Run(1686.0, f"{ARCHIVE} 26.04 (validation case MB-141)"),
        Run(1712.0, f"{ARCHIVE} 26.04.01, same layout (not in the case file)"),
        Run(ZOO_QWEN3_H100, "yanring/Megatron-MoE-ModelZoo@e865051:best_practice/qwen3/readme.md#L15 (BF16, DeepEP, "
                            "EP overlap, global batch 2048; a test anchor, planner.evidence.anchors)"))),
    Published("Qwen3-235B-A22B, 256 GB200, fp8", _p("qwen3-235b-a22b", "gb200x256", 4096, 8192, "fp8"), (
        Run(7376.0, f"{ARCHIVE} 26.06 (validation case MB-052)"),)),
    Published("gpt-oss-120b, 64 H100, bf16", _p("gpt-oss-120b", "h100x64", 4096, 1280, "bf16"), (
        Run(5824.0, f"{ARCHIVE} 26.04.01 (validation case MB-086)"),
        Run(5993.0, f"{ARCHIVE} 26.02, same layout (not in the case file)"))),
    Published("gpt-oss-120b, 64 GB200, fp8", _p("gpt-oss-120b", "gb200x64", 4096, 1280, "fp8"), (
        Run(28947.0, f"{ARCHIVE} 26.06, MXFP8 (not in the case file)"),)),
    Published("Llama 4 Maverick, 128 GB200, fp8", _p("llama4-maverick", "gb200x128", 8192, 1024, "fp8"), (
        Run(10756.8, "NVIDIA/dgxc-benchmarking v25.05 llama4 (validation case DGXC-230)"),)),
    # Kimi K2's published runs trained with Muon (the table's footnote; Megatron-Bridge's Kimi recipes run
    # dist_muon): planned with Muon, as they ran, and with Adam, the planner's default, for comparison
    Published("Kimi K2, 256 GB300, fp8, Muon", _p("kimi-k2", "gb300x256", 4096, 4096, "fp8", "--optimizer", "muon"), (
        Run(5372.0, f"{ARCHIVE} 26.06, MXFP8, Muon (not in the case file)"),)),
    Published("Kimi K2, 256 GB300, fp8, Adam", _p("kimi-k2", "gb300x256", 4096, 4096, "fp8"), (
        Run(5372.0, f"{ARCHIVE} 26.06, MXFP8, Muon (not in the case file; Adam priced)"),)),
)
TARGET = 1.2  # issue 25: the free #1 at most 1.2x the best published MFU for that model and GPU


def top1(args: tuple[str, ...]) -> dict:
    code, out, err = run_in_process(*args, "--top", "1", "--format", "json")
    if code != 0:
        raise RuntimeError(f"plan {' '.join(args)}: exit {code}: {err.strip()}")
    return json.loads(out)["plans"][0]


def in_band(plan: dict, tokens_per_s_per_gpu: float) -> bool:
    """Whether a throughput lies inside the #1's band (where 80 % of published runs of its regime landed against
    their price): a published figure inside it is one the model cannot tell from its own claim."""
    low, high = plan["band"]["tokens_per_s_per_gpu"]
    return low <= tokens_per_s_per_gpu <= high


def main() -> None:
    print("| problem | free #1 (nemo) | its tokens/s/GPU [band] | best published | ratio | within 1.2x | "
          "published inside the #1's band |")
    print("|---|---|---|---|---|---|---|")
    for run in RUNS:
        best = top1(run.args)
        priced = best["metrics"]["tokens_per_s_per_gpu"]
        low, high = best["band"]["tokens_per_s_per_gpu"]
        ratio = priced / run.tokens_per_s_per_gpu
        published = f"{run.tokens_per_s_per_gpu:,.0f} ({run.source})"
        print(f"| {run.title} | {short(best['layout'])} | {priced:,.0f} [{low:,.0f}-{high:,.0f}] | {published} | "
              f"{ratio:.2f}x | {'yes' if ratio <= TARGET else 'no'} | "
              f"{'yes' if in_band(best, run.tokens_per_s_per_gpu) else 'no'} |")


if __name__ == "__main__":
    main()
