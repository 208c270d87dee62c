"""OSDP (Jiang et al., IJCAI 2023): per-layer shard/replicate/split decisions under a memory budget, via CP-SAT."""

import itertools

import pytest

from planner.cost import device_memory, memory
from planner.errors import PlanInputError
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.problem import Problem
from planner.inputs.specs import ModelSpec, TrainingSpec
from planner.report.osdp_text import render_osdp
from planner.search.search import price_layout
from planner.strategies.osdp import plan_osdp, price_choice
from planner.strategies.osdp_table import full_layout, osdp_table

LAYOUT = full_layout({"tp": 1, "dp": 8, "mbs": 1, "recompute": 0})


@pytest.fixture(scope="module")
def llama8b() -> Problem:
    # 32 micro-batches per step: ZeRO-3 pays its gathers 32 times, the replicated all-reduce once.
    return Problem(load_model("llama3-8b"), load_cluster("h100x8"), TrainingSpec(seq_len=4096, global_batch=256))


def _layers(plan):
    return [d for d in plan.decisions if d.name.startswith("layer ")]


def test_ample_budget_replicates_every_layer(llama8b):
    plan = plan_osdp(llama8b, LAYOUT, capacity_gib=1000.0)
    assert all(d.sharded_fraction == 0 for d in plan.decisions)
    assert plan.step_time_s == pytest.approx(plan.zero1.step_time_s, rel=1e-12)
    assert plan.memory_gib == pytest.approx(plan.zero1.memory_gib, rel=1e-12)
    assert plan.optimal and not plan.beats_uniform


def test_uniform_ends_agree_with_the_cost_model(llama8b):
    plan = plan_osdp(llama8b, LAYOUT, capacity_gib=1000.0)
    ref1 = price_layout(llama8b, LAYOUT.replace(zero=1))
    assert plan.zero1.step_time_s == pytest.approx(ref1["step_time_s"], rel=1e-9)
    assert plan.zero1.memory_gib == pytest.approx(ref1["memory_peak_gib"], rel=1e-9)
    # All-sharded differs from step.py's zero=3 by the embedding/LM-head gathers and their buffer, which OSDP prices
    # (step.py gathers transformer layers only).
    ref3 = price_layout(llama8b, LAYOUT.replace(zero=3))
    assert plan.zero3.step_time_s == pytest.approx(ref3["step_time_s"], rel=0.10)
    assert plan.zero3.memory_gib == pytest.approx(ref3["memory_peak_gib"], rel=0.10)


def test_budget_between_uniform_ends_mixes_and_fits(llama8b):
    ends = plan_osdp(llama8b, LAYOUT, capacity_gib=1000.0)
    budget = (ends.zero3.memory_gib + ends.zero1.memory_gib) / 2
    plan = plan_osdp(llama8b, LAYOUT, capacity_gib=budget)
    fractions = {d.sharded_fraction for d in _layers(plan)}
    assert len(fractions) > 1 and min(fractions) < 1 and max(fractions) > 0
    assert plan.memory_gib <= budget
    assert plan.memory_gib > plan.zero3.memory_gib
    assert not plan.zero1.fits and plan.zero3.fits
    assert plan.step_time_s <= plan.zero3.step_time_s * (1 + 1e-9)
    assert plan.speedup_vs_best_uniform >= 1.0


def _tiny3() -> Problem:
    m = ModelSpec(name="tiny3", hidden_size=4096, num_hidden_layers=3, num_attention_heads=32,
                  intermediate_size=16384, vocab_size=32000, hidden_act="gelu", tie_word_embeddings=True)
    # dp = 16 spans two NVLink domains and the sequences are short: gathers are exposed, so choices matter.
    return Problem(m, load_cluster("a100x16"), TrainingSpec(seq_len=256, global_batch=64))


@pytest.mark.parametrize("splits", [(), (1, 2)], ids=["shard-or-replicate", "with-splitting"])
def test_three_layers_match_brute_force(splits):
    p, lay = _tiny3(), full_layout({"tp": 1, "dp": 16, "mbs": 1, "recompute": 0})
    wide = osdp_table(p, lay, splits, capacity_gib=1000.0)
    combos = list(itertools.product(*(range(len(it.options)) for it in wide.items)))
    if not splits:  # 2^3 layer choices x the tied embedding table
        assert len(combos) == 2**4
    levels = sorted({round(price_choice(wide, c).memory_gib, 6) for c in combos})
    mid = len(levels) // 2
    budget = (levels[mid - 1] + levels[mid]) / 2  # halfway between two memory levels: no rounding edge cases
    table = osdp_table(p, lay, splits, capacity_gib=budget)
    priced = [price_choice(table, c) for c in combos]
    best = min(x.step_time_s for x in priced if x.fits)
    plan = plan_osdp(p, lay, splits, capacity_gib=budget)
    assert plan.memory_gib <= budget
    assert plan.step_time_s == pytest.approx(best, abs=1e-5)  # CP-SAT works in whole microseconds
    uniform = [x.step_time_s for x, c in zip(priced, combos, strict=True) if x.fits and len(set(c)) == 1]
    assert all(best <= u for u in uniform)


# The OSDP repository's GPT-2 runs: 48 layers on 8 GPUs under an 8192 MB limit (cost_model.md §6). Its script uses
# hidden 1536, 48 heads, vocabulary 30522; cost_model.md quotes hidden 2048 -- both are checked. The limit is what
# PyTorch reports as allocated (their print_peak_memory), which leaves out the CUDA context and NCCL buffers that
# our device total adds, so the capacity here is 8 GiB plus that fixed reserve. The runs used short sequences.
@pytest.mark.parametrize("hidden,heads,vocab", [(1536, 48, 30522), (2048, 16, 50257)])
def test_paper_setup_osdp_beats_fsdp(hidden, heads, vocab):
    m = ModelSpec(name=f"gpt2-48x{hidden}", hidden_size=hidden, num_hidden_layers=48, num_attention_heads=heads,
                  intermediate_size=4 * hidden, vocab_size=vocab, hidden_act="gelu", tie_word_embeddings=False)
    p = Problem(m, load_cluster("a100x8"), TrainingSpec(seq_len=512, global_batch=64))
    capacity = 8.0 + (device_memory.CONTEXT_BYTES + device_memory.NCCL_BYTES_PER_GROUP) / memory.GIB
    plan = plan_osdp(p, full_layout({"tp": 1, "dp": 8, "mbs": 1, "recompute": 2}), capacity_gib=capacity)
    assert plan.zero3.fits and not plan.zero1.fits
    assert plan.zero3.memory_gib < plan.memory_gib <= capacity
    assert plan.beats_uniform and plan.speedup_vs_best_uniform > 1.0
    assert any(d.sharded_fraction < 1 for d in _layers(plan))  # the gain is bought with layers, not only embeddings
    text = render_osdp(plan)
    assert "speedup vs best uniform" in text and "zero3 (all sharded)" in text


def test_deterministic(llama8b):
    ends = plan_osdp(llama8b, LAYOUT, capacity_gib=1000.0)
    budget = (ends.zero3.memory_gib + ends.zero1.memory_gib) / 2
    assert plan_osdp(llama8b, LAYOUT, capacity_gib=budget) == plan_osdp(llama8b, LAYOUT, capacity_gib=budget)


def test_rejects_pipelined_layouts_and_moe(llama8b):
    with pytest.raises(PlanInputError):
        plan_osdp(llama8b, LAYOUT.replace(pp=2, dp=4))
    moe = Problem(load_model("mixtral-8x7b"), load_cluster("h100x8"), TrainingSpec(seq_len=4096, global_batch=64))
    with pytest.raises(PlanInputError):
        plan_osdp(moe, LAYOUT)
