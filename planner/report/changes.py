"""What differs between two plan documents: changed values, numeric deltas, and how both are printed in one cell.

Shared by the comparison (planner.report.compare) and its text rendering (planner.report.compare_text).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from planner.report.document import sig
from planner.report.plan_doc import ABSENT, is_number

LAYOUT_ORDER = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "num_microbatches", "zero", "recompute",
                "sequence_parallel", "schedule", "cp_comm", "rank_order", "expert_tp", "first_stage_layers",
                "last_stage_layers")


@dataclass(frozen=True)
class Change:
    """One value that differs between the old and the new document (ABSENT where a side lacks the key)."""

    key: str
    old: Any
    new: Any

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "old": json_value(self.old), "new": json_value(self.new)}


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
                "change": None if change is None else sig(change),
                "rel_change": None if rel is None or not math.isfinite(rel) else sig(rel, 4)}




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


def layout_order(key: str) -> tuple[int, str]:
    return (LAYOUT_ORDER.index(key), "") if key in LAYOUT_ORDER else (len(LAYOUT_ORDER), key)


def changes(old: dict[str, Any], new: dict[str, Any], prefix: str = "", layout: bool = False) -> list[Change]:
    a, b = flatten(old, prefix), flatten(new, prefix)
    out = []
    for key in sorted(set(a) | set(b), key=layout_order if layout else None):
        va, vb = a.get(key, ABSENT), b.get(key, ABSENT)
        if not same(va, vb):
            out.append(Change(key, va, vb))
    return out


def same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if is_number(a) and is_number(b):
        return a == b
    return type(a) is type(b) and a == b


def number(value: Any) -> float | None:
    return float(value) if is_number(value) else None


def deltas(old: dict[str, Any], new: dict[str, Any], keys: tuple[str, ...] | None = None) -> list[Delta]:
    a, b = flatten(old), flatten(new)
    names = keys if keys is not None else tuple(sorted(set(a) | set(b)))
    return [Delta(k, number(a.get(k)), number(b.get(k))) for k in names]


def moved_terms(old: dict[str, Any], new: dict[str, Any]) -> list[Delta]:
    """Breakdown terms that moved: time terms (seconds) first, then memory (GiB), each by largest absolute move."""
    moved = [d for d in deltas(old, new) if d.moved]

    def order(d: Delta) -> tuple[int, float]:
        change = d.change
        size = abs(change) if change is not None else math.inf
        return (0 if d.key.endswith("_s") else 1, -size)

    return sorted(moved, key=order)



def json_value(value: Any) -> Any:
    return None if value is ABSENT else value


def fmt(value: Any) -> str:
    if value is ABSENT:
        return "(absent)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return str(value)


def pct(rel: float | None) -> str:
    if rel is None:
        return "n/a"
    if math.isinf(rel):
        return "from 0"
    return f"{rel:+.2%}"
