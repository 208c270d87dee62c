"""Memory terms beyond the activations: per-stage peaks with the launched layer split, the allocator and runtime
terms and their sources, and the headroom that keeps tight plans from ranking as safe."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import cols, gpt, run_plan_in_process

from planner.cost import device_memory, memory
from planner.cost.stages import memory_stages
from planner.cost.step import evaluate
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec
from planner.search.search import is_tight, search


def _gpt22() -> Problem:
    """Zero Bubble's 1.5B GPT: 22 layers on 8 stages (first and last get 2, the middle six 3)."""
    m = gpt(22, 2304, 24).model_copy(update={"vocab_size": 51200})
    return Problem(m, load_cluster("a100x8"), TrainingSpec(seq_len=1024, global_batch=144, framework="megatron"))


def test_uneven_split_peaks_on_the_second_stage():
    """1F1B: rank r holds min(m, p - r) micro-batches of its own layers, so with 2 layers on the first stage and 3
    on the second, rank 1 (3 x 7 = 21 layer-micro-batches) outweighs rank 0 (2 x 8 = 16)."""
    p = _gpt22()
    c = cols(pp=8, mbs=6)
    st = memory_stages(p, c)
    per = st["second"]["activations"][0] / 21
    assert st["first"]["activations"][0] == pytest.approx(16 * per)
    assert st["second"]["allocated"][0] > st["first"]["allocated"][0]
    out = evaluate(p, c)
    assert out["memory_allocated_gib"][0] == pytest.approx(max(s["allocated"][0] for s in st.values()))


def test_even_split_peaks_on_the_first_stage():
    p = Problem(load_model("llama3-70b"), load_cluster("h100x64"), TrainingSpec(seq_len=4096, global_batch=64))
    st = memory_stages(p, cols(tp=8, pp=4, dp=2, sp=1, recompute=1))
    assert st["first"]["allocated"][0] >= st["second"]["allocated"][0]


def test_allocated_reserved_device_are_ordered_and_composed():
    p = Problem(load_model("llama3-8b"), load_cluster("h100x8"), TrainingSpec(seq_len=4096, global_batch=64))
    out = evaluate(p, cols(tp=2, pp=2, dp=2, sp=1, zero=1))
    alloc, reserved, peak = (out[k][0] for k in ("memory_allocated_gib", "memory_reserved_gib", "memory_peak_gib"))
    assert alloc < reserved < peak
    assert reserved == pytest.approx(alloc * (1 + device_memory.FRAGMENTATION))
    assert peak == pytest.approx(reserved + out["mem_context_gib"][0] + out["mem_nccl_gib"][0])
    assert out["mem_nccl_gib"][0] == pytest.approx(3 * device_memory.NCCL_BYTES_PER_GROUP / memory.GIB)  # tp, pp, dp


def test_nccl_buffers_per_communicator_match_the_measured_range():
    """2 connections x 32 channels x (Simple 4 MiB + LL 512 KiB + LL128 4.69 MiB): 544-688 MB per group on A100
    (NVIDIA/nccl#964)."""
    assert 544e6 <= device_memory.NCCL_BYTES_PER_GROUP <= 688e6


def test_p2p_buffers_only_with_pipelines():
    one = np.array([1])
    assert memory.p2p_buffer_bytes(np.array([4096.0]), 8192, one, one * 0, one)[0] == 0
    assert memory.p2p_buffer_bytes(np.array([4096.0]), 8192, one * 4, one, one * 2)[0] == 2 * 4096 * 8192 * 2 / 4


def test_fp8_keeps_amax_histories():
    layers = np.array([10.0])
    assert memory.fp8_meta_bytes(layers, 7, False)[0] == 0
    assert memory.fp8_meta_bytes(layers, 7, True)[0] == 10 * 7 * 3 * 1025 * 4


def _llama70b(headroom: float) -> Problem:
    return Problem(load_model("llama3-70b"), load_cluster("h100x64"), TrainingSpec(seq_len=8192, global_batch=128),
                   memory_headroom=headroom)


def test_tight_plans_rank_after_plans_with_room():
    loose = search(_llama70b(0.0), top=20, rank_by="time")
    cap = loose.problem.cluster.gpu.memory_gib
    # a headroom that leaves the loose first plan 1 % short of room: it must give way to a plan with room
    tight_share = 1 - loose.plans[0].metrics["memory_peak_gib"] / cap + 0.01
    res = search(_llama70b(tight_share), top=20, rank_by="time")
    flags = [bool(is_tight(res.problem, p.metrics["memory_peak_gib"])) for p in res.plans]
    assert not flags[0] and flags == sorted(flags)  # every plan with room first
    # the loose first plan gives way, or (activation offload sizes its copies to the memory budget) stays first
    # only by offloading more, in less memory than it took without the headroom
    first, was = res.plans[0], loose.plans[0]
    assert first.layout != was.layout or first.metrics["memory_peak_gib"] < was.metrics["memory_peak_gib"]


def test_table_marks_tight_plans_and_the_option_is_checked():
    r = run_plan_in_process("--model", "llama3-70b", "--cluster", "h100x32", "--global-batch", "32", "--seq-len",
                            "4096", "--memory-headroom", "0.5", "--top", "2")
    assert r.returncode == 0 and "tight" in r.stdout
    bad = run_plan_in_process("--model", "llama3-70b", "--cluster", "h100x64", "--memory-headroom", "0.9")
    assert bad.returncode == 2 and "--memory-headroom" in bad.stderr and "Traceback" not in bad.stderr


# --- optimizer offload ---------------------------------------------------------------------------------------------
def _offload_problem(cluster: str, share: float, framework: str = "megatron-core") -> Problem:
    return Problem(load_model("llama3-8b"), load_cluster(cluster),
                   TrainingSpec(seq_len=4096, global_batch=64, framework=framework, optimizer_offload=share))


def test_offload_moves_optimizer_states_and_costs_host_link_time():
    c = cols(tp=1, dp=8, zero=1)
    base, half = evaluate(_offload_problem("h100x8", 0.0), c), evaluate(_offload_problem("h100x8", 0.5), c)
    assert half["mem_optimizer_gib"][0] == pytest.approx(base["mem_optimizer_gib"][0] / 2)
    assert half["memory_peak_gib"][0] < base["memory_peak_gib"][0]
    extra = half["optimizer_s"][0] - base["optimizer_s"][0]
    params = load_model("llama3-8b")
    from planner.cost.flops import total_params
    from planner.cost.profiles import profile_for

    prof = profile_for("megatron-core")
    # PCIe Gen5 x16 at the copy engines' measured 55.63 of 64 GB/s (NVbandwidth)
    want = 0.5 * total_params(params) / 8 * (prof.grad_bytes + prof.weight_bytes) / 55.63e9
    assert extra == pytest.approx(want, rel=0.05)
    assert half["step_time_s"][0] > base["step_time_s"][0]  # not free


def test_grace_c2c_makes_offload_cheaper_than_pcie():
    c = cols(tp=1, dp=8, zero=1)
    pcie = evaluate(_offload_problem("b200x8", 1.0), c)["optimizer_s"][0]
    c2c = evaluate(_offload_problem("gb200x8", 1.0), c)["optimizer_s"][0]
    assert c2c < pcie / 3


def test_offload_capabilities_and_launch_flags():
    from planner.inputs.frameworks import offload_refusal

    assert offload_refusal("megatron-core", 0.3) is None
    assert offload_refusal("deepspeed", 1.0) is None and "whole optimizer" in offload_refusal("deepspeed", 0.5)
    assert "no optimizer-state offload" in offload_refusal("torchtitan", 1.0)
    args = ("--model", "llama3-70b", "--cluster", "h100x16", "--global-batch", "32", "--seq-len", "4096")
    mega = run_plan_in_process(*args, "--optimizer-offload", "0.5", "-f", "megatron")
    assert mega.returncode == 0
    assert "--optimizer-cpu-offload" in mega.stdout and "--optimizer-offload-fraction 0.5" in mega.stdout
    assert "--use-precision-aware-optimizer" in mega.stdout
    ds = run_plan_in_process("--model", "llama3-8b", "--cluster", "h100x8", "--global-batch", "32", "--seq-len",
                             "4096", "--optimizer-offload", "1", "-f", "deepspeed")
    assert ds.returncode == 0 and '"offload_optimizer"' in ds.stdout
    tt = run_plan_in_process(*args, "--optimizer-offload", "1", "-f", "torchtitan")
    assert tt.returncode == 2 and "--optimizer-offload" in tt.stderr and "Traceback" not in tt.stderr
