"""Property-based tests: generated models, clusters and options (modest shapes, so each example plans fast).

Every example: no exception but NoFeasiblePlan escapes the search; every reported plan satisfies every layout rule,
fits in GPU memory, and has finite, positive metrics. Physical sanity: more network or NVLink bandwidth never slows a
layout, more GPU memory never removes a feasible plan, a higher ZeRO stage never raises per-GPU state memory, and a
pinned knob never beats leaving it free.

Examples are derandomised so the suite is reproducible and its runtime bounded; set PLAN_HYPOTHESIS_EXAMPLES to
explore more (e.g. PLAN_HYPOTHESIS_EXAMPLES=500 for a long hunt).
"""

from __future__ import annotations

import math
import os

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from planner.cost.profiles import PROFILE_NAMES
from planner.errors import NoFeasiblePlan
from planner.inputs.catalog import gpu_catalog, load_cluster, load_model
from planner.inputs.frameworks import capabilities_for
from planner.inputs.layout import KNOBS, SCHEDULES, Schedule
from planner.inputs.problem import Problem
from planner.inputs.specs import ModelSpec, TrainingSpec
from planner.report.explain import complete_layout
from planner.search.rules import RULES
from planner.search.search import price_layout, search
from planner.search.space import divisors, domains

SCALE = int(os.environ.get("PLAN_HYPOTHESIS_EXAMPLES", "0"))


def examples(n: int):
    return settings(max_examples=SCALE or n, deadline=None, derandomize=not SCALE, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


# --- strategies ------------------------------------------------------------------------------------------------------
@st.composite
def models(draw) -> ModelSpec:
    heads = draw(st.sampled_from([1, 2, 4, 6, 8, 16, 32]))
    head_dim = draw(st.sampled_from([16, 64, 128]))
    doc = {
        "name": "generated",
        "num_attention_heads": heads,
        "num_key_value_heads": draw(st.sampled_from(divisors(heads))),
        "hidden_size": heads * head_dim if draw(st.booleans()) else draw(st.sampled_from([256, 1024, 4096])),
        "head_dim": head_dim,
        "num_hidden_layers": draw(st.integers(1, 48)),
        "intermediate_size": draw(st.sampled_from([1, 512, 2816, 4096, 14336])),
        "vocab_size": draw(st.sampled_from([2, 1000, 32000, 128256])),
        "hidden_act": draw(st.sampled_from(["silu", "gelu", "relu", "geglu"])),
        "tie_word_embeddings": draw(st.booleans()),
    }
    if draw(st.integers(0, 2)) == 0:  # a third are mixtures of experts
        experts = draw(st.sampled_from([2, 4, 8, 16, 64]))
        doc.update(num_local_experts=experts, num_experts_per_tok=draw(st.integers(1, min(experts, 8))),
                   moe_intermediate_size=draw(st.sampled_from([0, 256, 1408])),
                   n_shared_experts=draw(st.integers(0, 2)),
                   first_k_dense_replace=draw(st.integers(0, doc["num_hidden_layers"])))
    if draw(st.integers(0, 5)) == 0:  # and some use multi-head latent attention
        doc.update(kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32,
                   q_lora_rank=draw(st.sampled_from([0, 96])))
    return ModelSpec.model_validate(doc)


GPU_COUNTS = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 72, 96, 128, 144, 256]
clusters = st.builds(lambda g, n: load_cluster(f"{g}x{n}"), st.sampled_from(sorted(gpu_catalog())),
                     st.sampled_from(GPU_COUNTS))
trainings = st.builds(TrainingSpec, seq_len=st.sampled_from([1, 128, 1000, 2048, 4096, 8192, 32768]),
                      global_batch=st.sampled_from([1, 2, 3, 7, 8, 16, 64, 100, 128, 512]),
                      precision=st.sampled_from(["bf16", "fp8", "fp4"]),
                      framework=st.sampled_from(sorted(PROFILE_NAMES)))
PIN_VALUES = {"tp": [1, 2, 4, 8], "pp": [1, 2, 4], "dp": [1, 2, 8], "cp": [1, 2], "ep": [1, 2, 8], "vpp": [1, 2],
              "mbs": [1, 2, 4], "zero": [0, 1, 2, 3], "recompute": [0, 1, 2], "sp": [0, 1], "schedule": [0, 1, 2, 3]}
PIN_VALUES.update({k: [0, 1] for k in KNOBS if k not in PIN_VALUES})  # a knob added later: its first two codes
pins = st.dictionaries(st.sampled_from(sorted(PIN_VALUES)), st.integers(0, 3), max_size=2).map(
    lambda d: {k: PIN_VALUES[k][i % len(PIN_VALUES[k])] for k, i in d.items()})


@st.composite
def problems(draw, with_pins: bool = True) -> Problem:
    return Problem(draw(models()), draw(clusters), draw(trainings), fixed=draw(pins) if with_pins else {},
                   allow_tp_across_nodes=draw(st.booleans()))


def solve(problem: Problem, top: int = 5, rank_by: str = "preference"):
    try:
        return search(problem, top=top, rank_by=rank_by)
    except NoFeasiblePlan:
        return None




POSITIVE = ("step_time_s", "tokens_per_s_per_gpu", "mfu", "memory_peak_gib", "compute_s", "num_microbatches",
            "mem_weights_gib", "mem_activations_gib", "mem_first_stage_gib", "mem_last_stage_gib")


# --- every reported plan is valid ------------------------------------------------------------------------------------
@examples(150)
@given(problems())
def test_reported_plans_obey_rules_memory_and_are_finite(problem):
    result = solve(problem)
    if result is None:
        return
    cap = problem.cluster.gpu.memory_gib
    assert 1 <= len(result.plans) <= 5
    assert result.feasible >= len(result.plans) and result.candidates >= result.feasible
    best = result.plans[0].metrics["tokens_per_s_per_gpu"]
    for plan in result.plans:
        cols = plan.layout.columns()
        broken = [r.name for r in RULES if not bool(r.check(cols, problem)[0])]
        assert not broken, (plan.layout, broken)
        for knob, value in problem.fixed.items():
            assert getattr(plan.layout, knob) == value
        mt = plan.metrics
        assert mt["memory_peak_gib"] <= cap, (plan.layout, mt["memory_peak_gib"], cap)
        for key, value in mt.items():
            assert math.isfinite(value) and value >= 0, (key, value)
        for key in POSITIVE:
            assert mt[key] > 0, (key, mt[key])
        if problem.training.precision == "bf16":
            assert mt["mfu"] <= 1.0, mt["mfu"]
        # the ranking: no later plan is meaningfully faster than the first beyond the tie width the preference may
        # give up (planner.search.preference; ties within 0.05% go to simpler layouts)
        assert mt["tokens_per_s_per_gpu"] <= best * math.exp(result.tie_width) * (1 + 1e-3)
        # the same layout priced alone gives the same numbers (no hidden dependence on the batch it was priced in)
        alone = price_layout(problem, plan.layout)
        assert math.isclose(alone["step_time_s"], mt["step_time_s"], rel_tol=1e-9)


# --- physical sanity --------------------------------------------------------------------------------------------------
def _faster_network(problem: Problem, factor: float) -> Problem:
    cl = problem.cluster
    return Problem(problem.model, cl.model_copy(update={"network_gbps": cl.network_gbps * factor}), problem.training,
                   problem.fixed, problem.allow_tp_across_nodes, problem.enforce_memory)


def _faster_nvlink(problem: Problem, factor: float) -> Problem:
    cl = problem.cluster
    gpu = cl.gpu.model_copy(update={"nvlink_gbps": cl.gpu.nvlink_gbps * factor})
    return Problem(problem.model, cl.model_copy(update={"gpu": gpu}), problem.training, problem.fixed,
                   problem.allow_tp_across_nodes, problem.enforce_memory)


def _more_memory(problem: Problem, factor: float) -> Problem:
    cl = problem.cluster
    gpu = cl.gpu.model_copy(update={"memory_gib": cl.gpu.memory_gib * factor})
    return Problem(problem.model, cl.model_copy(update={"gpu": gpu}), problem.training, problem.fixed,
                   problem.allow_tp_across_nodes, problem.enforce_memory)


@examples(80)
@given(problems(with_pins=False), st.sampled_from([1.25, 2.0, 10.0]), st.sampled_from(["network", "nvlink", "both"]))
def test_more_bandwidth_never_slows_a_layout(problem, factor, which):
    result = solve(problem)
    if result is None:
        return
    faster = problem
    if which in ("network", "both"):
        faster = _faster_network(faster, factor)
    if which in ("nvlink", "both"):
        faster = _faster_nvlink(faster, factor)
    for plan in result.plans:
        before = price_layout(problem, plan.layout)
        after = price_layout(faster, plan.layout)
        assert after["step_time_s"] <= before["step_time_s"] * (1 + 1e-9), (which, factor, plan.layout)
        assert after["memory_peak_gib"] == before["memory_peak_gib"]
    # so the best plan on the faster machine is at least as fast as the best on the slower one
    again = solve(faster, top=1)
    assert again is not None
    assert again.plans[0].metrics["tokens_per_s_per_gpu"] >= result.plans[0].metrics["tokens_per_s_per_gpu"] * (
        1 - 1e-3)


@examples(80)
@given(problems(), st.sampled_from([1.5, 2.0, 4.0]))
def test_more_gpu_memory_never_removes_a_feasible_plan(problem, factor):
    result = solve(problem)
    bigger = _more_memory(problem, factor)
    if result is None:
        return
    roomier = solve(bigger)
    assert roomier is not None, "more memory made a feasible problem infeasible"
    assert roomier.feasible >= result.feasible
    assert roomier.plans[0].metrics["tokens_per_s_per_gpu"] >= result.plans[0].metrics["tokens_per_s_per_gpu"] * (
        1 - 1e-3)
    for plan in result.plans:  # every layout that fitted still fits, with the same prediction
        assert price_layout(bigger, plan.layout)["memory_peak_gib"] <= bigger.cluster.gpu.memory_gib


@examples(100)
@given(problems(with_pins=False), st.integers(0, 4))
def test_higher_zero_stage_never_raises_state_memory(problem, pick):
    result = solve(problem)
    if result is None:
        return
    layout = result.plans[pick % len(result.plans)].layout
    states = []
    for zero in (0, 1, 2, 3):
        mt = price_layout(problem, layout.replace(zero=zero))
        states.append(mt["mem_weights_gib"] + mt["mem_grads_gib"] + mt["mem_optimizer_gib"])
    for lower, higher in zip(states, states[1:], strict=False):
        assert higher <= lower * (1 + 1e-9), (layout, problem.training.framework, states)


@examples(100)
@given(problems(with_pins=False), st.sampled_from(sorted(PIN_VALUES)), st.integers(0, 3))
def test_pinning_a_knob_never_beats_leaving_it_free(problem, knob, index):
    value = PIN_VALUES[knob][index % len(PIN_VALUES[knob])]
    if knob == "schedule":
        # A schedule the framework does not ship is refused pinned or free (rule framework_schedule); skip those.
        assume(Schedule(value) in capabilities_for(problem.training.framework).schedules)
    if knob != "dp":
        # The free search only walks each knob's domain (planner.search.space.domains); a pin outside it is
        # priced anyway.
        # vpp (divisors of the layer count, <= 16) and mbs (<= 32) are narrower there than the rules allow, so a pin
        # can beat the free search (e.g. deepseek-v3, 61 layers: --fix vpp=15 beats the free search, which never
        # tries vpp > 1). That is reported to the search owners; here we compare like with like.
        assume(value in domains(problem)[knob])
    # By price alone on both sides: ranked by preference, the free #1 may be a slower layout priced inside the band
    # of the fastest (no context parallelism at this sequence length, say) that the pin excludes.
    pinned = solve(Problem(problem.model, problem.cluster, problem.training, {knob: value},
                           problem.allow_tp_across_nodes), top=1, rank_by="time")
    if pinned is None:
        return
    free = solve(problem, top=1, rank_by="time")
    assert free is not None, "a pinned problem was feasible but the free one was not"
    # the free ranking quantises throughput to 1/2000 of the best before preferring simpler layouts
    assert pinned.plans[0].metrics["tokens_per_s_per_gpu"] <= free.plans[0].metrics["tokens_per_s_per_gpu"] * (
        1 + 1e-3), (knob, value, pinned.plans[0].layout, free.plans[0].layout)
    assert pinned.feasible <= free.feasible


def test_one_microbatch_cannot_beat_its_critical_path():
    """With one micro-batch, stages run one after another: the step is at least p x (t_f + t_b) minus the weight-
    gradient passes that zero-bubble schedules defer (t_W <= t_b / 2), i.e. at least p/2 x the per-stage compute."""
    problem = Problem(load_model("llama3-8b"), load_cluster("h100x128"), TrainingSpec(seq_len=4096, global_batch=16))
    for schedule in ("1f1b", "zb-h1", "zb-h2"):
        layout = complete_layout(problem, {"tp": 1, "pp": 8, "dp": 16, "mbs": 1, "zero": 1,
                                           "schedule": SCHEDULES.index(schedule)})
        mt = price_layout(problem, layout)
        assert mt["num_microbatches"] == 1
        assert mt["step_time_s"] >= 8 / 2 * mt["compute_s"], (schedule, mt["step_time_s"], mt["compute_s"])
