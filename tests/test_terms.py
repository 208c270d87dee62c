"""planner.cost.terms names every number `evaluate` returns, and docs/cost-model.md shows that table."""

import importlib
from collections import Counter
from pathlib import Path

import numpy as np

from planner.cost import terms
from planner.cost.step import evaluate
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec

ROOT = Path(__file__).resolve().parents[1]


def _cols(**kw: int) -> dict[str, np.ndarray]:
    base = {"tp": 1, "pp": 1, "dp": 1, "cp": 1, "ep": 1, "vpp": 1, "mbs": 1, "zero": 0, "recompute": 0, "sp": 0,
            "schedule": 0, "cp_comm": 0}
    return {k: np.array([v]) for k, v in {**base, **kw}.items()}


def test_every_returned_key_has_exactly_one_row_and_vice_versa() -> None:
    p = Problem(load_model("llama3-8b"), load_cluster("h100x8"), TrainingSpec(seq_len=4096, global_batch=64))
    out = evaluate(p, _cols(tp=2, pp=2, dp=2, mbs=1, zero=1, sp=1))
    counts = Counter(terms.KEYS)
    assert all(n == 1 for n in counts.values()), [k for k, n in counts.items() if n > 1]
    assert set(counts) == set(out)


def test_every_row_names_an_importable_function() -> None:
    for t in terms.TERMS:
        module, _, name = t.where.rpartition(".")
        assert callable(getattr(importlib.import_module(module), name)), t.where
        assert t.label and t.unit and t.formula and "|" not in t.formula


def test_cost_model_doc_embeds_the_rendered_table() -> None:
    doc = (ROOT / "docs" / "cost-model.md").read_text()
    assert terms.embedded(doc) == terms.render_markdown(), "regenerate with planner.cost.terms.splice"


def test_explained_numbers_are_terms() -> None:
    """Every metric docs/cost-model.md's "What the numbers mean" explains is a row of the terms table."""
    import re

    from planner.cost.terms import TERMS

    text = (ROOT / "docs" / "cost-model.md").read_text()
    start = text.index("## What the numbers mean")
    section = text[start:text.index("\n## ", start + 1)]
    keys = set(re.findall(r"`([a-z_]+_(?:s|gpu|gib)|mfu)`", section))
    assert keys and keys <= {t.key for t in TERMS}, keys - {t.key for t in TERMS}
