"""Problems at 100k GPUs answer fast, feasible or not (issue 27): the shape rules' conflict is found with numpy
(planner.search.core), the nearest feasible problem is named and checked (planner.search.nearest), and CP-SAT, still
the fallback, says when its time limit left the question open."""

import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cli.options import build_problem
from cli.plan_options import PlanOptions
from planner.search import cpsat, diagnosis, nearest
from planner.search.core import knob_domains, minimal_core, rule_matrix, shape_conflict, shape_knobs
from planner.search.search import has_plan

ROOT = Path(__file__).resolve().parents[1]


def _problem(cluster: str, batch: int = 512):
    return build_problem(PlanOptions(model="llama3-405b", cluster=cluster, global_batch=batch))


def test_minimal_core_by_hand():
    """Rules a (rows 0, 1), b (rows 1, 2), c (row 2), d (every row): a and c leave no row; b and d are not needed.
    Deleting from the last: d goes (a, b, c still empty), c stays (a, b share row 1), b goes (a, c: empty), a stays."""
    allowed = np.array([[1, 1, 0], [0, 1, 1], [0, 0, 1], [1, 1, 1]], dtype=bool)
    assert minimal_core(allowed) == [0, 2]
    assert minimal_core(allowed[[1, 3]]) is None


@pytest.mark.parametrize("cluster", ["h100x100000", "h100x16200"])
def test_shape_conflict_is_a_minimal_core(cluster):
    """The rules named leave no row of the shape knobs' cross product together, and each of them is needed."""
    p = _problem(cluster)
    core = shape_conflict(p)
    assert core and {r.name for r in core} == {"world_size", "global_batch_divisible"}
    dom = knob_domains(p)
    rules, allowed = rule_matrix(p, shape_knobs(dom), dom)
    rows = [rules.index(r) for r in core]
    assert not allowed[rows].all(axis=0).any()
    for i in rows:
        assert allowed[[j for j in rows if j != i]].all(axis=0).any()
    assert not cpsat.diagnose(p).feasible  # the whole model agrees: no layout


def test_nearest_gpu_count_is_the_largest_with_a_plan():
    """h100x16200: 16,128 GPUs have a plan and none of the whole-node counts between it and 16,200 has."""
    p = _problem("h100x16200")
    assert nearest.nearest_count(p) == 16_128
    assert has_plan(nearest.with_gpus(p, 16_128))
    assert not any(has_plan(nearest.with_gpus(p, m)) for m in range(16_136, 16_200, 8))


def test_nearest_batch_is_the_closest_with_a_plan():
    """h100x100000 at batch 512: batch 500 (dp 500, tp x pp = 200) has a plan, none nearer to 512 has."""
    p = _problem("h100x100000")
    assert nearest.nearest_batch(p) == 500
    assert has_plan(nearest.with_batch(p, 500))
    assert not any(has_plan(nearest.with_batch(p, b)) for b in range(501, 524) if b != 512)


def test_cli_names_the_nearest_feasible_problem_quickly_and_without_ortools():
    """The one-line answer for Llama 3 405B on 100,000 H100 (~90 s of CPU before the shape check) names the nearest
    problems with a plan; the diagnosis never imports OR-Tools, and the whole run stays far below the old time."""
    code = ("import sys, runpy; sys.argv = ['plan', '--model', 'llama3-405b', '--cluster', 'h100x100000']\n"
            "try:\n    runpy.run_module('cli.main', run_name='__main__')\n"
            "except SystemExit as e:\n    print('ortools' in sys.modules, e.code, file=sys.stderr)\n")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = done.stderr.splitlines()
    assert lines[0] == ("no feasible plan: no layout satisfies every rule (nearest feasible: --global-batch 500 or "
                        "--cluster h100x98304)")
    assert lines[-1] == "False 1"  # OR-Tools not imported; exit 1
    assert after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime < 6.0


def test_cpsat_time_limit_leaves_the_conflict_open_and_says_so(monkeypatch):
    """A CP-SAT run cut by its time limit is not a conflict: the diagnosis says the core was not found."""
    p = _problem("h100x100000")
    assert not cpsat.diagnose(p, time_limit_s=1e-9).decided
    monkeypatch.setattr(diagnosis, "shape_conflict", lambda problem: None)
    monkeypatch.setattr(cpsat, "diagnose", lambda problem, time_limit_s=5.0: cpsat.CoreResult(False, [], None, False))
    d = diagnosis.explain_infeasible(p)
    assert d["binding"] == [] and "not found within the time limit" in d["reasons"][0]
