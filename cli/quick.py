"""A plain `plan` command line read without typer: importing typer and building its pydantic validators for
`plan`'s 18 options costs ~0.05-0.07 s of every run, a tenth of the slowest search.

Only a command line typer would read the same way is read here: every token an option of `plan` itself (exact
spelling, value in the next token), no option but --fix and --compress twice, ints as plain decimals, floats as
plain decimal fractions, every bound as typer checks it. Anything else (--help, a subcommand, `--opt=value`, a value
that starts with '-', an out-of-range number, ...) goes to typer, which reads it or reports it as it always has.
tests/test_quick_cli.py checks the table below against cli/commands/plan.py's typer options and that both give
run_plan the same arguments, types included (a JSON plan prints `time_limit` 5.0, not 5).
"""

from __future__ import annotations

# spelling -> (run_plan's parameter, kind, lower bound, upper bound), as cli/commands/plan.py declares them
OPTIONS: dict[str, tuple[str, str, float | None, float | None]] = {
    "--model": ("model", "str", None, None), "-m": ("model", "str", None, None),
    "--cluster": ("cluster", "str", None, None), "-c": ("cluster", "str", None, None),
    "--seq-len": ("seq_len", "int", None, None),
    "--global-batch": ("global_batch", "int", None, None),
    "--precision": ("precision", "str", None, None),
    "--framework": ("framework", "str", None, None),
    "--fix": ("fix", "list", None, None),
    "--top": ("top", "int", 1, 1000),
    "--format": ("fmt", "str", None, None), "-f": ("fmt", "str", None, None),
    "--rank": ("rank", "int", 1, None),
    "--allow-tp-across-nodes": ("allow_tp_across_nodes", "flag", None, None),
    "--time-limit": ("time_limit", "float", 0.01, None),
    "--compress": ("compress", "list", None, None),
    "--memory-headroom": ("memory_headroom", "float", 0.0, 0.5),
    "--optimizer-offload": ("optimizer_offload", "float", 0.0, 1.0),
    "--optimizer-moments": ("optimizer_moments", "str", None, None),
    "--fp8-recipe": ("fp8_recipe", "str", None, None),
    "--timings": ("timings", "flag", None, None),
    "--moe-capacity-factor": ("moe_capacity_factor", "float", 0.01, 64.0),
    "--moe-pad-to-capacity": ("moe_pad_to_capacity", "flag", None, None),
    "--rank-by": ("rank_by", "str", None, None),
}


def plan_args(argv: list[str]) -> dict[str, object] | None:
    """run_plan's keyword arguments for `argv` (the command line after the program), or None where typer must read
    it."""
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
