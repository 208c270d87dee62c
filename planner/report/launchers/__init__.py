"""Launcher renderers: turn one plan of a plan document into launch text for a training framework.

`render(doc, fmt, rank)` reads plan `rank` (1-based) of a document shaped as docs/plan-schema.md describes and
returns text for stdout. When a launcher cannot express the plan exactly enough to run it as planned, it raises
`PlanInputError` naming the plan field and what to change, rather than printing a near miss.
"""

from __future__ import annotations

from collections.abc import Callable

from planner.errors import PlanInputError
from planner.report.launchers import deepspeed, env, megatron, nemo, torchtitan
from planner.report.launchers._plan import PlanView, load

FORMATS = ("megatron", "torchtitan", "deepspeed", "nemo", "env")

_RENDERERS: dict[str, Callable[[PlanView], str]] = {
    "megatron": megatron.render,
    "torchtitan": torchtitan.render,
    "deepspeed": deepspeed.render,
    "nemo": nemo.render,
    "env": env.render,
}

__all__ = ["FORMATS", "render"]


def render(doc: dict, fmt: str, rank: int = 1) -> str:
    """Launch text in format `fmt` (one of FORMATS) for plan `rank` of the plan document `doc`."""
    if fmt not in _RENDERERS:
        raise PlanInputError(f"unknown launcher format {fmt!r}", field="format", fix=f"use one of {', '.join(FORMATS)}")
    return _RENDERERS[fmt](load(doc, rank))
