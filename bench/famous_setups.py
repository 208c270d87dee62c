"""Side by side for famous published setups: our top-1 against the layout the practitioners ran, priced by the same
model (`plan explain`), with its rank in our full table and, where the practitioners published a throughput or MFU
for it, the price against that figure. Markdown on stdout.

    python bench/famous_setups.py

Practitioners' layouts: Llama 3 405B (arXiv 2407.21783 §3.3.2, Table 4), Megatron-LM GPT-3 175B (Narayanan et al.
2021 §5), Nemotron-4 340B (arXiv 2406.11704 §3.2; Megatron-Bridge benchmark table), DeepSeek-V3 (arXiv 2412.19437
§3.2), Llama 3.1 70B on 512 H100 (NeMo's llama3_70b performance recipe, DGX Cloud benchmarking rows DGXC-137/141),
Llama 3 70B on GB300 (Megatron-Bridge perf recipe). Pins the source does not state take the planner's defaults.

Published figures (`published`): Llama 3 405B 38 % BF16 MFU at TP8 PP16 DP128 on 16,384 H100 (arXiv 2407.21783
Table 4: 400 TFLOP/s per GPU); Nemotron-4 340B 41.0 % MFU at DP64 on 6,144 H100, batch 2,304 (arXiv 2406.11704
Table 2); DeepSeek-V3 180K H800 GPU hours per trillion tokens (arXiv 2412.19437 §1: 1e12 / (180e3 x 3600) = 1,543
tokens/s/GPU); Llama 3.1 70B 1,117.6 tokens/s/GPU (DGX Cloud benchmarking v25.04, NeMo 25.02, DGXC-137); Llama 3 70B
on GB300 5,243 tokens/s/GPU (Megatron-Bridge performance summary, 26.02.01 container).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.layout import parse_pairs
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec
from planner.report.document import layout_dict
from planner.report.explain import explain
from planner.search.search import search

_KEYS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "zero", "recompute", "schedule")


@dataclass(frozen=True)
class Setup:
    title: str
    model: str
    cluster: str
    seq: int
    gbs: int
    precision: str
    framework: str
    layouts: tuple[tuple[str, str], ...]  # (name, --layout string) as the practitioners ran it
    recipe: tuple[tuple[str, object], ...] = ()  # further TrainingSpec fields the practitioners state
    published: tuple[str, float] | None = None  # (metric, value) the practitioners published for their first layout


SETUPS = (
    Setup("Llama 3 405B, h100x16384, megatron-core", "llama3-405b", "h100x16384", 8192, 2048, "bf16", "megatron-core",
          (("Meta TP8 PP16 DP128 v8, no recompute", "tp=8,pp=16,dp=128,vpp=8,mbs=1,schedule=interleaved,zero=1"),
           ("same, full recompute", "tp=8,pp=16,dp=128,vpp=8,mbs=1,schedule=interleaved,zero=1,recompute=full")),
          published=("mfu", 0.38)),
    Setup("Llama 3 405B, h100x16384, generic", "llama3-405b", "h100x16384", 8192, 2048, "bf16", "generic",
          (("Meta TP8 PP16 DP128 v8, no recompute, gradients sharded (ZeRO-2)",
            "tp=8,pp=16,dp=128,vpp=8,mbs=1,schedule=interleaved,zero=2,recompute=none"),), published=("mfu", 0.38)),
    Setup("GPT-3 175B, a100x1024, megatron (paper era)", "gpt3-175b", "a100x1024", 2048, 1536, "bf16", "megatron",
          (("N21 TP8 PP8 v4, ZeRO 0, full recompute",
            "tp=8,pp=8,dp=16,vpp=4,mbs=1,schedule=interleaved,zero=0,recompute=full"),
           ("N21 TP8 PP16 v2, ZeRO 0", "tp=8,pp=16,dp=8,vpp=2,mbs=1,schedule=interleaved,zero=0,recompute=none"))),
    Setup("Nemotron-4 340B, h100x6144, megatron-core", "nemotron4-340b", "h100x6144", 4096, 2304, "bf16",
          "megatron-core", (("NVIDIA TP8 PP12 DP64 v8", "tp=8,pp=12,dp=64,vpp=8,mbs=1,schedule=interleaved,zero=1"),),
          published=("mfu", 0.41)),
    Setup("Nemotron-4 340B, h100x1024, megatron-core", "nemotron4-340b", "h100x1024", 4096, 256, "bf16",
          "megatron-core", (("Bridge TP8 PP8 DP16 v12", "tp=8,pp=8,dp=16,vpp=12,mbs=1,schedule=interleaved,zero=1"),)),
    Setup("DeepSeek-V3, h800x2048 fp8, megatron-core", "deepseek-v3", "h800x2048", 4096, 15360, "fp8", "megatron-core",
          (("DeepSeek PP16 EP64 TP1 ZeRO-1 (1f1b: no DualPipe in Megatron-Core)",
            "tp=1,pp=16,dp=128,ep=64,mbs=1,schedule=1f1b,recompute=selective,zero=1"),),
          published=("tokens_per_s_per_gpu", 1e12 / (180e3 * 3600))),
    Setup("DeepSeek-V3, h800x2048 fp8 blockwise, bf16 moments, generic", "deepseek-v3", "h800x2048", 4096, 15360,
          "fp8", "generic", (("DeepSeek PP16 EP64 TP1 ZeRO-1 DualPipe",
                              "tp=1,pp=16,dp=128,ep=64,mbs=1,schedule=dualpipe,recompute=selective,zero=1"),),
          (("fp8_recipe", "blockwise"), ("optimizer_moments", "bf16")),  # report §3.3.2-3.3.3
          published=("tokens_per_s_per_gpu", 1e12 / (180e3 * 3600))),
    # NeMo 25.02's llama3_70b performance recipe (TE userbuffers on), as DGX Cloud benchmarking ran it
    *(Setup(f"Llama 3.1 70B, h100x512, {label}", "llama3-70b", "h100x512", 8192, 1024, "bf16", stack,
            (("NVIDIA TP4 PP4 CP2 v5 (NeMo performance recipe)",
              "tp=4,pp=4,cp=2,dp=16,vpp=5,mbs=1,schedule=interleaved,zero=1,recompute=none"),),
            (("tp_comm_overlap", overlap),), published=("tokens_per_s_per_gpu", 1117.6))
      for label, stack, overlap in (("nemo", "nemo", True), ("megatron-core --tp-comm-overlap", "megatron-core", True),
                                    ("megatron-core", "megatron-core", False))),
    # Megatron-Bridge perf_recipes/llama/gb300/llama3.py (fp8cs): FSDP, mbs 2, no recompute, 20 layers' activations
    # offloaded to Grace memory; measured 5,243 tokens/s/GPU (performance-summary archive, 26.02.01 container)
    Setup("Llama 3 70B, gb300x64 fp8, nemo", "llama3-70b", "gb300x64", 8192, 256, "fp8", "nemo",
          (("NVIDIA FSDP TP1 PP1, activations offloaded", "tp=1,pp=1,dp=64,mbs=2,zero=3,recompute=offload"),
           ("same with full recompute", "tp=1,pp=1,dp=64,mbs=2,zero=3,recompute=full")),
          published=("tokens_per_s_per_gpu", 5243.0)),
)


def short(lay: dict) -> str:
    """tp4 pp16 dp32 cp8 v8 m1 z1 none interleaved, as the table prints it."""
    out = f"tp{lay['tp']} pp{lay['pp']} dp{lay['dp']}"
    out += "".join(f" {k}{lay[k]}" for k in ("cp", "ep") if lay.get(k, 1) > 1)
    out += f" v{lay['vpp']}" if lay["vpp"] > 1 else ""
    return out + f" m{lay['micro_batch']} z{lay['zero']} {lay['recompute']} {lay['schedule']}"


def table(s: Setup) -> list[str]:
    p = Problem(load_model(s.model), load_cluster(s.cluster), TrainingSpec(
        seq_len=s.seq, global_batch=s.gbs, precision=s.precision, framework=s.framework, **dict(s.recipe)))
    plans = search(p, top=100_000).plans
    docs = [layout_dict(pl.layout, pl.metrics) for pl in plans]
    top = plans[0].metrics
    rows = [f"### {s.title}", "", "| layout | step s | MFU | GiB | rank | vs top-1 | verdict | vs published |",
            "|---|---|---|---|---|---|---|---|",
            f"| top-1: {short(docs[0])} | {top['step_time_s']:.2f} | {100 * top['mfu']:.1f} % "
            f"| {top['memory_peak_gib']:.1f} | 1 of {len(plans)} | - | | |"]
    for i, (name, layout) in enumerate(s.layouts):
        out = explain(p, parse_pairs([layout], "--layout"))
        m, lay = out["metrics"], out["layout"]
        rank = next((str(i) for i, d in enumerate(docs, 1) if all(d.get(k) == lay.get(k) for k in _KEYS)), "-")
        verdict = ", ".join(r["rule"] for r in out["broken_rules"]) or ("tight" if out["memory_tight"] else "fits")
        slower = 100 * (m["step_time_s"] / top["step_time_s"] - 1)
        rows.append(f"| {name}: {short(lay)} | {m['step_time_s']:.2f} | {100 * m['mfu']:.1f} % "
                    f"| {m['memory_peak_gib']:.1f} | {rank} | {slower:+.1f} % | {verdict} | {_vs(s, i, m)} |")
    return rows + [""]


def _vs(s: Setup, index: int, metrics: dict) -> str:
    """The price of the practitioners' first layout against their published figure: predicted / published - 1."""
    if s.published is None or index:
        return ""
    metric, value = s.published
    shown = f"{100 * value:.1f} % MFU" if metric == "mfu" else f"{value:,.0f} tokens/s/GPU"
    return f"{100 * (metrics[metric] / value - 1):+.1f} % of {shown}"


def main() -> None:
    for s in SETUPS:
        print("\n".join(table(s)))


if __name__ == "__main__":
    main()
