"""The CP-SAT model and the numpy search read the same rules and agree; infeasible problems explain themselves."""

from dataclasses import replace

import pytest

from planner.errors import NoFeasiblePlan
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.layout import parse_pairs
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec
from planner.search.cpsat import count_solutions, diagnose
from planner.search.diagnosis import explain_infeasible
from planner.search.search import search
from planner.search.space import enumerate_layouts


@pytest.mark.parametrize("model,cluster,gbs", [("llama2-7b", "h100x16", 64), ("mixtral-8x7b", "a100x32", 128)])
def test_cpsat_and_numpy_enumeration_agree(model, cluster, gbs):
    p = Problem(load_model(model), load_cluster(cluster), TrainingSpec(seq_len=4096, global_batch=gbs))
    assert count_solutions(p) == len(enumerate_layouts(p).cols["tp"])


def test_infeasible_core_names_conflicting_rules():
    p = Problem(load_model("llama3-70b"), load_cluster("h100x64"), TrainingSpec(),
                fixed=parse_pairs(["tp=16"], "--fix"))
    core = diagnose(p)
    assert not core.feasible
    assert {r.name for r in core.core} & {"tp_within_nvlink_domain", "kv_heads_divisible_by_tp"}


def test_memory_bound_problem_suggests_changes():
    p = Problem(load_model("llama3-405b"), load_cluster("h100x32"), TrainingSpec(seq_len=8192, global_batch=64))
    with pytest.raises(NoFeasiblePlan):
        search(p)
    d = explain_infeasible(p)
    assert d["binding"] == ["memory_fits"]
    assert any("GPUs" in s for s in d["suggestions"])


def test_memory_hints_name_leaner_optimizer_states_the_framework_has():
    """Llama 3 8B on one H100 needs ~150 GiB with fp32 Adam on the GPU: keeping the optimizer in CPU memory fits, and
    the hint says so where the framework has the switch (not torchtitan's FSDP2, whose CPU offload moves more)."""
    p = Problem(load_model("llama3-8b"), load_cluster("h100x1"), TrainingSpec(seq_len=8192, global_batch=512))
    hints = explain_infeasible(p)["suggestions"]
    assert "--optimizer-offload 1" in hints
    followed = replace(p, training=p.training.model_copy(update={"optimizer_offload": 1.0}))
    assert search(followed, top=1).plans  # following the hint gives a plan
    titan = replace(p, training=p.training.model_copy(update={"framework": "torchtitan"}))
    assert not any("optimizer" in h for h in explain_infeasible(titan)["suggestions"])


def test_search_is_deterministic():
    p = Problem(load_model("llama3-8b"), load_cluster("h100x64"), TrainingSpec(seq_len=8192, global_batch=256))
    a = [x.layout for x in search(p, top=10).plans]
    b = [x.layout for x in search(p, top=10).plans]
    assert a == b


def test_ranked_by_throughput():
    p = Problem(load_model("llama3-8b"), load_cluster("h100x64"), TrainingSpec(seq_len=8192, global_batch=256))
    tput = [x.metrics["tokens_per_s_per_gpu"] for x in search(p, top=10).plans]
    assert all(a >= b * 0.9995 for a, b in zip(tput, tput[1:], strict=False))


def test_time_limit_marks_not_proven(monkeypatch):
    import planner.search.search as s

    monkeypatch.setattr(s, "CHUNK", 1000)
    p = Problem(load_model("llama3-70b"), load_cluster("h100x512"), TrainingSpec())
    r = s.search(p, top=1, time_limit_s=1e-9)
    assert r.proven_best is False and r.plans


def test_batch_conflict_suggests_the_nearest_batch():
    p = Problem(load_model("llama3-8b"), load_cluster("h100x8"), TrainingSpec(seq_len=4096, global_batch=7),
                fixed=parse_pairs(["dp=8"], "--fix"))
    d = explain_infeasible(p)
    assert "global_batch_divisible" in d["binding"]
    assert any("--global-batch 8" in s for s in d["suggestions"])


def test_memory_bound_problem_suggests_a_bigger_gpu():
    p = Problem(load_model("llama3-70b"), load_cluster("a100-40gx16"), TrainingSpec(seq_len=8192, global_batch=64))
    d = explain_infeasible(p)
    assert any("more memory" in s for s in d["suggestions"])
