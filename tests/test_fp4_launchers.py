"""Bug: an fp4 plan could not be turned into launcher flags, and the error suggested fp16 (never planned)."""

from __future__ import annotations

import pytest
from conftest import run_plan_in_process

FP4 = ("--model", "llama3-8b", "--cluster", "b200x64", "--precision", "fp4")


def test_megatron_emits_fp4_flags() -> None:
    r = run_plan_in_process(*FP4, "--format", "megatron")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "--bf16" in lines and "--fp4-format e2m1" in lines and "--fp4-recipe nvfp4" in lines
    assert not any(line.startswith(("--fp8", "--fp16")) for line in lines)  # FP4 and FP8 are exclusive


def test_nemo_uses_the_nvfp4_preset() -> None:
    r = run_plan_in_process(*FP4, "--format", "nemo")
    assert r.returncode == 0, r.stderr
    assert "mixed_precision=bf16_with_nvfp4_mixed" in r.stdout.splitlines()


def test_env_restates_fp4() -> None:
    r = run_plan_in_process(*FP4, "--format", "env")
    assert r.returncode == 0, r.stderr
    assert "PRECISION=fp4" in r.stdout.splitlines()


@pytest.mark.parametrize("fmt", ["torchtitan", "deepspeed"])
def test_refusal_names_a_precision_the_planner_produces(fmt: str) -> None:
    r = run_plan_in_process(*FP4, "--format", fmt)
    assert r.returncode == 2 and r.stdout == ""
    (line,) = r.stderr.splitlines()
    assert "fp4" in line and "fp16" not in line
    assert "--precision bf16" in line or "--precision fp8" in line


def test_no_launcher_suggests_fp16() -> None:
    from planner.report.launchers._plan import PRECISIONS

    assert "fp16" not in PRECISIONS and {"bf16", "fp8", "fp4"} <= set(PRECISIONS)
