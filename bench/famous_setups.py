"""Thirteen famous setups side by side: our #1 (with its band, planned for a stack that launches it), whether the
launch file its framework's format writes reads back (`plan explain --from`) as the same layout, and the
practitioners' own layouts priced under their own framework against what they published. Markdown on stdout.

    python bench/famous_setups.py

Every command runs in this process through `plan`'s own entry point (cli.main.run), so what is checked is what a
user types. tests/test_famous_setups.py asserts the findings. The practitioners' sources are named per layout below;
knobs a source does not state take the planner's defaults (docs/commands.md, `plan explain`).
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's planner, not an installed one

import numpy as np  # noqa: E402

from cli.in_process import run_in_process  # noqa: E402
from planner.errors import NoFeasiblePlan  # noqa: E402
from planner.inputs.layout import Recompute  # noqa: E402
from planner.inputs.problem import Problem  # noqa: E402
from planner.search.preference import CP_MIN_TOKENS_PER_RANK, criteria_columns  # noqa: E402
from planner.search.search import search  # noqa: E402

# The layout keys a launch file must give back unchanged (num_microbatches and the stage split follow from them).
LAYOUT_KEYS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "zero", "recompute", "sequence_parallel",
               "schedule", "cp_comm", "expert_tp", "offload_layers")
FORMAT_OF = {"megatron-core": "megatron", "megatron": "megatron", "nemo": "nemo", "torchtitan": "torchtitan"}


@dataclass(frozen=True)
class Practice:
    """A layout practitioners ran, the problem and stack they ran it on, and what they published."""

    name: str
    args: tuple[str, ...]  # `plan explain` problem options (model, cluster, sizes, precision, --framework)
    layout: str  # `--layout` string
    # ("tokens_per_s_per_gpu" | "mfu" | "wall_tokens_per_s_per_gpu", value), None when none is published. A
    # wall-clock figure (tokens over GPU-hours of a whole run) is compared with the price net of restarts and
    # checkpoints (`plan explain`'s goodput, planner.cost.goodput), which those GPU-hours include.
    published: tuple[str, float] | None
    source: str


@dataclass(frozen=True)
class Setup:
    title: str
    args: tuple[str, ...]  # `plan` options of the problem; --framework names a stack with a launcher
    practice: tuple[Practice, ...]

    @property
    def framework(self) -> str:
        return self.args[self.args.index("--framework") + 1] if "--framework" in self.args else "megatron-core"


def _h(cluster: str, seq: int, gbs: int, *rest: str) -> tuple[str, ...]:
    return ("--cluster", cluster, "--seq-len", str(seq), "--global-batch", str(gbs), *rest)


L70 = ("--model", "llama3-70b")
L405 = ("--model", "llama3-405b")
N340 = ("--model", "nemotron4-340b")
DSV3 = ("--model", "deepseek-v3")
DSV3_RECIPE = ("--precision", "fp8", "--fp8-recipe", "blockwise", "--optimizer-moments", "bf16")

SETUPS: tuple[Setup, ...] = (
    Setup("README headline: Llama 3 70B, 512 H100", (*L70, "--cluster", "h100x512"), (
        Practice("NVIDIA Llama 3.1 70B recipe TP4 PP4 CP2 VPP5 (64 H100, batch 128)",
                 (*L70, *_h("h100x64", 8192, 128, "--framework", "nemo")), "tp=4,pp=4,cp=2,vpp=5,mbs=1,zero=1",
                 ("tokens_per_s_per_gpu", 1117.6),
                 "NVIDIA/dgxc-benchmarking v25.04 llama3.1 table (validation case DGXC-137)"),)),
    Setup("Llama 3 405B, 16,384 H100", (*L405, *_h("h100x16384", 8192, 2048)), (
        # 400 TFLOP/s per GPU in Table 4; as a share of the BF16 peak our model-FLOPs MFU uses (989 TFLOP/s)
        Practice("Meta TP8 PP16 DP128 v8, no recompute",
                 (*L405, *_h("h100x16384", 8192, 2048, "--framework", "megatron-core")),
                 "tp=8,pp=16,dp=128,vpp=8,mbs=1,zero=1,recompute=none", ("mfu", 400 / 989),
                 "The Llama 3 Herd of Models, arXiv 2407.21783, §3.3.2 and Table 4 (400 TFLOP/s per GPU)"),)),
    Setup("GPT-3 175B, 1,024 A100 (paper-era Megatron-LM)",
          ("--model", "gpt3-175b", *_h("a100x1024", 2048, 1536, "--framework", "megatron")), (
        Practice("Narayanan et al. TP8 PP8 v4, full recompute",
                 ("--model", "gpt3-175b", *_h("a100x1024", 2048, 1536, "--framework", "megatron")),
                 "tp=8,pp=8,dp=16,vpp=4,mbs=1,zero=0,recompute=full", None,
                 "Narayanan et al. 2021 (arXiv 2104.04473) §5"),)),
    Setup("Nemotron-4 340B, 6,144 H100", (*N340, *_h("h100x6144", 4096, 2304)), (
        Practice("NVIDIA TP8 PP12 v8 DP64", (*N340, *_h("h100x6144", 4096, 2304, "--framework", "megatron-core")),
                 "tp=8,pp=12,dp=64,vpp=8,mbs=1,zero=1", ("mfu", 0.41),
                 "Nemotron-4 340B Technical Report, arXiv 2406.11704, §3.2 and Table 2 (41.0 % MFU)"),)),
    Setup("Nemotron-4 340B, 1,024 H100", (*N340, *_h("h100x1024", 4096, 256, "--framework", "nemo")), (
        Practice("Megatron-Bridge TP8 PP8 v12", (*N340, *_h("h100x1024", 4096, 256, "--framework", "nemo")),
                 "tp=8,pp=8,dp=16,vpp=12,mbs=1,zero=1", ("tokens_per_s_per_gpu", 216.5),
                 "NVIDIA/dgxc-benchmarking nemotron4 table (validation case DGXC-051)"),)),
    Setup("DeepSeek-V3, 2,048 H800, its fp8 recipe", (*DSV3, *_h("h800x2048", 4096, 15360), *DSV3_RECIPE), (
        # 14.8T tokens in 2.664M H800 GPU-hours of pre-training: 14.8e12 / (2.664e6 x 3600) tokens/s per GPU
        Practice("DeepSeek PP16 EP64 ZeRO-1 DualPipe (their own stack: generic)",
                 (*DSV3, *_h("h800x2048", 4096, 15360, "--framework", "generic"), *DSV3_RECIPE),
                 "tp=1,pp=16,dp=128,ep=64,mbs=1,schedule=dualpipe,recompute=selective,zero=1",
                 ("wall_tokens_per_s_per_gpu", 14.8e12 / (2.664e6 * 3600)), "DeepSeek-V3 Technical Report, arXiv "
                 "2412.19437, §3.2 and Table 1 (2.664M H800 GPU-hours for 14.8T pre-training tokens)"),)),
    Setup("Llama 3 70B, 64 GB300, fp8", (*L70, *_h("gb300x64", 8192, 256, "--precision", "fp8", "--framework",
                                                   "nemo")), (
        Practice("NVIDIA FSDP, 20 layers' activations offloaded",
                 (*L70, *_h("gb300x64", 8192, 256, "--precision", "fp8", "--framework", "nemo")),
                 "tp=1,pp=1,dp=64,mbs=2,zero=3,recompute=offload", ("tokens_per_s_per_gpu", 5243.0),
                 "Megatron-Bridge perf_recipes llama3 gb300 fp8 (validation case MB-159)"),)),
    Setup("Mixtral 8x22B, 128 H100", ("--model", "mixtral-8x22b", *_h("h100x128", 4096, 512, "--framework", "nemo")), (
        Practice("NeMo recipe TP2 PP4 VP14 CP2 EP8",
                 ("--model", "mixtral-8x22b", *_h("h100x128", 4096, 512, "--framework", "nemo")),
                 "tp=2,pp=4,vpp=14,cp=2,ep=8,mbs=1,zero=1", None,
                 "NVIDIA/NeMo@00138e21c:nemo/collections/llm/recipes/mixtral_8x22b.py (no published throughput)"),)),
    Setup("Qwen3-235B-A22B, 256 H100, fp8", ("--model", "qwen3-235b-a22b",
                                             *_h("h100x256", 4096, 8192, "--precision", "fp8", "--framework",
                                                 "nemo")), (
        # the preset names no flex backend: the run used Megatron-Core's alltoall dispatcher, and it forced the
        # router to balance (moe_router_force_load_balancing), as the table's benchmarks do (validation case MB-141)
        Practice("Megatron-Bridge TP2 PP8 VP4 EP32, alltoall", ("--model", "qwen3-235b-a22b",
                                                                *_h("h100x256", 4096, 8192, "--precision", "fp8",
                                                                    "--framework", "nemo", "--moe-dispatcher",
                                                                    "alltoall", "--moe-force-balance")),
                 "tp=2,pp=8,vpp=4,ep=32,mbs=1,zero=1,schedule=combined-1f1b", ("tokens_per_s_per_gpu", 1686.0),
                 "Megatron-Bridge performance summary, NeMo 26.04 (validation case MB-141)"),)),
    Setup("Llama 4 Maverick, 128 GB200", ("--model", "llama4-maverick",
                                          *_h("gb200x128", 8192, 1024, "--framework", "nemo")), (
        Practice("NVIDIA TP1 PP2 VP12 EP64", ("--model", "llama4-maverick",
                                              *_h("gb200x128", 8192, 1024, "--framework", "nemo")),
                 "tp=1,pp=2,vpp=12,ep=64,mbs=1,zero=1", ("tokens_per_s_per_gpu", 8419.9),
                 "NVIDIA/dgxc-benchmarking v25.05 llama4 (validation case DGXC-215)"),)),
    Setup("gpt-oss-120b, 64 H100", ("--model", "gpt-oss-120b", *_h("h100x64", 4096, 512, "--framework", "nemo")), (
        Practice("Megatron-Bridge recipe TP2 PP4 EP16 ETP1", ("--model", "gpt-oss-120b",
                                                             *_h("h100x64", 4096, 512, "--framework", "nemo")),
                 "tp=2,pp=4,ep=16,etp=1,mbs=1,zero=1", None, "NVIDIA-NeMo/Megatron-Bridge@8a5031e6d:src/megatron/"
                 "bridge/recipes/gpt_oss/h100/gpt_oss.py gpt_oss_120b_pretrain_64gpu_h100_bf16_config"),)),
    # The recipe trains with Muon (_apply_kimi_k2_optimizer(cfg, "muon")): planned and priced with it
    Setup("Kimi K2, 512 H100, Muon", ("--model", "kimi-k2", *_h("h100x512", 4096, 4096, "--framework", "nemo",
                                                               "--optimizer", "muon")), (
        Practice("Megatron-Bridge recipe TP2 PP16 EP32 ETP1, selective recompute, Muon",
                 ("--model", "kimi-k2", *_h("h100x512", 4096, 4096, "--framework", "nemo", "--optimizer", "muon")),
                 "tp=2,pp=16,ep=32,etp=1,mbs=1,zero=1,recompute=selective", None,
                 "NVIDIA-NeMo/Megatron-Bridge@8a5031e6d:src/megatron/bridge/recipes/kimi/h100/kimi_k2.py (its "
                 "pipeline layout, 4 layers a rank and 1 on the last, is priced as the planner's first/last split)"),)),
    # On the GPUs the row ran: Grand Teton H100s, 96 GB HBM2e, 500 W (clusters/gpus.yaml [GT-H100])
    Setup("Llama 3 8B, 8 H100 (500 W), torchtitan", ("--model", "llama3-8b", *_h("h100-hbm2e-500wx8", 8192, 16,
                                                                                  "--framework", "torchtitan")), (
        # Table 1's 5,762 is the eager FSDP row (its compiled row is 6,667): priced eager, as TT-001 ran
        Practice("torchtitan FSDP, selective recompute, eager", ("--model", "llama3-8b", *_h(
                     "h100-hbm2e-500wx8", 8192, 16, "--framework", "torchtitan", "--torch-compile", "off")),
                 "tp=1,pp=1,dp=8,mbs=2,zero=3,recompute=selective", ("tokens_per_s_per_gpu", 5762.0),
                 "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md Table 1 (validation case TT-001)"),)),
)


def plan(*args: str) -> tuple[int, str, str]:
    """`plan ARGS` in this process: exit code, stdout, stderr."""
    return run_in_process(*args)


def _json(*args: str) -> dict[str, Any]:
    code, out, err = plan(*args)
    if code != 0:
        raise RuntimeError(f"plan {' '.join(args)}: exit {code}: {err.strip()}")
    return json.loads(out)


def _knobs(layout: dict[str, Any]) -> dict[str, Any]:
    return {k: layout.get(k) for k in LAYOUT_KEYS}


def top1(s: Setup) -> dict[str, Any]:
    """The plan document of the setup's problem (top 1)."""
    return _json(*s.args, "--top", "1", "--format", "json")


def launch_roundtrip(s: Setup, doc: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The setup's launcher text for #1 and the layout `plan explain --from` reads back from it."""
    fmt = FORMAT_OF[s.framework]
    code, text, err = plan(*s.args, "--top", "1", "--format", fmt)
    if code != 0:
        raise RuntimeError(f"--format {fmt}: exit {code}: {err.strip()}")
    suffix = ".toml" if fmt == "torchtitan" else ".txt"  # Bridge overrides (section.field=value) are not YAML
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"launch{suffix}"
        path.write_text(text, encoding="utf-8")
        cluster = s.args[s.args.index("--cluster") + 1]
        back = _json("explain", "--from", str(path), "--dialect", fmt, "--cluster", cluster,
                     "--framework", s.framework, "--format", "json")
    return text, back["yours"]["layout"]


def price(p: Practice) -> dict[str, Any]:
    """The practitioners' layout priced (`plan explain`) on their problem under their stack."""
    code, out, err = plan("explain", *p.args, "--layout", p.layout, "--format", "json")
    if code not in (0, 1):
        raise RuntimeError(f"explain {p.layout}: exit {code}: {err.strip()}")
    return json.loads(out)


def priced_figure(key: str, priced: dict[str, Any]) -> float:
    """The price of the figure practitioners published: a metric, or for a whole run's GPU-hours average the
    throughput kept after restarts and checkpoints."""
    return priced["goodput"]["tokens_per_s_per_gpu"] if key == "wall_tokens_per_s_per_gpu" else priced["metrics"][key]


def price_error(p: Practice, priced: dict[str, Any]) -> float | None:
    """(predicted - published) / published of the figure the practitioners published."""
    if p.published is None:
        return None
    key, value = p.published
    return priced_figure(key, priced) / value - 1


def published_in_band(p: Practice, priced: dict[str, Any]) -> bool | None:
    """Whether the published figure lies in the band of its price (MFU scales like tokens/s per GPU)."""
    if p.published is None:
        return None
    key, value = p.published
    lo, hi = priced["band"]["tokens_per_s_per_gpu"]
    tput = value if key == "tokens_per_s_per_gpu" else value * priced["metrics"]["tokens_per_s_per_gpu"] / \
        priced_figure(key, priced)
    return lo <= tput <= hi


def short(lay: dict[str, Any]) -> str:
    out = f"tp{lay['tp']} pp{lay['pp']}" + (f" v{lay['vpp']}" if lay["vpp"] > 1 else "") + f" dp{lay['dp']}"
    out += "".join(f" {k}{lay[k]}" for k in ("cp", "ep") if lay.get(k, 1) > 1)
    return out + f" m{lay['micro_batch']} z{lay['zero']} {lay['recompute']} {lay['schedule']}"


def problem_of(s: Setup) -> Problem:
    """The setup's planning problem, as `plan` reads its options."""
    from cli.options import build_problem
    from cli.plan_options import plan_options
    from cli.quick import plan_args

    args = list(s.args) if "--framework" in s.args else ["--framework", s.framework, *s.args]
    values = plan_args(args)
    assert values is not None, s.args  # plain options, as `plan` reads them
    return build_problem(plan_options(values))


def best_without(p: Problem, criterion: str) -> float | None:
    """The fastest price (tokens/s per GPU) among layouts that do what the preference `criterion` asks (no
    offloading; CP only down to CP_MIN_TOKENS_PER_RANK tokens per rank), or None when none is feasible."""
    if criterion == "offload":
        keep = tuple(int(r) for r in Recompute if r not in (Recompute.OFFLOAD, Recompute.OFFLOAD_MODULES))
        tries = [replace(p, recompute_choices=keep)]
    else:
        sizes = [c for c in (1, 2, 4, 8, 16, 32, 64) if c * CP_MIN_TOKENS_PER_RANK <= p.training.seq_len] or [1]
        tries = [replace(p, fixed={**p.fixed, "cp": c}) for c in sizes]
    best = None
    for q in tries:
        try:
            tput = search(q, top=1, rank_by="time").plans[0].metrics["tokens_per_s_per_gpu"]
        except NoFeasiblePlan:
            continue
        best = tput if best is None else max(best, tput)
    return best


def row(s: Setup) -> dict[str, Any]:
    """Everything the side-by-side table and the test read about one setup."""
    doc = top1(s)
    first = doc["plans"][0]
    _, back = launch_roundtrip(s, doc)
    same = _knobs(back) == _knobs(first["layout"])
    practice = []
    for p in s.practice:
        priced = price(p)
        practice.append({"practice": p, "priced": priced, "error": price_error(p, priced),
                         "in_band": published_in_band(p, priced)})
    prob = problem_of(s)
    result = search(prob, top=1)
    crit = {k: int(v[0]) for k, v in criteria_columns(
        prob, result.plans[0].layout.columns(),
        np.array([result.plans[0].metrics["memory_peak_gib"]])).items()}
    fastest = (result.fastest or result.plans[0]).metrics["tokens_per_s_per_gpu"]
    without = {name: best_without(prob, name) if crit[name] else None for name in ("offload", "cp")}
    return {"setup": s, "doc": doc, "first": first, "launches": same, "read_back": back, "practice": practice,
            "criteria": crit, "fastest_tput": fastest, "best_without": without}


def _problem(args: tuple[str, ...]) -> tuple[str, ...]:
    """The problem options without the stack (options other than --framework, each with its value; a switch such as
    --moe-force-balance stands alone)."""
    opts, i = [], 0
    while i < len(args):
        switch = i + 1 == len(args) or args[i + 1].startswith("--")
        opts.append((args[i], "on" if switch else args[i + 1]))
        i += 1 if switch else 2
    return tuple(sorted(f"{k}={v}" for k, v in opts if k != "--framework"))


def markdown(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| setup | our #1 (stack) | #1 tok/s/GPU [band] | launch reads back | practitioners' layout: price "
             "[band] | its price vs published | its step vs our #1 |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        s, first, band = r["setup"], r["first"], r["first"]["band"]
        lo, hi = band["tokens_per_s_per_gpu"]
        ours = (f"{first['metrics']['tokens_per_s_per_gpu']:,.0f} [{lo:,.0f}-{hi:,.0f}]")
        for i, pr in enumerate(r["practice"]):
            p, m = pr["practice"], pr["priced"]["metrics"]
            err = "no figure" if pr["error"] is None else \
                f"{100 * pr['error']:+.1f} % ({'inside' if pr['in_band'] else 'outside'} its band)"
            same_problem = _problem(p.args) == _problem(s.args)
            gap = (f"{100 * (m['step_time_s'] / first['metrics']['step_time_s'] - 1):+.1f} %"
                   if same_problem else "other problem")
            lead = (f"| {s.title} | {short(first['layout'])} ({s.framework}) | {ours} | "
                    f"{'yes' if r['launches'] else 'NO'} |") if i == 0 else "| | | | |"
            plo, phi = pr["priced"]["band"]["tokens_per_s_per_gpu"]
            lines.append(f"{lead} {p.name}: {m['tokens_per_s_per_gpu']:,.0f} [{plo:,.0f}-{phi:,.0f}] tok/s/GPU, "
                         f"{100 * m['mfu']:.1f} % MFU | {err} | {gap} |")
    return lines


def main() -> None:
    rows = [row(s) for s in SETUPS]
    print("\n".join(markdown(rows)))
    for r in rows:
        text = r["doc"]["ranking"]["why_first"]
        if text:
            print(f"- {r['setup'].title}: {text}")
        for name, tput in r["best_without"].items():
            if r["criteria"][name]:
                gap = "none feasible" if tput is None else f"{100 * (1 - tput / r['fastest_tput']):.1f} % behind"
                print(f"- {r['setup'].title}: #1 keeps {name} because the best layout without it is {gap} the "
                      f"fastest (tie {100 * math.expm1(r['doc']['ranking']['tie_width']):.1f} %)")


if __name__ == "__main__":
    main()
