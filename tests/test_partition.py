"""Uneven pipeline partition: layers and full-recompute counts per stage, CP-SAT vs exhaustive search."""

import itertools
import math
import random

import pytest

from planner.cost import device_memory, memory
from planner.errors import NoFeasiblePlan
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec
from planner.search.search import price_layout
from planner.strategies.osdp_table import full_layout
from planner.strategies.partition import partition_for, partition_inputs, partition_layers, render_partition


def test_even_split_without_edge_costs():
    part = partition_layers(32, 4, layer_time=1.0, head_time=0.0, embed_time=0.0)
    assert part.layers == (8, 8, 8, 8) == part.even_layers
    assert part.recomputed == (0, 0, 0, 0)
    assert part.bottleneck_s == part.even_bottleneck_s == 8.0


def test_heavy_lm_head_gives_the_last_stage_fewer_layers():
    # Llama-3-8B with a 256K vocabulary: the LM head costs about two and a half layers.
    model = load_model("llama3-8b").model_copy(update={"vocab_size": 256_000})
    p = Problem(model, load_cluster("h100x32"), TrainingSpec(seq_len=4096, global_batch=256))
    part = partition_for(p, full_layout({"tp": 1, "pp": 4, "dp": 8, "mbs": 1, "zero": 1, "recompute": 1}))
    assert sum(part.layers) == 32
    assert part.layers[-1] < 8 and part.layers[-1] < min(part.layers[:-1])
    assert part.bottleneck_s < part.even_bottleneck_s
    assert part.speedup_vs_even > 1.2
    assert "--decoder-last-pipeline-num-layers" in render_partition(part)


@pytest.fixture(scope="module")
def llama405b() -> Problem:
    return Problem(load_model("llama3-405b"), load_cluster("h100x1024"), TrainingSpec(seq_len=8192, global_batch=512))


def test_llama405b_on_16_stages_lightens_first_and_last(llama405b):
    # Llama 3 (arXiv 2407.21783 §3.3.2): 126 layers on 16 stages, one layer fewer on the first and the last.
    part = partition_for(llama405b, full_layout({"tp": 8, "pp": 16, "dp": 8, "mbs": 1, "zero": 1,
                                                 "recompute": 1, "sp": 1}))
    middle = part.layers[1:-1]
    assert sum(part.layers) == 126
    assert part.layers[0] < max(middle) and part.layers[-1] < max(middle)
    assert part.bottleneck_s <= part.even_bottleneck_s


def test_tight_memory_recomputes_more_on_the_first_stage(llama405b):
    # Without selective recompute, 1F1B's 16 in-flight micro-batches on stage 0 force full recompute there.
    part = partition_for(llama405b, full_layout({"tp": 8, "pp": 16, "dp": 8, "mbs": 1, "zero": 1,
                                                 "recompute": 0, "sp": 1}))
    assert part.recomputed[0] > part.recomputed[-1] == 0
    assert all(m <= part.capacity_bytes for m in part.stage_memory_bytes)
    # Synthetic: 4 stages of 4 layers; stage 0 holds 4 micro-batches, the last one.
    syn = partition_layers(16, 4, 1.0, 0.0, 0.0, act_bytes=1.0, act_bytes_recompute=0.1, recompute_time=0.3,
                           layer_static_bytes=1.0, capacity_bytes=14.0)
    assert syn.recomputed[0] > syn.recomputed[-1]
    assert all(m <= 14.0 for m in syn.stage_memory_bytes)


@pytest.mark.parametrize("recompute,zero", [(0, 1), (1, 1), (2, 1), (1, 3)])
def test_stage_memory_agrees_with_the_cost_model(llama405b, recompute, zero):
    # At the cost model's own split (ceil(L/p) layers per stage) the partition's stage-0 memory is memory_peak_gib.
    lay = full_layout({"tp": 8, "pp": 14, "dp": 8, "mbs": 1, "zero": zero, "recompute": recompute, "sp": 1})
    ref = price_layout(llama405b, lay)
    inp = partition_inputs(llama405b, lay, capacity_gib=1000.0)
    frag = device_memory.FRAGMENTATION
    fixed = 1000.0 * memory.GIB - inp.capacity_bytes * (1 + frag)
    n = math.ceil(126 / 14)
    r = n if recompute == 2 else 0  # full recompute is the partition's "every layer recomputed"

    def device_gib(alloc: float) -> float:
        return (alloc * (1 + frag) + fixed) / memory.GIB

    assert device_gib(inp.stage_memory(0, n, r)) == pytest.approx(ref["mem_first_stage_gib"], rel=1e-9)
    # step.py charges every stage the busiest stage's fragmentation share; the partition charges each its own.
    last = device_gib(inp.stage_memory(13, n, r))
    assert last <= ref["mem_last_stage_gib"] and last == pytest.approx(ref["mem_last_stage_gib"], rel=0.1)


def _brute_force(num_layers, pp, kw):
    """Every split with >= 1 layer per stage and every recompute count: (best bottleneck, least recompute there)."""
    layer_t, head_t, embed_t, rc_t = kw["layer_time"], kw["head_time"], kw["embed_time"], kw["recompute_time"]
    best = (float("inf"), float("inf"))
    for cut in itertools.combinations(range(1, num_layers), pp - 1):
        n = [b - a for a, b in zip((0, *cut), (*cut, num_layers), strict=True)]
        for r in itertools.product(*(range(k + 1) for k in n)):
            ok, times = True, []
            for s in range(pp):
                mem = (n[s] * kw["layer_static_bytes"] + (pp - s) * ((n[s] - r[s]) * kw["act_bytes"]
                       + r[s] * kw["act_bytes_recompute"]) + (kw["act_bytes"] if r[s] else 0.0))
                mem += kw["embed_static_bytes"] if s == 0 else 0.0
                mem += kw["head_static_bytes"] if s == pp - 1 else 0.0
                ok &= mem <= kw["capacity_bytes"]
                times.append(n[s] * layer_t + r[s] * rc_t + (embed_t if s == 0 else 0) + (head_t if s == pp - 1 else 0))
            if ok:
                best = min(best, (max(times), sum(r) * rc_t))
    return best


def _random_case(seed: int) -> dict:
    rng = random.Random(seed)
    return dict(layer_time=1.0, head_time=rng.choice([0.0, 0.6, 1.7, 3.2]), embed_time=rng.choice([0.0, 0.2, 0.9]),
                recompute_time=rng.uniform(0.2, 0.5), act_bytes=rng.uniform(1.0, 3.0),
                act_bytes_recompute=rng.uniform(0.1, 0.6), layer_static_bytes=rng.uniform(0.5, 3.0),
                embed_static_bytes=rng.uniform(0.0, 3.0), head_static_bytes=rng.uniform(0.0, 3.0),
                capacity_bytes=rng.uniform(8.0, 20.0))


@pytest.mark.parametrize("seed", range(12))
def test_tiny_instance_matches_exhaustive_search(seed):
    case = _random_case(seed)
    best, least_recompute = _brute_force(6, 3, case)
    if best == float("inf"):
        with pytest.raises(NoFeasiblePlan):
            partition_layers(6, 3, **case)
        return
    part = partition_layers(6, 3, **case)
    assert part.bottleneck_s == pytest.approx(best, rel=1e-4)
    assert sum(r * case["recompute_time"] for r in part.recomputed) == pytest.approx(least_recompute, rel=1e-4)
    assert all(m <= case["capacity_bytes"] for m in part.stage_memory_bytes)


def test_infeasible_and_invalid_inputs():
    with pytest.raises(NoFeasiblePlan):
        partition_layers(6, 3, 1.0, 0.0, 0.0, act_bytes=10.0, act_bytes_recompute=10.0, layer_static_bytes=1.0,
                         capacity_bytes=5.0)
    with pytest.raises(Exception, match="stages"):
        partition_layers(2, 4, 1.0, 0.0, 0.0)
