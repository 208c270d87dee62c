"""Fit the cost model's fitted constants to the published runs and record the fit in planner/cost/fitted.yaml.

Each framework profile's kernel_efficiency is fitted on that framework's dense cases; the MoE expert imbalance is
anchored on the model zoo's measured dropless / forced-balance pairs (planner.evidence.anchors), which no case
constrains, and the host CPU time per eager op is fitted on the MoE cases at that imbalance; everything else in the
cost model carries a cited source.
Candidates are priced inside `fitted.using(...)`, so nothing outside this script changes while it runs. Usage:

    python bench/fit_profiles.py [--only kernel|moe] [--profiles a,b] [--write [--adopt]] [--file PATH]

Without --write it prints the diff it would make to the file. --write records the fit (cases, scores, the refit
result, date) and keeps each value; --adopt also makes the refit result the value. --max-cases N and --grid V,...
make a quick partial run (tests). The file's header says what each field means.
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

# Run as a script, Python puts bench/ on the path, not this checkout: without this line the planner of whatever
# checkout the environment installed would be fitted instead of this one.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.cost import fitted  # noqa: E402
from planner.evidence.anchors import ZOO_BALANCE_PAIRS, ZOO_SOURCE, anchored_imbalance  # noqa: E402
from planner.evidence.recipes import default_recipes_path, load_recipes, priced_stack  # noqa: E402
from planner.evidence.validate import load_cases, run_case, short_source  # noqa: E402

KERNEL_GRID = tuple(round(0.40 + 0.025 * i, 3) for i in range(25))  # 0.400 .. 1.000
# CPU seconds per eager op on an x86 host, across its published range (fitted.yaml moe.host_op_s)
HOST_GRID = (13.48e-6, 20e-6, 27e-6, 34e-6, 41e-6, 48e-6, 55e-6, 62e-6, 74e-6)
IMBALANCE_GRID = (1.0, 1.05, 1.1, 1.15, 1.2, 1.25)  # the busiest rank's load over the mean, across its range
ROUND = 4  # decimals kept of a score

Case = dict[str, Any]
Recipes = dict[str, dict[str, Any]]  # the knob file's entries by case id: what each run ran (validate prices it so)
Errors = dict[str, list[float]]  # case id -> |ln(predicted / measured)| at each candidate, in candidate order


def log_error(case: Case, candidate: fitted.Fitted, recipes: Recipes | None = None) -> float | None:
    """|ln(predicted / measured tokens/s per GPU)| of one case priced with `candidate` and with what its run ran
    (`recipes`, as validate prices it); None where validate does not score it (no prediction, or a measurement that
    contradicts itself)."""
    with fitted.using(candidate):
        r = run_case(case, "fit", recipes)
    if not r["predicted"] or r.get("reason"):
        return None
    return abs(math.log(r["predicted"]["tokens_per_s_per_gpu"] / case["measured"]["tokens_per_s_per_gpu"]))


def error_table(cases: list[Case], candidates: Sequence[fitted.Fitted], label: str,
                recipes: Recipes | None = None) -> Errors:
    """Each scored case's errors over every candidate (cases priced once per candidate)."""
    table: Errors = {}
    for i, case in enumerate(cases, 1):
        errs = [log_error(case, c, recipes) for c in candidates]
        print(f"  {label}: case {i}/{len(cases)} {case['id']}", file=sys.stderr, end="\r")
        if all(e is not None for e in errs):
            table[case["id"]] = errs
    print(file=sys.stderr)
    return table


def best(table: Errors, ids: Sequence[str]) -> int:
    """Index of the candidate with the least median error over `ids` (the first of equals)."""
    scores = [statistics.median(table[i][j] for i in ids) for j in range(len(next(iter(table.values()))))]
    return scores.index(min(scores))


def leave_one_source_out(table: Errors, source: dict[str, str]) -> tuple[float | None, int]:
    """(median error of every held-out case, sources): each source's cases priced at the fit on the other sources."""
    sources = sorted({source[i] for i in table})
    if len(sources) < 2:
        return None, len(sources)
    held: list[float] = []
    for s in sources:
        pick = best(table, [i for i in table if source[i] != s])
        held += [table[i][pick] for i in table if source[i] == s]
    return round(statistics.median(held), ROUND), len(sources)


def fit(cases: list[Case], candidates: list[fitted.Fitted], stored: int, label: str,
        adopt: bool, recipes: Recipes | None = None) -> tuple[dict[str, Any], int]:
    """The fit fields of one entry (fitted_on, score) and the index of the refit candidate. The score is that of the
    stored candidate, or of the refit one when it is being adopted."""
    table = error_table(cases, candidates, label, recipes)
    ids = sorted(table)
    if not ids:
        raise SystemExit(f"{label}: no case to fit on")
    loso, n_sources = leave_one_source_out(table, {c["id"]: short_source(c) for c in cases})
    pick = best(table, ids)
    value = pick if adopt else stored
    score = {"median_abs_log_error": round(statistics.median(table[i][value] for i in ids), ROUND),
             "loso_median_abs_log_error": loso, "loso_sources": n_sources}
    refit_score = round(statistics.median(table[i][pick] for i in ids), ROUND)
    return {"score": score, "refit_error": refit_score, "fitted_on": ids}, pick


def dense_cases(cases: list[Case], profile: str, recipes: Recipes | None = None) -> list[Case]:
    return [c for c in cases if c.get("tier") == "dense" and c["measured"].get("tokens_per_s_per_gpu")
            and priced_stack(c, recipes) == profile]


def with_kernel(base: fitted.Fitted, profile: str, value: float) -> fitted.Fitted:
    return replace(base, kernel_efficiency=MappingProxyType({**base.kernel_efficiency, profile: value}))


def fit_kernel(doc: dict[str, Any], cases: list[Case], names: list[str] | None, grid: Sequence[float],
               adopt: bool, recipes: Recipes | None = None) -> None:
    base = fitted.from_document(doc)
    for name, entry in doc["kernel_efficiency"]["profiles"].items():
        if "borrowed_from" in entry or (names and name not in names):
            continue
        values = sorted({*grid, entry["value"]})
        candidates = [with_kernel(base, name, v) for v in values]
        fields, pick = fit(dense_cases(cases, name, recipes), candidates, values.index(entry["value"]), name, adopt,
                           recipes)
        update(entry, fields, {"value": values[pick]})
        if adopt:
            entry["value"] = values[pick]
        print(f"{name:20s} cases {len(fields['fitted_on']):3d}  value {entry['value']:.3f}  "
              f"refit {values[pick]:.3f}  score {entry['score']}")


def fit_moe(doc: dict[str, Any], cases: list[Case], adopt: bool, recipes: Recipes | None = None) -> None:
    """The expert imbalance anchored on the model zoo's dropless / forced-balance pairs (planner.evidence.anchors:
    no case constrains it), then the host time per op fitted on the MoE cases at that imbalance."""
    moe = doc["moe"]
    base = fitted.from_document(doc)
    with fitted.using(base):
        imbalance, anchor_error = anchored_imbalance(IMBALANCE_GRID)
    moe["expert_imbalance"]["anchor"] = {"source": ZOO_SOURCE, "median_abs_log_error": anchor_error,
                                         "ratios_measured": [round(p.measured_ratio, 3) for p in ZOO_BALANCE_PAIRS]}
    pairs = [(h, imbalance) for h in HOST_GRID]
    stored = (moe["host_op_s"]["value"], moe["expert_imbalance"]["value"])
    if stored not in pairs:
        pairs.append(stored)
    candidates = [replace(base, host_op_s=h, expert_imbalance=i) for h, i in pairs]
    group = [c for c in cases if c.get("tier") == "moe" and c["measured"].get("tokens_per_s_per_gpu")]
    fields, pick = fit(group, candidates, pairs.index(stored), "moe", adopt, recipes)
    refit = {"expert_imbalance": pairs[pick][1], "host_op_s": pairs[pick][0]}
    update(moe, fields, refit)
    if adopt:
        for key, value in refit.items():
            moe[key]["value"] = value
    print(f"moe cases {len(fields['fitted_on'])}  imbalance {moe['expert_imbalance']['value']}  host per op "
          f"{moe['host_op_s']['value']} s  refit {refit}  score {moe['score']}")


def update(entry: dict[str, Any], fields: dict[str, Any], refit: dict[str, float]) -> None:
    """Write one entry's fit fields after its own, in a fixed order, dating them only when they change."""
    new = {"refit": {**refit, "median_abs_log_error": fields["refit_error"]}, "score": fields["score"],
           "fitted_on": fields["fitted_on"]}
    changed = any(entry.get(k) != v for k, v in new.items())
    date = datetime.date.today() if changed or "date" not in entry else entry["date"]
    for key in ("refit", "score", "date", "fitted_on"):
        entry.pop(key, None)
    entry.update({"refit": new["refit"], "score": new["score"], "date": date, "fitted_on": new["fitted_on"]})


class _Dumper(yaml.SafeDumper):
    """Block style, except on one (wrapped) line: a list of plain values (case ids, a range) and a mapping of numbers
    (a score)."""


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flat = all(not isinstance(x, dict | list) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flat)


def _represent_dict(dumper: yaml.SafeDumper, data: dict[str, Any]) -> yaml.Node:
    numbers = all(isinstance(v, int | float) or v is None for v in data.values())
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=numbers)


_Dumper.add_representer(list, _represent_list)
_Dumper.add_representer(dict, _represent_dict)


def header(text: str) -> str:
    """The file's leading comment block, kept verbatim."""
    lines = text.splitlines(keepends=True)
    return "".join(line for line in lines[:next(i for i, s in enumerate(lines) if not s.startswith("#"))])


def render(doc: dict[str, Any], head: str) -> str:
    return head + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True,
                            default_flow_style=False)


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=None, help="case file (default: validation/published_runs.yaml)")
    ap.add_argument("--recipes", default=None, help="knob file (default: case_recipes.yaml beside the case file, "
                    "else the shipped one; what each run ran, priced as validate prices it)")
    ap.add_argument("--file", type=Path, default=fitted.FITTED_FILE, help="the fitted-constants file")
    ap.add_argument("--only", choices=("kernel", "moe"), default=None)
    ap.add_argument("--profiles", default=None, help="comma-separated profiles to fit (kernel part)")
    ap.add_argument("--grid", default=None, help="comma-separated kernel_efficiency values instead of the grid")
    ap.add_argument("--max-cases", type=int, default=None, help="fit on the first N cases per entry (quick check)")
    ap.add_argument("--write", action="store_true", help="write the file (default: print the diff)")
    ap.add_argument("--adopt", action="store_true", help="with --write: the refit results become the values")
    args = ap.parse_args(argv)
    text = args.file.read_text(encoding="utf-8")
    doc = yaml.safe_load(text)
    cases = load_cases(args.cases)
    recipes = load_recipes(Path(args.recipes) if args.recipes else default_recipes_path(args.cases))
    if args.max_cases:
        cases = _first_per_group(cases, args.max_cases)
    grid = tuple(float(v) for v in args.grid.split(",")) if args.grid else KERNEL_GRID
    if args.only in (None, "kernel"):
        fit_kernel(doc, cases, args.profiles.split(",") if args.profiles else None, grid, args.adopt, recipes)
    if args.only in (None, "moe"):
        fit_moe(doc, cases, args.adopt, recipes)
    new = render(doc, header(text))
    if args.write:
        args.file.write_text(new, encoding="utf-8")
        out(f"wrote {args.file}")
    else:
        diff = difflib.unified_diff(text.splitlines(keepends=True), new.splitlines(keepends=True),
                                    str(args.file), f"{args.file} (refit)")
        out("".join(diff) or f"{args.file}: no change")
    return 0


def _first_per_group(cases: list[Case], n: int) -> list[Case]:
    """The first n cases of each (tier, framework): a quick run still reaches every entry."""
    seen: dict[tuple[str, str], int] = {}
    kept = []
    for c in cases:
        key = (c.get("tier"), c["training"]["framework"])
        seen[key] = seen.get(key, 0) + 1
        if seen[key] <= n:
            kept.append(c)
    return kept


if __name__ == "__main__":
    sys.exit(main())
