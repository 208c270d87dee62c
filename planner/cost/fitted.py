"""The cost model's fitted constants: read once from fitted.yaml beside this module, which bench/fit_profiles.py writes.

Every other constant of the cost model names a published source; these few are fitted on the published runs
(validation/published_runs.yaml), and the file keeps each one's value with the cases, score, date and method of its
fit and the physical range it must land in. The cost model asks `current()`; the fit script prices candidates
inside `using(candidate)`, which swaps the values for the duration of a `with` block and restores them after, so no
module global is ever reassigned.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from planner.inputs.catalog import read_packaged_yaml

FITTED_FILE = Path(__file__).with_name("fitted.yaml")


@dataclass(frozen=True, eq=False)  # eq=False: hashed by identity, so caches keyed on it stay cheap
class Fitted:
    """The values the cost model prices with (what each one means: fitted.yaml)."""

    kernel_efficiency: Mapping[str, float]  # framework profile -> achieved / MAMF rate; borrowed values resolved
    expert_imbalance: float  # busiest expert-parallel rank's routed load / the mean (dropless)
    host_op_s: float  # CPU seconds per eager op as Megatron-Core issues it, on an x86 host (planner.cost.host)


def _kernel_value(profiles: Mapping[str, Any], name: str) -> float:
    lender = profiles[name].get("borrowed_from")
    entry = profiles[lender] if lender is not None else profiles[name]
    if "value" not in entry:
        raise ValueError(f"{FITTED_FILE.name}: kernel_efficiency of {name} borrows from {lender}, which borrows too")
    return float(entry["value"])


def from_document(doc: Mapping[str, Any]) -> Fitted:
    """The values of a parsed fitted.yaml (a profile that borrows takes its lender's value)."""
    profiles = doc["kernel_efficiency"]["profiles"]
    moe = doc["moe"]
    return Fitted(kernel_efficiency=MappingProxyType({name: _kernel_value(profiles, name) for name in profiles}),
                  expert_imbalance=float(moe["expert_imbalance"]["value"]),
                  host_op_s=float(moe["host_op_s"]["value"]))


def read(path: Path = FITTED_FILE) -> Fitted:
    return from_document(read_packaged_yaml(path))


@cache
def shipped() -> Fitted:
    """The values in the package's fitted.yaml, read on first use."""
    return read()


_swapped: list[Fitted] = []  # `using` blocks in force, innermost last


def current() -> Fitted:
    """The values pricing uses now: the innermost `using` block's, else the shipped file's."""
    return _swapped[-1] if _swapped else shipped()


@contextmanager
def using(values: Fitted) -> Iterator[Fitted]:
    """Price with `values` inside the block (the fit script's candidates); the previous values come back after."""
    _swapped.append(values)
    try:
        yield values
    finally:
        _swapped.pop()
