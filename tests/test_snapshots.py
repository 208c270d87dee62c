"""Recorded outputs stay byte-identical: plan documents, explain and validate for tests/snapshots/problems.txt.

The guard of the package reshaping (issue 10): moving code must not move a number. When the cost model changes on
purpose, re-record with `python bench/record_snapshots.py` in the same commit.
"""

import sys
from pathlib import Path

import pytest
from conftest import run_plan_in_process

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from record_snapshots import SNAPSHOTS, problems  # noqa: E402

PROBLEMS = problems()


def test_at_least_twenty_plan_problems_are_recorded() -> None:
    plan_docs = [name for name, args in PROBLEMS if args[0].startswith("--")]
    assert len(plan_docs) >= 20


@pytest.mark.parametrize(("name", "args"), PROBLEMS, ids=[name for name, _ in PROBLEMS])
def test_output_is_byte_identical(name: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    done = run_plan_in_process(*args)
    assert done.returncode in (0, 1), done.stderr
    expected = (SNAPSHOTS / f"{name}.out").read_text()
    assert done.stdout == expected, f"{name}: output changed; re-record only if the change is intended"
