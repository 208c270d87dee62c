"""planner.cost.terms names every number `evaluate` returns, each row the one function that returns it (checked by
value on sample layouts), and docs/cost-model.md shows that table."""

import importlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

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


# Sample layouts whose every term the by-value test exercises: a dense pipelined one (interleaved, selective
# recompute), an MoE one with expert parallelism and full recompute, long context with context parallelism, layer
# offloading (with ZeRO-3), module offloading, and a ZeRO-3 MoE layout whose gathers share the NIC with its
# all-to-all. `plan explain` arguments.
SAMPLES = {
    "dense-vpp": ["--model", "llama70b", "--cluster", "h100x512",
                  "--layout", "tp=8,pp=4,vpp=5,mbs=1,zero=1,recompute=selective"],
    "moe-ep": ["--model", "mixtral-8x22b", "--cluster", "h100x256", "--layout", "tp=2,pp=4,ep=8,zero=1,recompute=full"],
    "context": ["--model", "llama70b", "--cluster", "h100x512", "--seq-len", "131072", "--global-batch", "64",
                "--layout", "tp=8,cp=4,pp=4,recompute=full"],
    "offload": ["--model", "llama3-70b", "--cluster", "gb300x64", "--seq-len", "8192", "--global-batch", "256",
                "--precision", "fp8", "--framework", "nemo",
                "--layout", "tp=1,pp=1,dp=64,mbs=2,zero=3,recompute=offload"],
    "moe-zero3": ["--model", "qwen3-235b-a22b", "--cluster", "h100x256", "--seq-len", "4096", "--global-batch", "8192",
                  "--precision", "fp8", "--framework", "nemo",
                  "--layout", "tp=1,pp=1,ep=32,zero=3,recompute=selective,schedule=combined-1f1b"],
    "offload-modules": ["--model", "llama3-70b", "--cluster", "h100x64", "--seq-len", "8192", "--global-batch", "64",
                        "--layout", "tp=8,pp=4,dp=2,zero=1,sp=1,recompute=offload-modules"],
}
# What the sample layouts must exercise: a term that is 0 in every sample would pass vacuously.
NONZERO = {"tp_comm_s", "cp_comm_s", "ep_comm_s", "fsdp_comm_s", "nic_comm_s", "pp_comm_s", "dp_comm_s", "recompute_s",
           "offload_s", "offloaded_layers", "bubble_s", "mem_buffers_gib", "mem_logits_gib"}
# evaluate's numbers that `plan explain --format json` does not print (checked against evaluate's value only).
UNPRINTED = {"stage_fwd_s", "stage_bwd_s", "stage_wgrad_s", "p2p_s"}


def _printed(doc: dict) -> dict[str, tuple[float, Callable[[float], float]]]:
    """Each number explain's JSON prints: (the printed value, how a value is rounded to print it)."""
    from planner.report.document import sig

    out: dict[str, tuple[float, Callable[[float], float]]] = {}
    for key, v in doc["metrics"].items():
        digits = 4 if key.startswith(("mfu", "memory")) else 6
        if key != "memory_capacity_gib":
            out[key] = (v, lambda x, d=digits: sig(x, d))
    for key, v in doc["breakdown"].items():
        if key != "memory_gib":
            out[key] = (v, sig)
    for kind, v in doc["breakdown"]["memory_gib"].items():
        out[f"mem_{kind}_gib"] = (v, lambda x: sig(x, 4))
    out["num_microbatches"] = (doc["layout"]["num_microbatches"], lambda x: int(round(x)))
    out["offloaded_layers"] = (doc["layout"].get("offload_layers", 0), lambda x: int(round(x)))
    for stage in ("first", "last"):
        out[f"{stage}_stage_mb_s"] = (doc["stages"][stage]["microbatch_fwd_bwd_s"], lambda x: round(x, 6))
    return out


def _record(monkeypatch: pytest.MonkeyPatch) -> list[tuple[dict, dict[str, list[np.ndarray]]]]:
    """Wrap every named function (in every module that holds it, however it was imported) and `evaluate`: each
    evaluate call is recorded with what each named function returned while it ran."""
    import pkgutil
    import sys

    import cli
    import planner
    from planner.cost import step

    # every module imported first, so that each one holding a named function is patched here and restored after
    # (a module first imported while patched would keep the wrapper past this test)
    for package in (planner, cli):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(info.name)
    runs: list[tuple[dict, dict[str, list[np.ndarray]]]] = []
    current: list[dict[str, list[np.ndarray]]] = []

    def install(original: Callable, wrapper: Callable) -> None:
        for mod in list(sys.modules.values()):
            if mod is not None and getattr(mod, original.__name__, None) is original:
                monkeypatch.setattr(mod, original.__name__, wrapper)

    for t in terms.TERMS:
        module, _, name = t.where.rpartition(".")
        original = getattr(importlib.import_module(module), name)

        def recorded(*args, _f=original, _where=t.where, **kw):  # noqa: ANN002, ANN003, ANN202
            out = _f(*args, **kw)
            if current:
                current[-1].setdefault(_where, []).append(np.array(out, dtype=float))
            return out

        install(original, recorded)
    evaluate_original = step.evaluate

    def evaluating(*args, **kw):  # noqa: ANN002, ANN003, ANN202
        current.append({})
        try:
            out = evaluate_original(*args, **kw)
        finally:
            calls = current.pop()
        runs.append((out, calls))
        return out

    install(evaluate_original, evaluating)
    return runs


def test_every_row_names_a_different_function() -> None:
    wheres = Counter(t.where for t in terms.TERMS)
    assert all(n == 1 for n in wheres.values()), [w for w, n in wheres.items() if n > 1]


@pytest.mark.parametrize("sample", SAMPLES, ids=list(SAMPLES))
def test_each_row_function_returns_the_number_explain_prints(sample: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """While `plan explain` prices the sample layout, the function each row names returns exactly (bit for bit) the
    number `evaluate` returns for its key, every time it is called, and that is the number the JSON prints."""
    import json

    from conftest import run_plan_in_process

    runs = _record(monkeypatch)
    done = run_plan_in_process("explain", *SAMPLES[sample], "--format", "json")
    assert done.returncode == 0, done.stderr
    assert len(runs) == 1, f"explain priced {len(runs)} layouts"
    values, calls = runs[0]
    printed = _printed(json.loads(done.stdout))
    assert set(printed) | UNPRINTED == set(terms.KEYS) and not set(printed) & UNPRINTED
    for t in terms.TERMS:
        value = np.asarray(values[t.key], dtype=float)
        assert calls.get(t.where), f"{t.key}: {t.where} is not called while evaluate prices it"
        for got in calls[t.where]:
            assert np.array_equal(np.broadcast_to(got, value.shape), value, equal_nan=True), \
                f"{t.key}: {t.where} returned {got}, evaluate returns {value}"
        if t.key in printed:
            shown, rounding = printed[t.key]
            assert shown == rounding(float(value[0])), f"{t.key}: printed {shown}, {t.where} gives {value[0]}"


def test_the_samples_exercise_every_term() -> None:
    """Each term that can be 0 is non-zero in at least one sample (else the by-value test checks only zeros)."""
    import json

    from conftest import run_plan_in_process

    seen: set[str] = set()
    for args in SAMPLES.values():
        doc = json.loads(run_plan_in_process("explain", *args, "--format", "json").stdout)
        seen |= {k for k, (v, _) in _printed(doc).items() if v}
    assert NONZERO <= seen, NONZERO - seen
