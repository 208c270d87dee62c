"""The inputs of a capacity sweep (`plan sweep`): GPU kinds, GPU counts, token amounts with SI suffixes, prices.

Each parser raises one PlanInputError naming the option and the fix, so that the CLI prints one line and exits 2.
"""

from __future__ import annotations

import math
import re

from planner.errors import PlanInputError
from planner.inputs.catalog import gpu_catalog
from planner.inputs.files import did_you_mean
from planner.inputs.specs import MAX_SIZE

# Decimal SI prefixes, as token budgets are quoted ("15T tokens" = 15e12; Llama 3 paper, Dubey et al. 2024).
_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "b": 10**9, "t": 10**12, "p": 10**15}
_AMOUNT = re.compile(r"^\s*(?P<number>\d+(?:\.\d*)?|\.\d+)(?:e(?P<exp>\d+))?\s*(?P<suffix>[kmgbtp]?)\s*$", re.I)
MAX_TOKENS = 10**18  # a quintillion tokens: far beyond any training run, small enough for exact float arithmetic


def parse_amount(raw: str, option: str, example: str) -> int:
    """A positive whole amount such as '15T', '16M', '2.5e12' or '4096' (decimal suffixes k M G/B T P)."""
    match = _AMOUNT.match(str(raw))
    if not match:
        raise PlanInputError(f"'{str(raw)[:40]}' is not an amount", field=option,
                             fix=f"e.g. {option} {example} (suffixes k, M, B/G, T, P)")
    value = float(match["number"]) * 10 ** int(match["exp"] or 0) * _SUFFIX[match["suffix"].lower()]
    if not (math.isfinite(value) and 1 <= value <= MAX_TOKENS):
        raise PlanInputError(f"{str(raw)[:40]} is out of range (1 to {MAX_TOKENS:.0e})", field=option,
                             fix=f"e.g. {option} {example}")
    return int(round(value))


def _items(raw: str, option: str, example: str) -> list[str]:
    items = [part.strip() for part in str(raw).split(",") if part.strip()]
    if not items:
        raise PlanInputError("is empty", field=option, fix=f"e.g. {option} {example}")
    return items


def parse_gpus(raw: str) -> list[str]:
    """Comma-separated catalog GPU keys ('h100,b200,gb200'), in the order given, each once."""
    catalog = gpu_catalog()
    out: list[str] = []
    for item in _items(raw, "--gpus", "h100,b200"):
        key = item.lower()
        if key not in catalog:
            raise PlanInputError(f"unknown GPU '{item[:40]}'; {did_you_mean(key, list(catalog))}", field="--gpus",
                                 fix=f"use catalog keys ('plan clusters'): {', '.join(catalog)}")
        if key not in out:
            out.append(key)
    return out


def _count(item: str) -> int:
    if not item.isdigit() or not 0 < int(item[:12]) <= MAX_SIZE:
        raise PlanInputError(f"'{item[:40]}' is not a GPU count between 1 and {MAX_SIZE:,}", field="--counts",
                             fix="e.g. --counts 256,512,1024 or 256,512,...,8192")
    return int(item)


def _series(first: int, second: int, last: int) -> list[int]:
    """'a,b,...,c': doubling-style when b is a whole multiple of a (256,512,...,8192), else evenly spaced."""
    if second <= first or last < second:
        raise PlanInputError(f"'{first},{second},...,{last}' does not grow", field="--counts",
                             fix="e.g. --counts 256,512,...,8192 (two counts, '...', the last count)")
    out = [first]
    while len(out) <= 10_000:
        step = out[-1] * (second // first) if second % first == 0 else out[-1] + (second - first)
        if step > last:
            break
        out.append(step)
    if out[-1] != last:
        raise PlanInputError(f"the series {first},{second},... does not reach {last}", field="--counts",
                             fix=f"end it at a count of the series (e.g. {out[-1]})")
    return out


def parse_counts(raw: str) -> list[int]:
    """Comma-separated GPU counts ('256,512,1024', or '256,512,...,8192' for the series), ascending, each once."""
    items = _items(raw, "--counts", "256,512,1024")
    counts: set[int] = set()
    i = 0
    while i < len(items):
        if items[i + 2:i + 3] == ["..."] and i + 3 < len(items):
            counts.update(_series(_count(items[i]), _count(items[i + 1]), _count(items[i + 3])))
            i += 4
            continue
        counts.add(_count(items[i]))
        i += 1
    return sorted(counts)


def parse_prices(raw: list[str] | None, gpus: list[str]) -> dict[str, float]:
    """`--gpu-hour-price h100=2.5,b200=4` (repeatable): dollars per GPU-hour for GPUs of the sweep."""
    prices: dict[str, float] = {}
    for item in raw or []:
        for part in _items(item, "--gpu-hour-price", "h100=2.5"):
            key, sep, value = part.partition("=")
            key = key.strip().lower()
            if not sep or key not in gpus:
                raise PlanInputError(f"'{part[:40]}' is not GPU=PRICE for a GPU of --gpus ({', '.join(gpus)})",
                                     field="--gpu-hour-price", fix="e.g. --gpu-hour-price h100=2.5,b200=4")
            try:
                price = float(value)
            except ValueError:
                price = math.nan
            if not (math.isfinite(price) and 0 < price <= 1e6):
                raise PlanInputError(f"price for {key} must be a positive number of dollars (got '{value[:40]}')",
                                     field="--gpu-hour-price", fix="e.g. --gpu-hour-price h100=2.5")
            prices[key] = price
    return prices


def global_batch_for(tokens_per_batch: int, seq_len: int, num_gpus: int) -> int:
    """Sequences per step for a target of `tokens_per_batch`, rounded to a multiple of `unit`, the largest divisor
    of the GPU count of the form count / 2^i that is not above the target: then every data-parallel size
    count / (tp x pp x cp) with tp x pp x cp >= 2^i divides the batch, so the layouts stay open as clusters grow.
    At least one unit (a target below one sequence per data-parallel rank rounds up)."""
    target = max(tokens_per_batch / seq_len, 1.0)
    unit = num_gpus
    while unit > target and unit % 2 == 0:
        unit //= 2
    return max(unit, int(round(target / unit)) * unit)
