"""What a plain `plan` run imports: neither typer (cli/quick.py reads its command line) nor importlib.metadata
(cli/__init__.py answers pydantic's plugin lookup while plugins are off), and the answers stay the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import runpy, sys
sys.argv = ["plan", *sys.argv[1:]]
try:
    runpy.run_module("cli.main", run_name="__main__")
except SystemExit as exc:
    code = exc.code
names = ("typer", "click", "rich", "importlib.metadata", "ortools")
print({n: n in sys.modules for n in names}, file=sys.stderr)
raise SystemExit(code)
"""


def _probe(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, dict[str, bool]]:
    r = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, **(env or {})})
    return r, eval(r.stderr.strip().splitlines()[-1])  # noqa: S307 - the probe's own dict literal


def test_a_plain_plan_imports_no_typer_and_no_package_metadata() -> None:
    r, loaded = _probe("--model", "llama3-8b", "--cluster", "h100x16", "--format", "json", "--top", "2")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["plans"]) == 2
    assert loaded == {"typer": False, "click": False, "rich": False, "importlib.metadata": False, "ortools": False}


def test_help_still_goes_through_typer() -> None:
    r, loaded = _probe("--help")
    assert r.returncode == 0 and "--global-batch" in r.stdout and loaded["typer"]


def test_plugins_left_on_by_the_caller_are_looked_up() -> None:
    """Only while plugins are off is pydantic's loader answered for it: a caller that turns them on (any other
    value) gets pydantic's own entry-point scan, and the same plan."""
    argv = ("--model", "llama3-8b", "--cluster", "h100x16", "--format", "json", "--top", "2")
    off, _ = _probe(*argv)
    on, loaded = _probe(*argv, env={"PYDANTIC_DISABLE_PLUGINS": "some-plugin"})
    assert on.returncode == 0 and loaded["importlib.metadata"]
    assert on.stdout == off.stdout


def test_the_stand_in_answers_as_pydantics_loader() -> None:
    code = ("import os, importlib.util, sys; os.environ['PYDANTIC_DISABLE_PLUGINS'] = '1'; "
            "spec = importlib.util.find_spec('pydantic.plugin._loader'); real = importlib.util.module_from_spec(spec); "
            "spec.loader.exec_module(real); import cli; "
            "print(tuple(real.get_plugins()) == tuple(sys.modules['pydantic.plugin._loader'].get_plugins()) == ())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.strip() == "True", r.stderr
