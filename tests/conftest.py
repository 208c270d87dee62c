import subprocess

import numpy as np
import pytest

from cli.in_process import run_in_process
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.layout import KNOBS, Layout
from planner.inputs.problem import Problem
from planner.inputs.specs import ModelSpec, TrainingSpec


def gpt(layers: int, hidden: int, heads: int, vocab: int = 51200, tie: bool = True) -> ModelSpec:
    """A GPT-style model as in Narayanan et al. 2021 (MHA, 4h GeLU MLP)."""
    return ModelSpec(name=f"gpt-{layers}-{hidden}", hidden_size=hidden, num_hidden_layers=layers,
                     num_attention_heads=heads, num_key_value_heads=heads, intermediate_size=4 * hidden,
                     vocab_size=vocab, hidden_act="gelu", tie_word_embeddings=tie)


def cols(**layout: int) -> dict[str, np.ndarray]:
    base = {"tp": 1, "pp": 1, "dp": 1, "cp": 1, "ep": 1, "vpp": 1, "mbs": 1, "zero": 0, "recompute": 0, "sp": 0,
            "schedule": 0, "cp_comm": 0, "etp": 0, "order": 0}
    base.update(layout)
    assert set(base) == set(KNOBS)
    return {k: np.array([v], dtype=np.int64) for k, v in base.items()}


def layout(**knobs: int) -> Layout:
    """One layout: the knobs given, the rest as `cols` fills them."""
    return Layout.from_columns(cols(**knobs))


@pytest.fixture
def llama70b_h100x512() -> Problem:
    return Problem(load_model("llama3-70b"), load_cluster("h100x512"), TrainingSpec(seq_len=8192, global_batch=512))


def run_plan_in_process(*args: str) -> subprocess.CompletedProcess:
    """cli.main.run in this process (about 10x faster than a subprocess), with its exit code, stdout and stderr."""
    code, out, err = run_in_process(*args)
    return subprocess.CompletedProcess(list(args), code, out, err)
