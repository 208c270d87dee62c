"""Errors the CLI turns into one-line messages and exit codes (see README, "Exit codes")."""

from __future__ import annotations

# Control characters from user input (a model name with a newline, a YAML problem quoting a tab) would break the
# one-line promise; they are shown escaped instead.
_ESCAPES = {i: f"\\x{i:02x}" for i in range(32)} | {9: "\\t", 10: "\\n", 13: "\\r", 127: "\\x7f"}


def single_line(text: str) -> str:
    return text.translate(_ESCAPES)


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
            src = self.source if len(self.source) <= 120 else "..." + self.source[-117:]  # keep the file name
            parts.append(f"{src}:")
        if self.field:
            parts.append(f"{self.field}:")
        parts.append(self.message)
        text = " ".join(parts)
        if self.fix:
            text += f" (fix: {self.fix})"
        return single_line(text)


class NoFeasiblePlan(Exception):
    """The problem is well formed but no layout satisfies every rule; the CLI exits 1."""

    def __init__(self, message: str, diagnosis: dict | None = None):
        self.message = message
        self.diagnosis = diagnosis or {}
        super().__init__(message)
