"""The search's shortcuts are exact: grouped memory equals the row-by-row memory bit for bit, the step-time floor
never exceeds the priced step, and pricing only the rankable rows ranks the same top plans as pricing every row."""

import numpy as np
import pytest

import planner.search.search as s
from planner.cost.fit_check import grouped_fits, grouped_memory_peak_gib, state_memory_floor_gib
from planner.cost.memory import distinct_pairs, stage_layer_counts
from planner.cost.memory_terms import memory_peak_gib
from planner.cost.step import (
    ACTIVATION_FREE_KNOBS,
    STATE_FREE_KNOBS,
    ZERO_FREE_KNOBS,
    evaluate,
    step_time_floor,
)
from planner.errors import NoFeasiblePlan
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.layout import Recompute, chunk_layers, uneven_stage_layers
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec
from planner.search.rules import DOMINANCE, RULES
from planner.search.space import _ORDER, domains, enumerate_layouts, row_groups, shared_rows

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
    by_state, by_zero, by_act = shared_rows(cols, STATE_FREE_KNOBS, ZERO_FREE_KNOBS, ACTIVATION_FREE_KNOBS)
    assert len(by_state.table["tp"]) < len(cols["tp"]) and len(by_act.table["tp"]) < len(by_zero.table["tp"])
    assert np.array_equal(grouped_memory_peak_gib(p, by_state, by_act), memory_peak_gib(p, cols), equal_nan=True)
    assert np.array_equal(grouped_memory_peak_gib(p, by_state, by_zero), memory_peak_gib(p, cols), equal_nan=True)
    # and the row-by-row memory is evaluate's
    assert np.array_equal(memory_peak_gib(p, cols), evaluate(p, cols)["memory_peak_gib"], equal_nan=True)


@pytest.mark.parametrize("case", PROBLEMS[:2])
def test_groups_cut_to_some_rows_price_them_as_all_groups(case):
    """Shared.only (the fit test prices the rows near a line with their groups alone) gives the bits of pricing
    them with every group of the table."""
    p = _problem(*case)
    cols = {k: v[:60_000] for k, v in enumerate_layouts(p).cols.items()}
    by_state, by_act = shared_rows(cols, STATE_FREE_KNOBS, ACTIVATION_FREE_KNOBS)
    rows = np.sort(np.random.default_rng(7).choice(len(cols["tp"]), 3000, replace=False))
    cut_state, cut_act = by_state.only(rows), by_act.only(rows)
    assert len(cut_state.table["tp"]) < len(by_state.table["tp"]) and len(cut_act.table["tp"]) < len(by_act.table["tp"])
    for cap in (None, p.cluster.gpu.memory_gib):
        whole = grouped_memory_peak_gib(p, by_state.subset(rows), by_act.subset(rows), cap=cap)
        assert np.array_equal(grouped_memory_peak_gib(p, cut_state, cut_act, cap=cap), whole, equal_nan=True)
        assert np.array_equal(whole, memory_peak_gib(p, {k: v[rows] for k, v in cols.items()}), equal_nan=True) \
            or cap is not None  # (with a cap, rows whose states alone are over it are NaN)


@pytest.mark.parametrize("case", PROBLEMS)
def test_grouped_fit_check_answers_as_the_row_by_row_peak(case):
    """fit_check sums each stage in another order than the peak; rows within rounding of a line must still get the
    peak's answer: lines are also put exactly on rows' peaks, where only the exact peak can tell."""
    p = _problem(*case)
    cols = {k: v[:60_000] for k, v in enumerate_layouts(p).cols.items()}
    by_state, by_zero, by_act = shared_rows(cols, STATE_FREE_KNOBS, ZERO_FREE_KNOBS, ACTIVATION_FREE_KNOBS)
    peak = memory_peak_gib(p, cols)
    known = np.sort(peak[np.isfinite(peak)])
    cap = p.cluster.gpu.memory_gib
    lines = [(cap, cap * (1.0 - p.memory_headroom)), (known[len(known) // 2], known[len(known) // 3]),
             (known[-1], known[0]), (float(np.nextafter(known[len(known) // 4], 0.0)), known[len(known) // 5])]
    for capacity, room in lines:
        for by in (by_act, by_zero):
            fits, tight = grouped_fits(p, by_state, by, capacity, room)
            assert np.array_equal(fits, peak <= capacity), (capacity, np.flatnonzero(fits != (peak <= capacity)))
            assert np.array_equal(tight, fits & (peak > room)), room
    fits, _ = grouped_fits(p, by_state, by_act, *lines[1])
    assert fits.any() and not fits.all()


@pytest.mark.parametrize("case", PROBLEMS)
def test_step_time_floor_never_exceeds_the_step(case):
    p = _problem(*case)
    enum = enumerate_layouts(p, lazy_last=True)
    cols, *_ = s._fitting(p, enum, {**enum.pruned, "memory_fits": 0}, dominate=False)
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
    cols, tight, fitting, _, _ = s._fitting(p, enum, {**enum.pruned, "memory_fits": 0})
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
        chunks = chunk_layers(61, int(pp[i]), int(vpp[i]))
        if split is None and chunks is not None:  # a pipeline layout: its first and last ranks' layers
            split = (sum(chunks[0::int(pp[i])]), sum(chunks[int(pp[i]) - 1::int(pp[i])]))
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


@pytest.mark.parametrize("case", PROBLEMS[:3] + [("mixtral-8x7b", "h100x128", 4096, 512, "bf16")])
def test_memory_pass_matches_the_row_by_row_table(case):
    """_fitting (state floor, groups found once before the last knob, parts never built, dominance as each parent's
    first eligible row) keeps the same rows, in the same order, with the same tightness and counts as the whole table
    priced row by row with the dominance found by sorting. DeepSeek-V3 on 256 H800s (pp=16 splits 61 layers
    unevenly) caught a state floor that priced ceil(L/pp) layers plus the embedding on one stage: above the peak of
    523 layouts that fit."""
    p = _problem(*case)
    enum = enumerate_layouts(p, lazy_last=True)
    pruned = {**enum.pruned, "memory_fits": 0}
    cols, tight, fitting, proven, by_zero = s._fitting(p, enum, pruned)
    # the ZeRO-free groups read off the enumeration's indices partition the rows as row_groups does
    (rep, index), = row_groups(cols, ZERO_FREE_KNOBS)
    pairs = np.unique(np.stack([by_zero[1], index]), axis=1) if by_zero is not None else None
    assert pairs is not None and len(by_zero[0]) == len(rep) == pairs.shape[1]
    assert all(np.array_equal(v.take(by_zero[0]).take(by_zero[1]), v) for k, v in cols.items() if k != "zero")
    full = enumerate_layouts(p).cols
    peak = memory_peak_gib(p, full)
    fits = peak <= s.capacity_gib(p)
    assert (state_memory_floor_gib(p, full) <= peak)[np.isfinite(peak)].all()  # the floor the pass drops rows by
    room = fits & ~np.asarray(s.is_tight(p, peak), dtype=bool)
    others = np.stack([full[k] for k in full if k != "recompute"])
    _, sibling = np.unique(others, axis=1, return_inverse=True)
    sibling = sibling.reshape(-1)
    keep = np.zeros(len(peak), dtype=bool)
    # offloading (layers or modules) is not "more recompute" (search._undominated)
    ladder = (full["recompute"] != Recompute.OFFLOAD) & (full["recompute"] != Recompute.OFFLOAD_MODULES)
    for eligible in (fits & ladder, room & ladder):
        least = np.full(sibling.max() + 1, np.iinfo(np.int64).max)
        np.minimum.at(least, sibling[eligible], full["recompute"][eligible].astype(np.int64))
        keep |= eligible & (full["recompute"] == least[sibling])
    roomy_none = np.zeros(sibling.max() + 1, dtype=bool)
    roomy_none[sibling[room & (full["recompute"] == Recompute.NONE)]] = True
    keep |= fits & ~ladder & ~roomy_none[sibling]
    assert proven and keep.any() and (~fits).any() and (fits & ~keep).any()  # every branch is exercised
    assert all(np.array_equal(cols[k], full[k][keep]) for k in full)
    assert np.array_equal(tight, fits[keep] & ~room[keep])
    assert fitting == int(keep.sum()) and pruned["memory_fits"] == int((~fits).sum())
    assert pruned["dominated_recompute"] == int((fits & ~keep).sum())


@pytest.mark.parametrize("case, framework, fix", [
    (("llama3-8b", "h100x8", 8192, 32, "bf16"), "generic", {}),
    (("llama3-8b", "h100x8", 8192, 32, "fp8"), "deepspeed", {}),  # framework rules prune one knob's values
    (("mixtral-8x7b", "h100x8", 4096, 32, "bf16"), "torchtitan", {"mbs": 1}),
    (("mixtral-8x7b", "h100x8", 4096, 32, "fp8"), "megatron-core", {"mbs": 1, "cp_comm": 0})])
def test_staged_enumeration_is_the_filtered_cross_product(case, framework, fix):
    """enumerate_layouts (rules applied as soon as their knobs exist, one-knob rules checked per value, crossed
    columns built only when read) keeps the rows, in the order, and charges each rule the counts of crossing every
    knob first and then applying each rule at the stage its knobs are complete, in RULES order."""
    model, cluster, seq, gbs, precision = case
    p = Problem(load_model(model), load_cluster(cluster), TrainingSpec(seq_len=seq, global_batch=gbs,
                precision=precision, framework=framework), fixed=fix)
    dom = domains(p)
    sizes = [len(dom[k]) for k in _ORDER]
    grid = np.indices(sizes, dtype=np.int32).reshape(len(sizes), -1)
    full = {k: np.asarray(dom[k], dtype=np.int32)[grid[i]] for i, k in enumerate(_ORDER)}
    denom = full["tp"].astype(np.int64) * full["pp"] * full["cp"]
    full["dp"] = np.where(p.num_gpus % denom == 0, p.num_gpus // denom, 0).astype(np.int32)
    stage = {k: i for i, k in enumerate(_ORDER)} | {"dp": _ORDER.index("cp")}
    rules = sorted((*RULES, *DOMINANCE), key=lambda r: max(stage[k] for k in r.knobs))  # stable: RULES order within
    keep = np.ones(len(full["tp"]), dtype=bool)
    pruned = {}
    for rule in rules:
        ok = rule.check(full, p) & ((full["dp"] > 0) if rule.name == "world_size" else True)
        pruned[rule.name] = int((keep & ~ok).sum())
        keep &= ok
    enum = enumerate_layouts(p)
    assert enum.candidates == len(keep) and enum.pruned == pruned
    assert all(np.array_equal(enum.cols[k], full[k][keep]) for k in full)
    lazy = enumerate_layouts(p, lazy_last=True)  # its last rules run per value of the last knob
    parent, pos = np.divmod(np.flatnonzero(lazy.last[2]), len(lazy.last[1]))
    assert lazy.pruned == pruned and all(np.array_equal(v, full[k][keep]) for k, v in lazy.take(parent, pos).items())


def test_rules_code_sets_match_isin():
    from planner.search.rules import _among

    col = np.random.default_rng(1).integers(0, 9, 10_000).astype(np.int32)
    for values in ([], [3], [0, 8], [1, 2, 5, 7], list(range(9))):
        assert np.array_equal(_among(col, values), np.isin(col, values))
    assert _among(np.int32(4), [4, 5]) and not _among(np.int32(4), [5])  # a scalar, as explain checks one layout
