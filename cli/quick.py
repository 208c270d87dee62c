"""A plain `plan` command line read without typer: importing typer and building its pydantic validators for
`plan`'s 20 options costs ~0.05-0.07 s of every run, a tenth of the slowest search.

Only a command line typer would read the same way is read here: every token an option of `plan` itself (exact
spelling, value in the next token), no option but the repeatable ones (--fix, --compress) twice, ints as plain
decimals, floats as plain decimal fractions, every bound as typer checks it. Anything else (--help, a subcommand,
`--opt=value`, a value that starts with '-', an out-of-range number, ...) goes to typer, which reads it or reports it
as it always has. Both read the one declaration of the options (cli/plan_options.py); tests/test_quick_cli.py checks
that they give run_plan the same PlanOptions, types included (a JSON plan prints `time_limit` 5.0, not 5).
"""

from __future__ import annotations

from cli.plan_options import options_of

# spelling -> (PlanOptions field, kind, lower bound, upper bound), for every option of plain `plan`
OPTIONS: dict[str, tuple[str, str, float | None, float | None]] = {
    flag: (o.name, o.opt.kind, o.opt.lower, o.opt.upper) for o in options_of("plan") for flag in o.opt.flags}


def plan_args(argv: list[str]) -> dict[str, object] | None:
    """The option values `argv` (the command line after the program) gives, by PlanOptions field, or None where typer
    must read it."""
    if not argv:
        return None
    args: dict[str, object] = {}
    i = 0
    while i < len(argv):
        spec = OPTIONS.get(argv[i])
        if spec is None:
            return None
        name, kind, lower, upper = spec
        if kind == "flag":
            value: object = True
            i += 1
        else:
            if i + 1 >= len(argv):
                return None
            value = _value(argv[i + 1], kind, lower, upper)
            i += 2
        if value is None:
            return None
        if kind == "list":
            args.setdefault(name, []).append(value)  # type: ignore[union-attr]
        elif name in args:
            return None
        else:
            args[name] = value
    return args


def _value(text: str, kind: str, lower: float | None, upper: float | None) -> object | None:
    """The value typer would give `text`, or None where this module does not promise to read it as typer does."""
    if not text or text.startswith("-"):
        return None
    if kind in ("str", "list"):
        return text
    whole, dot, fraction = text.partition(".")
    if not (whole.isascii() and whole.isdigit() and len(whole) <= 15 and (whole == "0" or whole[0] != "0")):
        return None
    if kind == "int":
        if dot:
            return None
        number: float = int(whole)
    elif dot and not (fraction.isascii() and fraction.isdigit() and len(fraction) <= 15):
        return None
    else:
        number = float(text)  # correctly rounded, as pydantic's parse of the same text
    if (lower is not None and number < lower) or (upper is not None and number > upper):
        return None
    return number
