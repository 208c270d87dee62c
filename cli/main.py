"""The `plan` command line (typer): the app, its commands (cli/commands/), and exceptions mapped to exit codes
(cli/exit_codes.py: OK, NOTHING_FEASIBLE_OR_CHANGED, BAD_INPUT, INTERNAL)."""

from __future__ import annotations

import sys

import typer

from cli.commands import calibrate, check, clusters, diff, dsp, explain, models, plan, report, sweep, validate
from cli.exit_codes import ExitCode
from cli.options import stderr
from planner.errors import NoFeasiblePlan, PlanInputError, single_line

# typer >= 0.20 vendors click and raises its own exception classes; older typer raises click's, and click is then
# installed. run() matches both by shape so that a usage error is one line and exit 2, never an "internal error".

EXAMPLES = """
Examples:

  plan --model llama70b --cluster h100x512

  plan --model ./config.json --cluster a100x1024 --seq-len 4096 --global-batch 1024 --top 10

  plan --model mixtral-8x22b --cluster h100x256 --fix ep=8 --fix tp=2 --format json

  plan explain --model llama70b --cluster h100x512 --layout "tp=8,pp=4,vpp=5,mbs=1,zero=1,recompute=selective"

  plan explain --from launch.sh --cluster h100x512

  plan report --model llama70b --cluster h100x512 -o report.html

  plan sweep --model llama70b --gpus h100,b200 --counts 256,512,1024 --train-tokens 15T

  plan validate --format json
"""

app = typer.Typer(
    help="Parallelism auto-planner for LLM training: ranked layouts with predicted step time, MFU and memory.",
    epilog=EXAMPLES, add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None,
    no_args_is_help=False, context_settings={"help_option_names": ["-h", "--help"]},
)

# The order here is the order of `plan --help`.
app.callback(invoke_without_command=True)(plan.main)
app.command("explain")(explain.explain)
app.command("report")(report.report)
app.command("models")(models.models)
app.command("clusters")(clusters.clusters)
app.command("validate")(validate.validate)
app.command("dsp")(dsp.dsp)
check.register(app)
diff.register(app)
sweep.register(app)
calibrate.register(app)


def _print_infeasible(exc: NoFeasiblePlan) -> None:
    err = stderr()
    d = exc.diagnosis
    err.print(f"no feasible plan: {exc.message}")
    for reason in d.get("reasons", []):
        err.print(f"  binding: {reason}")
    if d.get("suggestions"):
        err.print("  would help: " + "; ".join(d["suggestions"]))


def run() -> None:
    """Console-script entry point: map errors to exit codes, never show a traceback."""
    try:
        rc = app(standalone_mode=False)
        sys.exit(rc if isinstance(rc, int) else ExitCode.OK)
    except PlanInputError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        sys.exit(ExitCode.BAD_INPUT)
    except NoFeasiblePlan as exc:
        _print_infeasible(exc)
        sys.exit(ExitCode.NOTHING_FEASIBLE_OR_CHANGED)
    except KeyboardInterrupt:
        sys.exit(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        sys.exit(ExitCode.OK)
    except Exception as exc:  # noqa: BLE001 - the promise is "never a traceback"; report and exit INTERNAL
        name = type(exc).__name__
        if name == "Exit":
            sys.exit(getattr(exc, "exit_code", ExitCode.OK))
        if name == "Abort":
            print("aborted", file=sys.stderr)
            sys.exit(ExitCode.INTERRUPTED)
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            print(single_line(f"error: {exc.format_message()} (fix: see 'plan --help')"), file=sys.stderr)
            sys.exit(ExitCode.BAD_INPUT)
        print(single_line(f"internal error: {type(exc).__name__}: {exc} (please report with the command line)"),
              file=sys.stderr)
        sys.exit(ExitCode.INTERNAL)


if __name__ == "__main__":
    run()
