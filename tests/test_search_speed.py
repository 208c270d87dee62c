"""The search's shortcuts are exact: grouped memory equals the row-by-row memory bit for bit, the step-time floor
never exceeds the priced step, and pricing only the rankable rows ranks the same top plans as pricing every row."""

import numpy as np
import pytest

import planner.search.search as s
from planner.cost.memory import distinct_pairs, stage_layer_counts
from planner.cost.step import (
    STATE_FREE_KNOBS,
    ZERO_FREE_KNOBS,
    evaluate,
    grouped_memory_peak_gib,
    memory_peak_gib,
    step_time_floor,
)
from planner.errors import NoFeasiblePlan
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.layout import uneven_stage_layers
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec
from planner.search.space import enumerate_layouts, shared_rows

PROBLEMS = [  # dense + pipelines, MoE + DualPipe in fp8, sliding-window MoE, a memory-tight dense problem
    ("llama3-8b", "h100x64", 8192, 256, "bf16"),
    ("deepseek-v3", "h800x256", 4096, 1024, "fp8"),
    ("gpt-oss-120b", "b200x64", 4096, 1280, "bf16"),
    ("llama3-70b", "h100x64", 8192, 128, "bf16"),
]


def _problem(model: str, cluster: str, seq: int, gbs: int, precision: str) -> Problem:
    return Problem(load_model(model), load_cluster(cluster),
                   TrainingSpec(seq_len=seq, global_batch=gbs, precision=precision))


@pytest.mark.parametrize("case", PROBLEMS[:3])
def test_grouped_memory_is_the_row_by_row_memory(case):
    p = _problem(*case)
    cols = {k: v[:60_000] for k, v in enumerate_layouts(p).cols.items()}
    by_state, by_zero = shared_rows(cols, STATE_FREE_KNOBS, ZERO_FREE_KNOBS)
    assert len(by_state.table["tp"]) < len(cols["tp"]) and len(by_zero.table["tp"]) < len(cols["tp"])
    assert np.array_equal(grouped_memory_peak_gib(p, by_state, by_zero), memory_peak_gib(p, cols), equal_nan=True)
    # and the row-by-row memory is evaluate's
    assert np.array_equal(memory_peak_gib(p, cols), evaluate(p, cols)["memory_peak_gib"], equal_nan=True)


@pytest.mark.parametrize("case", PROBLEMS)
def test_step_time_floor_never_exceeds_the_step(case):
    p = _problem(*case)
    enum = enumerate_layouts(p, lazy_last=True)
    cols, _, _, _ = s._fitting(p, enum, {**enum.pruned, "memory_fits": 0}, dominate=False)
    cols = {k: v[:80_000] for k, v in cols.items()}
    step = evaluate(p, cols)["step_time_s"]
    floor = step_time_floor(p, cols)
    cheap = step_time_floor(p, cols, communication=False)
    ok = np.isfinite(step)
    assert ok.any() and (floor[ok] <= step[ok] * (1 + 1e-12)).all()
    assert (cheap[ok] <= floor[ok] * (1 + 1e-12)).all()
    assert np.median(floor[ok] / step[ok]) > 0.25  # a floor worth having (ZeRO-3 and DP traffic are left out), not 0


@pytest.mark.parametrize("case", PROBLEMS)
@pytest.mark.parametrize("top", [1, 5, 40])
def test_pricing_only_rankable_rows_ranks_as_pricing_all(case, top):
    p = _problem(*case)
    pruned = s.search(p, top=top)
    full = s.search(p, top=top, time_limit_s=1e9)  # a time limit prices every row in table order
    assert full.proven_best and pruned.proven_best
    assert [x.layout for x in pruned.plans] == [x.layout for x in full.plans]
    assert [x.metrics for x in pruned.plans] == [x.metrics for x in full.plans]
    assert (pruned.candidates, pruned.feasible, pruned.pruned) == (full.candidates, full.feasible, full.pruned)


def test_rankable_rows_are_few_on_a_large_problem():
    p = _problem("deepseek-v3", "h800x256", 4096, 1024, "fp8")
    enum = enumerate_layouts(p, lazy_last=True)
    cols, tight, fitting, _ = s._fitting(p, enum, {**enum.pruned, "memory_fits": 0})
    priced, _ = s._price_rankable(p, cols, tight, 5)
    assert len(priced["tp"]) < len(cols["tp"]) / 4


def test_distinct_pairs_and_stage_splits_match_a_sort():
    rng = np.random.default_rng(0)
    pp, vpp = rng.integers(1, 70, 5000).astype(float), rng.integers(1, 17, 5000).astype(float)
    pairs, index = distinct_pairs(pp, vpp)
    found, inverse = np.unique(np.stack([pp, vpp]).astype(np.int64), axis=1, return_inverse=True)
    assert pairs == [(int(a), int(b)) for a, b in found.T]
    assert np.array_equal(index, inverse.reshape(-1))
    first, middle, last = stage_layer_counts(61, pp, vpp)
    for i in range(0, 5000, 97):
        split = uneven_stage_layers(61, int(pp[i]), int(vpp[i]))
        expect = split if split is not None else (middle[i], middle[i])
        assert (first[i], last[i]) == expect


@pytest.mark.parametrize("case", [("llama3-405b", "h100x32", 8192, 64, "bf16"),
                                  ("llama3-8b", "h100x16", 8192, 64, "bf16"),
                                  ("deepseek-v3", "h100x64", 4096, 512, "bf16"),
                                  ("mixtral-8x7b", "a100x32", 4096, 128, "bf16")])
def test_has_plan_answers_as_search(case):
    p = _problem(*case)
    try:
        s.search(p, top=1)
        found = True
    except NoFeasiblePlan:
        found = False
    assert s.has_plan(p) is found
