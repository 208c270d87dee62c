"""Megatron-Core's fine-grained activation offloading (recompute=offload-modules): the bytes the fixed module set
moves, the device memory it frees with pipelining, the host memory it takes, the copy stalls, where the search
picks it, the frameworks that run it, and the launchers that print it and read it back
(planner.cost.module_offload, activation_offload.modules_stall)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from conftest import cols, run_plan_in_process

from planner.cost import activation_offload, memory
from planner.cost.stages import memory_stages
from planner.cost.step import evaluate
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.hardware import HOST_COPY_EFFICIENCY
from planner.inputs.layout import Recompute
from planner.inputs.problem import Problem
from planner.inputs.specs import ClusterSpec, TrainingSpec
from planner.search.rules import RULES_BY_NAME
from planner.search.search import search

OFFM = int(Recompute.OFFLOAD_MODULES)


def _one(x: float) -> np.ndarray:
    return np.array([x])


def test_bytes_per_layer_dense_hand_worked() -> None:
    # Llama 3 70B, tp 8, 8192 tokens: fused attention saves Q (64 x 128), K and V (8 x 128 each) and the output
    # (64 x 128), 2 bytes each: 2 x (8192 + 2048) + 2 x 8192 = 36,864 bytes per token, /8 = 4,608. The fp32 LSE
    # (64 heads) stays (under Megatron-Core's 1 Mi-element floor). 4,608 x 8192 = 37,748,736 bytes per layer.
    p = Problem(load_model("llama3-70b"), load_cluster("h100x64"), TrainingSpec(seq_len=8192, global_batch=512))
    got = memory.offloaded_module_bytes(p, _one(8192.0), _one(8.0), np.array([OFFM, int(Recompute.NONE)]))
    assert got.tolist() == [4608 * 8192, 0.0]


def test_bytes_per_layer_moe_mla_hand_worked() -> None:
    # DeepSeek-V3 (MLA, 128 heads, qk 128 + 64 rope, v 128), tp 1, bf16, per token: Q 2 x 128 x 192 = 49,152,
    # K 49,152, V 2 x 128 x 128 = 32,768, output 32,768 -> 163,840; the kv up-projection's K-nope half and the LSE
    # stay. Its 58 MoE layers of 61 add expert_fc1's permuted inputs: 8 routed copies x 2 x 7168 = 114,688.
    p = Problem(load_model("deepseek-v3"), load_cluster("gb200x256"), TrainingSpec(seq_len=4096, global_batch=1024))
    per_token = 163_840 + 58 / 61 * 114_688
    got = memory.offloaded_module_bytes(p, _one(4096.0), _one(1.0), np.array([OFFM]))
    assert got[0] == pytest.approx(per_token * 4096, rel=1e-12)
    # fp8: Transformer Engine saves the fp8 cast of the fc1 input, 1 byte per value
    fp8 = Problem(p.model, p.cluster, TrainingSpec(seq_len=4096, global_batch=1024, precision="fp8"))
    got8 = memory.offloaded_module_bytes(fp8, _one(4096.0), _one(1.0), np.array([OFFM]))
    assert got8[0] == pytest.approx((163_840 + 58 / 61 * 57_344) * 4096, rel=1e-12)


def test_copy_stall_hand_worked() -> None:
    # 151 MB per layer over PCIe Gen5 (64 GB/s x 0.869 = 55.6 GB/s): 2.714 ms each way. A 2 ms forward leaves
    # 0.714 ms exposed, a 4 ms backward hides its reload; both copies also read or write 151 MB of HBM (3.35 TB/s):
    # 2 x 0.0451 ms. 20 layers: 20 x (0.714 + 0.0901) = 16.1 ms per micro-batch.
    p = Problem(load_model("llama3-70b"), load_cluster("h100x64"), TrainingSpec(seq_len=8192, global_batch=512))
    o, hbm = 151e6, 3.35e12
    tau = o / (64e9 * HOST_COPY_EFFICIENCY)
    assert tau == pytest.approx(2.714e-3, rel=1e-3)
    got = activation_offload.modules_stall(p, _one(o), _one(20.0), _one(2e-3), _one(4e-3), hbm)
    assert got[0] == pytest.approx(20 * (tau - 2e-3 + 2 * o / hbm), rel=1e-12)
    assert got[0] == pytest.approx(16.08e-3, abs=0.05e-3)
    # NVLink-C2C (225 GB/s per direction on GB200): the copies hide, the HBM traffic stays
    c2c = Problem(p.model, load_cluster("gb200x64"), p.training)
    fast = activation_offload.modules_stall(c2c, _one(o), _one(20.0), _one(2e-3), _one(4e-3), hbm)
    assert fast[0] == pytest.approx(20 * 2 * o / hbm)
    # a NIC busy the whole forward on the shared PCIe link leaves the copies 5.6 GB/s
    busy = activation_offload.modules_stall(p, _one(o), _one(1.0), _one(0.0), _one(1.0), 1e30, busy_f=1.0)
    assert busy[0] == pytest.approx(o / (64e9 * HOST_COPY_EFFICIENCY - 50e9))
    assert activation_offload.modules_stall(p, _one(0.0), _one(20.0), _one(0.0), _one(0.0), hbm)[0] == 0.0


def _layout(**kw: int) -> dict[str, np.ndarray]:
    """Llama 3 70B's tp 8 pp 4 dp 2 layout with sequence parallelism and ZeRO-1 (conftest.cols fills the rest)."""
    return cols(**{"tp": 8, "pp": 4, "dp": 2, "zero": 1, "sp": 1, **kw})


def test_every_in_flight_microbatch_is_off_the_device() -> None:
    """Llama 3 70B, tp 8 pp 4 1F1B: the first rank holds 4 micro-batches of 20 layers, and each of those 80 layer
    passes leaves its attention tensors on the host; one layer's share is back ahead of its backward. The step grows
    by the copies alone, priced from the same bytes."""
    p = Problem(load_model("llama3-70b"), load_cluster("h100x64"), TrainingSpec(seq_len=8192, global_batch=64))
    moved = float(memory.offloaded_module_bytes(p, _one(8192.0), _one(8.0), np.array([OFFM]))[0])
    none, off = memory_stages(p, _layout()), memory_stages(p, _layout(recompute=OFFM))
    freed = (none["first"]["activations"][0] - off["first"]["activations"][0]) * 2**30
    assert freed == pytest.approx((4 * 20 - 1) * moved, rel=1e-9)
    assert (none["last"]["activations"][0] - off["last"]["activations"][0]) * 2**30 == pytest.approx(
        (1 * 20 - 1) * moved, rel=1e-9)  # the last rank holds one micro-batch
    e_none, e_off = evaluate(p, _layout()), evaluate(p, _layout(recompute=OFFM))
    assert e_off["compute_s"][0] == e_none["compute_s"][0] and e_off["recompute_s"][0] == 0.0
    assert e_off["offload_s"][0] > 0.0
    assert e_off["step_time_s"][0] == pytest.approx(e_none["step_time_s"][0] + e_off["offload_s"][0], rel=1e-9)


def _with_host(cluster: ClusterSpec, **gpu: float) -> ClusterSpec:
    return cluster.model_copy(update={"gpu": cluster.gpu.model_copy(update=gpu)})


def test_host_memory_bounds_the_offload() -> None:
    # 80 layer passes x 37.7 MB = 2.8 GiB on the first rank's host share: 2 GiB per GPU cannot hold it
    p = Problem(load_model("llama3-70b"), load_cluster("h100x64"), TrainingSpec(seq_len=8192, global_batch=64))
    assert np.isfinite(evaluate(p, _layout(recompute=OFFM))["memory_peak_gib"][0])
    small = Problem(p.model, _with_host(p.cluster, host_memory_gib=2.0), p.training)
    roomy = evaluate(p, _layout(recompute=OFFM))["memory_peak_gib"][0]
    cramped = evaluate(small, _layout(recompute=OFFM))["memory_peak_gib"][0]
    # what the host cannot hold stays on the device: a finite, larger total (so JSON and explain stay readable)
    assert np.isfinite(cramped) and cramped > roomy
    assert np.isfinite(evaluate(small, _layout())["memory_peak_gib"][0])  # nothing offloaded, nothing needed


def _deepseek(cluster: ClusterSpec | None = None) -> Problem:
    return Problem(load_model("deepseek-v3"), cluster or load_cluster("gb200x256"),
                   TrainingSpec(seq_len=4096, global_batch=1024, framework="megatron-core"), fixed={"pp": 4})


def test_search_picks_it_where_layer_offload_cannot_run() -> None:
    """DeepSeek-V3 on 256 GB200 with pp 4 (layer-level offloading needs pp 1) and tp 1: keeping every activation
    does not fit the fastest layouts, and the attention and expert fc1 inputs over NVLink-C2C free enough memory for
    a layout faster than any that recomputes. (With tp free, a TP 2 layout that keeps everything prices within
    0.1 % of it since issue 25's MoE pricing and TP overlap as each stack runs it.)"""
    problem = replace(_deepseek(), fixed={"pp": 4, "tp": 1})
    result = search(problem, top=5, rank_by="time")  # by price: what the copies cost, not the preference
    best = result.plans[0]
    assert best.layout.recompute == OFFM, best.layout
    assert not any(pl.layout.recompute == Recompute.OFFLOAD for pl in result.plans)
    # C2C hides most of the copies: 2.7 % of the step exposed since issue 25's MoE pricing (host-bound layers and
    # Blackwell's attention rates shorten the GPU time they hide behind; 2 % before)
    assert best.metrics["offload_s"] < 0.03 * best.metrics["step_time_s"]
    # the same layout with every activation on the GPU does not fit
    none = evaluate(problem, best.layout.replace(recompute=Recompute.NONE).columns())
    assert none["memory_peak_gib"][0] > best.metrics["memory_peak_gib"] * 1.1


def test_not_chosen_where_the_host_link_cannot_hide_the_copies() -> None:
    # The same problem with a 4 GB/s host link: each layer's copies take longer than its compute, so the stalls
    # exceed what recomputation costs, and no offload-modules layout ranks first.
    slow = _with_host(load_cluster("gb200x256"), host_link_gbps=4.0)
    result = search(_deepseek(slow), top=5, rank_by="time")
    assert result.plans[0].layout.recompute != OFFM, result.plans[0].layout
    priced = search(Problem(*(_deepseek(slow).model, slow), _deepseek(slow).training,
                            fixed={"pp": 4, "recompute": OFFM}), top=1)
    # pinned, it is priced: its copies are what makes it lose
    assert priced.plans[0].metrics["offload_s"] > 0.05 * priced.plans[0].metrics["step_time_s"]
    assert priced.plans[0].metrics["step_time_s"] > result.plans[0].metrics["step_time_s"]


def test_frameworks_that_run_it() -> None:
    rule = RULES_BY_NAME["framework_recompute"]
    cols = {"recompute": np.array([OFFM])}
    for framework, runs in (("megatron-core", True), ("nemo", True), ("generic", True), ("torchtitan", False),
                            ("deepspeed", False), ("megatron", False), ("megatron-deepspeed", False)):
        p = Problem(load_model("llama3-70b"), load_cluster("gb200x64"),
                    TrainingSpec(seq_len=8192, global_batch=512, framework=framework))
        assert bool(rule.check(cols, p)[0]) is runs, framework
    # unlike layer-level offloading, pipelining and the combined 1F1B schedule are allowed
    one_stage = RULES_BY_NAME["offload_needs_one_stage"]
    p = Problem(load_model("llama3-70b"), load_cluster("gb200x64"), TrainingSpec(seq_len=8192, global_batch=512))
    assert one_stage.check({"recompute": np.array([OFFM]), "pp": np.array([4]), "schedule": np.array([6])}, p)[0]


def _doc(fmt: str, model: str = "deepseek-v3") -> str:
    args = ("--model", model, "--cluster", "gb200x256", "--framework", "megatron-core", "--fix", "pp=4",
            "--fix", "recompute=offload-modules", "--top", "1", "--format", fmt)
    proc = run_plan_in_process(*args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_launchers_print_the_modules(tmp_path) -> None:  # noqa: ANN001 - pytest fixture
    flags = _doc("megatron")
    assert "--fine-grained-activation-offloading\n--offload-modules core_attn attn_proj expert_fc1\n" in flags
    assert "NVTE_CPU_OFFLOAD_V1=1" in flags and "--cpu-offloading-num-layers" not in flags
    assert "--recompute-granularity" not in flags
    nemo = _doc("nemo")
    assert "model.fine_grained_activation_offloading=true" in nemo
    assert "model.offload_modules=[core_attn,attn_proj,expert_fc1]" in nemo and "model.cpu_offloading" not in nemo
    assert "--offload-modules core_attn attn_proj\n" in _doc("megatron", "llama3-70b")  # no experts: no expert_fc1
    torchtitan = run_plan_in_process("--model", "llama3-70b", "--cluster", "gb200x64", "--fix",
                                     "recompute=offload-modules", "--top", "1", "--format", "torchtitan")
    assert torchtitan.returncode == 1 and "framework_recompute" in torchtitan.stderr


@pytest.mark.parametrize("fmt", ["megatron", "nemo"])
def test_launch_files_read_back(fmt: str, tmp_path) -> None:  # noqa: ANN001 - pytest fixture
    path = tmp_path / f"run.{fmt}"
    path.write_text(_doc(fmt))
    proc = run_plan_in_process("explain", "--from", str(path), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["yours"]["layout"]["recompute"] == "offload-modules"
    assert out["yours"]["offload"]["modules"] == ["core_attn", "attn_proj", "expert_fc1"]
    assert out["yours"]["offload"]["host_gib"] <= out["yours"]["offload"]["host_capacity_gib"]


def test_reader_prices_other_sets_as_its_own_and_says_so() -> None:
    from planner.inputs.launch_readers._common import LaunchConfig, read_fine_grained_offload

    cfg = LaunchConfig("megatron", "x.sh", layout={"recompute": int(Recompute.NONE)})
    read_fine_grained_offload(cfg, ["expert_fc1"], "--offload-modules")
    assert cfg.layout["recompute"] == OFFM and any("priced as" in s for s in cfg.ignored)
    beside = LaunchConfig("megatron", "x.sh", layout={"recompute": int(Recompute.SELECTIVE)})
    read_fine_grained_offload(beside, ["core_attn", "attn_proj"], "--offload-modules")
    assert beside.layout["recompute"] == Recompute.SELECTIVE and beside.ignored
    from planner.errors import PlanInputError
    with pytest.raises(PlanInputError, match="offload"):
        read_fine_grained_offload(LaunchConfig("megatron", "x.sh"), ["mlp"], "--offload-modules")


def test_validate_prices_offloading_only_where_a_case_states_it() -> None:
    """Published runs that do not state their recomputation are searched over every mode but fine-grained offloading
    (off by default in Megatron-Core; a recipe's choice no row states); one that states it is priced with it."""
    from planner.evidence.cases import case_problem
    from planner.evidence.validate import load_cases
    from planner.search.space import domains

    case = next(c for c in load_cases(None) if c["id"] == "MB-163")
    assert case["layout"].get("recompute") is None
    unstated = case_problem(case, "published_runs.yaml")
    assert OFFM not in domains(unstated)["recompute"] and int(Recompute.SELECTIVE) in domains(unstated)["recompute"]
    stated = case_problem({**case, "layout": {**case["layout"], "recompute": "offload-modules"}}, "x.yaml")
    assert domains(stated)["recompute"] == [OFFM]
