"""Errors the CLI turns into one-line messages and exit codes (see README, "Exit codes")."""

from __future__ import annotations


class PlanInputError(Exception):
    """Bad input: the CLI prints one line naming where, the field and the fix, and exits 2."""

    def __init__(self, message: str, *, field: str | None = None, fix: str | None = None, source: str | None = None):
        self.message = message
        self.field = field
        self.fix = fix
        self.source = source
        super().__init__(self.one_line())

    def one_line(self) -> str:
        parts = []
        if self.source:
            parts.append(f"{self.source}:")
        if self.field:
            parts.append(f"{self.field}:")
        parts.append(self.message)
        text = " ".join(parts)
        if self.fix:
            text += f" (fix: {self.fix})"
        return text


class NoFeasiblePlan(Exception):
    """The problem is well formed but no layout satisfies every rule; the CLI exits 1."""

    def __init__(self, message: str, diagnosis: dict | None = None):
        self.message = message
        self.diagnosis = diagnosis or {}
        super().__init__(message)
