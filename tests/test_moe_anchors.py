"""Measured before/after pairs the MoE and fp8 terms are held against (issue 25 items 2 and 4): one layout run with
and without a feature by the same source, so the feature's gain is measured without the rest of the model's error.

- EP overlap: Megatron-MoE-ModelZoo best_practice/qwen3/readme.md (yanring/Megatron-MoE-ModelZoo@e865051), Qwen3-235B
  BF16 on 256 H100 with DeepEP, tp2 pp8 vpp4 ep32, micro-batch 1, batch 2048 x 4096, norm/act recompute:
  19.7 s a step, 17.6 s "+1f1b overlap"; the same table's other H100 layouts (ZOO_LAYOUTS) check the ranking.
  Its benchmarking config turns the fused router on (model_configs/benchmarking/Qwen3-235B-A22B.yaml#L104
  `--moe-router-fusion: true`), which megatron-core's default leaves off, so every zoo row is priced with it.
- fp8 against bf16: the DGX Cloud benchmark rows of one layout in both precisions (validation/published_runs.yaml
  DGXC pairs) and Megatron-Bridge's DeepSeek-V3 (w/o MTP) on 256 GB300 in the 25.11 container (BF16 3,848, FP8-MX
  4,357 tokens/s/GPU, docs/performance-summary-archive.md @4ab94dfad).

Each fp8 pair is priced at one layout, the fp8 row's as validate prices it with ZeRO-1 (NeMo's distributed
optimizer: the rows' recipes shard the optimizer states and nothing else), so only the precision differs.
Tolerance 10 %: the measured ratio of one pair moves by up to 3 % between two scales of the same recipe (Nemotron-4
340B on 128 and 1,024 H100: 1.459 and 1.416; Llama 3.1 70B on 64 and 128: 1.332 and 1.348), and the model's fp8
terms (GEMM rate per GPU, operand casts, bf16 attention and head, low-precision MoE padding and its host ops) are
held to within a few points more than that.
"""

from dataclasses import replace
from functools import cache

import pytest
import yaml

from planner.cost.fitted import FITTED_FILE, current
from planner.evidence import validate as V
from planner.evidence.anchors import (
    BRIDGE_OVERLAP_PAIR,
    ZOO_BALANCE_PAIRS,
    anchored_imbalance,
    bridge_overlap_metrics,
    dropless_penalty,
    zoo_h100_step,
)
from planner.evidence.cases import case_problem, load_cases
from planner.evidence.recipes import apply_knobs, case_knobs, default_recipes_path, load_recipes, recipe_entry
from planner.inputs.layout import Layout, Schedule
from planner.inputs.problem import Problem
from planner.search.search import price_layout

TOLERANCE = 0.10


@cache
def _cases() -> dict[str, dict]:
    return {c["id"]: c for c in load_cases(None)}


def _problem(cid: str) -> tuple[Problem, Layout]:
    """The case's problem with what its run ran, and its best layout as validate prices it."""
    case = _cases()[cid]
    bare = case_problem(case, "anchors")
    knobs = case_knobs(case, recipe_entry(load_recipes(default_recipes_path(None)), case), bare)
    problem, applied = apply_knobs(bare, knobs)
    found = V._search_case(problem, bare, applied, knobs)
    return problem, found[0].plans[0].layout


def _zoo_step(schedule: Schedule) -> float:
    return zoo_h100_step(2, 8, 32, 4, 1, schedule)


# The zoo's benchmarking config routes with the learned router (aux loss, no forced balancing:
# model_configs/benchmarking/Qwen3-235B-A22B.yaml), so its rows are priced at the anchored expert imbalance (1.25,
# planner.evidence.anchors) and the host time per op refitted on the case file (34 us, fitted.yaml); DeepEP's network
# leg carries the node's load, not the busiest rank's (planner.cost.expert.domain_load). There the EP-overlap row and
# all four layouts hold; the DeepEP row without overlap is still 11 % slow, so the overlap's gain and the measured
# order do not (docs/accuracy.md, known gaps).
ZOO_OVERLAP_GAP = ("known gap: the zoo's DeepEP row without EP overlap is priced 21.8 s against 19.7 s while the row "
                   "with it is priced 16.9 s against 17.6 s (the model hides more of the all-to-all than the run "
                   "did), so the overlap's gain is 1.29x against 1.12x and the row without it ranks behind the "
                   "alltoall PP32 row (21.3 s against 24.2 s)")


def test_ep_overlap_row_of_the_model_zoo_pair() -> None:
    """With EP overlap (combined 1F1B priced by Megatron-Core's node order) the step is priced within 5 %."""
    assert _zoo_step(Schedule.COMBINED_1F1B) == pytest.approx(17.6, rel=0.05)


@pytest.mark.xfail(strict=True, reason=ZOO_OVERLAP_GAP)
def test_ep_overlap_gain_of_the_model_zoo_pair() -> None:
    """The overlap's gain within 10 % of the measured 1.12x."""
    gain = _zoo_step(Schedule.INTERLEAVED) / _zoo_step(Schedule.COMBINED_1F1B)
    assert gain == pytest.approx(19.7 / 17.6, rel=TOLERANCE)


@cache
def _bridge_arm(ep_overlap: bool) -> dict:
    return bridge_overlap_metrics(ep_overlap)


@pytest.mark.parametrize("ep_overlap", [False, True], ids=["without", "with"])
def test_each_arm_of_the_bridge_overlap_pair(ep_overlap: bool) -> None:
    """Megatron-Bridge's controlled pair (Qwen3-30B-A3B, 16 H100, EP16 HybridEP, planner.evidence.anchors): each arm's
    step within 10 %."""
    measured = BRIDGE_OVERLAP_PAIR.with_s if ep_overlap else BRIDGE_OVERLAP_PAIR.without_s
    assert _bridge_arm(ep_overlap)["step_time_s"] == pytest.approx(measured, rel=TOLERANCE)


BRIDGE_NODE_GAP = ("known gap: the pair captured only moe_router and moe_preprocess, so its attention runs eagerly, "
                   "and combined 1F1B's schedule-node bookkeeping (event, stream, NVTX, detach: 8 calls a node) is "
                   "priced at the fitted 34 us of a Megatron op each; that makes the overlap arm host-bound, 23.0 s "
                   "against 21.0 s, a gain of 1.04x against 1.18x. At the measured cost of a bare call (7.2 us, "
                   "bench/results/h100-2026-11-27/host_overhead.json) the pair holds (1.20x), but NVIDIA's "
                   "pipelined Qwen3-235B rows with the overlap (MB-141/185, MB-184/221) go 15-56 % fast: the node "
                   "cost stands in for what pipelined combined 1F1B loses and the model lacks")


@pytest.mark.xfail(strict=True, reason=BRIDGE_NODE_GAP)
def test_ep_overlap_gain_of_the_bridge_pair() -> None:
    """The overlap's gain within 10 % of the measured 1.18x."""
    gain = _bridge_arm(False)["step_time_s"] / _bridge_arm(True)["step_time_s"]
    assert gain == pytest.approx(BRIDGE_OVERLAP_PAIR.measured_gain, rel=TOLERANCE)


def test_combined_1f1b_without_a_pipeline_holds_one_micro_batch() -> None:
    """Rank 0's peak allocated memory with the overlap, 62.166 GiB, within 10 %: a combined pair frees each layer of
    the backward micro-batch as the forward fills the next, so it holds one micro-batch and one layer, not two
    micro-batches (priced that way the arm would not fit an H100's 80 GB), and the overlap adds about one layer."""
    with_ = _bridge_arm(True)["memory_allocated_gib"]
    assert with_ == pytest.approx(BRIDGE_OVERLAP_PAIR.with_allocated_gib, rel=TOLERANCE)
    layer = _bridge_arm(False)["mem_activations_gib"] / 48
    assert with_ - _bridge_arm(False)["memory_allocated_gib"] == pytest.approx(layer, rel=0.25)


# The same readme's other measured H100 layouts of Qwen3-235B (BF16, 256 H100, batch 2048 x 4096): step seconds.
# (dispatcher, tp, pp, ep, vpp, micro-batch, recompute code, ZeRO, measured s, what the table says)
ZOO_LAYOUTS = [
    ("flex", 2, 8, 32, 4, 1, 1, 1, 19.7, "DeepEP, cross-node EP, norm/act recompute"),
    ("alltoall", 2, 32, 8, 3, 1, 1, 1, 24.2, "A2A, intra-node EP, norm/act recompute"),
    ("flex", 4, 8, 8, 4, 1, 0, 1, 29.0, "DeepEP, TP4 intra-node EP, no recompute"),
]


def _zoo_layout_step(dispatcher: str, tp: int, pp: int, ep: int, vpp: int, mbs: int, recompute: int,
                     zero: int) -> float:
    return zoo_h100_step(tp, pp, ep, vpp, recompute, Schedule.INTERLEAVED, mbs=mbs, zero=zero, dispatcher=dispatcher)


@pytest.mark.parametrize("row", ZOO_LAYOUTS, ids=[r[-1] for r in ZOO_LAYOUTS])
def test_measured_layouts_of_the_model_zoo(row: tuple) -> None:
    """Each measured layout priced within 15 % (the MoE tier's P90 on the public file is 22 %)."""
    assert _zoo_layout_step(*row[:8]) == pytest.approx(row[8], rel=0.15)


@pytest.mark.xfail(strict=True, reason=ZOO_OVERLAP_GAP)
def test_the_model_zoo_layouts_rank_as_measured() -> None:
    """What a search needs most: the measured order of one model's layouts on one cluster, EP overlap included."""
    priced = [_zoo_step(Schedule.COMBINED_1F1B), *(_zoo_layout_step(*r[:8]) for r in ZOO_LAYOUTS)]
    measured = [17.6, *(r[8] for r in ZOO_LAYOUTS)]
    assert sorted(range(4), key=priced.__getitem__) == sorted(range(4), key=measured.__getitem__)


@pytest.mark.xfail(strict=True, reason="known gap: the zoo's Megatron-FSDP row (TP2 EP8, no PP, micro-batch 4, full "
                   "recompute) measured 17.6 s is priced 26.3 s; its FSDP flags (gradient reduce dtype, reduce-scatter "
                   "every micro-batch or once) are not in the repository, and the model reduce-scatters fp32 "
                   "gradients every micro-batch, 27 ms against a 20 ms backward window per layer")
def test_megatron_fsdp_row_of_the_model_zoo() -> None:
    assert _zoo_layout_step("flex", 2, 1, 8, 1, 4, 2, 3) == pytest.approx(17.6, rel=0.15)


FP8_PAIRS = [  # (bf16 row, fp8 row): same source, model, cluster, batch and layout
    ("DGXC-008", "DGXC-025"),  # Llama 3.1 70B, 128 H100
    ("DGXC-137", "DGXC-024"),  # Llama 3.1 70B, 64 H100
    ("DGXC-048", "DGXC-066"),  # Nemotron-4 340B, 128 H100
    ("DGXC-051", "DGXC-069"),  # Nemotron-4 340B, 1,024 H100
    ("DGXC-224", "DGXC-239"),  # Nemotron-4 340B, 256 GB200
    ("DGXC-215", "DGXC-230"),  # Llama 4 Maverick, 128 GB200 (MoE)
    ("DGXC-228", "DGXC-243"),  # Grok-1, 512 GB200 (MoE; both rows describe half their batch, the ratio holds)
]


def _measured_and_priced(bf16: str, fp8: str) -> tuple[float, float]:
    fp8_problem, layout = _problem(fp8)
    layout = layout.replace(zero=min(layout.zero, 1))
    bf16_problem, _ = _problem(bf16)
    priced = price_layout(fp8_problem, layout)["tokens_per_s_per_gpu"] / price_layout(
        bf16_problem, layout)["tokens_per_s_per_gpu"]
    cases = _cases()
    measured = cases[fp8]["measured"]["tokens_per_s_per_gpu"] / cases[bf16]["measured"]["tokens_per_s_per_gpu"]
    return measured, priced


@pytest.mark.parametrize(("bf16", "fp8"), FP8_PAIRS)
def test_fp8_gain_of_a_measured_pair(bf16: str, fp8: str) -> None:
    measured, priced = _measured_and_priced(bf16, fp8)
    assert priced == pytest.approx(measured, rel=TOLERANCE)


@pytest.mark.xfail(strict=True, reason="known gap: torchtitan's float8 rows measured slower than bf16 (TT-029 "
                   "against TT-025); the model prices the rowwise recipe as blockwise and still gains 1.18x")
def test_fp8_gain_of_the_torchtitan_pair() -> None:
    measured, priced = _measured_and_priced("TT-025", "TT-029")
    assert priced == pytest.approx(measured, rel=TOLERANCE)


def test_fp8_gain_of_deepseek_v3_on_gb300() -> None:
    """Megatron-Bridge 25.11, DeepSeek-V3 (w/o MTP) on 256 GB300, tp1 pp2 vpp4 ep32: BF16 3,848, FP8-MX 4,357."""
    fp8_problem, layout = _problem("MB-228")
    bf16_problem = replace(fp8_problem, training=fp8_problem.training.model_copy(update={"precision": "bf16"}))
    priced = price_layout(fp8_problem, layout)["tokens_per_s_per_gpu"] / price_layout(
        bf16_problem, layout)["tokens_per_s_per_gpu"]
    assert priced == pytest.approx(4357 / 3848, rel=TOLERANCE)


def test_dropless_routing_costs_what_the_zoo_measured_in_direction_and_order() -> None:
    """The model zoo's dropless / forced-balance pairs (planner.evidence.anchors): at the anchored imbalance dropless
    is priced slower at every context length, the penalty shrinking as attention outgrows the MoE layers, as
    measured (1.245x at 16k to 1.09x at 128k); it is priced smaller than measured (known gap)."""
    priced = [r for _, r in dropless_penalty(current().expert_imbalance)]
    measured = [p.measured_ratio for p in ZOO_BALANCE_PAIRS]
    assert all(1.0 < r < m for r, m in zip(priced, measured, strict=True))
    assert priced == sorted(priced, reverse=True) and measured == sorted(measured, reverse=True)


def test_the_imbalance_is_the_anchor_of_the_zoo_pairs_in_its_published_range() -> None:
    """fitted.yaml's expert imbalance is what bench/fit_profiles.py anchors: the value of its published range
    nearest the zoo's measured dropless penalty."""
    entry = yaml.safe_load(FITTED_FILE.read_text())["moe"]["expert_imbalance"]
    low, high = entry["range"]
    grid = tuple(round(low + 0.05 * i, 2) for i in range(int(round((high - low) / 0.05)) + 1))
    value, error = anchored_imbalance(grid)
    assert entry["value"] == value and entry["anchor"]["median_abs_log_error"] == error
