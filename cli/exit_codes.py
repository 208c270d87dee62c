"""The exit codes of `plan` (README, "Exit codes"): one name for each, used instead of bare numbers."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    # No feasible plan; `plan explain`: the layout breaks a rule; `plan check`: the baseline moved.
    NOTHING_FEASIBLE_OR_CHANGED = 1
    BAD_INPUT = 2  # a one-line error on stderr naming the field and the fix
    INTERNAL = 3  # a bug in plan: one line asking for a report, never a traceback
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as shells report it
