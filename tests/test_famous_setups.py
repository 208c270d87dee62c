"""Famous published setups: the practitioners' layout is launchable and priced near our top pick, and where it does
not fit our model the reason is a physical one that the test names.

Sources of the practitioners' layouts:
- Llama 3 405B, 16,384 H100: TP8 PP16 DP128 CP1, interleaved 1F1B, 16 sequences of 8K per data-parallel rank, no
  activation checkpointing, the first and last stage one transformer layer short (embedding / output as a layer),
  FSDP sharding optimizer states and gradients but keeping parameters gathered, 38-43 % BF16 MFU ("The Llama 3
  Herd of Models", arXiv 2407.21783, §3.3.2 and Table 4).
- Nemotron-4 340B, 6,144 H100: TP8 PP12 interleaved, DP64, global batch 2304 x 4K (arXiv 2406.11704 §3.2 and
  Table 2, 41 % MFU); Megatron-Bridge's 1,024-GPU benchmark TP8 PP8 VPP12 (published_runs.yaml DGXC-051).
- GPT-3 175B, 1,024 A100: TP8 and pipelining with interleaving (Narayanan et al. 2021 §5).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from planner.cost import device_memory, memory
from planner.cost.profiles import profile_for
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.layout import Schedule, parse_pairs
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec
from planner.report.explain import explain
from planner.search.search import search

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import famous_setups as famous  # noqa: E402


def problem(model: str, cluster: str, seq: int, gbs: int, framework: str, precision: str = "bf16") -> Problem:
    return Problem(load_model(model), load_cluster(cluster),
                   TrainingSpec(seq_len=seq, global_batch=gbs, framework=framework, precision=precision))


def price(p: Problem, layout: str) -> dict:
    return explain(p, parse_pairs([layout], "--layout"))


def top1_step_s(p: Problem) -> float:
    return search(p, top=1).plans[0].metrics["step_time_s"]


META = "tp=8,pp=16,dp=128,cp=1,vpp=8,mbs=1,schedule=interleaved,recompute=none"


@pytest.fixture(scope="module")
def llama_mcore() -> Problem:
    return problem("llama3-405b", "h100x16384", 8192, 2048, "megatron-core")


def test_llama3_meta_layout_launches_with_the_embedding_loss_split(llama_mcore: Problem) -> None:
    """126 layers do not split into 16 x 8 equal chunks, but 126 + embedding + loss = 128 do: the split Meta
    describes (first and last stage one layer short) is Megatron-Core's account-for-embedding/loss split, so the
    interleaved layout breaks no launch rule; only memory is left to judge."""
    out = price(llama_mcore, META + ",zero=1")
    assert out["layout"]["stage_split"] == "embedding_loss"
    assert (out["layout"]["first_stage_layers"], out["layout"]["last_stage_layers"]) == (7, 7)
    assert [r["rule"] for r in out["broken_rules"]] == ["memory_fits"]


def test_llama3_meta_layout_priced_near_our_top_pick(llama_mcore: Problem) -> None:
    """Same tokens and FLOPs as our pick; with v = 8 chunks and m = 16 micro-batches the interleaved bubble is
    (p - 1)/(v m) = 15/128 of the compute, so the layout Meta ran must price within 10 % of our best and at an MFU
    inside a 15 % band around the 38-43 % Meta reports."""
    out = price(llama_mcore, META + ",zero=1")
    assert out["metrics"]["step_time_s"] <= 1.10 * top1_step_s(llama_mcore)
    assert 0.34 <= out["metrics"]["mfu"] <= 0.49


def test_llama3_meta_layout_fits_once_gradients_are_sharded(llama_mcore: Problem) -> None:
    """The memory gap is Megatron-Core's distributed optimizer keeping an unsharded fp32 gradient buffer (ZeRO-1;
    its ZeRO-2 path, Megatron-FSDP, does not combine with pipelining). Meta's FSDP shards the gradients over the
    128 data ranks (ZeRO-2): with the same activations, the layout fits 80 GB, as Meta trained it."""
    mc = price(llama_mcore, META + ",zero=1")
    cap = mc["metrics"]["memory_capacity_gib"]
    grads = mc["breakdown"]["memory_gib"]["grads"]
    assert mc["metrics"]["memory_peak_gib"] > cap
    assert mc["metrics"]["memory_peak_gib"] - (1 + device_memory.FRAGMENTATION) * grads * (1 - 1 / 128) < cap
    fsdp = price(problem("llama3-405b", "h100x16384", 8192, 2048, "generic"), META + ",zero=2")
    assert fsdp["feasible"] and fsdp["metrics"]["memory_peak_gib"] <= cap
    assert fsdp["breakdown"]["memory_gib"]["activations"] == pytest.approx(
        mc["breakdown"]["memory_gib"]["activations"], rel=1e-6)


def test_megatron_core_dense_selective_recompute_is_not_a_free_memory_cut(llama_mcore: Problem) -> None:
    """Megatron-Core's dense selective recompute (core_attn, fused attention) keeps what no recompute keeps, so it
    cannot make the Meta layout fit; the generic stack, which re-makes norms and activations, can."""
    none = price(llama_mcore, META + ",zero=1")["breakdown"]["memory_gib"]["activations"]
    sel = price(llama_mcore, META.replace("recompute=none", "recompute=selective") + ",zero=1")
    assert sel["breakdown"]["memory_gib"]["activations"] == pytest.approx(none, rel=1e-6)
    generic = problem("llama3-405b", "h100x16384", 8192, 2048, "generic")
    gen = price(generic, META.replace("recompute=none", "recompute=selective") + ",zero=1")
    assert gen["breakdown"]["memory_gib"]["activations"] < 0.8 * none


def test_fp8_param_gather_keeps_no_bf16_weight_copy() -> None:
    """Megatron-Core fp8 with the distributed optimizer gathers fp8 parameters (--fp8-param-gather; all Bridge fp8
    presets): 2 bytes per weight (fp8 row- and column-wise data), not bf16 + an fp8 cache (3)."""
    layout = "tp=8,pp=8,dp=8,cp=2,vpp=8,mbs=1,schedule=interleaved,recompute=none"
    per_gpu = 405.9e9 / 64  # parameters on one TP x PP rank, to within the embedding's share
    mc = price(problem("llama3-405b", "h100x1024", 8192, 1536, "megatron-core", "fp8"), layout + ",zero=1")
    gen = price(problem("llama3-405b", "h100x1024", 8192, 1536, "generic", "fp8"), layout + ",zero=1")
    w_mc = mc["breakdown"]["memory_gib"]["weights"] * memory.GIB / per_gpu
    w_gen = gen["breakdown"]["memory_gib"]["weights"] * memory.GIB / per_gpu
    assert w_mc == pytest.approx(memory.FP8_PARAM_BYTES, rel=0.03)
    assert w_gen == pytest.approx(profile_for("generic").weight_bytes + 1.0, rel=0.03)


@pytest.mark.parametrize(("cluster", "gbs", "layout", "within"), [
    # 36 micro-batches over 12 stages x 8 chunks: bubble 11/288 of compute; NVIDIA's report: 41 % MFU
    ("h100x6144", 2304, "tp=8,pp=12,dp=64,vpp=8,mbs=1,schedule=interleaved,recompute=none", 0.05),
    # Megatron-Bridge's benchmark layout: it should be (or tie with) our own pick
    ("h100x1024", 256, "tp=8,pp=8,dp=16,vpp=12,mbs=1,schedule=interleaved,recompute=none", 0.02),
])
def test_nemotron4_340b_nvidia_layout_near_top(cluster: str, gbs: int, layout: str, within: float) -> None:
    p = problem("nemotron4-340b", cluster, 4096, gbs, "megatron-core")
    out = price(p, layout + ",zero=1")
    assert out["feasible"]
    assert out["metrics"]["step_time_s"] <= (1 + within) * top1_step_s(p)


def test_gpt3_175b_paper_layout_near_top() -> None:
    """Narayanan et al.'s TP8 + interleaved pipeline on 1,024 A100 (paper-era Megatron-LM): within 5 % of our pick;
    TP8 trades TP traffic inside the node for a smaller pipeline bubble and weight shard."""
    p = problem("gpt3-175b", "a100x1024", 2048, 1536, "megatron")
    out = price(p, "tp=8,pp=8,dp=16,vpp=4,mbs=1,schedule=interleaved,zero=1,recompute=none")
    assert out["feasible"]
    assert out["metrics"]["step_time_s"] <= 1.05 * top1_step_s(p)


def test_deepseek_v3_with_its_own_recipe_gets_its_own_layout_first_by_price():
    """DeepSeek-V3 (arXiv 2412.19437 §3.1-3.3): 2,048 H800, PP16 x EP64 x ZeRO-1 DP128, no TP, DualPipe, batch
    15360 x 4K, fp8 with 128 x 128 block scales, bf16 Adam moments, SwiGLU inputs cached in fp8. Planned with that
    recipe under the generic stack, the layout DeepSeek ran is priced within 5 % of the fastest, a tie the cost model
    cannot separate (since host-bound layers are priced, issue 25, and TP overlap as each stack runs it, DualPipe
    variants with TP 2 or CP 2 price 1-3 % faster; with dropless routing priced at the anchored expert
    imbalance, 1.25, TP 2's all-to-alls carry half the tokens per rank and it prices 3.2 % faster). Ranked by
    preference it stays DualPipe, and a layout with more memory room goes first: DeepSeek's own sits at 75.7 of 80
    GiB, inside the memory model's typical miss. (Megatron's EP-overlapped interleaving on 4 x 3 chunks, a custom
    pipeline layout for 61 layers, is priced within the tie as well; a split without a layout is preferred.)"""
    p = Problem(load_model("deepseek-v3"), load_cluster("h800x2048"),
                TrainingSpec(seq_len=4096, global_batch=15360, precision="fp8", fp8_recipe="blockwise",
                             optimizer_moments="bf16"))
    keys = ("tp", "pp", "dp", "cp", "ep", "mbs", "zero", "schedule")
    by_price = search(p, top=6, rank_by="time").plans
    top = by_price[0].layout
    theirs = [pl for pl in by_price
              if tuple(getattr(pl.layout, k) for k in keys) == (1, 16, 128, 1, 64, 1, 1, int(Schedule.DUALPIPE))]
    assert theirs, [pl.layout for pl in by_price]
    assert theirs[0].metrics["tokens_per_s_per_gpu"] >= 0.95 * by_price[0].metrics["tokens_per_s_per_gpu"]
    assert top.schedule == Schedule.DUALPIPE and (top.pp, top.ep) == (16, 64)
    first = search(p, top=1)
    pick = first.plans[0]
    assert pick.layout.schedule == Schedule.DUALPIPE
    assert first.fastest is not None and first.fastest.layout == top
    assert pick.metrics["step_time_s"] <= (1 + first.tie_width) * first.fastest.metrics["step_time_s"]
    from planner.search.preference import deciding_criterion

    crit = deciding_criterion(p, pick.layout, pick.metrics["memory_peak_gib"], top,
                              first.fastest.metrics["memory_peak_gib"])
    assert crit is not None and crit.name == "memory"


def test_llama3_70b_on_gb300_nvidias_offload_recipe_is_the_fastest_priced() -> None:
    """Megatron-Bridge's Llama 3 70B fp8 recipe on 64 GB300 (perf_recipes/llama/gb300/llama3.py): Megatron-FSDP,
    micro-batch 2, no recomputation, 20 layers' activations offloaded to Grace memory. By price our first pick is
    that layout (offloading the fewest layers that fit: 16), or its ZeRO-2 twin, priced within 0.5 % of it (a tie;
    since Blackwell's attention rates of issue 25 the twin is the faster by a hair); full recomputation, the
    planner's only way to fit it before activation offloading, is at least 20 % slower. On a Grace host offloading
    is not held against a layout,
    but offloading the fewest layers that fit leaves no room for the memory model's typical miss, so the preference
    puts a layout with room, priced within the tie, first."""
    from planner.inputs.layout import Recompute

    p = problem("llama3-70b", "gb300x64", 8192, 256, "nemo", "fp8")
    by_price = search(p, top=2, rank_by="time").plans
    best = by_price[0]
    top = best.layout
    keys = ("tp", "pp", "dp", "cp", "mbs", "recompute")
    assert tuple(getattr(top, k) for k in keys) == (1, 1, 64, 1, 2, int(Recompute.OFFLOAD)), top
    recipe = [pl for pl in by_price if pl.layout.zero == 3 and tuple(getattr(pl.layout, k) for k in keys) ==
              (1, 1, 64, 1, 2, int(Recompute.OFFLOAD))]
    assert recipe and recipe[0].metrics["step_time_s"] <= 1.005 * best.metrics["step_time_s"], by_price
    assert 1 <= best.metrics["offloaded_layers"] <= 78
    full = price(p, "tp=1,pp=1,dp=64,mbs=2,zero=3,recompute=full")
    assert full["metrics"]["step_time_s"] >= 1.2 * best.metrics["step_time_s"]
    first = search(p, top=1)
    assert first.fastest is not None and first.fastest.layout == top
    assert first.plans[0].metrics["step_time_s"] <= best.metrics["step_time_s"] * math.exp(first.tie_width)


# --- the thirteen setups of bench/famous_setups.py (issue 24) --------------------------------------------------------
ROWS: dict[str, dict] = {}


def _row(title: str) -> dict:
    if title not in ROWS:
        setup = next(s for s in famous.SETUPS if s.title == title)
        ROWS[title] = famous.row(setup)
    return ROWS[title]


TITLES = [s.title for s in famous.SETUPS]


def test_thirteen_setups() -> None:
    assert len(famous.SETUPS) == 13


@pytest.mark.parametrize("title", TITLES)
def test_top_pick_launches_and_reads_back(title: str) -> None:
    """The framework's launcher writes #1, and `plan explain --from` that file gives the same layout back."""
    r = _row(title)
    assert r["launches"], (r["first"]["layout"], r["read_back"])


@pytest.mark.parametrize("title", TITLES)
def test_no_top_pick_is_decided_by_offload_or_cp_inside_the_tie(title: str) -> None:
    """#1 offloads over PCIe, or runs CP below 4,096 tokens per rank, only where no layout without it is priced
    within the tie of the fastest."""
    r = _row(title)
    crit = r["criteria"]
    for name in ("offload", "cp"):
        if crit[name]:
            best = r["best_without"][name]
            assert best is None or math.log(r["fastest_tput"] / best) > r["doc"]["ranking"]["tie_width"], name


# The practitioners' published figures the issue names: NVIDIA's Llama 3.1 70B (1,117 tokens/s/GPU), Meta's 405B,
# Nemotron-4 340B and DeepSeek-V3, priced under their own stack within 15 %.
NAMED = ("README headline: Llama 3 70B, 512 H100", "Llama 3 405B, 16,384 H100", "Nemotron-4 340B, 6,144 H100",
         "Nemotron-4 340B, 1,024 H100", "DeepSeek-V3, 2,048 H800, its fp8 recipe")


# DeepSeek-V3's report figure is its whole pre-training's average over GPU-hours: it is compared with the price net of
# restarts and checkpoints (the planner's goodput, 96.9 %), which still leaves the batch ramp of the first 469B tokens
# (priced at 3,072-12,288 sequences it lowers the run's average by 0.5 %) and its own routing, priced at the expert
# imbalance the model zoo's dropless / forced-balance pairs anchor (1.25, planner.evidence.anchors): +5.8 %, within
# the 15 % all five are held to (it was +15.9 % at the mean load).
TOLERANCE: dict[str, float] = {}


@pytest.mark.parametrize("title", NAMED)
def test_practitioners_layouts_priced_within_15_percent_of_what_they_published(title: str) -> None:
    for pr in _row(title)["practice"]:
        within = TOLERANCE.get(title, 0.15)
        assert pr["error"] is not None and abs(pr["error"]) <= within, (pr["practice"].name, pr["error"])


@pytest.mark.parametrize("title", TITLES)
def test_published_figures_lie_in_the_bands_of_their_prices(title: str) -> None:
    """Every figure practitioners published lies inside the band of its price under their own stack."""
    for pr in _row(title)["practice"]:
        assert pr["in_band"] in (None, True), (pr["practice"].name, pr["priced"]["band"], pr["practice"].published)
