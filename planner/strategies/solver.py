"""The CP-SAT solver the strategy solvers (OSDP, the pipeline partition) run their models with: one worker and a
deterministic-time budget, so that the answer is the same however loaded the machine is (a wall-clock limit alone
stops earlier on a busy machine); the wall clock is only a backstop."""

from __future__ import annotations

from ortools.sat.python import cp_model

# CP-SAT's deterministic time tracks seconds on an unloaded core; allow this many times it in wall-clock time.
WALL_CLOCK_BACKSTOP = 6.0


def deterministic_solver(time_limit_s: float) -> cp_model.CpSolver:
    """A single-worker solver budgeted `time_limit_s` of deterministic time."""
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_deterministic_time = time_limit_s
    solver.parameters.max_time_in_seconds = WALL_CLOCK_BACKSTOP * time_limit_s
    return solver
