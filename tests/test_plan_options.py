"""The planning options are declared once (cli/plan_options.py): typer's options of plan, report, sweep and explain,
cli/quick.py's table and PlanOptions name the same options with the same defaults, the problem builder reads a
PlanOptions, `explain --from` merges it with the file, and docs/commands.md holds the rendered table."""

from __future__ import annotations

import dataclasses
import inspect
import json
import typing
from pathlib import Path

import pytest
from conftest import run_plan_in_process

from cli import quick
from cli.commands import explain, plan, report, sweep
from cli.commands.explain import _with_file
from cli.options import build_problem
from cli.plan_options import REQUIRED, PlanOptions, options_of, plan_options, render_options_markdown
from planner.inputs.launch_readers import LaunchConfig
from planner.inputs.problem import DEFAULT_MEMORY_HEADROOM

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {"plan": plan.main, "report": report.report, "sweep": sweep.sweep, "explain": explain.explain}
OWN = {"plan": {"ctx"}, "report": {"output"}, "sweep": {"gpus", "counts", "train_tokens", "gpu_hour_price",
                                                       "tokens_per_batch", "chart"},
       "explain": {"layout", "from_file", "dialect", "assign", "osdp", "partition", "svg"}}


def _typer_options(command: str) -> dict[str, tuple[tuple[str, ...], object]]:
    """The options typer reads for `command`: name -> (spellings, default)."""
    func = COMMANDS[command]
    hints = typing.get_type_hints(func, include_extras=True)
    out = {}
    for name, param in inspect.signature(func).parameters.items():
        if name in OWN[command]:
            continue
        info = hints[name].__metadata__[0]
        default = REQUIRED if param.default is inspect.Parameter.empty else param.default
        out[name] = ((info.default, *info.param_decls), default)
    return out


def _field_defaults() -> dict[str, object]:
    return {f.name: f.default for f in dataclasses.fields(PlanOptions)}


def test_plan_typer_quick_and_planoptions_name_the_same_options_with_the_same_defaults() -> None:
    typed = _typer_options("plan")
    fields = _field_defaults()
    assert set(typed) == set(fields) == {name for name, *_ in quick.OPTIONS.values()}
    # typer gives a repeatable option left out as None; PlanOptions holds it as ()
    assert {k: default for k, (_, default) in typed.items()} == {k: None if v == () else v for k, v in fields.items()}
    assert {flag: name for name, (flags, _) in typed.items() for flag in flags} == {
        flag: spec[0] for flag, spec in quick.OPTIONS.items()}


@pytest.mark.parametrize("command", ["report", "sweep", "explain"])
def test_every_planning_command_takes_its_declared_options(command: str) -> None:
    typed = _typer_options(command)
    declared = {o.name: (o.opt.flags, None if o.default == () else o.default) for o in options_of(command)}
    assert typed == declared
    assert set(typed) <= set(_field_defaults())


def test_an_option_a_command_leaves_out_takes_plans_default() -> None:
    assert plan_options({}) == PlanOptions()
    assert plan_options({"seq_len": None, "fix": ["tp=8"], "model": "m"}) == PlanOptions(model="m", fix=("tp=8",))
    assert PlanOptions().memory_headroom == DEFAULT_MEMORY_HEADROOM  # the problem's own default
    options = PlanOptions(top=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.top = 4  # type: ignore[misc]
    with pytest.raises(TypeError, match="topp"):
        PlanOptions(topp=3)
    assert dataclasses.replace(options, rank=2) == PlanOptions(top=3, rank=2) != options
    assert hash(PlanOptions(fix=("tp=2",))) == hash(PlanOptions(fix=("tp=2",)))


def test_the_problem_builder_reads_planoptions() -> None:
    problem = build_problem(PlanOptions(model="llama3-8b", cluster="h100x64", seq_len=4096, global_batch=256,
                                        precision="fp8", fix=("tp=2", "pp=2"), compress=("dp=4",),
                                        memory_headroom=0.1, optimizer_moments="bf16", allow_tp_across_nodes=True))
    tr = problem.training
    assert (tr.seq_len, tr.global_batch, tr.precision, tr.optimizer_moments) == (4096, 256, "fp8", "bf16")
    assert problem.fixed == {"tp": 2, "pp": 2} and problem.compress == {"dp": 4.0}
    assert problem.memory_headroom == 0.1 and problem.allow_tp_across_nodes
    # a launcher format implies its framework where none is given
    assert build_problem(PlanOptions(model="llama3-8b", cluster="h100x8", fmt="deepspeed")).training.framework == \
        "deepspeed"


def test_explain_from_takes_what_the_command_line_states_then_the_file() -> None:
    cfg = LaunchConfig(source="x.sh", dialect="megatron", seq_len=4096, global_batch=1024, precision="fp8",
                       optimizer_moments="bf16", fp8_recipe="blockwise")
    given = PlanOptions(seq_len=2048, optimizer_moments="fp32", fp8_recipe="tensorwise")
    merged = _with_file(given, frozenset({"seq_len"}), cfg)
    assert (merged.seq_len, merged.global_batch, merged.precision) == (2048, 1024, "fp8")
    assert merged.optimizer_moments == "bf16"  # not stated: the file's
    assert merged.fp8_recipe == "blockwise" and merged.framework == "megatron-core"
    bare = _with_file(PlanOptions(), frozenset(), LaunchConfig(source="y.sh", dialect="torchtitan"))
    assert (bare.seq_len, bare.global_batch, bare.precision, bare.framework) == (8192, 512, "bf16", "torchtitan")


def test_bad_options_still_fail_in_one_line_with_exit_2() -> None:
    for argv, field in ((["--model", "llama3-8b", "--cluster", "h100x8", "--optimizer-moments", "fp16"],
                         "--optimizer-moments"),
                        (["report", "--cluster", "h100x8", "-o", "x.html"], "--model"),
                        (["sweep", "--model", "llama3-8b", "--gpus", "h100", "--counts", "8", "--train-tokens", "1T",
                          "--format", "megatron"], "--format")):
        r = run_plan_in_process(*argv)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and field in r.stderr, (argv, r.stderr)


def test_docs_commands_holds_the_rendered_options_table() -> None:
    text = (ROOT / "docs" / "commands.md").read_text()
    begin, end = "<!-- options:begin -->", "<!-- options:end -->"
    block = text[text.index(begin) + len(begin):text.index(end)]
    assert block.strip("\n") == render_options_markdown().strip("\n")
    for o in options_of("plan"):
        assert f"`{o.opt.flags[0]}`" in block


def test_the_default_stack_is_the_planners() -> None:
    """cli/plan_options.py writes the default framework out (a plain `plan` imports no planner module for it); it must
    be the planner's DEFAULT_FRAMEWORK, a stack that ships."""
    from cli import plan_options
    from planner.inputs.frameworks import DEFAULT_FRAMEWORK, LAUNCHES

    assert plan_options.DEFAULT_FRAMEWORK == DEFAULT_FRAMEWORK
    assert any(DEFAULT_FRAMEWORK in stacks for stacks in LAUNCHES.values())


def test_moe_force_balance_reaches_the_price() -> None:
    """`--moe-force-balance` is the run's routing: the header says so, and at today's imbalance of learned routing
    (1.0) the price is the same either way."""
    argv = ("explain", "--model", "mixtral-8x7b", "--cluster", "h100x64", "--layout", "tp=2,pp=1,ep=8,mbs=1",
            "--format", "json")
    plain = json.loads(run_plan_in_process(*argv).stdout)
    forced = run_plan_in_process(*argv, "--moe-force-balance")
    assert forced.returncode == 0
    assert json.loads(forced.stdout)["inputs"]["training"]["moe_force_balance"] is True
    assert plain["inputs"]["training"]["moe_force_balance"] is False
    table = run_plan_in_process("--model", "mixtral-8x7b", "--cluster", "h100x64", "--moe-force-balance", "--top", "1")
    assert "forced expert balance" in " ".join(table.stdout.split())
