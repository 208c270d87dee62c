"""CI regression gate: re-plan the problem recorded in a plan document and say what moved (`plan check`, `plan diff`).

A plan document (docs/plan-schema.md) records everything needed to plan the same problem again under `inputs`. The
gate rebuilds exactly that problem (the recorded model, cluster and GPU figures, not today's catalog entries),
searches again with the recorded options and compares the new document with the recorded one: it passes when the
rank-1 layout is identical and rank-1 tokens/s/GPU moved by at most a relative tolerance. Everything else that moved
(metrics, breakdown terms, prune counts, planner version, inputs) is reported to explain why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from planner.errors import NoFeasiblePlan, PlanInputError
from planner.inputs.layout import KNOBS
from planner.inputs.problem import Problem
from planner.inputs.specs import MAX_SIZE, ClusterSpec, GPUSpec, ModelSpec, TrainingSpec
from planner.report import document

GATE_METRIC = "tokens_per_s_per_gpu"
METRIC_KEYS = ("step_time_s", "tokens_per_s_per_gpu", "mfu", "memory_peak_gib")
LAYOUT_ORDER = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "num_microbatches", "zero", "recompute",
                "sequence_parallel", "schedule", "cp_comm", "expert_tp", "first_stage_layers", "last_stage_layers")
OPTION_KEYS = ("fix", "top", "allow_tp_across_nodes", "time_limit", "compress")
MAX_TOP = 1000  # the CLI's --top bound
RECORD_FIX = "record a baseline with 'plan --model ... --cluster ... --format json > baseline.json'"
RERECORD_FIX = "re-record the baseline with this planner ('plan ... --format json > baseline.json')"
_SHOWN_BREAKDOWN = 8  # breakdown terms named in the text report (all are in the JSON one)


class _Absent:
    """A key present in one document only."""

    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Any = _Absent()


# --- the comparison -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Change:
    """One value that differs between the old and the new document (ABSENT where a side lacks the key)."""

    key: str
    old: Any
    new: Any

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "old": _json_value(self.old), "new": _json_value(self.new)}


@dataclass(frozen=True)
class Delta:
    """A numeric value in both documents, with its change."""

    key: str
    old: float | None
    new: float | None

    @property
    def change(self) -> float | None:
        if self.old is None or self.new is None:
            return None
        return self.new - self.old

    @property
    def rel_change(self) -> float | None:
        """(new - old) / |old|; inf when old is 0 and new is not; None when a side is missing."""
        return relative_change(self.old, self.new)

    @property
    def moved(self) -> bool:
        return self.old != self.new

    def to_dict(self) -> dict[str, Any]:
        rel = self.rel_change
        change = self.change
        return {"key": self.key, "old": self.old, "new": self.new,
                "change": None if change is None else document.sig(change),
                "rel_change": None if rel is None or not math.isfinite(rel) else document.sig(rel, 4)}


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
            moved = f"{GATE_METRIC} {_fmt(gate.old)} -> {_fmt(gate.new)} ({_pct(gate.rel_change)})"
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


# --- reading a plan document ------------------------------------------------------------------------------------------
def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _mapping(value: Any, name: str, source: str | None, fix: str = RECORD_FIX) -> dict[str, Any]:
    if value is ABSENT:
        raise PlanInputError("missing", field=name, source=source, fix=fix)
    if not isinstance(value, dict):
        raise PlanInputError(f"expected a mapping, got {_type_name(value)}", field=name, source=source, fix=fix)
    return value


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def check_header(doc: Any, source: str | None = None) -> dict[str, Any]:
    """The document is a mapping with schema_version 1 and an `inputs` mapping holding the four sections."""
    if not isinstance(doc, dict):
        raise PlanInputError(f"not a plan document (expected a mapping, got {_type_name(doc)})", source=source,
                             fix=RECORD_FIX)
    if "schema_version" not in doc:
        raise PlanInputError("not a plan document (no schema_version)", field="schema_version", source=source,
                             fix=RECORD_FIX)
    version = doc["schema_version"]
    if isinstance(version, bool) or version != document.SCHEMA_VERSION:
        raise PlanInputError(f"{version!r:.40} is not supported (this planner reads "
                             f"{document.SCHEMA_VERSION})", field="schema_version", source=source, fix=RERECORD_FIX)
    inputs = _mapping(doc.get("inputs", ABSENT), "inputs", source)
    for section in ("model", "cluster", "training", "options"):
        _mapping(inputs.get(section, ABSENT), f"inputs.{section}", source)
    return inputs


def check_plans(doc: dict[str, Any], source: str | None = None) -> list[dict[str, Any]]:
    """`plans` is a non-empty list of {layout: {...}, metrics: {...}, breakdown: {...}} with numeric metrics."""
    plans = doc.get("plans", ABSENT)
    if plans is ABSENT:
        raise PlanInputError("missing", field="plans", source=source, fix=RECORD_FIX)
    if not isinstance(plans, list) or not plans:
        raise PlanInputError(f"expected a non-empty list of plans, got {_describe(plans)}", field="plans",
                             source=source, fix=RECORD_FIX)
    for i, raw in enumerate(plans):
        where = f"plans[{i}]"
        entry = _mapping(raw, where, source)
        _mapping(entry.get("layout", ABSENT), f"{where}.layout", source)
        metrics = _mapping(entry.get("metrics", ABSENT), f"{where}.metrics", source)
        breakdown = entry.get("breakdown", {})
        _mapping(breakdown, f"{where}.breakdown", source)
        for key in METRIC_KEYS:
            if key not in metrics and i == 0:
                raise PlanInputError("missing", field=f"{where}.metrics.{key}", source=source, fix=RECORD_FIX)
            if key in metrics and not _is_number(metrics[key]):
                raise PlanInputError(f"expected a finite number, got {metrics[key]!r:.60}",
                                     field=f"{where}.metrics.{key}", source=source, fix=RECORD_FIX)
    return plans


def _describe(value: Any) -> str:
    if isinstance(value, list):
        return "an empty list"
    return _type_name(value)


def load_plan_document(path: str) -> dict[str, Any]:
    """Read a plan document (JSON, or YAML from `--format yaml`) and check its shape; one PlanInputError otherwise."""
    from planner.inputs.files import read_structured_file

    if Path(path).is_dir():
        raise PlanInputError("is a directory, not a plan document", source=path,
                             fix="pass one plan.json; to gate a directory, loop over its files (docs/ci-gate.md)")
    doc = read_structured_file(Path(path))
    check_header(doc, path)
    check_plans(doc, path)
    return doc


def _unknown_keys(section: dict[str, Any], known: set[str], name: str, source: str | None) -> None:
    """A key the planner does not read would be silently ignored on re-planning: refuse it instead."""
    from planner.inputs.files import check_keys

    unknown = check_keys(section, source or "<document>", known, where=name)
    if unknown.notes:
        plural = "s" if len(unknown.notes) > 1 else ""
        raise PlanInputError(f"unknown key{plural} {', '.join(unknown.notes[:4])}", field=name, source=source,
                             fix="correct or remove it (plan documents hold only the keys plan writes)")


def _spec(cls: type[BaseModel], data: dict[str, Any], name: str, source: str | None) -> Any:
    from planner.inputs.files import pydantic_error

    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise pydantic_error(exc, source, prefix=f"{name}.") from None


def _categories(key: str) -> list[str]:
    """The names of a categorical knob in index order (recompute, schedule, ...); [] for a numeric one."""
    from planner.inputs.layout import decode

    names: list[str] = []
    for index in range(64):
        try:
            name = decode(key, index)
        except IndexError:
            break
        if not isinstance(name, str):
            return []
        names.append(name)
    return names


def _fixed(raw: Any, source: str | None) -> dict[str, int]:
    """options.fix: knob -> encoded value, as `plan` stores it (categoricals as indices; names are accepted too)."""
    from planner.inputs.layout import encode

    where = "inputs.options.fix"
    fix = _mapping(raw, where, source)
    limits = {"sp": 1, "zero": 3}
    out: dict[str, int] = {}
    for key, value in fix.items():
        field_name = f"{where}.{key}"
        if key not in KNOBS:
            raise PlanInputError(f"unknown knob {str(key)[:40]!r}", field=where, source=source,
                                 fix=f"use one of {', '.join(KNOBS)}")
        if isinstance(value, bool) and key == "sp":
            value = int(value)
        if isinstance(value, str):
            try:
                out[key] = encode(key, value, field_name)[1]
            except PlanInputError as exc:
                raise PlanInputError(exc.message, field=field_name, source=source, fix=exc.fix) from None
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise PlanInputError(f"expected an encoded knob value (an integer), got {value!r:.60}",
                                 field=field_name, source=source, fix=RERECORD_FIX)
        names = _categories(key)
        if key in limits:
            low, high = 0, limits[key]
        elif names:
            low, high = 0, len(names) - 1
        else:
            low, high = 1, MAX_SIZE
        if not low <= value <= high:
            shown = f" (0..{high}: {', '.join(names)})" if names else f" ({low}..{high})"
            raise PlanInputError(f"{value} is out of range{shown}", field=field_name, source=source,
                                 fix=RERECORD_FIX)
        out[key] = value
    return dict(sorted(out.items()))


def _options(options: dict[str, Any], source: str | None) -> dict[str, Any]:
    """The recorded options, checked and normalised to what `plan` writes (fix, top, allow_tp_across_nodes,
    time_limit)."""
    _unknown_keys(options, set(OPTION_KEYS), "inputs.options", source)
    if "top" not in options:
        raise PlanInputError("missing", field="inputs.options.top", source=source, fix=RERECORD_FIX)
    top = options["top"]
    if not isinstance(top, int) or isinstance(top, bool) or not 1 <= top <= MAX_TOP:
        raise PlanInputError(f"expected an integer from 1 to {MAX_TOP}, got {top!r:.60}", field="inputs.options.top",
                             source=source, fix="e.g. top: 5")
    allow = options.get("allow_tp_across_nodes", False)
    if not isinstance(allow, bool):
        raise PlanInputError(f"expected true or false, got {allow!r:.60}", field="inputs.options.allow_tp_across_nodes",
                             source=source, fix="write true or false")
    limit = options.get("time_limit")
    if limit is not None and not (_is_number(limit) and limit > 0):
        raise PlanInputError(f"expected null or a positive number of seconds, got {limit!r:.60}",
                             field="inputs.options.time_limit", source=source, fix="write null (no limit)")
    out = {"fix": _fixed(options.get("fix", {}), source), "top": top, "allow_tp_across_nodes": allow,
           "time_limit": limit}
    if "compress" in options:  # what-if compressed collectives, recorded only by planners that offer them
        out["compress"] = _compress(options["compress"], source)
    return out


def _compress(raw: Any, source: str | None) -> dict[str, float]:
    from planner.cost.fabric import DIMENSIONS

    where = "inputs.options.compress"
    ratios = _mapping(raw, where, source)
    for key, value in ratios.items():
        if key not in DIMENSIONS:
            raise PlanInputError(f"unknown dimension {str(key)[:40]!r}", field=where, source=source,
                                 fix=f"use one of {', '.join(DIMENSIONS)}")
        if not (_is_number(value) and value > 0):
            raise PlanInputError(f"expected a positive compression ratio, got {value!r:.60}", field=f"{where}.{key}",
                                 source=source, fix="e.g. dp: 4")
    return dict(ratios)


def problem_from_document(doc: Any, source: str | None = None) -> Problem:
    """Rebuild exactly the problem a plan document was made for, from its `inputs` (recorded figures, not today's
    catalog). A bad or foreign document raises one PlanInputError naming `source`, the field and the fix."""
    from planner.cost.profiles import PROFILES

    inputs = check_header(doc, source)
    model_in = inputs["model"]
    _unknown_keys(model_in, set(ModelSpec.model_fields), "inputs.model", source)
    model = _spec(ModelSpec, model_in, "inputs.model", source)
    cluster_in = inputs["cluster"]
    _unknown_keys(cluster_in, set(ClusterSpec.model_fields), "inputs.cluster", source)
    gpu_in = _mapping(cluster_in.get("gpu", ABSENT), "inputs.cluster.gpu", source)
    _unknown_keys(gpu_in, set(GPUSpec.model_fields), "inputs.cluster.gpu", source)
    cluster = _spec(ClusterSpec, cluster_in, "inputs.cluster", source)
    training_in = inputs["training"]
    _unknown_keys(training_in, set(TrainingSpec.model_fields), "inputs.training", source)
    training = _spec(TrainingSpec, training_in, "inputs.training", source)
    if training.framework not in PROFILES:
        raise PlanInputError(f"unknown framework {training.framework!r:.60}", field="inputs.training.framework",
                             source=source, fix=f"use one of {', '.join(sorted(PROFILES))}")
    options = _options(inputs["options"], source)
    extra = {"compress": options["compress"]} if options.get("compress") else {}
    return Problem(model, cluster, training, fixed=options["fix"],
                   allow_tp_across_nodes=options["allow_tp_across_nodes"], **extra)


def replan(doc: dict[str, Any], source: str | None = None) -> dict[str, Any]:
    """Search the recorded problem again with the recorded options and build a new plan document (as `plan --format
    json` would write it). Raises NoFeasiblePlan when nothing is feasible any more."""
    from planner.search.search import search

    problem = problem_from_document(doc, source)
    options = _options(doc["inputs"]["options"], source)
    plans = doc.get("plans")
    top = max(options["top"], len(plans) if isinstance(plans, list) else 0)  # `plan --rank N` reports max(top, N)
    result = search(problem, top=top, time_limit_s=options["time_limit"])
    new = document.build(result, options)
    recorded = doc.get("search")
    timed = isinstance(recorded, dict) and recorded.get("seconds") is not None  # recorded with --timings
    new["search"]["seconds"] = round(result.seconds, 3) if timed else None
    return new


# --- comparing --------------------------------------------------------------------------------------------------------
def relative_change(old: float | None, new: float | None) -> float | None:
    if old is None or new is None:
        return None
    if old == new:
        return 0.0
    if old == 0:
        return math.inf if new > 0 else -math.inf
    return (new - old) / abs(old)


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys ({"gpu": {"key": "h100"}} -> {"gpu.key": "h100"}); lists are leaves."""
    if not isinstance(value, dict):
        return {prefix: value} if prefix else {}
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(item, dict) and item:
            out.update(flatten(item, name))
        else:
            out[name] = item
    return out


def _layout_order(key: str) -> tuple[int, str]:
    return (LAYOUT_ORDER.index(key), "") if key in LAYOUT_ORDER else (len(LAYOUT_ORDER), key)


def _changes(old: dict[str, Any], new: dict[str, Any], prefix: str = "", layout: bool = False) -> list[Change]:
    a, b = flatten(old, prefix), flatten(new, prefix)
    out = []
    for key in sorted(set(a) | set(b), key=_layout_order if layout else None):
        va, vb = a.get(key, ABSENT), b.get(key, ABSENT)
        if not _same(va, vb):
            out.append(Change(key, va, vb))
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if _is_number(a) and _is_number(b):
        return a == b
    return type(a) is type(b) and a == b


def _number(value: Any) -> float | None:
    return float(value) if _is_number(value) else None


def _deltas(old: dict[str, Any], new: dict[str, Any], keys: tuple[str, ...] | None = None) -> list[Delta]:
    a, b = flatten(old), flatten(new)
    names = keys if keys is not None else tuple(sorted(set(a) | set(b)))
    return [Delta(k, _number(a.get(k)), _number(b.get(k))) for k in names]


def _moved_terms(old: dict[str, Any], new: dict[str, Any]) -> list[Delta]:
    """Breakdown terms that moved: time terms (seconds) first, then memory (GiB), each by largest absolute move."""
    moved = [d for d in _deltas(old, new) if d.moved]

    def order(d: Delta) -> tuple[int, float]:
        change = d.change
        size = abs(change) if change is not None else math.inf
        return (0 if d.key.endswith("_s") else 1, -size)

    return sorted(moved, key=order)


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
    summary = doc.get("model_summary")
    if isinstance(summary, dict):
        out["model_summary"] = summary
    return out


def compare(old_doc: dict[str, Any], new_doc: dict[str, Any], tolerance: float = 0.01) -> Comparison:
    """Passes when the rank-1 layout is identical and rank-1 tokens_per_s_per_gpu changed by at most `tolerance`
    (relative). Both documents must be plan documents (PlanInputError otherwise)."""
    if not (_is_number(tolerance) and tolerance >= 0):
        raise PlanInputError(f"must be a non-negative number (got {tolerance!r})", field="tolerance",
                             fix="e.g. 0.01 for 1%")
    old_plan = check_plans(old_doc)[0]
    new_plan = check_plans(new_doc)[0]
    cmp = Comparison(passed=True, tolerance=float(tolerance), old_layout=old_plan["layout"],
                     new_layout=new_plan["layout"])
    cmp.layout_changes = _changes(old_plan["layout"], new_plan["layout"], layout=True)
    cmp.metrics = _deltas(old_plan["metrics"], new_plan["metrics"], METRIC_KEYS)
    cmp.breakdown = _moved_terms(old_plan.get("breakdown", {}), new_plan.get("breakdown", {}))
    cmp.inputs = _changes(_with_summary(old_doc), _with_summary(new_doc))
    old_version, new_version = old_doc.get("planner_version", ABSENT), new_doc.get("planner_version", ABSENT)
    if not _same(old_version, new_version):
        cmp.planner_version = Change("planner_version", old_version, new_version)
    cmp.pruned = _changes(_pruned(old_doc), _pruned(new_doc))
    cmp.search = _changes(_search_counts(old_doc), _search_counts(new_doc))
    if cmp.layout_changes:
        moved = ", ".join(f"{c.key} {_fmt(c.old)} -> {_fmt(c.new)}" for c in cmp.layout_changes)
        cmp.reasons.append(f"rank-1 layout changed ({moved})")
    gate = cmp.gate
    rel = gate.rel_change if gate is not None else None
    if rel is None:
        cmp.reasons.append(f"rank-1 {GATE_METRIC} is missing")
    elif abs(rel) > tolerance * (1 + 1e-9):
        cmp.reasons.append(f"rank-1 {GATE_METRIC} changed {_pct(rel)} ({_fmt(gate.old)} -> {_fmt(gate.new)}), "
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
            current = load_model(name).model_dump(exclude_none=True)
        except PlanInputError:
            current = None
        if current is not None:
            out += _changes(model, current, "model")
    cluster = inputs.get("cluster")
    cname = cluster.get("name") if isinstance(cluster, dict) else None
    match = _CLUSTER_NAME.match(cname.strip().lower()) if isinstance(cname, str) else None
    if match and match["gpu"] in gpu_catalog() and len(match["count"]) <= 8 and 0 < int(match["count"]) <= MAX_SIZE:
        try:
            gpu = load_gpu(match["gpu"], "catalog")
            current_cluster = cluster_from_gpu(gpu, int(match["count"]), cname.strip().lower()).model_dump()
        except (PlanInputError, ValidationError):
            current_cluster = None
        if current_cluster is not None:
            out += _changes(cluster, current_cluster, "cluster")
    return out


def check_document(doc: dict[str, Any], tolerance: float = 0.01, source: str | None = None) -> Comparison:
    """The gate: re-plan `doc` and compare (old = the document, new = today's planner). A problem that has no
    feasible plan any more fails, naming the rules whose prune counts grew."""
    check_header(doc, source)
    check_plans(doc, source)
    problem = problem_from_document(doc, source)  # every input error before any search
    try:
        new = replan(doc, source)
    except NoFeasiblePlan as exc:
        from planner.search.diagnosis import explain_infeasible

        cmp = Comparison(passed=False, tolerance=float(tolerance), old_layout=doc["plans"][0]["layout"])
        cmp.reasons.append(f"the recorded problem has no feasible plan any more ({exc.message})")
        cmp.metrics = [Delta(k, _number(doc["plans"][0]["metrics"].get(k)), None) for k in METRIC_KEYS]
        pruned = exc.diagnosis.get("pruned") if isinstance(exc.diagnosis, dict) else None
        cmp.pruned = _changes(_pruned(doc), pruned if isinstance(pruned, dict) else {})
        cmp.notes += [f"binding: {reason}" for reason in explain_infeasible(problem).get("reasons", [])]
        cmp.catalog_drift = catalog_drift(doc)
        return cmp
    cmp = compare(doc, new, tolerance)
    cmp.catalog_drift = catalog_drift(doc)
    return cmp


# --- text -------------------------------------------------------------------------------------------------------------
def _json_value(value: Any) -> Any:
    return None if value is ABSENT else value


def _fmt(value: Any) -> str:
    if value is ABSENT:
        return "(absent)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict | list):
        import json

        return json.dumps(value, sort_keys=True)
    return str(value)


def _pct(rel: float | None) -> str:
    if rel is None:
        return "n/a"
    if math.isinf(rel):
        return "from 0"
    return f"{rel:+.2%}"


def _table(title: str, header: tuple[str, ...], rows: list[tuple[str, ...]], indent: str = "  ") -> list[str]:
    """A left-aligned text table: the title line, then a header and the rows in columns."""
    if not rows:
        return []
    cols = [header, *rows]
    widths = [max(len(r[i]) for r in cols) for i in range(len(header))]
    lines = [title]
    for row in cols:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row)]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def _change_rows(changes: list[Change]) -> list[tuple[str, ...]]:
    return [(c.key, _fmt(c.old), _fmt(c.new)) for c in changes]


def _delta_rows(deltas: list[Delta]) -> list[tuple[str, ...]]:
    return [(d.key, _fmt(d.old), _fmt(d.new), _pct(d.rel_change) if d.moved else "same") for d in deltas]


def layout_text(layout: Any) -> str:
    """A layout on one line: 'tp=8 pp=4 dp=16 ...'."""
    if not isinstance(layout, dict):
        return _fmt(layout)
    return " ".join(f"{k}={_fmt(layout[k])}" for k in sorted(layout, key=lambda k: _layout_order(str(k))))


def format_comparison(cmp: Comparison, title: str | None = None) -> str:
    """The comparison for humans: the verdict, then 'old vs new' columns for everything that moved."""
    o, n = cmp.old_label, cmp.new_label
    lines = [title] if title else []
    lines.append(cmp.summary())
    if cmp.old_layout is not None:
        lines.append(f"rank-1 layout ({o}): {layout_text(cmp.old_layout)}")
    if cmp.new_layout is not None and cmp.layout_changes:
        lines.append(f"rank-1 layout ({n}): {layout_text(cmp.new_layout)}")
    sections = [
        _table("rank-1 layout changes:", ("key", o, n), _change_rows(cmp.layout_changes)),
        _table("rank-1 metrics:", ("metric", o, n, "change"), _delta_rows(cmp.metrics)),
    ]
    terms = cmp.breakdown[:_SHOWN_BREAKDOWN]
    more = len(cmp.breakdown) - len(terms)
    breakdown = _table("rank-1 breakdown terms that moved most:", ("term", o, n, "change"), _delta_rows(terms))
    if more > 0:
        breakdown.append(f"  ... and {more} more (see --format json)")
    sections.append(breakdown)
    sections.append(_table("inputs that differ:", ("key", o, n), _change_rows(cmp.inputs)))
    if cmp.catalog_drift:
        sections.append(_table("recorded inputs that differ from today's catalog entry (the gate re-plans the "
                               "recorded values):", ("key", "recorded", "catalog"), _change_rows(cmp.catalog_drift)))
    if cmp.planner_version is not None:
        sections.append([f"planner_version: {_fmt(cmp.planner_version.old)} ({o}) vs "
                         f"{_fmt(cmp.planner_version.new)} ({n})"])
    sections.append(_table("search.pruned counts that changed:", ("rule", o, n), _change_rows(cmp.pruned)))
    sections.append(_table("search counts that changed:", ("key", o, n), _change_rows(cmp.search)))
    if cmp.notes:
        sections.append([f"note: {note}" for note in cmp.notes])
    for section in sections:
        lines.extend(section)
    return "\n".join(lines) + "\n"


def check_ok_line(cmp: Comparison, source: str) -> str:
    """The one line `plan check` prints to stderr when the baseline still holds."""
    line = f"{source}: {cmp.summary()}"
    if cmp.planner_version is not None:
        line += f" (planner {_fmt(cmp.planner_version.old)} -> {_fmt(cmp.planner_version.new)})"
    if cmp.catalog_drift:
        keys = ", ".join(c.key for c in cmp.catalog_drift[:3]) + (" ..." if len(cmp.catalog_drift) > 3 else "")
        line += f"; note: today's catalog differs from the recorded inputs ({keys}); re-record to adopt it"
    return line


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
    import json

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
            row.layout_changes = _changes(pa["layout"], pb["layout"], layout=True)
            row.metrics = _deltas(pa["metrics"], pb["metrics"], METRIC_KEYS)
        if pb:
            row.b_rank_in_a = where_a.get(_canonical(pb["layout"]))
        out.append(row)
    return out


def diff_data(a: dict[str, Any], b: dict[str, Any], a_label: str = "A", b_label: str = "B") -> dict[str, Any]:
    """Two plan documents, structured (what `plan diff --format json` prints)."""
    version_a, version_b = a.get("planner_version", ABSENT), b.get("planner_version", ABSENT)
    return {
        "a": a_label, "b": b_label,
        "inputs": [c.to_dict() for c in _changes(_with_summary(a), _with_summary(b))],
        "planner_version": None if _same(version_a, version_b) else Change("planner_version", version_a,
                                                                           version_b).to_dict(),
        "ranks": [r.to_dict() for r in rank_diffs(a, b)],
        "pruned": [c.to_dict() for c in _changes(_pruned(a), _pruned(b))],
        "search": [c.to_dict() for c in _changes(_search_counts(a), _search_counts(b))],
    }


def diff_documents(a: dict[str, Any], b: dict[str, Any], a_label: str = "A", b_label: str = "B") -> str:
    """Two plan documents side by side for code review: inputs that differ, rank-by-rank layout changes, metric deltas
    with percentages, planner version and prune-count changes."""
    ranks = rank_diffs(a, b)
    lines = [f"A = {a_label}", f"B = {b_label}"]
    inputs = _changes(_with_summary(a), _with_summary(b))
    lines += _table("inputs that differ:", ("key", "A", "B"), _change_rows(inputs)) or ["inputs: identical"]
    version_a, version_b = a.get("planner_version", ABSENT), b.get("planner_version", ABSENT)
    if not _same(version_a, version_b):
        lines.append(f"planner_version: {_fmt(version_a)} (A) vs {_fmt(version_b)} (B)")
    for row in ranks:
        r = row.rank
        if row.layout_a is None:
            lines.append(f"rank {r}: only in B: {layout_text(row.layout_b)}")
            continue
        if row.layout_b is None:
            lines.append(f"rank {r}: only in A: {layout_text(row.layout_a)}")
            continue
        if row.layout_changes:
            moved = f"; B's rank {r} was rank {row.b_rank_in_a} in A" if row.b_rank_in_a not in (None, r) else ""
            lines.append(f"rank {r}: layout changed{moved}")
            lines += _table("", ("key", "A", "B"), _change_rows(row.layout_changes))[1:]
        else:
            lines.append(f"rank {r}: same layout: {layout_text(row.layout_a)}")
        if any(d.moved for d in row.metrics):
            lines += _table("", ("metric", "A", "B", "change"), _delta_rows(row.metrics))[1:]
        else:
            lines.append("  metrics: identical")
    lines += _table("search.pruned counts that differ:", ("rule", "A", "B"),
                    _change_rows(_changes(_pruned(a), _pruned(b))))
    lines += _table("search counts that differ:", ("key", "A", "B"),
                    _change_rows(_changes(_search_counts(a), _search_counts(b))))
    return "\n".join(lines) + "\n"
