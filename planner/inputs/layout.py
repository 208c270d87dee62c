"""Parsing `--fix KEY=VALUE` and `--layout "tp=8,pp=4"` into encoded knob values (one set of keys for both)."""

from __future__ import annotations

import difflib

from planner.errors import PlanInputError
from planner.inputs.problem import CP_COMM, KNOBS, RECOMPUTE, SCHEDULES

_ALIASES = {"micro_batch": "mbs", "micro-batch": "mbs", "sequence_parallel": "sp", "virtual_pipeline": "vpp",
            "recomp": "recompute", "fsdp": "zero"}
_BOOL = {"1": 1, "true": 1, "yes": 1, "on": 1, "0": 0, "false": 0, "no": 0, "off": 0}
_INT_LIMIT = 10_000_000


def encode(key: str, raw: str, where: str = "--fix") -> tuple[str, int]:
    name = key.strip().lower()
    name = _ALIASES.get(name, name)
    value = str(raw).strip().lower()
    if name not in KNOBS:
        close = difflib.get_close_matches(name, KNOBS, n=1, cutoff=0.5)
        hint = f"did you mean '{close[0]}'?" if close else f"keys are {', '.join(KNOBS)}"
        raise PlanInputError(f"unknown layout key '{key}'; {hint}", field=where, fix=f"use one of {', '.join(KNOBS)}")
    if name == "recompute":
        if value not in RECOMPUTE:
            raise PlanInputError(f"recompute must be one of {', '.join(RECOMPUTE)} (got '{raw}')", field=where,
                                 fix="e.g. recompute=selective")
        return name, RECOMPUTE.index(value)
    if name == "schedule":
        value = {"interleaved-1f1b": "interleaved", "zb1p": "zb-h1", "zb2p": "zb-h2", "zb-1p": "zb-h1",
                 "zb-2p": "zb-h2", "zbv": "zb-v", "zbvzerobubble": "zb-v", "seq-1f1b": "seq1f1b"}.get(value, value)
        if value not in SCHEDULES:
            raise PlanInputError(f"schedule must be one of {', '.join(SCHEDULES)} (got '{raw}')", field=where,
                                 fix="e.g. schedule=interleaved")
        return name, SCHEDULES.index(value)
    if name == "cp_comm":
        value = {"p2p": "ring", "ulysses": "a2a", "all-to-all": "a2a", "alltoall": "a2a", "hybrid": "a2a+p2p",
                 "usp": "a2a+p2p"}.get(value, value)
        if value not in CP_COMM:
            raise PlanInputError(f"cp_comm must be one of {', '.join(CP_COMM)} (got '{raw}')", field=where,
                                 fix="e.g. cp_comm=a2a")
        return name, CP_COMM.index(value)
    if name == "sp":
        if value not in _BOOL:
            raise PlanInputError(f"sp must be true or false (got '{raw}')", field=where, fix="e.g. sp=true")
        return name, _BOOL[value]
    if name == "zero" and value in ("hsdp", "hybrid", "3h"):
        return name, 4
    try:
        number = int(value)
    except ValueError:
        raise PlanInputError(f"{name} must be a positive integer (got '{raw}')", field=where,
                             fix=f"e.g. {name}=2") from None
    if name == "zero":
        if number not in (0, 1, 2, 3, 4):
            raise PlanInputError(f"zero must be 0, 1, 2, 3 or 4 (= hsdp) (got {number})", field=where,
                                 fix="e.g. zero=1")
        return name, number
    if number <= 0 or number > _INT_LIMIT:
        raise PlanInputError(f"{name} must be a positive integer up to {_INT_LIMIT} (got {number})", field=where,
                             fix=f"e.g. {name}=2")
    return name, number


def parse_pairs(items: list[str], where: str) -> dict[str, int]:
    fixed: dict[str, int] = {}
    for item in items:
        for part in item.split(","):
            part = part.strip()
            if not part:
                continue
            if "=" not in part:
                raise PlanInputError(f"'{part}' is not KEY=VALUE", field=where, fix="e.g. tp=8")
            key, raw = part.split("=", 1)
            name, value = encode(key, raw, where)
            if name in fixed and fixed[name] != value:
                raise PlanInputError(f"{name} is given twice with different values", field=where,
                                     fix="give each key once")
            fixed[name] = value
    return fixed


def decode(name: str, value: int) -> int | str | bool:
    if name == "recompute":
        return RECOMPUTE[value]
    if name == "schedule":
        return SCHEDULES[value]
    if name == "cp_comm":
        return CP_COMM[value]
    if name == "sp":
        return bool(value)
    return int(value)
