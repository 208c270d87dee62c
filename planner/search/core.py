"""Which rules conflict, found on the few knobs that shape a layout before CP-SAT is asked.

Most problems with no rule-feasible layout fail on their shape: the GPU count against tp x pp x cp x dp, the global
batch against the micro-batch and dp, heads, layers and sequence against tp, pp and cp. Those rules read a handful
of knobs whose cross product is small (~10^5 rows on 100k GPUs), so every such rule is checked once on every row of
it (numpy), and a conflict among them is exact and cheap: a set of rules is unsatisfiable on these knobs exactly
when no row passes all of them, and such a set is unsatisfiable for the whole problem too (the other knobs cannot
help a rule that does not read them). A rule that reads a few more knobs takes part through its projection (a row
passes when some values of the others do), which only ever finds conflicts that are real. Dropping each rule in
turn while the rest still leave no row gives a minimal core (no rule of it can be left out). Only when these rules
do leave rows does the diagnosis need the whole model (planner.search.cpsat), which costs the OR-Tools import and
seconds of solving on large problems.
"""

from __future__ import annotations

import numpy as np

from planner.inputs.problem import Problem
from planner.search.rules import RULES, Rule
from planner.search.space import divisors, domains

# Knobs in the order they join the cross product: what a layout's shape is, then the knobs that multiply it.
SHAPE_ORDER = ("tp", "pp", "cp", "dp", "mbs", "vpp", "ep", "etp", "schedule", "sp", "zero", "cp_comm", "recompute")
MAX_ROWS = 400_000  # the cross product stays under this (a few MB per column)
MAX_CROSSED = 250_000  # rows x value combinations of the other knobs a projected rule is checked on


def knob_domains(problem: Problem) -> dict[str, list[int]]:
    """The search's domains, with dp's: the GPU count's divisors unless pinned (planner.search.cpsat's too)."""
    dom = domains(problem)
    dom["dp"] = [problem.fixed["dp"]] if "dp" in problem.fixed else divisors(problem.num_gpus)
    return dom


def shape_knobs(dom: dict[str, list[int]], limit: int = MAX_ROWS) -> tuple[str, ...]:
    """The longest prefix of SHAPE_ORDER whose cross product stays within `limit` rows."""
    knobs: list[str] = []
    rows = 1
    for knob in SHAPE_ORDER:
        if rows * len(dom[knob]) > limit:
            break
        rows *= len(dom[knob])
        knobs.append(knob)
    return tuple(knobs)


def product_columns(dom: dict[str, list[int]], knobs: tuple[str, ...] | list[str]) -> dict[str, np.ndarray]:
    """Every combination of the `knobs`' values in `dom`, one row each (itertools.product order), as columns."""
    grids = np.meshgrid(*(np.asarray(dom[k], dtype=np.int64) for k in knobs), indexing="ij")
    return {k: g.ravel() for k, g in zip(knobs, grids, strict=True)}


def rule_matrix(problem: Problem, knobs: tuple[str, ...], dom: dict[str, list[int]] | None = None,
                without: tuple[str, ...] = ()) -> tuple[list[Rule], np.ndarray]:
    """The rules that read any of `knobs` (and none of `without`), and which rows of those knobs' cross product each
    allows (rules x rows). A rule that also reads other knobs allows a row when some values of those others pass it
    (its projection: a layout that passes the rule passes the projection, so a conflict among projections is a
    conflict among the rules); one whose projection would cross more than MAX_CROSSED rows is left out."""
    dom = dom or knob_domains(problem)
    cols = product_columns(dom, knobs)
    rows = len(cols[knobs[0]])
    rules, allowed = [], []
    for rule in RULES:
        other = [k for k in rule.knobs if k not in cols]
        combos = int(np.prod([len(dom[k]) for k in other]))
        if len(other) == len(rule.knobs) or set(rule.knobs) & set(without) or (other and rows * combos > MAX_CROSSED):
            continue
        if not other:
            allowed.append(rule.check({k: cols[k] for k in rule.knobs}, problem))
        else:
            crossed = {k: np.repeat(cols[k], combos) for k in rule.knobs if k in cols}
            crossed |= {k: np.tile(v, rows) for k, v in product_columns(dom, other).items()}
            allowed.append(rule.check(crossed, problem).reshape(rows, combos).any(axis=1))
        rules.append(rule)
    return rules, np.array(allowed, dtype=bool).reshape(len(rules), rows)


def minimal_core(allowed: np.ndarray) -> list[int] | None:
    """Indices of a minimal set of rows of `allowed` (rules) that no column satisfies together, or None when some
    column satisfies every rule (deletion: drop a rule whenever the others still leave no column)."""
    if allowed.all(axis=0).any():
        return None
    keep = list(range(len(allowed)))
    for i in range(len(allowed) - 1, -1, -1):
        rest = [j for j in keep if j != i]
        if not allowed[rest].all(axis=0).any():
            keep = rest
    return keep


def shape_conflict(problem: Problem) -> list[Rule] | None:
    """A minimal set of rules over the shape knobs that no layout satisfies together, or None when those rules
    leave some layout (then only the whole model can say which rules conflict)."""
    dom = knob_domains(problem)
    rules, allowed = rule_matrix(problem, shape_knobs(dom), dom)
    core = minimal_core(allowed)
    return None if core is None else [rules[i] for i in core]
