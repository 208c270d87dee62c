"""Whole nodes left idle where the global batch does not spread over every GPU (planner.search.subset)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec
from planner.search.search import search
from planner.search.subset import MIN_GAIN, smaller_job, subset_size

ROOT = Path(__file__).resolve().parent.parent


def _problem(model: str, cluster: str, gbs: int = 512, fixed: dict | None = None, **training: str) -> Problem:
    return Problem(load_model(model), load_cluster(cluster), TrainingSpec(seq_len=8192, global_batch=gbs, **training),
                   fixed=fixed or {})


def test_subset_keeps_only_the_batchs_odd_factors():
    # an NVL72 rack (odd factor 9) with a batch of 512 (odd factor 1): 64 GPUs, whole 4-GPU trays
    assert subset_size(_problem("llama3-8b", "gb200x72")) == 64
    assert subset_size(_problem("llama3-8b", "gb200x72", gbs=576)) is None  # 576 = 9 x 64: dp takes the 9
    assert subset_size(_problem("llama3-8b", "h100x64")) is None  # nothing odd to shed
    assert subset_size(_problem("llama3-8b", "h100x24", gbs=512)) == 16  # 24 = 3 x 8 -> two nodes of 8
    assert subset_size(_problem("llama3-8b", "gb200x72", fixed={"dp": 8})) is None  # the user pinned dp


def test_a_faster_smaller_job_is_named_and_a_tie_is_not():
    """gpt-oss on a GB200 NVL72 rack with a batch of 512: all 72 GPUs need a 9-deep pipeline, 64 run without one,
    and the 64 train faster in all; Llama 3 70B fits a 9-stage zero-bubble pipeline almost as well (no note)."""
    oss = _problem("gpt-oss-120b", "gb200x72", framework="nemo", precision="fp8")
    best = search(oss, top=1).plans[0].metrics["tokens_per_s_per_gpu"]
    note = smaller_job(oss, float(best))
    assert note is not None and note.gpus == 64 and note.cluster == "gb200x64" and note.gain >= MIN_GAIN
    llama = _problem("llama3-70b", "gb200x72")
    assert smaller_job(llama, float(search(llama, top=1).plans[0].metrics["tokens_per_s_per_gpu"])) is None


def test_the_note_goes_to_stderr_and_json_stays_clean():
    args = ["-m", "gpt-oss-120b", "-c", "gb200x72", "--framework", "nemo", "--precision", "fp8", "--format", "json"]
    r = subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["inputs"]["cluster"]["num_gpus"] == 72
    assert "note: 64 of these 72 GPUs (gb200x64) train" in r.stderr and "--cluster gb200x64" in r.stderr
