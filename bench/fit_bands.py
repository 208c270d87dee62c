"""Write planner/cost/bands.yaml, the uncertainty bands, from `plan validate`'s per-case residuals.

    python bench/fit_bands.py [--from validate.json] [--write] [--file PATH]

Runs validate on the shipped cases (or reads a saved `plan validate --format json`), groups each scored case's
residual ln(measured / predicted) by regime (planner.evidence.band_fit) and prints the diff it would make to the
file; --write writes it (with today's date when anything but the date changed) and the bands block of
docs/accuracy.md. Rerun after anything that moves
validate: a cost-model change, a refit, new cases.
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's planner, not an installed one

from planner.cost.bands import BANDS_FILE  # noqa: E402
from planner.cost.fitted import FITTED_FILE  # noqa: E402
from planner.cost.profiles import PROFILE_NAMES  # noqa: E402
from planner.evidence.band_fit import document, splice  # noqa: E402

HEADER = """\
# Uncertainty bands of the cost model: where published runs land around its price, per regime. Written by
# bench/fit_bands.py from `plan validate`'s per-case residuals r = ln(measured / predicted); read by
# planner/cost/bands.py. Do not edit by hand: rerun the script after anything that moves validate.
#
# Fields:
#   coverage    the share of a regime's published runs its band holds (two-sided; each side misses at most half
#               the rest).
#   min_cases   the fewest cases whose split-conformal order statistics exist at that coverage; a regime with
#               fewer has no band (band: null) and backs off to a coarser one (planner/cost/bands.py).
#   scored      cases validate scored (throughput).
#   tie         width: the conformal bound, at the coverage, of |r_a - r_b| over every pair of measured layouts of
#               one validate ranking group (the error of a predicted ratio of two layouts of one run); plans
#               priced within it of the fastest tie. pairs, groups: what it rests on.
#   widest      the envelope of every throughput band: the band of a feature too few runs state.
#   throughput  one entry per regime: stack (a planning stack, its cases pooled with the stack it borrows its
#               fitted kernel efficiency from, fitted.yaml borrowed_from: `pool`; * = every stack), kind (dense |
#               moe | *), generation (GPU generation | *), feature (only on the cases that state it: activation
#               offloading, context parallelism, its all-to-all form, fp8, fp4, a schedule other than 1F1B and
#               interleaved); n, band [low, high] of r, median, the cases.
#   memory      the same for peak memory per GPU (each stack's logged figure), per stack pool and for every stack.
#   date        the day the script last changed anything else in this file.
"""


def lenders() -> dict[str, str]:
    """Stacks that borrow their kernel efficiency, and from whom (fitted.yaml)."""
    profiles = yaml.safe_load(FITTED_FILE.read_text(encoding="utf-8"))["kernel_efficiency"]["profiles"]
    return {name: entry["borrowed_from"] for name, entry in profiles.items() if "borrowed_from" in entry}


def validate_report(path: Path | None) -> dict[str, Any]:
    if path is not None:
        return json.loads(path.read_text(encoding="utf-8"))
    from planner.evidence.validate import validate

    return validate()


class _Dumper(yaml.SafeDumper):
    pass


def _flow_lists(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    """Lists of numbers or names on one (wrapped) line; the list of regimes one block per entry."""
    flat = all(not isinstance(x, dict | list) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flat)


_Dumper.add_representer(list, _flow_lists)


def render(doc: dict[str, Any]) -> str:
    return HEADER + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=110)


def without_date(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith("date:"))


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="source", type=Path, help="a saved `plan validate --format json`")
    ap.add_argument("--write", action="store_true", help="write the file (default: print the diff)")
    ap.add_argument("--file", type=Path, default=BANDS_FILE)
    args = ap.parse_args(argv)
    doc = document(validate_report(args.source), lenders(), PROFILE_NAMES)
    old = args.file.read_text(encoding="utf-8") if args.file.exists() else ""
    old_date = (yaml.safe_load(old) or {}).get("date") if old else None
    doc["date"] = str(old_date) if old_date and without_date(render({**doc, "date": ""})) == without_date(old) \
        else datetime.date.today().isoformat()
    new = render(doc)
    if args.write:
        args.file.write_text(new, encoding="utf-8")
        out(f"wrote {args.file}")
        if args.file == BANDS_FILE:  # the shipped bands: docs/accuracy.md shows them
            accuracy = Path(__file__).resolve().parents[1] / "docs" / "accuracy.md"
            text = accuracy.read_text(encoding="utf-8")
            accuracy.write_text(splice(text, yaml.safe_load(new)), encoding="utf-8")
            out(f"wrote {accuracy} (bands block)")
    else:
        out("".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), str(args.file), "new")) or
            "no change")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
