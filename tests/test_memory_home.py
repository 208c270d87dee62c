"""The memory side has one home per idea (issue 23): the device total is derived in planner.cost.device_memory
alone, every priced stage comes from the one per-stage sum, and the printed numbers are its busiest stage's."""

import ast
from pathlib import Path

import numpy as np
import pytest
from conftest import cols

from planner.cost import device_memory
from planner.cost.allocations import PRICED, activation_side, every_rank, stage_memories, state_side
from planner.cost.memory import GIB
from planner.cost.memory_terms import busiest, memory_peak_gib, report
from planner.cost.stages import memory_stages
from planner.cost.step import evaluate
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.layout import Recompute, Schedule
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec

ROOT = Path(__file__).resolve().parents[1]
# The constants of the device total beyond the allocations. Only device_memory derives a total from them; two
# modules read one for a stated reason.
DEVICE_CONSTANTS = {"FRAGMENTATION", "CONTEXT_BYTES", "NCCL_BYTES_PER_GROUP", "NCCL_PROTOCOL_BYTES"}
READERS = {
    "planner/cost/device_memory.py": DEVICE_CONSTANTS,
    "planner/cost/fit_check.py": {"FRAGMENTATION"},  # the reordered fit test's line (its docstring's algebra)
    "planner/cost/memory_terms.py": {"CONTEXT_BYTES"},  # mem_context_gib prints the constant itself
}


def _names(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias):
            found.add(node.name)
    return found & DEVICE_CONSTANTS


def test_the_device_total_is_derived_in_device_memory_alone() -> None:
    """No module of the planner or the benchmarks reads the fragmentation share, the CUDA context or the NCCL
    buffers but device_memory (and the two stated readers): everything else calls device_bytes or its inverse."""
    for path in sorted((*(ROOT / "planner").rglob("*.py"), *(ROOT / "bench").rglob("*.py"))):
        rel = path.relative_to(ROOT).as_posix()
        used = _names(path)
        assert used <= READERS.get(rel, set()), f"{rel} derives the device total itself: {sorted(used)}"


def test_device_bytes_and_allocation_budget_are_inverse() -> None:
    allocated, outside = np.array([1e9, 7.5e10, 3.3e10]), np.array([1.6e9, 2.7e9, 1.0 * GIB])
    device = device_memory.device_bytes(allocated, outside)
    assert np.allclose(device, allocated * (1 + device_memory.FRAGMENTATION) + outside, rtol=1e-15, atol=0)
    assert np.allclose(device_memory.allocation_budget(device, outside), allocated, rtol=1e-15, atol=0)
    assert device_memory.device_bytes(allocated, 0.0)[1] == allocated[1] + device_memory.fragmentation_bytes(
        allocated[1])


def _llama70b() -> Problem:
    return Problem(load_model("llama3-70b"), load_cluster("h100x64"), TrainingSpec(seq_len=8192, global_batch=64))


LAYOUTS = {  # pipelined 1F1B, interleaved, DualPipe (two stage copies per rank), no pipeline with layer offloading
    "1f1b": cols(tp=8, pp=4, dp=2, sp=1, zero=1, recompute=int(Recompute.SELECTIVE)),
    "interleaved": cols(tp=8, pp=4, dp=2, sp=1, vpp=5, schedule=int(Schedule.INTERLEAVED)),
    "dualpipe": cols(tp=8, pp=4, dp=2, sp=1, schedule=int(Schedule.DUALPIPE)),
    "offload": cols(tp=8, pp=1, dp=8, sp=1, mbs=4, zero=3, recompute=int(Recompute.OFFLOAD)),
}


@pytest.mark.parametrize("name", LAYOUTS)
def test_printed_memory_numbers_are_the_busiest_priced_stage(name: str) -> None:
    """evaluate's memory numbers are memory_terms' of the one per-stage sum: allocated is the largest stage total,
    the per-kind numbers that stage's, the first and last totals those stages' device totals; explain's stages and
    the plain peak are the same sum."""
    p, c = _llama70b(), LAYOUTS[name]
    out = evaluate(p, c)
    stages = stage_memories(p, activation_side(p, c), state_side(p, c))
    groups = device_memory.table_groups(c)
    printed = report(stages, groups)
    assert set(printed) == {k for k in out if k.startswith("mem")}
    assert all(np.array_equal(v, out[k]) for k, v in printed.items())
    totals = [float(st.total[0]) for st in stages]
    top = stages[int(np.argmax(totals))]
    assert out["memory_allocated_gib"][0] == max(totals) / GIB
    assert out["mem_activations_gib"][0] == float(top.activations[0]) / GIB
    assert out["mem_weights_gib"][0] == float(top.states["weights"][0]) / GIB
    outside = device_memory.outside_allocator_bytes(groups)
    assert out["memory_peak_gib"][0] == float(device_memory.device_bytes(max(totals), outside[0])) / GIB
    assert out["mem_last_stage_gib"][0] == float(device_memory.device_bytes(stages[2].total, outside)[0]) / GIB
    assert memory_peak_gib(p, c)[0] == out["memory_peak_gib"][0]
    assert busiest(stages, outside=outside).allocated[0] == max(totals)
    explained = memory_stages(p, c)
    assert [explained[s]["allocated"][0] for s in ("first", "second", "last")] == [t / GIB for t in totals]
    if name == "offload":
        assert out["offloaded_layers"][0] > 0 and stages[0].offloaded[0] == out["offloaded_layers"][0]


def test_every_rank_walks_the_same_places() -> None:
    """The report's ranks are the priced places where they coincide: the first rank is the first priced stage, the
    last rank the last, rank 1 of a deep pipeline the second."""
    p, c = _llama70b(), LAYOUTS["1f1b"]
    act = activation_side(p, c)
    priced = stage_memories(p, act, state_side(p, c))
    places = every_rank(4)
    ranks = stage_memories(p, act, state_side(p, c, places), places)
    assert len(ranks) == 4 and len(PRICED) == 3
    for i, r in ((0, 0), (1, 1), (2, 3)):
        assert ranks[r].total[0] == priced[i].total[0]
    assert ranks[1].activations[0] > ranks[2].activations[0]  # 1F1B's warm-up depth falls with the rank
