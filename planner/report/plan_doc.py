"""The one reader of plan documents (docs/plan-schema.md): what `plan --format json|yaml` writes, read back.

`read_plan_document(path)` reads a file; `plan_document(doc)` checks a mapping already in memory. Both give a
`PlanDocument`: the raw mapping (kept as written, so comparisons see exactly the recorded values) with typed access to
its plans, its recorded options and the problem it was planned for. Launchers read the same object through
`loose_plan_document`, which asks only for what a launcher needs (plans and the inputs it renders from).
Knob values are read through the typed layout (planner.inputs.layout): a categorical knob is recorded either as its
code (what `plan` writes under options.fix, e.g. zero 4 for HSDP) or as its label ("hsdp").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from planner.errors import PlanInputError
from planner.inputs.layout import KNOB_BY_NAME, KNOBS, encode
from planner.inputs.problem import Problem, parse_compress
from planner.inputs.resilience import SECTIONS
from planner.inputs.specs import MAX_SIZE, ClusterSpec, GPUSpec, ModelSpec, TrainingSpec
from planner.report import READABLE_SCHEMA_VERSIONS, SCHEMA_VERSION
from planner.search.preference import RANK_BY

METRIC_KEYS = ("step_time_s", "tokens_per_s_per_gpu", "mfu", "memory_peak_gib")
OPTION_KEYS = ("fix", "top", "allow_tp_across_nodes", "time_limit", "compress", "memory_headroom", "rank_by")
MAX_TOP = 1000  # the CLI's --top bound
RECORD_FIX = "record a baseline with 'plan --model ... --cluster ... --format json > baseline.json'"
RERECORD_FIX = "re-record the baseline with this planner ('plan ... --format json > baseline.json')"
LAUNCHER_FIX = "pass a plan document produced by `plan --format json`"


class _Absent:
    """A key present in one document only."""

    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Any = _Absent()


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _mapping(value: Any, name: str, source: str | None, fix: str = RECORD_FIX) -> dict[str, Any]:
    if value is ABSENT:
        raise PlanInputError("missing", field=name, source=source, fix=fix)
    if not isinstance(value, dict):
        raise PlanInputError(f"expected a mapping, got {_type_name(value)}", field=name, source=source, fix=fix)
    return value


# --- typed fields (shared with the launchers' view of one plan) -------------------------------------------------------
def get(obj: Any, key: str, path: str) -> Any:
    """obj[key], or one PlanInputError naming `path.key`."""
    if not isinstance(obj, dict) or key not in obj:
        raise PlanInputError("missing key in plan document", field=f"{path}.{key}".lstrip("."), fix=LAUNCHER_FIX)
    return obj[key]


def get_int(obj: Any, key: str, path: str, *, minimum: int = 0, default: int | None = None) -> int:
    if default is not None and (not isinstance(obj, dict) or obj.get(key) is None):
        return default
    value = get(obj, key, path)
    # bool is an int subclass; a true/false where a count belongs is a broken document, not 1/0.
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise PlanInputError(f"expected an integer >= {minimum}, got {value!r}", field=f"{path}.{key}")
    return value


def get_choice(obj: Any, key: str, path: str, choices: tuple[str, ...]) -> str:
    value = get(obj, key, path)
    if value not in choices:
        raise PlanInputError(f"unknown value {value!r}", field=f"{path}.{key}", fix=f"use one of {', '.join(choices)}")
    return value


# --- shape checks ---------------------------------------------------------------------------------------------------
def check_header(doc: Any, source: str | None = None) -> dict[str, Any]:
    """The document is a mapping with a schema_version this planner reads and an `inputs` mapping holding the four
    sections."""
    if not isinstance(doc, dict):
        raise PlanInputError(f"not a plan document (expected a mapping, got {_type_name(doc)})", source=source,
                             fix=RECORD_FIX)
    if "schema_version" not in doc:
        raise PlanInputError("not a plan document (no schema_version)", field="schema_version", source=source,
                             fix=RECORD_FIX)
    version = doc["schema_version"]
    if isinstance(version, bool) or not isinstance(version, int) or version not in READABLE_SCHEMA_VERSIONS:
        readable = " and ".join(str(v) for v in READABLE_SCHEMA_VERSIONS)
        raise PlanInputError(f"{version!r:.40} is not supported (this planner reads {readable}; it writes "
                             f"{SCHEMA_VERSION})",
                             field="schema_version", source=source, fix=RERECORD_FIX)
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
        shown = "an empty list" if isinstance(plans, list) else _type_name(plans)
        raise PlanInputError(f"expected a non-empty list of plans, got {shown}", field="plans", source=source,
                             fix=RECORD_FIX)
    for i, raw in enumerate(plans):
        where = f"plans[{i}]"
        entry = _mapping(raw, where, source)
        _mapping(entry.get("layout", ABSENT), f"{where}.layout", source)
        metrics = _mapping(entry.get("metrics", ABSENT), f"{where}.metrics", source)
        _mapping(entry.get("breakdown", {}), f"{where}.breakdown", source)
        for key in METRIC_KEYS:
            if key not in metrics and i == 0:
                raise PlanInputError("missing", field=f"{where}.metrics.{key}", source=source, fix=RECORD_FIX)
            if key in metrics and not is_number(metrics[key]):
                raise PlanInputError(f"expected a finite number, got {metrics[key]!r:.60}",
                                     field=f"{where}.metrics.{key}", source=source, fix=RECORD_FIX)
    return plans


# --- recorded options -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecordedOptions:
    """inputs.options, checked and normalised to what `plan` writes."""

    fix: dict[str, int]  # knob -> encoded value (categoricals as their enum codes)
    top: int
    allow_tp_across_nodes: bool
    time_limit: float | None
    compress: dict[str, float] | None  # None: recorded by a planner without --compress
    memory_headroom: float | None = None  # None: recorded by a planner without --memory-headroom (the default)
    rank_by: str = "preference"  # planner.search.preference.RANK_BY

    def as_dict(self) -> dict[str, Any]:
        """The options mapping as `plan` records it in a new document."""
        out: dict[str, Any] = {"fix": dict(self.fix), "top": self.top,
                               "allow_tp_across_nodes": self.allow_tp_across_nodes, "time_limit": self.time_limit}
        if self.compress is not None:
            out["compress"] = dict(self.compress)
        if self.memory_headroom is not None:
            out["memory_headroom"] = self.memory_headroom
        out["rank_by"] = self.rank_by
        return out


def _unknown_keys(section: dict[str, Any], known: set[str], name: str, source: str | None) -> None:
    """A key the planner does not read would be silently ignored on re-planning: refuse it instead."""
    from planner.inputs.files import check_keys

    unknown = check_keys(section, source or "<document>", known, where=name)
    if unknown.notes:
        plural = "s" if len(unknown.notes) > 1 else ""
        raise PlanInputError(f"unknown key{plural} {', '.join(unknown.notes[:4])}", field=name, source=source,
                             fix="correct or remove it (plan documents hold only the keys plan writes)")


def _knob_value(key: str, value: Any, field_name: str, source: str | None) -> int:
    """One options.fix entry: a label ("hsdp", "selective") or an encoded value within the knob's range."""
    if isinstance(value, bool) and key == "sp":
        value = int(value)
    if isinstance(value, str):
        try:
            return encode(key, value, field_name)[1]
        except PlanInputError as exc:
            raise PlanInputError(exc.message, field=field_name, source=source, fix=exc.fix) from None
    if not isinstance(value, int) or isinstance(value, bool):
        raise PlanInputError(f"expected an encoded knob value (an integer), got {value!r:.60}",
                             field=field_name, source=source, fix=RERECORD_FIX)
    choices = KNOB_BY_NAME[key].choices
    if choices is not None:
        codes = [int(m) for m in choices]
        if value not in codes:
            shown = ", ".join(f"{int(m)} = {m.label}" if m.label != str(int(m)) else m.label for m in choices)
            raise PlanInputError(f"{value} is out of range ({min(codes)}..{max(codes)}: {shown})", field=field_name,
                                 source=source, fix=RERECORD_FIX)
        return value
    low, high = (0, 1) if key == "sp" else (1, MAX_SIZE)
    if not low <= value <= high:
        raise PlanInputError(f"{value} is out of range ({low}..{high})", field=field_name, source=source,
                             fix=RERECORD_FIX)
    return value


def _fixed(raw: Any, source: str | None) -> dict[str, int]:
    where = "inputs.options.fix"
    fix = _mapping(raw, where, source)
    out: dict[str, int] = {}
    for key, value in fix.items():
        if key not in KNOBS:
            raise PlanInputError(f"unknown knob {str(key)[:40]!r}", field=where, source=source,
                                 fix=f"use one of {', '.join(KNOBS)}")
        out[key] = _knob_value(key, value, f"{where}.{key}", source)
    return dict(sorted(out.items()))


def read_options(options: dict[str, Any], source: str | None = None) -> RecordedOptions:
    """The recorded options, checked (fix, top, allow_tp_across_nodes, time_limit, compress)."""
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
    if limit is not None and not (is_number(limit) and limit > 0):
        raise PlanInputError(f"expected null or a positive number of seconds, got {limit!r:.60}",
                             field="inputs.options.time_limit", source=source, fix="write null (no limit)")
    compress = None
    if "compress" in options:  # what-if compressed collectives, recorded only by planners that offer them
        where = "inputs.options.compress"
        compress = parse_compress(_mapping(options["compress"], where, source), where, source)
    headroom = options.get("memory_headroom")
    if headroom is not None and not (is_number(headroom) and 0 <= headroom <= 0.5):
        raise PlanInputError(f"expected a share from 0 to 0.5, got {headroom!r:.60}",
                             field="inputs.options.memory_headroom", source=source, fix="e.g. memory_headroom: 0.05")
    rank_by = options.get("rank_by", "preference")
    if rank_by not in RANK_BY:
        raise PlanInputError(f"unknown ranking {rank_by!r:.40}", field="inputs.options.rank_by", source=source,
                             fix=f"use {' or '.join(RANK_BY)}")
    return RecordedOptions(_fixed(options.get("fix", {}), source), top, allow, limit, compress, headroom, rank_by)


def _spec(cls: type[BaseModel], data: dict[str, Any], name: str, source: str | None) -> Any:
    from planner.inputs.files import pydantic_error

    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise pydantic_error(exc, source, prefix=f"{name}.") from None


def _section(inputs: dict[str, Any], name: str, cls: type[BaseModel], source: str | None) -> Any:
    data = inputs[name]
    _unknown_keys(data, set(cls.model_fields), f"inputs.{name}", source)
    if name == "cluster":
        gpu_in = _mapping(data.get("gpu", ABSENT), "inputs.cluster.gpu", source)
        _unknown_keys(gpu_in, set(GPUSpec.model_fields), "inputs.cluster.gpu", source)
        for key, spec in SECTIONS.items():  # absent in schema 1 documents: the defaults
            if key in data:
                where = f"inputs.cluster.{key}"
                _unknown_keys(_mapping(data[key], where, source), set(spec.model_fields), where, source)
    return _spec(cls, data, f"inputs.{name}", source)


def with_default_sections(cluster: Any) -> Any:
    """A recorded cluster with the sections a schema 1 document lacks (`reliability`, `storage`) filled with the
    defaults the reader gives them, so that comparing it with a newer document shows no change there."""
    if not isinstance(cluster, dict):
        return cluster
    return {**{key: spec().model_dump() for key, spec in SECTIONS.items()}, **cluster}


# Breakdown terms a newer schema added, with the value an older document's plans had for them: `nic_comm_s`
# (schema 9, planner.cost.links) was no term before, so it read 0.
BREAKDOWN_DEFAULTS = {"nic_comm_s": 0.0}


def with_default_breakdown(breakdown: Any) -> Any:
    """A recorded plan's breakdown with the terms an older schema lacks at the value they then had, so that comparing
    it with a newer document shows no change there."""
    if not isinstance(breakdown, dict):
        return breakdown
    return {**BREAKDOWN_DEFAULTS, **breakdown}


def problem_from_document(doc: Any, source: str | None = None) -> Problem:
    """Rebuild exactly the problem a plan document was made for, from its `inputs` (recorded figures, not today's
    catalog). A bad or foreign document raises one PlanInputError naming `source`, the field and the fix."""
    from planner.cost.profiles import PROFILE_NAMES, plan_compiles_loss

    inputs = check_header(doc, source)
    model = _section(inputs, "model", ModelSpec, source)
    cluster = _section(inputs, "cluster", ClusterSpec, source)
    training = _section(inputs, "training", TrainingSpec, source)
    if training.framework not in PROFILE_NAMES:
        raise PlanInputError(f"unknown framework {training.framework!r:.60}", field="inputs.training.framework",
                             source=source, fix=f"use one of {', '.join(sorted(PROFILE_NAMES))}")
    options = read_options(inputs["options"], source)
    extra: dict[str, Any] = {"compress": options.compress} if options.compress else {}
    if options.memory_headroom is not None:
        extra["memory_headroom"] = float(options.memory_headroom)
    return Problem(model, cluster, training, fixed=options.fix, allow_tp_across_nodes=options.allow_tp_across_nodes,
                   compiled_loss=plan_compiles_loss(training), **extra)


# --- the document -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlanDocument:
    """A plan document read back: the mapping as written plus typed access to what it records."""

    raw: dict[str, Any]
    source: str | None = None

    @property
    def inputs(self) -> dict[str, Any]:
        return get(self.raw, "inputs", "")

    @property
    def plans(self) -> list[dict[str, Any]]:
        return self.raw["plans"]

    @property
    def planner_version(self) -> Any:
        return self.raw.get("planner_version", ABSENT)

    def plan(self, rank: int) -> dict[str, Any]:
        """Plan `rank` (1-based)."""
        plans = self.plans
        if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= len(plans):
            raise PlanInputError(f"no plan with rank {rank!r}; this document has ranks 1..{len(plans)}", field="rank",
                                 fix=f"pick a rank between 1 and {len(plans)}")
        return plans[rank - 1]

    def options(self) -> RecordedOptions:
        return read_options(check_header(self.raw, self.source)["options"], self.source)

    def problem(self) -> Problem:
        return problem_from_document(self.raw, self.source)


def plan_document(doc: Any, source: str | None = None) -> PlanDocument:
    """A mapping checked as a whole plan document (header, inputs sections, plans with metrics)."""
    check_header(doc, source)
    check_plans(doc, source)
    return PlanDocument(doc, source)


def loose_plan_document(doc: Any) -> PlanDocument:
    """What a launcher needs: a mapping with a non-empty list of plans (each plan's fields are read as rendered)."""
    if isinstance(doc, PlanDocument):
        return doc
    if not isinstance(doc, dict):
        raise PlanInputError("plan document must be a JSON object", fix="pass the output of `plan --format json`")
    plans = get(doc, "plans", "")
    if not isinstance(plans, list) or not plans:
        raise PlanInputError("plan document has no plans", field="plans", fix="re-run `plan` on a feasible problem")
    return PlanDocument(doc)


def read_plan_document(path: str) -> PlanDocument:
    """Read a plan document (JSON, or YAML from `--format yaml`) and check its shape; one PlanInputError otherwise."""
    from planner.inputs.files import read_structured_file

    if Path(path).is_dir():
        raise PlanInputError("is a directory, not a plan document", source=path,
                             fix="pass one plan.json; to gate a directory, loop over its files (docs/ci-gate.md)")
    return plan_document(read_structured_file(Path(path)), path)
