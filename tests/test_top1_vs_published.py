"""bench/top1_vs_published.py, issue 25's check of the free #1 against the best published run: its published figures
are the case file's where a case holds them, the best of a problem's runs is the fastest, and each problem plans a #1
that the check can compare."""

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
    args = dict(zip(run.args[::2], run.args[1::2], strict=True))
    for one in run.runs:
        named = re.search(r"validation case ([A-Z0-9]+-\d+)", one.source)
        if named:  # the figure is the case's own, and so is the problem where it is the first run's
            case = _cases()[named.group(1)]
            assert case["measured"]["tokens_per_s_per_gpu"] == one.tokens_per_s_per_gpu
            assert args["--cluster"] == case["cluster"]
            assert int(args["--seq-len"]) == case["training"]["seq_len"]
            if one is run.runs[0]:
                assert int(args["--global-batch"]) == case["training"]["global_batch"]
                assert args["--precision"] == case["training"]["precision"]
    assert run.tokens_per_s_per_gpu == max(one.tokens_per_s_per_gpu for one in run.runs)
    best = check.top1(run.args)
    assert best["metrics"]["tokens_per_s_per_gpu"] > 0
    low, high = best["band"]["tokens_per_s_per_gpu"]
    assert low < best["metrics"]["tokens_per_s_per_gpu"] < high
    assert check.in_band(best, low) and not check.in_band(best, 0.99 * low)
