"""Activations kept in host memory (recompute=offload, Megatron-Core --cpu-offloading-num-layers): how many layers
the planner offloads, what the copies cost, where the rules allow it, and what the launchers print.

The schedule priced is the one Transformer Engine documents for its CPU offloading (at most L - k layers' activations
on the GPU; copies on one side stream; compute waits for a copy that falls behind), planner.cost.activation_offload.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_plan_in_process

from planner.cost import activation_offload, memory
from planner.cost.step import evaluate
from planner.errors import PlanInputError
from planner.evidence.validate import case_problem, load_cases
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.hardware import HOST_COPY_EFFICIENCY
from planner.inputs.layout import Recompute, Schedule
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec
from planner.report.launchers import render
from planner.search.rules import RULES_BY_NAME
from planner.search.search import search

GIB = 2**30


def _problem(cluster: str = "h100x64", headroom: float = 0.05) -> Problem:
    return Problem(load_model("llama3-70b"), load_cluster(cluster), TrainingSpec(seq_len=8192, global_batch=512),
                   memory_headroom=headroom)


def test_fewest_layers_that_fit_hand_worked() -> None:
    # An 80 GiB GPU with 5 % headroom aims under 76 GiB. 100 GiB allocated + 1 GiB outside the allocator is
    # 100 x 1.05 + 1 = 106 GiB on the device: 30 GiB too much; each offloaded 2 GiB layer frees 2 x 1.05 = 2.1 GiB,
    # so 30 / 2.1 = 14.3 -> 15 layers.
    p = _problem()
    rc = np.array([Recompute.OFFLOAD, Recompute.NONE, Recompute.OFFLOAD, Recompute.OFFLOAD])
    layers = np.array([80.0, 80.0, 10.0, 80.0])
    a = np.array([2.0, 2.0, 2.0, 0.5]) * GIB
    alloc = np.array([100.0, 100.0, 100.0, 70.0]) * GIB
    k = activation_offload.offloaded_layers(p, rc, layers, a, alloc, np.full(4, 1.0 * GIB))
    # row 2: not offloading; row 3: at most L - 2 = 8 layers (two stay resident so copies overlap compute);
    # row 4: 70 x 1.05 + 1 = 74.5 GiB already fits, yet an offload layout moves at least one layer
    assert k.tolist() == [15.0, 0.0, 8.0, 1.0]
    budget = 80 * 0.95 * GIB
    assert (100 - 15 * 2) * GIB * 1.05 + GIB <= budget < (100 - 14 * 2) * GIB * 1.05 + GIB


def test_host_memory_caps_the_offload() -> None:
    # 256 GiB of host memory per H100 ([HOST]): 40 GiB layers fit 6 at most, however many the GPU would need.
    p = _problem()
    assert p.cluster.gpu.host_memory_gib == 256
    k = activation_offload.offloaded_layers(p, np.array([Recompute.OFFLOAD]), np.array([80.0]),
                                            np.array([40.0 * GIB]), np.array([600.0 * GIB]), np.array([GIB]))
    assert k.tolist() == [6.0]


def test_copy_stalls_hand_worked() -> None:
    # 44 layers of 1.88 GB over PCIe Gen5 (64 GB/s x 0.869 achieved = 55.6 GB/s): 33.8 ms each, 1.487 s in all.
    # The forward of the 78 layers the copies overlap takes 78 x 14.8 ms = 1.154 s: 0.333 s of waiting. The
    # backward (78 x 30 ms = 2.34 s) hides its reloads. The copies also read and write 2 x 44 x 1.88 GB of HBM.
    p = _problem()
    hbm = 2.8e12
    got = activation_offload.offload_stall(p, np.array([44.0]), np.array([1.88e9]), np.array([80.0]),
                                           np.array([14.8e-3]), np.array([30e-3]), hbm)
    tau = 1.88e9 / (64e9 * HOST_COPY_EFFICIENCY)
    assert tau == pytest.approx(33.8e-3, rel=1e-3)
    assert got[0] == pytest.approx(44 * tau - 78 * 14.8e-3 + 2 * 44 * 1.88e9 / hbm, rel=1e-9)
    assert got[0] == pytest.approx(0.392, abs=2e-3)
    # NVLink-C2C (225 GB/s per GPU per direction on GB200): the same copies hide behind the same compute
    fast = activation_offload.offload_stall(_problem("gb200x64"), np.array([44.0]), np.array([1.88e9]),
                                            np.array([80.0]), np.array([14.8e-3]), np.array([30e-3]), hbm)
    assert fast[0] == pytest.approx(2 * 44 * 1.88e9 / hbm)
    # nothing offloaded, nothing paid
    assert activation_offload.offload_stall(p, np.array([0.0]), np.array([1.88e9]), np.array([80.0]),
                                            np.array([1e-3]), np.array([2e-3]), hbm)[0] == 0.0


def _layout(**kw: int) -> dict[str, np.ndarray]:
    base = {"tp": 1, "pp": 1, "dp": 64, "cp": 1, "ep": 1, "etp": 0, "vpp": 1, "mbs": 2, "zero": 3,
            "recompute": int(Recompute.NONE), "sp": 0, "schedule": 0, "cp_comm": 0}
    base.update(kw)
    return {k: np.array([v]) for k, v in base.items()}


def test_offload_prices_like_no_recompute_less_the_offloaded_layers() -> None:
    """Llama 3 70B, FSDP, 2 x 8k tokens per GPU on GB300 (NeMo's fp8 recipe: pp 1, no recompute, activations of
    some layers offloaded): the activations shrink by k layers, the kernels stay those of `none`, and the step
    grows only by the copies."""
    p = Problem(load_model("llama3-70b"), load_cluster("gb300x64"),
                TrainingSpec(seq_len=8192, global_batch=256, precision="fp8", framework="nemo"))
    none, off = evaluate(p, _layout()), evaluate(p, _layout(recompute=int(Recompute.OFFLOAD)))
    k = float(off["offloaded_layers"][0])
    assert none["memory_peak_gib"][0] > p.cluster.gpu.memory_gib  # keeping everything does not fit 288 GiB
    assert 1 <= k <= 78
    assert off["memory_peak_gib"][0] <= p.cluster.gpu.memory_gib * (1 - p.memory_headroom)
    a, _ = memory.layer_activation_bytes(p, np.array([16384.0]), np.array([1.0]), np.array([0]),
                                         np.array([int(Recompute.OFFLOAD)]))
    assert none["mem_activations_gib"][0] - off["mem_activations_gib"][0] == pytest.approx(k * a[0] / GIB)
    assert off["compute_s"][0] == none["compute_s"][0] and off["recompute_s"][0] == 0.0
    assert off["step_time_s"][0] == pytest.approx(none["step_time_s"][0] + off["offload_s"][0])
    assert 0 < off["offload_s"][0] < 0.02 * off["step_time_s"][0]  # C2C at 225 GB/s keeps up with the layers


def test_published_gb300_run_that_offloads() -> None:
    """MB-159 (Megatron-Bridge performance summary, 26.02.01 container: Llama 3 70B, 64 GB300, fp8, FSDP, no
    recompute; its recipe offloads 20 layers' activations, perf_recipes/llama/gb300/llama3.py). Priced with
    full recomputation, the only way the planner had to fit it, it was 27 % slow; offloading it is within 10 %."""
    case = next(c for c in load_cases(None) if c["id"] == "MB-159")
    best = search(case_problem(case, "published_runs.yaml"), top=1).plans[0]
    assert best.layout.recompute == Recompute.OFFLOAD
    measured = case["measured"]["tokens_per_s_per_gpu"]
    assert abs(best.metrics["tokens_per_s_per_gpu"] / measured - 1) < 0.10


def test_offload_is_dominated_where_everything_fits() -> None:
    # Llama 3 8B, FSDP, one 8k sequence per GPU on 64 H100 keeps its activations with room: the same layout with
    # recompute=offload would only add copies, so the search drops it (dominated_recompute), as it drops recompute.
    fixed = {"tp": 1, "pp": 1, "cp": 1, "mbs": 1, "zero": 3}
    p = Problem(load_model("llama3-8b"), load_cluster("h100x64"), TrainingSpec(seq_len=8192, global_batch=512),
                fixed=fixed)
    result = search(p, top=10)
    assert [pl.layout.recompute for pl in result.plans] == [Recompute.NONE]
    assert result.pruned["dominated_recompute"] == 4  # selective, full, offload and offload-modules
    # pinned, it is priced: slower than keeping the activations, by the copies alone
    none = evaluate(p, _layout(dp=64, mbs=1))
    off = evaluate(p, _layout(dp=64, mbs=1, recompute=int(Recompute.OFFLOAD)))
    assert off["offloaded_layers"][0] == 1 and off["step_time_s"][0] > none["step_time_s"][0]


def test_rule_one_stage_and_frameworks() -> None:
    rule = RULES_BY_NAME["offload_needs_one_stage"]
    p = _problem()
    cols = {"recompute": np.array([Recompute.OFFLOAD, Recompute.OFFLOAD, Recompute.FULL, Recompute.OFFLOAD]),
            "pp": np.array([1, 2, 2, 1]), "schedule": np.array([0, 0, 0, int(Schedule.COMBINED_1F1B)])}
    assert rule.check(cols, p).tolist() == [True, False, True, False]
    # stacks without Megatron-Core's offloading: the generic planner offloads here (ZeRO-3 on GB200), they do not
    for framework in ("generic", "torchtitan", "megatron"):
        problem = Problem(load_model("llama3-70b"), load_cluster("gb200x64"),
                          TrainingSpec(seq_len=8192, global_batch=512, framework=framework))
        plans = search(problem, top=5, rank_by="time").plans  # what each stack can run, by price
        offloads = [pl.layout.recompute == Recompute.OFFLOAD for pl in plans]
        assert any(offloads) if framework == "generic" else not any(offloads), framework


def _offload_doc(fmt: str) -> tuple[dict, str]:
    args = ("--model", "llama3-70b", "--cluster", "gb200x64", "--framework", "megatron-core", "--fix", "pp=1",
            "--fix", "recompute=offload", "--top", "1")
    doc = run_plan_in_process(*args, "--format", "json")
    text = run_plan_in_process(*args, "--format", fmt)
    assert doc.returncode == 0 and text.returncode == 0, doc.stderr + text.stderr
    return json.loads(doc.stdout), text.stdout


def test_launchers_print_the_offloaded_layer_count() -> None:
    doc, flags = _offload_doc("megatron")
    lay = doc["plans"][0]["layout"]
    k = lay["offload_layers"]
    assert lay["recompute"] == "offload" and 1 <= k <= 78
    assert f"--cpu-offloading-num-layers {k}" in flags and "--recompute-granularity" not in flags
    _, nemo = _offload_doc("nemo")
    assert "model.cpu_offloading=true" in nemo and f"model.cpu_offloading_num_layers={k}" in nemo
    assert doc["plans"][0]["breakdown"]["offload_s"] >= 0.0


def test_torchtitan_has_no_offload_plan() -> None:
    # --format torchtitan plans for torchtitan, which has no activation offloading: a pinned offload finds nothing,
    # and the reason names the rule; a generic offload plan fed to the torchtitan renderer is refused.
    args = ("--model", "llama3-70b", "--cluster", "gb200x64", "--fix", "pp=1", "--fix", "recompute=offload",
            "--top", "1")
    proc = run_plan_in_process(*args, "--format", "torchtitan")
    assert proc.returncode == 1 and "framework_recompute" in proc.stderr
    doc = run_plan_in_process(*args, "--framework", "generic", "--format", "json")
    assert doc.returncode == 0
    with pytest.raises(PlanInputError, match="offload"):
        render(json.loads(doc.stdout), "torchtitan")


def test_nic_traffic_shares_the_pcie_link_hand_worked() -> None:
    # On an H100 node the GPU's one PCIe x16 link (55.6 GB/s achieved) also carries its 50 GB/s NIC. With the NIC
    # busy the whole forward, a 1.88 GB copy gets 5.6 GB/s: 336 ms instead of 33.8 ms. On GB200 the copies cross
    # NVLink-C2C, which the NIC does not use.
    p = _problem()
    link = 64e9 * HOST_COPY_EFFICIENCY
    one = activation_offload.offload_stall(p, np.array([1.0]), np.array([1.88e9]), np.array([80.0]),
                                           np.array([0.0]), np.array([1.0]), 1e30, busy_f=1.0)
    assert one[0] == pytest.approx(1.88e9 / (link - 50e9))
    half = activation_offload.offload_stall(p, np.array([1.0]), np.array([1.88e9]), np.array([80.0]),
                                            np.array([0.0]), np.array([1.0]), 1e30, busy_f=0.5)
    assert half[0] == pytest.approx(1.88e9 / (link - 25e9))
    assert load_cluster("gb200x64").gpu.nic_shares_host_link is False
    assert load_cluster("h100x64").gpu.nic_shares_host_link is True


def test_zero3_across_nodes_keeps_the_nic_busy() -> None:
    """Llama 3 70B ZeRO-3 over 512 H100s: each layer's gathers (and, in the backward, reduce-scatters) cross the
    network for their share of the pass; with eight data ranks they stay on NVLink and leave the PCIe link alone."""
    from planner.cost.fabric import Fabric
    from planner.cost.profiles import profile_for
    from planner.cost.sharding import fsdp_collectives

    p = _problem("h100x512")
    fab, prof = Fabric(p.cluster, {}, 2.8e12), profile_for("generic")
    params, group, tp = np.array([8.6e8, 8.6e8]), np.array([512.0, 8.0]), np.array([1.0, 1.0])
    t_f, t_b = np.array([25e-3, 25e-3]), np.array([50e-3, 50e-3])
    ag, rs = fsdp_collectives(fab, prof, params, group, tp)
    busy_f, busy_b = activation_offload.nic_busy(p, np.array([3, 3]), group, tp, ag, rs, t_f, t_b)
    assert busy_f[0] == pytest.approx(ag[0] / 25e-3) and busy_b[0] == pytest.approx((ag[0] + rs[0]) / 50e-3)
    assert 0.1 < busy_f[0] < 1.0
    assert busy_f[1] == 0.0 and busy_b[1] == 0.0  # eight data ranks tile one NVLink domain
    # not ZeRO-3: nothing is gathered during the passes
    none = activation_offload.nic_busy(p, np.array([1, 1]), group, tp, ag, rs, t_f, t_b)
    assert not none[0].any() and not none[1].any()


def test_expert_all_to_alls_across_nodes_keep_the_nic_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Qwen3-235B with EP 16 x TP 2 spans four H100 nodes: each MoE layer's dispatch and combine cross the NIC that
    shares the GPU's PCIe link with the module offload's copies, so those copies slow down; with EP 4 (one node) the
    NIC carries none of it."""
    from planner.cost import expert
    from planner.cost.fabric import Fabric
    from planner.cost.profiles import profile_for
    from planner.inputs.layout import parse_pairs
    from planner.report.explain import explain

    m = load_model("qwen3-235b-a22b")
    p = Problem(m, load_cluster("h100x256"), TrainingSpec(seq_len=4096, global_batch=8192, precision="fp8",
                                                          framework="nemo"))
    fab, prof = Fabric(p.cluster, {}, 3.35e12), profile_for("nemo")
    tok, tp, etp = np.array([8192.0, 8192.0]), np.array([2.0, 2.0]), np.array([1.0, 1.0])
    nbytes = expert.nic_bytes_per_pass(m, fab, prof, tok, tp, np.array([16.0, 4.0]), etp, True, 1.0)
    assert nbytes[0] > 0 and nbytes[1] == 0.0  # EP 4 x TP 2 fills one node
    busy_f, _ = activation_offload.nic_busy(p, np.array([1]), np.array([32.0]), tp[:1], np.zeros(1), np.zeros(1),
                                            np.array([0.1]), np.array([0.2]), expert_nic_s=0.03)
    assert busy_f[0] == pytest.approx(0.3)
    layout = "tp=2,pp=4,vpp=4,ep=16,mbs=2,zero=1,recompute=offload-modules,schedule=combined-1f1b"
    with_nic = explain(p, parse_pairs([layout], "--layout"))["breakdown"]["offload_s"]
    monkeypatch.setattr(expert, "nic_bytes_per_pass", lambda *a, **k: np.zeros(1))
    without = explain(p, parse_pairs([layout], "--layout"))["breakdown"]["offload_s"]
    assert with_nic > without


def test_explain_says_how_much_host_memory_the_offload_takes() -> None:
    from planner.inputs.layout import parse_pairs
    from planner.report.explain import explain

    p = Problem(load_model("llama3-70b"), load_cluster("gb300x64"),
                TrainingSpec(seq_len=8192, global_batch=256, precision="fp8", framework="nemo"))
    out = explain(p, parse_pairs(["tp=1,pp=1,dp=64,mbs=2,zero=3,recompute=offload"], "--layout"))
    off = out["offload"]
    assert off["layers"] == out["layout"]["offload_layers"] and off["host_capacity_gib"] == 240
    none = explain(p, parse_pairs(["tp=1,pp=1,dp=64,mbs=2,zero=3,recompute=none"], "--layout"))
    freed = none["breakdown"]["memory_gib"]["activations"] - out["breakdown"]["memory_gib"]["activations"]
    assert off["host_gib"] == pytest.approx(freed, abs=0.1)  # what leaves the GPU is what the host holds (4 digits)
    assert off["copies_s"] == pytest.approx(out["breakdown"]["offload_s"], rel=1e-4)
    assert "offload" not in none
