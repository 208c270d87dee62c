"""_Crossed.grouped (a rule checked once per run of rows that agree on the knobs it reads) keeps exactly the rows,
order and per-rule counts of checking every crossed row, on problems too large for the full cross product of
tests/test_search_speed.py's staged-enumeration test."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest

from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec
from planner.search import space
from planner.search.rules import RULES, Rule

CASES = [  # MoE + DualPipe in fp8 (the slowest search's model), a dense pipeline problem, a fixed knob, torchtitan
    (("deepseek-v3", "h800x256", 4096, 1024, "fp8", "generic"), {}),
    (("llama3-405b", "h100x1024", 8192, 512, "bf16", "megatron-core"), {}),
    (("mixtral-8x22b", "h100x256", 4096, 1024, "bf16", "generic"), {"dp": 8}),
    (("llama3-70b", "h100x64", 8192, 128, "bf16", "torchtitan"), {}),
]


def _problem(model: str, cluster: str, seq: int, gbs: int, precision: str, framework: str,
             fixed: dict[str, int]) -> Problem:
    return Problem(load_model(model), load_cluster(cluster), TrainingSpec(
        seq_len=seq, global_batch=gbs, precision=precision, framework=framework), fixed=fixed)


@pytest.mark.parametrize("case, fixed", CASES, ids=lambda c: c[0] if isinstance(c, tuple) else "")
@pytest.mark.parametrize("lazy_last", [False, True])
def test_runs_answer_as_every_crossed_row(case, fixed, lazy_last) -> None:
    p = _problem(*case, fixed)
    calls: list[str] = []
    real = space._Crossed.grouped

    def counted(self, rule: Rule, problem: Problem) -> np.ndarray | None:
        ok = real(self, rule, problem)
        if ok is not None:
            calls.append(rule.name)
        return ok

    with mock.patch.object(space._Crossed, "grouped", counted):
        fast = space.enumerate_layouts(p, lazy_last=lazy_last)
    with mock.patch.object(space._Crossed, "grouped", lambda self, rule, problem: None):
        slow = space.enumerate_layouts(p, lazy_last=lazy_last)
    assert len(calls) >= 2  # the runs did answer rules
    assert fast.candidates == slow.candidates and fast.pruned == slow.pruned
    assert any(v for k, v in fast.pruned.items() if k in calls)  # ... and some of them pruned rows
    if lazy_last:
        assert fast.last[0] == slow.last[0] and np.array_equal(fast.last[1], slow.last[1])
        assert np.array_equal(fast.last[2], slow.last[2])
        assert all(np.array_equal(fast.cols.take_column(k, np.arange(len(slow.cols.parent))), slow.cols[k])
                   for k in slow.cols)
    else:
        assert all(np.array_equal(fast.cols[k], slow.cols[k]) for k in slow.cols)


def test_runs_are_only_taken_when_few() -> None:
    """A knob that changes on every row gives no runs worth checking alone: the crossed rows are checked."""
    rule = next(r for r in RULES if r.name == "global_batch_divisible")  # reads mbs and dp
    p = _problem("llama3-8b", "h100x64", 8192, 256, "bf16", "generic", {})
    alternating = {"dp": np.tile(np.array([1, 2], dtype=np.int32), 50)}
    assert space._Crossed(alternating, "mbs", [1, 2, 4]).grouped(rule, p) is None
    steady = {"dp": np.repeat(np.array([1, 2, 3, 4], dtype=np.int32), 25)}
    crossed = space._Crossed(steady, "mbs", [1, 2, 4])
    ok = crossed.grouped(rule, p)
    assert ok is not None and np.array_equal(ok, rule.check(crossed, p)) and (~ok).any() and ok.any()
