"""bench/top1_vs_published.py, issue 25's check of the free #1 against the best published run: its published figures
are the case file's where a case holds them, and each problem plans a #1 that the check can compare."""

from __future__ import annotations

import re
import sys
from functools import cache
from pathlib import Path

import pytest

from planner.evidence.cases import load_cases

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import top1_vs_published as check  # noqa: E402


@cache
def _cases() -> dict[str, dict]:
    return {c["id"]: c for c in load_cases(None)}


@pytest.mark.parametrize("run", check.RUNS, ids=[r.title for r in check.RUNS])
def test_each_published_figure_is_its_case_and_the_problem_plans(run: check.Published) -> None:
    named = re.search(r"validation case ([A-Z0-9]+-\d+)", run.source)
    if named:  # the figure and the problem are the case's own
        case = _cases()[named.group(1)]
        assert case["measured"]["tokens_per_s_per_gpu"] == run.tokens_per_s_per_gpu
        args = dict(zip(run.args[::2], run.args[1::2], strict=True))
        assert args["--cluster"] == case["cluster"]
        assert int(args["--seq-len"]) == case["training"]["seq_len"]
        assert int(args["--global-batch"]) == case["training"]["global_batch"]
        assert args["--precision"] == case["training"]["precision"]
    best = check.top1(run.args)
    assert best["metrics"]["tokens_per_s_per_gpu"] > 0
