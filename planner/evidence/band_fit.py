"""Uncertainty bands from `plan validate`'s residuals: each case's regime, and the bands.yaml document
bench/fit_bands.py writes (planner.cost.bands reads it; docs/accuracy.md, "Uncertainty bands", says why each choice).

Per regime the band is the pair of split-conformal order statistics of the residuals r = ln(measured / predicted)
at coverage 1 - a: the floor((n + 1) a / 2)-th smallest and the ceil((n + 1)(1 - a / 2))-th smallest of n cases
(Vovk et al. 2005; Lei et al. 2018, "Distribution-free predictive inference for regression", §2.2). For a new run
exchangeable with the regime's cases each side misses with probability at most a / 2, whatever the residuals'
distribution; the order statistics exist only for n >= 2 / a - 1 (9 cases at 80 %), which is the small-sample
inflation: a regime with fewer cases has no band of its own and backs off to a coarser one.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from planner.cost import bands
from planner.inputs.layout import Layout
from planner.inputs.problem import Problem

COVERAGE = 0.8
# Knob statuses (planner.evidence.recipes) under which the run is known to have run the priced value.
_KNOWN = ("stated", "priced", "approximate", "assumed")


def min_cases(coverage: float = COVERAGE) -> int:
    """The fewest cases whose conformal order statistics exist at `coverage`."""
    alpha = 1.0 - coverage
    return math.ceil(2.0 / alpha - 1.0 - 1e-9)


def conformal_band(residuals: Iterable[float], coverage: float = COVERAGE) -> tuple[float, float] | None:
    """(low, high) split-conformal bounds of `residuals` at `coverage`, None when there are too few."""
    r = sorted(residuals)
    n, alpha = len(r), 1.0 - coverage
    k_lo = math.floor((n + 1) * alpha / 2 + 1e-9)
    k_hi = math.ceil((n + 1) * (1 - alpha / 2) - 1e-9)
    if k_lo < 1 or k_hi > n:
        return None
    return r[k_lo - 1], r[k_hi - 1]


def case_regime(case: Mapping[str, Any], problem: Problem, layout: Layout,
                knobs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The regime a priced case belongs to, and which of its features the run did not state (the search chose
    them: they say nothing about that feature's error)."""
    tr = problem.training
    stated = case.get("layout") or {}
    feats = bands.layout_features(layout.as_dict(), tr.precision,
                                  bands.shards_experts_as_feature(tr.framework, problem.model.is_moe))

    def known(knob: str) -> bool:
        return (knobs.get(knob) or {}).get("status") in _KNOWN

    def is_stated(f: str) -> bool:
        if f in bands.PRECISION_FEATURES:
            return True
        if f in ("offload", "offload-modules"):
            return stated.get("recompute") is not None or known("recompute")
        if f == "cp":
            return stated.get("cp") is not None
        if f == bands.SHARDED_EXPERTS:
            return stated.get("zero") is not None
        if f == "cp-a2a":
            return known("cp_comm")  # the case format states no context-parallel exchange; a recipe may
        return stated.get("schedule") is not None or (f == "combined-1f1b" and known("ep_overlap"))

    return {"stack": tr.framework, "kind": bands.model_kind(problem.model.is_moe),
            "generation": bands.generation(problem.cluster.gpu.key), "features": list(feats),
            "searched": [f for f in feats if not is_stated(f)]}


def _pools(lenders: Mapping[str, str], stacks: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Each stack's cases pooled with those of the stack it borrows its fitted kernel efficiency from."""
    return {s: tuple(dict.fromkeys((s, lenders[s]) if s in lenders else (s,))) for s in stacks}


def _entry(ids: list[str], values: list[float], coverage: float, **key: Any) -> dict[str, Any]:
    band = conformal_band(values, coverage)
    return {**key, "n": len(values), "band": [round(band[0], 4), round(band[1], 4)] if band else None,
            "median": round(statistics.median(values), 4), "cases": sorted(ids)}


def _scored(results: list[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    return [r for r in results if r.get("regime") and metric in (r.get("residual") or {})]


def throughput_entries(results: list[dict[str, Any]], pools: Mapping[str, tuple[str, ...]],
                       coverage: float) -> list[dict[str, Any]]:
    """Every regime with a scored case: (stack pool | *, kind | *, generation | *) without a feature, and
    (stack pool | *, feature) over the cases that state the feature."""
    rows = _scored(results, "throughput")
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        g = r["regime"]
        stated = [f for f in g["features"] if f not in g["searched"]]
        for stack in [s for s, pool in pools.items() if g["stack"] in pool]:
            keys = [(stack, g["kind"], g["generation"], ""), (stack, g["kind"], bands.ANY, "")]
            for key in keys + [(stack, bands.ANY, bands.ANY, f) for f in stated]:
                groups[key].append(r)
        keys = [(bands.ANY, g["kind"], g["generation"], ""), (bands.ANY, g["kind"], bands.ANY, ""),
                (bands.ANY, bands.ANY, bands.ANY, "")]
        for key in keys + [(bands.ANY, bands.ANY, bands.ANY, f) for f in stated]:
            groups[key].append(r)
    out = []
    for (stack, kind, gen, feature), members in sorted(groups.items()):
        unique = {m["id"]: m["residual"]["throughput"] for m in members}
        key: dict[str, Any] = {"stack": stack, "kind": kind, "generation": gen}
        if feature:
            key["feature"] = feature
        if stack != bands.ANY:
            key["pool"] = list(pools[stack])
        out.append(_entry(list(unique), list(unique.values()), coverage, **key))
    return out


def memory_entries(results: list[dict[str, Any]], pools: Mapping[str, tuple[str, ...]],
                   coverage: float) -> list[dict[str, Any]]:
    rows = _scored(results, "memory")
    out = []
    for stack in [*sorted(pools), bands.ANY]:
        members = [r for r in rows if stack == bands.ANY or r["regime"]["stack"] in pools[stack]]
        if members:
            key: dict[str, Any] = {"stack": stack} | ({"pool": list(pools[stack])} if stack != bands.ANY else {})
            out.append(_entry([m["id"] for m in members], [m["residual"]["memory"] for m in members], coverage,
                              **key))
    return out


def tie_entry(results: list[dict[str, Any]], groups: list[dict[str, Any]], coverage: float) -> dict[str, Any]:
    """The tie width: the conformal upper bound (at `coverage`) of |r_a - r_b| over every pair of measured layouts
    of one ranking group, the error of the model's predicted ratio of two layouts of one run. Repeats of one layout
    were averaged by validate's groups, so each pair is two different layouts."""
    residual = {r["id"]: r["residual"]["throughput"] for r in _scored(results, "throughput")}
    diffs = []
    for g in groups:
        rs = [residual[i] for i in g["cases"] if i in residual]
        diffs += [abs(a - b) for k, a in enumerate(rs) for b in rs[k + 1:]]
    band = conformal_band([-d for d in diffs] + diffs, coverage)  # |d| is symmetric: both signs of every pair
    assert band is not None, "too few ranking pairs for a tie width"
    return {"width": round(band[1], 4), "pairs": len(diffs), "groups": len(groups),
            "median_abs_difference": round(statistics.median(diffs), 4)}


def document(report: dict[str, Any], lenders: Mapping[str, str], stacks: Iterable[str],
             coverage: float = COVERAGE) -> dict[str, Any]:
    """bands.yaml's content from a `plan validate` report (its JSON)."""
    results = report["cases"]
    pools = _pools(lenders, stacks)
    thr = throughput_entries(results, pools, coverage)
    widest = [min(e["band"][0] for e in thr if e["band"]), max(e["band"][1] for e in thr if e["band"])]
    return {"coverage": coverage, "min_cases": min_cases(coverage),
            "scored": len(_scored(results, "throughput")),
            "tie": tie_entry(results, report["summary"]["ranking"]["groups"], coverage),
            "widest": widest, "throughput": thr, "memory": memory_entries(results, pools, coverage)}


BEGIN, END = "<!-- bands:begin -->", "<!-- bands:end -->"


def _pct(r: float) -> str:
    return f"{100 * (math.exp(r) - 1):+.0f} %"


def render_markdown(doc: Mapping[str, Any]) -> str:
    """The bands of a bands.yaml document as docs/accuracy.md shows them: the tie width, then every regime that has a
    band of its own (measured throughput relative to the price: exp(r) - 1), one row per distinct pool of stacks."""
    tie = doc["tie"]
    lines = [f"Tie width: {100 * (math.exp(tie['width']) - 1):.1f} % (ln ratio {tie['width']:.3f}; the 80 % bound of "
             f"the residual differences of {tie['pairs']} layout pairs in {tie['groups']} ranking groups, median "
             f"{100 * (math.exp(tie['median_abs_difference']) - 1):.1f} %). Widest band: "
             f"{_pct(doc['widest'][0])} / {_pct(doc['widest'][1])}.", "",
             "| stack (pooled) | kind | GPU generation | feature | cases | band | median |",
             "|---|---|---|---|---|---|---|"]
    seen = set()
    for e in doc["throughput"]:
        if e.get("band") is None:
            continue
        pool = tuple(e.get("pool") or (e["stack"],))
        key = (pool, e["kind"], e["generation"], e.get("feature"))
        if key in seen:
            continue
        seen.add(key)
        stack = " + ".join(pool) if e["stack"] != "*" else "every stack"
        lo, hi = e["band"]
        lines.append(f"| {stack} | {e['kind']} | {e['generation']} | {e.get('feature') or '-'} | {e['n']} | "
                     f"{_pct(lo)} / {_pct(hi)} | {_pct(e['median'])} |")
    lines += ["", "| memory, stack (pooled) | cases | band | median |", "|---|---|---|---|"]
    for e in doc["memory"]:
        if e.get("band") is None:
            continue
        pool = " + ".join(e.get("pool") or (e["stack"],)) if e["stack"] != "*" else "every stack"
        lo, hi = e["band"]
        lines.append(f"| {pool} | {e['n']} | {_pct(lo)} / {_pct(hi)} | {_pct(e['median'])} |")
    return "\n".join(lines)


def splice(document_text: str, doc: Mapping[str, Any]) -> str:
    """`document_text` with the block between the bands markers replaced by render_markdown(doc)."""
    head, rest = document_text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{render_markdown(doc)}\n{END}{tail}"
