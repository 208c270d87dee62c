"""CI regression gate: re-plan the problem recorded in a plan document and say what moved (`plan check`, `plan diff`).

A plan document (docs/plan-schema.md) records everything needed to plan the same problem again under `inputs`. The
gate rebuilds exactly that problem (the recorded model, cluster and GPU figures, not today's catalog entries),
searches again with the recorded options and compares the new document with the recorded one: it passes when the
rank-1 layout is identical and rank-1 tokens/s/GPU moved by at most a relative tolerance. Everything else that moved
(metrics, breakdown terms, prune counts, planner version, inputs) is reported to explain why.
Documents are read by planner.report.plan_doc; the comparison is printed by planner.report.compare_text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from planner.errors import NoFeasiblePlan, PlanInputError
from planner.inputs.specs import MAX_SIZE
from planner.report import document
from planner.report.changes import Change, Delta, changes, deltas, fmt, moved_terms, number, pct, same
from planner.report.plan_doc import (
    ABSENT,
    METRIC_KEYS,
    PlanDocument,
    check_plans,
    is_number,
    plan_document,
    problem_from_document,
    read_options,
    with_default_breakdown,
    with_default_sections,
)

GATE_METRIC = "tokens_per_s_per_gpu"


# --- the comparison -------------------------------------------------------------------------------------------------
@dataclass
class Comparison:
    """Old (recorded) plan document vs new (re-planned or other) one: the verdict and everything that moved."""

    passed: bool
    tolerance: float
    reasons: list[str] = field(default_factory=list)  # why it failed; empty when it passed
    layout_changes: list[Change] = field(default_factory=list)  # rank-1 layout, key: old -> new
    metrics: list[Delta] = field(default_factory=list)  # rank-1 METRIC_KEYS, moved or not
    breakdown: list[Delta] = field(default_factory=list)  # rank-1 breakdown terms that moved, largest first
    inputs: list[Change] = field(default_factory=list)  # inputs.* (and model_summary.*) values that differ
    planner_version: Change | None = None
    pruned: list[Change] = field(default_factory=list)  # search.pruned rules whose counts changed
    search: list[Change] = field(default_factory=list)  # search.candidates / feasible / proven_best changes
    catalog_drift: list[Change] = field(default_factory=list)  # recorded inputs (old) vs today's catalog (new)
    notes: list[str] = field(default_factory=list)
    old_layout: dict[str, Any] | None = None
    new_layout: dict[str, Any] | None = None
    old_label: str = "old"
    new_label: str = "new"

    @property
    def gate(self) -> Delta | None:
        return next((d for d in self.metrics if d.key == GATE_METRIC), None)

    def summary(self) -> str:
        """One line: the verdict and the gate metric."""
        gate = self.gate
        moved = ""
        if gate is not None and gate.old is not None and gate.new is not None:
            moved = f"{GATE_METRIC} {fmt(gate.old)} -> {fmt(gate.new)} ({pct(gate.rel_change)})"
        if self.passed:
            return f"OK: rank-1 layout unchanged, {moved} within tolerance {self.tolerance:.4g}"
        return "FAIL: " + "; ".join(self.reasons)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed, "tolerance": self.tolerance, "reasons": list(self.reasons),
            "summary": self.summary(),
            "layout": {"old": self.old_layout, "new": self.new_layout,
                       "changes": [c.to_dict() for c in self.layout_changes]},
            "metrics": [d.to_dict() for d in self.metrics],
            "breakdown": [d.to_dict() for d in self.breakdown],
            "inputs": [c.to_dict() for c in self.inputs],
            "planner_version": None if self.planner_version is None else self.planner_version.to_dict(),
            "pruned": [c.to_dict() for c in self.pruned],
            "search": [c.to_dict() for c in self.search],
            "catalog_drift": [c.to_dict() for c in self.catalog_drift],
            "notes": list(self.notes),
        }



# --- re-planning ------------------------------------------------------------------------------------------------------
def replan(doc: dict[str, Any] | PlanDocument, source: str | None = None) -> dict[str, Any]:
    """Search the recorded problem again with the recorded options and build a new plan document (as `plan --format
    json` would write it). Raises NoFeasiblePlan when nothing is feasible any more."""
    from planner.search.search import search

    pd = doc if isinstance(doc, PlanDocument) else PlanDocument(doc, source)
    problem = pd.problem()
    options = read_options(pd.raw["inputs"]["options"], pd.source)
    plans = pd.raw.get("plans")
    top = max(options.top, len(plans) if isinstance(plans, list) else 0)  # `plan --rank N` reports max(top, N)
    result = search(problem, top=top, time_limit_s=options.time_limit, rank_by=options.rank_by)
    new = document.build(result, options.as_dict())
    recorded = pd.raw.get("search")
    timed = isinstance(recorded, dict) and recorded.get("seconds") is not None  # recorded with --timings
    new["search"]["seconds"] = round(result.seconds, 3) if timed else None
    return new


# --- comparing --------------------------------------------------------------------------------------------------------
def _search_section(doc: dict[str, Any]) -> dict[str, Any]:
    section = doc.get("search")
    return section if isinstance(section, dict) else {}


def _pruned(doc: dict[str, Any]) -> dict[str, Any]:
    pruned = _search_section(doc).get("pruned")
    return pruned if isinstance(pruned, dict) else {}


def _search_counts(doc: dict[str, Any]) -> dict[str, Any]:
    section = _search_section(doc)
    return {k: section[k] for k in ("candidates", "feasible", "proven_best") if k in section}


def _with_summary(doc: dict[str, Any]) -> dict[str, Any]:
    """The inputs plus model_summary (derived, but it shows a changed model even where the inputs were edited)."""
    inputs = doc.get("inputs")
    out = dict(inputs) if isinstance(inputs, dict) else {}
    if "cluster" in out:
        out["cluster"] = with_default_sections(out["cluster"])
    summary = doc.get("model_summary")
    if isinstance(summary, dict):
        out["model_summary"] = summary
    return out


def compare(old_doc: dict[str, Any], new_doc: dict[str, Any], tolerance: float = 0.01) -> Comparison:
    """Passes when the rank-1 layout is identical and rank-1 tokens_per_s_per_gpu changed by at most `tolerance`
    (relative). Both documents must be plan documents (PlanInputError otherwise)."""
    if not (is_number(tolerance) and tolerance >= 0):
        raise PlanInputError(f"must be a non-negative number (got {tolerance!r})", field="tolerance",
                             fix="e.g. 0.01 for 1%")
    old_plan = check_plans(old_doc)[0]
    new_plan = check_plans(new_doc)[0]
    cmp = Comparison(passed=True, tolerance=float(tolerance), old_layout=old_plan["layout"],
                     new_layout=new_plan["layout"])
    cmp.layout_changes = changes(old_plan["layout"], new_plan["layout"], layout=True)
    cmp.metrics = deltas(old_plan["metrics"], new_plan["metrics"], METRIC_KEYS)
    cmp.breakdown = moved_terms(with_default_breakdown(old_plan.get("breakdown", {})),
                                with_default_breakdown(new_plan.get("breakdown", {})))
    cmp.inputs = changes(_with_summary(old_doc), _with_summary(new_doc))
    old_version, new_version = old_doc.get("planner_version", ABSENT), new_doc.get("planner_version", ABSENT)
    if not same(old_version, new_version):
        cmp.planner_version = Change("planner_version", old_version, new_version)
    cmp.pruned = changes(_pruned(old_doc), _pruned(new_doc))
    cmp.search = changes(_search_counts(old_doc), _search_counts(new_doc))
    if cmp.layout_changes:
        moved = ", ".join(f"{c.key} {fmt(c.old)} -> {fmt(c.new)}" for c in cmp.layout_changes)
        cmp.reasons.append(f"rank-1 layout changed ({moved})")
    gate = cmp.gate
    rel = gate.rel_change if gate is not None else None
    if rel is None:
        cmp.reasons.append(f"rank-1 {GATE_METRIC} is missing")
    elif abs(rel) > tolerance * (1 + 1e-9):
        cmp.reasons.append(f"rank-1 {GATE_METRIC} changed {pct(rel)} ({fmt(gate.old)} -> {fmt(gate.new)}), "
                           f"beyond the tolerance of {tolerance:.4g} ({tolerance:.2%})")
    cmp.passed = not cmp.reasons
    for side, doc in (("old", old_doc), ("new", new_doc)):
        if _search_section(doc).get("proven_best") is False:
            cmp.notes.append(f"the {side} search was cut short by its time limit (not proven best); its result "
                             "depends on the machine's speed")
    return cmp


# --- check: baseline vs re-plan ---------------------------------------------------------------------------------------
def catalog_drift(doc: dict[str, Any]) -> list[Change]:
    """Where a baseline names a catalog model (inputs.model.name) or a catalog cluster ({gpu}x{count}), the recorded
    values (old) that differ from today's catalog entry (new). The gate re-plans the recorded values; this says the
    baseline is stale or was edited, and which keys."""
    from planner.inputs.catalog import _CLUSTER_NAME, cluster_from_gpu, gpu_catalog, load_gpu, load_model, model_aliases

    inputs = doc.get("inputs")
    if not isinstance(inputs, dict):
        return []
    out: list[Change] = []
    model = inputs.get("model")
    name = model.get("name") if isinstance(model, dict) else None
    if isinstance(name, str) and name.strip().lower() in model_aliases():
        try:
            current = load_model(name).dump()
        except PlanInputError:
            current = None
        if current is not None:
            out += changes(model, current, "model")
    cluster = inputs.get("cluster")
    cname = cluster.get("name") if isinstance(cluster, dict) else None
    match = _CLUSTER_NAME.match(cname.strip().lower()) if isinstance(cname, str) else None
    if match and match["gpu"] in gpu_catalog() and len(match["count"]) <= 8 and 0 < int(match["count"]) <= MAX_SIZE:
        try:
            gpu = load_gpu(match["gpu"], "catalog")
            current_cluster = document.cluster_dict(cluster_from_gpu(gpu, int(match["count"]), cname.strip().lower()))
        except (PlanInputError, ValidationError):
            current_cluster = None
        if current_cluster is not None:
            out += changes(with_default_sections(cluster), current_cluster, "cluster")
    return out


def check_document(doc: dict[str, Any] | PlanDocument, tolerance: float = 0.01,
                   source: str | None = None) -> Comparison:
    """The gate: re-plan `doc` and compare (old = the document, new = today's planner). A problem that has no
    feasible plan any more fails, naming the rules whose prune counts grew."""
    if isinstance(doc, PlanDocument):
        doc, source = doc.raw, source or doc.source
    plan_document(doc, source)
    problem = problem_from_document(doc, source)  # every input error before any search
    try:
        new = replan(doc, source)
    except NoFeasiblePlan as exc:
        from planner.search.diagnosis import explain_infeasible

        cmp = Comparison(passed=False, tolerance=float(tolerance), old_layout=doc["plans"][0]["layout"])
        cmp.reasons.append(f"the recorded problem has no feasible plan any more ({exc.message})")
        cmp.metrics = [Delta(k, number(doc["plans"][0]["metrics"].get(k)), None) for k in METRIC_KEYS]
        pruned = exc.diagnosis.get("pruned") if isinstance(exc.diagnosis, dict) else None
        cmp.pruned = changes(_pruned(doc), pruned if isinstance(pruned, dict) else {})
        cmp.notes += [f"binding: {reason}" for reason in explain_infeasible(problem).get("reasons", [])]
        cmp.catalog_drift = catalog_drift(doc)
        return cmp
    cmp = compare(doc, new, tolerance)
    cmp.catalog_drift = catalog_drift(doc)
    return cmp


# --- diff: two plan documents side by side ----------------------------------------------------------------------------
@dataclass
class RankDiff:
    """One rank of two plan documents (None where a document has fewer plans)."""

    rank: int
    layout_a: dict[str, Any] | None
    layout_b: dict[str, Any] | None
    layout_changes: list[Change] = field(default_factory=list)
    metrics: list[Delta] = field(default_factory=list)
    b_rank_in_a: int | None = None  # where B's layout at this rank ranked in A (None: not among A's plans)

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "layout_a": self.layout_a, "layout_b": self.layout_b,
                "layout_changes": [c.to_dict() for c in self.layout_changes],
                "metrics": [d.to_dict() for d in self.metrics], "b_rank_in_a": self.b_rank_in_a}


def _canonical(layout: dict[str, Any]) -> str:
    return json.dumps(layout, sort_keys=True)


def rank_diffs(a: dict[str, Any], b: dict[str, Any]) -> list[RankDiff]:
    """Rank by rank: layout changes and metric deltas, and where B's layout sat in A's ranking."""
    plans_a, plans_b = check_plans(a), check_plans(b)
    where_a: dict[str, int] = {}
    for i, p in enumerate(plans_a):
        where_a.setdefault(_canonical(p["layout"]), i + 1)
    out = []
    for i in range(max(len(plans_a), len(plans_b))):
        pa = plans_a[i] if i < len(plans_a) else None
        pb = plans_b[i] if i < len(plans_b) else None
        row = RankDiff(i + 1, pa["layout"] if pa else None, pb["layout"] if pb else None)
        if pa and pb:
            row.layout_changes = changes(pa["layout"], pb["layout"], layout=True)
            row.metrics = deltas(pa["metrics"], pb["metrics"], METRIC_KEYS)
        if pb:
            row.b_rank_in_a = where_a.get(_canonical(pb["layout"]))
        out.append(row)
    return out


def diff_data(a: dict[str, Any], b: dict[str, Any], a_label: str = "A", b_label: str = "B") -> dict[str, Any]:
    """Two plan documents, structured (what `plan diff --format json` prints)."""
    version_a, version_b = a.get("planner_version", ABSENT), b.get("planner_version", ABSENT)
    return {
        "a": a_label, "b": b_label,
        "inputs": [c.to_dict() for c in changes(_with_summary(a), _with_summary(b))],
        "planner_version": None if same(version_a, version_b) else Change("planner_version", version_a,
                                                                           version_b).to_dict(),
        "ranks": [r.to_dict() for r in rank_diffs(a, b)],
        "pruned": [c.to_dict() for c in changes(_pruned(a), _pruned(b))],
        "search": [c.to_dict() for c in changes(_search_counts(a), _search_counts(b))],
    }
