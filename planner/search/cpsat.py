"""The layout rules as a CP-SAT model (OR-Tools), compiled from `planner.search.rules`.

Each rule becomes a table constraint over the knobs it reads (the allowed tuples are the rule's own predicate
evaluated on the product of those knobs' domains), guarded by one Boolean per rule. Solving under the assumption that
every guard holds either finds a layout or returns an infeasible core: a set of rules that cannot hold together,
which is what `plan` reports when nothing is feasible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from planner.inputs.layout import Layout
from planner.inputs.problem import Problem
from planner.search.core import knob_domains, product_columns
from planner.search.rules import DOMINANCE, RULES, Rule

MAX_TABLE_ROWS = 2_000_000


@dataclass
class CoreResult:
    feasible: bool
    core: list[Rule]
    example: Layout | None
    decided: bool = True  # False: the time limit ran out before CP-SAT found a layout or a conflict


def build_model(problem: Problem, rules: tuple[Rule, ...] = RULES):
    dom = knob_domains(problem)
    model = cp_model.CpModel()
    var = {k: model.new_int_var_from_domain(cp_model.Domain.from_values(v), k) for k, v in dom.items()}
    guards: dict[str, cp_model.IntVar] = {}
    for rule in rules:
        knobs = list(rule.knobs)
        size = int(np.prod([len(dom[k]) for k in knobs]))
        if size > MAX_TABLE_ROWS:
            continue
        cols = product_columns(dom, knobs)
        ok = rule.check(cols, problem)
        guard = model.new_bool_var(f"rule:{rule.name}")
        guards[rule.name] = guard
        if ok.any():  # the allowed tuples as plain ints (tolist: ~50x faster than a tuple per row on 10^5 rows)
            allowed = np.stack([cols[k][ok] for k in knobs], axis=1).tolist()
            model.add_allowed_assignments([var[k] for k in knobs], allowed).only_enforce_if(guard)
        else:
            model.add_bool_or([guard.Not()])
    return model, var, guards


def diagnose(problem: Problem, time_limit_s: float = 5.0) -> CoreResult:
    """Feasible example, or a small set of rules that conflict (CP-SAT sufficient assumptions for infeasibility)."""
    model, var, guards = build_model(problem)
    model.add_assumptions(list(guards.values()))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = 1
    # Presolve rewrites the large tables (10^5 tuples on 100k GPUs) before the search; without it the same core comes
    # back several times faster there (0.5 s against a time-out at 1.6 s on Llama 3 405B on 100,000 H100).
    solver.parameters.cp_model_presolve = False
    status = solver.solve(model)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return CoreResult(True, [], Layout.from_dict({k: int(solver.value(v)) for k, v in var.items()}))
    if status != cp_model.INFEASIBLE:
        return CoreResult(False, [], None, decided=False)
    core_idx = set(solver.sufficient_assumptions_for_infeasibility())
    by_index = {g.index: name for name, g in guards.items()}
    names = [by_index[i] for i in core_idx if i in by_index]
    rules = [r for r in RULES if r.name in names]
    return CoreResult(False, rules, None)


def count_solutions(problem: Problem) -> int:
    """Number of layouts satisfying every rule and not dominated (what the numpy enumeration keeps; used by tests
    to cross-check it)."""
    model, var, guards = build_model(problem, (*RULES, *DOMINANCE))
    for g in guards.values():
        model.add_bool_and([g])

    class _Count(cp_model.CpSolverSolutionCallback):
        def __init__(self) -> None:
            super().__init__()
            self.n = 0

        def on_solution_callback(self) -> None:
            self.n += 1

    solver = cp_model.CpSolver()
    solver.parameters.enumerate_all_solutions = True
    solver.parameters.num_workers = 1
    counter = _Count()
    solver.solve(model, counter)
    return counter.n
