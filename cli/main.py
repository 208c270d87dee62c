"""The `plan` command line: a plain `plan --model M --cluster C ...` read without typer (cli/quick.py, ~0.05-0.07 s
less start-up), anything else by the typer app (cli/app.py, its commands in cli/commands/), and exceptions mapped to
exit codes (cli/exit_codes.py: OK, NOTHING_FEASIBLE_OR_CHANGED, BAD_INPUT, INTERNAL)."""

from __future__ import annotations

import sys
from typing import Any

from cli import plan_run, quick
from cli.exit_codes import ExitCode
from cli.options import stderr
from cli.plan_options import plan_options
from planner.errors import NoFeasiblePlan, PlanInputError, single_line

# typer >= 0.20 vendors click and raises its own exception classes; older typer raises click's, and click is then
# installed. run() matches both by shape so that a usage error is one line and exit 2, never an "internal error".


def __getattr__(name: str) -> Any:
    """`app` (cli/app.py, with cli.commands wired in), imported on first use: a plain `plan` command line runs
    without typer (cli/quick.py)."""
    if name == "app":
        from cli.app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _print_infeasible(exc: NoFeasiblePlan) -> None:
    err = stderr()
    d = exc.diagnosis
    nearest = d.get("nearest") or []
    err.print(f"no feasible plan: {exc.message}" + (f" (nearest feasible: {' or '.join(nearest)})" if nearest else ""))
    for reason in d.get("reasons", []):
        err.print(f"  binding: {reason}")
    if d.get("suggestions"):
        err.print("  would help: " + "; ".join(d["suggestions"]))


def run() -> None:
    """Console-script entry point: map errors to exit codes, never show a traceback."""
    try:
        args = quick.plan_args(sys.argv[1:])
        if args is not None:
            rc = plan_run.run_plan(plan_options(args))
        else:
            from cli.app import app

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
