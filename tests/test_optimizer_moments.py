"""bf16 Adam moments (Megatron-Core's precision-aware optimizer, issue 12 item 3): priced, refused where a stack has
no switch for them, and launched with the framework's own flags."""

import subprocess
import sys
from pathlib import Path

import pytest

from planner.cost.profiles import BF16_MOMENTS_SAVING, profile_for, stack_profile
from planner.inputs.specs import TrainingSpec
from planner.report.launchers import render

ROOT = Path(__file__).resolve().parent.parent


def _plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, check=False)


def test_bf16_moments_hold_two_bytes_each_instead_of_four():
    fp32 = stack_profile(TrainingSpec(framework="megatron-core"))
    bf16 = stack_profile(TrainingSpec(framework="megatron-core", optimizer_moments="bf16"))
    # fp32 master (4) + two fp32 moments (8) = 12 bytes; two bf16 moments (4) leave 8
    assert fp32.optimizer_bytes == profile_for("megatron-core").optimizer_bytes == 12.0
    assert bf16.optimizer_bytes == 12.0 - BF16_MOMENTS_SAVING == 8.0


def test_bf16_moments_shrink_the_planned_optimizer_states():
    common = ("--model", "llama3-8b", "--cluster", "h100x8", "--framework", "megatron-core", "--fix",
              "tp=1,pp=1,zero=1,recompute=full,mbs=1", "--global-batch", "64", "--format", "json", "--top", "1")
    import json

    fp32 = json.loads(_plan(*common).stdout)["plans"][0]["breakdown"]["memory_gib"]
    bf16 = json.loads(_plan(*common, "--optimizer-moments", "bf16").stdout)["plans"][0]["breakdown"]["memory_gib"]
    assert bf16["optimizer"] == pytest.approx(fp32["optimizer"] * 8 / 12, rel=0.01)
    assert bf16["weights"] == fp32["weights"] and bf16["grads"] == fp32["grads"]


def test_frameworks_without_the_switch_refuse_with_one_line():
    r = _plan("--model", "llama3-8b", "--cluster", "h100x8", "--framework", "torchtitan", "--optimizer-moments",
              "bf16")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--optimizer-moments" in r.stderr
    r = _plan("--model", "llama3-8b", "--cluster", "h100x8", "--optimizer-moments", "fp16")
    assert r.returncode == 2 and "fp32 or bf16" in r.stderr


def test_megatron_and_bridge_emit_the_precision_aware_optimizer():
    import json

    doc = json.loads(_plan("--model", "llama3-8b", "--cluster", "h100x64", "--framework", "megatron-core",
                           "--optimizer-moments", "bf16", "--format", "json", "--top", "1").stdout)
    text = render(doc, "megatron")
    assert "--exp-avg-dtype bf16" in text and "--exp-avg-sq-dtype bf16" in text
    assert text.count("--use-precision-aware-optimizer") == 1
    nemo = render(doc, "nemo")
    assert "optimizer.exp_avg_dtype=bf16" in nemo and "optimizer.use_precision_aware_optimizer=true" in nemo
