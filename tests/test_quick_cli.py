"""cli/quick.py reads a plain `plan` command line without typer: it must give run_plan exactly the PlanOptions typer
gives it (values and types), and leave to typer every command line it does not promise to read the same way."""

from __future__ import annotations

import dataclasses
import typing
from unittest import mock

import pytest
from conftest import run_plan_in_process

from cli import quick
from cli.commands import plan as plan_command
from cli.plan_options import PlanOptions, plan_options

KINDS = {int: "int", float: "float", str: "str", bool: "flag", list[str]: "list"}


def _declared() -> dict[str, tuple[str, str, float | None, float | None]]:
    """cli/commands/plan.py's typer options, as quick.OPTIONS writes them."""
    hints = typing.get_type_hints(plan_command.main, include_extras=True)
    out = {}
    for name, hint in hints.items():
        if name in ("ctx", "return"):
            continue
        info = hint.__metadata__[0]
        kind = typing.get_args(hint)[0]
        kind = next((a for a in typing.get_args(kind) if a is not type(None)), kind)  # X | None -> X
        for spelling in (info.default, *info.param_decls):
            out[spelling] = (name, KINDS[kind], info.min, info.max)
    return out


def test_the_table_is_plans_typer_options() -> None:
    assert quick.OPTIONS == _declared()


def _typer_options(argv: list[str]) -> PlanOptions:
    """The PlanOptions typer's `plan` passes on to run_plan for `argv`."""
    seen: list[PlanOptions] = []
    with mock.patch.object(quick, "plan_args", return_value=None), \
            mock.patch.object(plan_command, "run_plan", seen.append):
        r = run_plan_in_process(*argv)
    assert r.returncode == 0, r.stderr
    [options] = seen
    return options


def _typed(options: PlanOptions) -> dict[str, tuple[type, object]]:
    return {f.name: (type(getattr(options, f.name)), getattr(options, f.name)) for f in dataclasses.fields(options)}


READ = [
    ["--model", "llama70b", "--cluster", "h100x512"],
    ["-m", "deepseek-v3", "-c", "h800x2048", "--precision", "fp8", "--global-batch", "15360", "--seq-len", "4096",
     "--format", "json"],
    ["--cluster", "h100x64", "--model", "mixtral-8x22b", "--fix", "ep=8", "--fix", "tp=2", "-f", "yaml", "--top",
     "1000", "--rank", "3"],
    ["-m", "x", "-c", "y", "--time-limit", "5", "--memory-headroom", "0.1", "--optimizer-offload", "1",
     "--optimizer-moments", "bf16", "--fp8-recipe", "blockwise", "--timings", "--allow-tp-across-nodes"],
    ["-m", "x", "-c", "y", "--time-limit", "0.01", "--memory-headroom", "0", "--optimizer-offload", "0.25",
     "--compress", "dp=4,tp=1.5", "--compress", "pp=2", "--framework", "megatron-core", "--top", "1"],
    ["-m", "x", "-c", "y", "--memory-headroom", "0.5", "--seq-len", "0", "--global-batch", "123456789012345"],
]


@pytest.mark.parametrize("argv", READ, ids=lambda a: " ".join(a)[:40])
def test_quick_gives_run_plan_what_typer_gives(argv: list[str]) -> None:
    quick_args = quick.plan_args(argv)
    assert quick_args is not None
    assert _typed(plan_options(quick_args)) == _typed(_typer_options(argv))


LEFT_TO_TYPER = [
    [], ["--help"], ["-h"], ["explain", "--model", "x"], ["--model"], ["--model=x", "--cluster", "y"],
    ["--top", "0"], ["--top", "1001"], ["--top", "+3"], ["--top", "03"], ["--top", "3.0"], ["--rank", "0"],
    ["--seq-len", "-5"], ["--seq-len", "1_000"], ["--time-limit", "0.001"], ["--time-limit", "1e-3"],
    ["--time-limit", "inf"], ["--memory-headroom", "0.51"], ["--memory-headroom", ".1"],
    ["--optimizer-offload", "1.5"], ["--model", "a", "--model", "b"], ["--timings", "--timings"],
    ["--no-timings"], ["--model", "-x"], ["--model", ""], ["--top", "١"], ["-mx"], ["--", "--model", "x"],
]


@pytest.mark.parametrize("argv", LEFT_TO_TYPER, ids=lambda a: " ".join(a)[:40] or "empty")
def test_anything_else_is_left_to_typer(argv: list[str]) -> None:
    assert quick.plan_args(argv) is None


def test_typer_still_reports_what_quick_leaves_to_it() -> None:
    r = run_plan_in_process("--model", "llama3-8b", "--cluster", "h100x8", "--top", "0")
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "--top" in r.stderr


def test_same_plan_either_way() -> None:
    argv = ["--model", "llama3-8b", "--cluster", "h100x16", "--format", "json", "--top", "3"]
    fast = run_plan_in_process(*argv)
    with mock.patch.object(quick, "plan_args", return_value=None):
        slow = run_plan_in_process(*argv)
    assert fast.returncode == slow.returncode == 0
    assert fast.stdout == slow.stdout and fast.stderr == slow.stderr
