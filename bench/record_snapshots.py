"""Record the outputs of tests/snapshots/problems.txt (plan documents, explain, validate) for tests/test_snapshots.py.

Run from the repository root: `python bench/record_snapshots.py`. Re-record only on purpose (a cost-model or schema
change), and say which in the commit message; a refactoring must leave every file byte-identical.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOTS = ROOT / "tests" / "snapshots"


def problems() -> list[tuple[str, list[str]]]:
    rows = []
    for line in (SNAPSHOTS / "problems.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, *args = shlex.split(line)
            rows.append((name, args))
    return rows


def run(args: list[str]) -> str:
    done = subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONHASHSEED": "0", "NO_COLOR": "1", "PATH": "/usr/bin:/bin"})
    if done.returncode not in (0, 1):
        raise SystemExit(f"{args}: exit {done.returncode}: {done.stderr}")
    return done.stdout


def main() -> None:
    for name, args in problems():
        (SNAPSHOTS / f"{name}.out").write_text(run(args))
        print(name, file=sys.stderr)


if __name__ == "__main__":
    main()
