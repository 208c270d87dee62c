"""The typed Layout (planner.inputs.layout): its conversions round-trip (encoded dict, one-row columns, labels,
`--layout` text, a plan document's layout), and every public signature that takes or returns one layout uses it."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.inputs.layout import KNOB_TABLE, KNOBS, Layout, Recompute, Zero, parse_pairs
from planner.report.document import layout_dict
from planner.report.launchers._plan import _layout as document_layout
from planner.search.search import search

ROOT = Path(__file__).resolve().parents[1]


def _values(knob: str) -> st.SearchStrategy[int]:
    choices = dict((k.name, k.allowed()) for k in KNOB_TABLE)[knob]
    if choices is not None:
        return st.sampled_from(choices)
    return st.integers(0, 1) if knob == "sp" else st.integers(1, 4096)


layouts = st.builds(lambda values: Layout.from_dict(values), st.fixed_dictionaries({k: _values(k) for k in KNOBS}))


def test_every_knob_is_a_documented_field_in_the_tables_order() -> None:
    fields = [f.name for f in dataclasses.fields(Layout)]
    assert fields == list(KNOBS)
    source = (ROOT / "planner/inputs/layout.py").read_text()
    cls = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == "Layout")
    body = cls.body
    documented = {stmt.target.id for stmt, after in zip(body, body[1:], strict=False)
                  if isinstance(stmt, ast.AnnAssign) and isinstance(after, ast.Expr)
                  and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)}
    assert documented == set(KNOBS)  # a docstring right under each field, as torchtitan documents its config


@settings(max_examples=300, deadline=None)
@given(layouts)
def test_conversions_round_trip(lay: Layout) -> None:
    encoded = lay.as_dict()
    assert list(encoded) == list(KNOBS) and all(type(v) is int for v in encoded.values())
    assert Layout.from_dict(encoded) == lay
    cols = lay.columns()
    assert all(v.dtype == np.int64 and v.shape == (1,) for v in cols.values())
    assert Layout.from_columns(cols) == lay
    assert Layout.from_labels(lay.labels()) == lay
    assert Layout.from_dict(parse_pairs([lay.text()], "--layout")) == lay  # as `--layout` and `--fix` read it
    assert hash(Layout.from_dict(encoded)) == hash(lay)


@settings(max_examples=200, deadline=None)
@given(layouts)
def test_a_plan_documents_layout_reads_back_as_the_same_knobs(lay: Layout) -> None:
    doc = layout_dict(lay, {"num_microbatches": 8.0}, nvlink_domain=8)
    assert {k: doc[k] for k in ("tp", "pp", "dp", "cp", "ep", "vpp")} == {k: getattr(lay, k) for k in
                                                                          ("tp", "pp", "dp", "cp", "ep", "vpp")}
    labels = lay.labels()
    assert (doc["micro_batch"], doc["recompute"], doc["sequence_parallel"], doc["schedule"], doc["cp_comm"]) == (
        labels["mbs"], labels["recompute"], labels["sp"], labels["schedule"], labels["cp_comm"])
    # the document writes HSDP as ZeRO-3 with a shard group; the launchers' reader gets the same knobs back
    back = document_layout(doc, "plans[0].layout")
    assert back.zero == (int(Zero.PARAMETERS) if lay.zero == Zero.HSDP else int(lay.zero))
    assert (back.fsdp_shard_group is not None) == (lay.zero == Zero.HSDP)
    assert (back.tp, back.micro_batch, back.recompute, back.schedule) == (lay.tp, lay.mbs, labels["recompute"],
                                                                          labels["schedule"])


def test_codes_become_the_declared_types() -> None:
    second = {"etp": 1, "sp": 1, "cp_comm": 2, "order": 1}
    lay = Layout.from_columns({k: np.array([1, second.get(k, 2)]) for k in KNOBS}, row=1)
    assert lay.recompute is Recompute.FULL and lay.zero is Zero.GRADIENTS and lay.sp is True
    assert type(lay.tp) is int
    assert lay.replace(recompute=0).recompute is Recompute.NONE
    with pytest.raises(ValueError):
        lay.replace(recompute=99)
    with pytest.raises(dataclasses.FrozenInstanceError):
        lay.tp = 4  # type: ignore[misc]
    assert dataclasses.replace(lay, tp=4).tp == 4 and lay.tp == 2 and "recompute='full'" in repr(lay)


def test_a_layout_written_before_etp_and_cp_comm_gets_their_defaults() -> None:
    old = {"tp": 2, "pp": 1, "dp": 6, "cp": 1, "ep": 4, "vpp": 1, "mbs": 1, "zero": 1, "recompute": 0, "sp": 1,
           "schedule": 0}
    lay = Layout.from_dict(old)
    assert int(lay.etp) == 1 and int(lay.cp_comm) == 0  # ep 4 does not divide dp 6: only folding launches it


def test_search_plans_carry_layouts(llama70b_h100x512) -> None:
    result = search(llama70b_h100x512, top=3)
    assert all(isinstance(p.layout, Layout) for p in result.plans)
    assert all(Layout.from_dict(p.layout.as_dict()) == p.layout for p in result.plans)


# --- every public signature with one layout uses Layout --------------------------------------------------------------
LAYOUT_NAMES = ("layout", "lay")  # a parameter, return or field of these names is one layout
# (module, function or class.field, parameter name or "return") that take or return one layout
EXPECTED = [
    ("planner/search/search.py", "price_layout", "layout"), ("planner/search/search.py", "Plan.layout", "field"),
    ("planner/search/cpsat.py", "CoreResult.example", "field"),
    ("planner/report/explain.py", "complete_layout", "return"), ("planner/report/explain.py", "timeline", "lay"),
    ("planner/report/document.py", "layout_dict", "layout"), ("planner/report/table.py", "compact_layout", "layout"),
    ("planner/report/html.py", "layout_text", "lay"), ("planner/report/html.py", "simulate", "lay"),
    ("planner/report/html.py", "sim_microbatch_cap", "lay"), ("planner/report/html.py", "timeline_chart", "lay"),
    ("planner/report/html.py", "layout_svg", "lay"), ("planner/report/sweep.py", "SweepPoint.layout", "field"),
    ("planner/strategies/pipeline_sim.py", "simulate_layout", "lay"),
    ("planner/strategies/osdp.py", "plan_osdp", "layout"), ("planner/strategies/osdp.py", "OsdpPlan.layout", "field"),
    ("planner/strategies/osdp_table.py", "osdp_table", "layout"),
    ("planner/strategies/osdp_table.py", "layer_costs", "layout"),
    ("planner/strategies/osdp_table.py", "full_layout", "return"),
    ("planner/strategies/partition.py", "partition_for", "layout"),
    ("planner/strategies/partition.py", "partition_inputs", "layout"),
    ("planner/strategies/partition.py", "layer_weights", "lay"),
]
# Layouts as a plan document writes them (labels, micro_batch, derived keys): mappings by design, not Layout.
DOCUMENT_LAYOUTS = {("planner/report/compare_text.py", "layout_text"), ("planner/report/explain_from.py", "_knobs"),
                    ("planner/report/compare.py", "_canonical"),
                    # and the knobs a launch file states, gathered while it is read: a partial layout (Knobs)
                    ("planner/inputs/launch_readers/_common.py", "LaunchConfig.layout")}
# The cost model's own modules (restructured separately) take columns, or a layout dict at their edge.
COST_EDGE = {"planner/cost/stages.py"}


def _signatures() -> dict[tuple[str, str], dict[str, str]]:
    """(module path, function or Class.field) -> {parameter name or "return" or "field": annotation text}."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    for path in sorted((ROOT / "planner").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                notes = {a.arg: ast.unparse(a.annotation) for a in args if a.annotation is not None}
                if node.returns is not None:
                    notes["return"] = ast.unparse(node.returns)
                out[(rel, node.name)] = notes
            elif isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                        out[(rel, f"{node.name}.{stmt.target.id}")] = {"field": ast.unparse(stmt.annotation)}
    return out


def test_the_listed_signatures_take_or_return_layout() -> None:
    found = _signatures()
    for module, name, where in EXPECTED:
        annotation = found[(module, name)][where]
        assert annotation in ("Layout", "Layout | None"), (module, name, where, annotation)


def test_no_public_signature_passes_one_layout_as_a_dict() -> None:
    """A parameter, return value or field named like one layout is a Layout; a string-keyed int mapping is only a
    partial layout (Knobs: pins, `--layout`, a launch file), never named `layout`."""
    wrong = []
    for (module, name), notes in _signatures().items():
        if (module, name) in DOCUMENT_LAYOUTS or module in COST_EDGE or module.startswith("planner/cost/"):
            continue
        for where, annotation in notes.items():
            named = where in LAYOUT_NAMES or (where in ("field", "return") and name.split(".")[-1] in LAYOUT_NAMES)
            if named and "Layout" not in annotation and annotation != "bool":  # (changes(layout=True) is a flag)
                wrong.append((module, name, where, annotation))
            if annotation.replace(" ", "") in ("dict[str,int]", "Mapping[str,int]") and where in LAYOUT_NAMES:
                wrong.append((module, name, where, annotation))
    assert wrong == []
