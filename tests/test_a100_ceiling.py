"""A100 plans against what published A100 runs reached, and the SM-contention term that brought them down.

The ceiling is computed, not typed in: the highest MFU (planner.cost.compute.mfu's definition, model FLOPs only) that
any A100 case of validation/published_runs.yaml measured. Today that is LF-090 (mosaicml/llm-foundry
scripts/train/benchmarking/README.md, "A100 80GB with 1600 Gbps node-node interconnect (RoCE)", MPT-13B, 2,330
tokens/s/GPU on 8 A100) at 58.5 %; the other published A100 figures stay under it: Korthikanti et al. 2022 Table 5
(1T, 56.3 %), MegaScale (Jiang et al., NSDI'24, 175B on 12,288 GPUs, 55.2 %), and FlashAttention-2's end-to-end
225 TFLOP/s per A100 (Dao-AILab/flash-attention README, "72 % model FLOPs utilization" counted with Megatron-LM's
formula, whose non-causal s^2 attention term makes it about 60 % in ours at 8k tokens).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from planner.cost import compute, flops
from planner.cost.fabric import Fabric, collective_sm_share, overlapped_exposed
from planner.cost.profiles import profile_for
from planner.cost.sharding import fsdp_exposed
from planner.errors import NoFeasiblePlan
from planner.evidence.validate import case_problem, load_cases
from planner.inputs.catalog import load_cluster, load_model, model_catalog
from planner.inputs.hardware import COLLECTIVE_SMS
from planner.inputs.layout import Recompute
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec
from planner.search.search import search

A100_CLUSTERS = ("a100x64", "a100x512", "a100x1024")


def _best_a100_rate(flops_per_model_flop: Callable[[dict], float]) -> tuple[float, str]:
    """(rate / dense BF16 peak, case id) of the fastest A100 case in the published runs: model FLOPs per token x
    measured tokens/s per GPU x the case's factor of executed to model FLOPs."""
    best = (0.0, "")
    for case in load_cases(None):
        tokens = case["measured"].get("tokens_per_s_per_gpu")
        if not tokens or not str(case["cluster"]).startswith("a100"):
            continue
        problem = case_problem(case, "published_runs.yaml")
        per_token = flops.model_flops_per_token(problem.model, problem.training.seq_len)
        rate = per_token * tokens * flops_per_model_flop(case) / (problem.cluster.gpu.bf16_tflops * 1e12)
        best = max(best, (rate, case["id"]))
    return best


def best_published_a100_mfu() -> tuple[float, str]:
    """(MFU, case id) of the fastest A100 case: model FLOPs only."""
    return _best_a100_rate(lambda case: 1.0)


def dense_catalog_models() -> list[str]:
    return sorted(name for name in model_catalog() if not load_model(name).is_moe)


def test_ceiling_is_the_best_published_a100_run() -> None:
    mfu, case = best_published_a100_mfu()
    # at least MegaScale's 55.2 % (175B, 12,288 Ampere GPUs): every other published A100 figure is under the ceiling
    assert 0.552 <= mfu < 0.65, (mfu, case)
    assert case == "LF-090"


def top1_mfu(model: str, cluster: str, framework: str) -> float | None:
    """MFU of the first plan at the plan defaults (8,192 tokens, 512 sequences); None where nothing fits."""
    problem = Problem(load_model(model), load_cluster(cluster), TrainingSpec(seq_len=8192, global_batch=512,
                                                                             framework=framework))
    try:
        return float(search(problem, top=1).plans[0].metrics["mfu"])
    except NoFeasiblePlan:
        return None


def worst_top1(cluster: str, framework: str) -> tuple[float, str]:
    """The highest top-1 MFU over the dense catalog models that fit `cluster`, and its model."""
    return max((mfu, model) for model in dense_catalog_models()
               if (mfu := top1_mfu(model, cluster, framework)) is not None)


@pytest.mark.parametrize("cluster", A100_CLUSTERS)
def test_megatron_a100_plans_stay_under_published_a100_mfu(cluster: str) -> None:
    """`--framework megatron` (paper-era Megatron-LM) at the plan defaults (8,192 tokens, 512 sequences)."""
    ceiling, case = best_published_a100_mfu()
    mfu, model = worst_top1(cluster, "megatron")
    assert mfu <= ceiling, f"{model} on {cluster}: {mfu:.3f} > {ceiling:.3f} ({case})"


_GENERIC_OVER = pytest.mark.xfail(strict=True, reason="not done: the generic profile's top-1 on a100x64 and a100x512 "
                                   "claims 58.7-58.8 % MFU against the best published 58.5 % (LF-090); its kernel "
                                   "efficiency (NeMo's 0.775 of MAMF) is fitted on H100/GB200 NeMo runs and no "
                                   "published A100 run of such a stack exists to check it (docs/accuracy.md, known "
                                   "gaps)")


@pytest.mark.parametrize("cluster", [pytest.param(c, marks=_GENERIC_OVER) if c != "a100x1024" else c
                                     for c in A100_CLUSTERS])
def test_generic_a100_plans_stay_under_published_a100_mfu(cluster: str) -> None:
    ceiling, case = best_published_a100_mfu()
    mfu, model = worst_top1(cluster, "generic")
    assert mfu <= ceiling, f"{model} on {cluster}: {mfu:.3f} > {ceiling:.3f} ({case})"


# Hardware FLOPs per model FLOP: full recomputation runs every forward twice (4/3, HFU in PaLM App. B and in
# llm-foundry's benchmark table); selective recomputation re-makes norm outputs and activations (no GEMM FLOPs) or,
# with fused attention, nothing the attention backward does not already redo.
RECOMPUTE_HFU = {"full": 4.0 / 3.0}


def best_published_a100_hfu() -> tuple[float, str]:
    """(hardware FLOP rate / peak, case id) of the fastest A100 case: its MFU x its stated recompute factor."""
    return _best_a100_rate(lambda case: RECOMPUTE_HFU.get(str(case["layout"].get("recompute")), 1.0))


@pytest.mark.parametrize("cluster", A100_CLUSTERS)
def test_generic_a100_plans_execute_flops_no_faster_than_published_a100_runs(cluster: str) -> None:
    """What the xfail above leaves open is recomputation, not kernel speed: LF-090 ran MPT-13B with full
    recomputation at 58.5 % MFU, so its GPUs executed 78 % of peak in FLOPs; the generic plans that claim 61-68 %
    MFU keep their activations (ZeRO sharding or host offload make room), so they execute fewer FLOPs per second
    than that run did. Fails if a plan's hardware FLOP rate passes the best published A100 one."""
    ceiling, case = best_published_a100_hfu()
    assert case == "LF-090" and 0.75 < ceiling < 0.80
    for model in dense_catalog_models():
        problem = Problem(load_model(model), load_cluster(cluster), TrainingSpec(seq_len=8192, global_batch=512))
        try:
            plan = search(problem, top=1).plans[0]
        except NoFeasiblePlan:
            continue
        recompute = Recompute(int(plan.layout.recompute)).name.lower()
        hfu = float(plan.metrics["mfu"]) * RECOMPUTE_HFU.get(recompute, 1.0)
        assert hfu <= ceiling, f"{model} on {cluster}: {hfu:.3f} > {ceiling:.3f} ({case})"


def test_collective_sm_share_hand_worked() -> None:
    # 24 NCCL CTAs, one SM each: 24/108 of an A100, 24/132 of an H100; no SM count, no contention.
    assert COLLECTIVE_SMS == 24
    assert collective_sm_share(load_cluster("a100x8")) == pytest.approx(24 / 108)
    assert collective_sm_share(load_cluster("h100x8")) == pytest.approx(24 / 132)


def test_overlapped_exposed_hand_worked() -> None:
    s = 24 / 108
    # A 10 ms gather beside 30 ms of GEMMs on A100: the GEMMs lose 22 % of the SMs for 10 ms, 2.22 ms more.
    assert overlapped_exposed(10e-3, 30e-3, s) == pytest.approx(2.2222e-3, rel=1e-4)
    # A 40 ms gather beside 30 ms: 10 ms exposed, more than the 30 x 22 % = 6.7 ms the compute loses.
    assert overlapped_exposed(40e-3, 30e-3, s) == pytest.approx(10e-3)
    # 34 ms beside 30 ms: exposed 4 ms < 0.222 x 30 = 6.7 ms, the SMs it holds set the price.
    assert overlapped_exposed(34e-3, 30e-3, s) == pytest.approx(s * 30e-3)
    # share 0 is the old free overlap
    assert overlapped_exposed(np.array([10e-3, 40e-3]), 30e-3, 0.0) == pytest.approx([0.0, 10e-3])


def test_penalty_stays_under_the_measured_tail_effect() -> None:
    """NVIDIA developer forum (2025, "Compute-Communication Overlap Causes Severe GEMM Performance Degradation because
    of Tail Effect"): a one-wave 132-block GEMM on H100 fell from ~80 % to ~47 % of peak (1.7x the time) beside a
    24-CTA ncclAllGather, because the blocks that no longer fit ran as a second wave. The SM-share model charges only
    the lost SMs, 1/(1 - 24/132) = 1.22x at most: a lower bound of that worst case, never above it."""
    s = collective_sm_share(load_cluster("h100x8"))
    gemm = 1.0
    slowdown = (gemm + overlapped_exposed(gemm, gemm, s)) / gemm
    assert 1.0 < slowdown <= 1.0 / (1.0 - s) <= 0.80 / 0.47


def test_zero3_gathers_hidden_by_the_layer_now_cost_their_sms() -> None:
    """fsdp_exposed on A100: a layer whose gathers fit under its compute pays 24/108 of them, hand-computed from
    the same collectives."""
    problem = Problem(load_model("llama3-8b"), load_cluster("a100x64"), TrainingSpec(seq_len=8192, global_batch=512))
    fab = Fabric(problem.cluster, {}, compute.rates(problem).hbm)
    prof = profile_for("generic")
    params, group, tp = np.array([2.2e8]), np.array([64.0]), np.array([1.0])
    ag = fab.collective("all_gather", params * 2.0, group, tp, "dp")
    rs = fab.collective("reduce_scatter", params * prof.grad_reduce_bytes, group, tp, "dp")
    t_f, t_b = 10 * ag, 10 * (ag + rs)  # compute long enough to hide both
    z3 = np.array([3])
    fwd, bwd = fsdp_exposed(fab, prof, z3, params, group, tp, t_f, t_b)
    assert fwd == pytest.approx(24 / 108 * ag)
    assert bwd == pytest.approx(24 / 108 * (ag + rs))
    # without ZeRO-3 nothing is gathered
    none = fsdp_exposed(fab, prof, np.array([1]), params, group, tp, t_f, t_b)
    assert none[0] == 0.0 and none[1] == 0.0
