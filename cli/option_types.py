"""The typer options of the planning commands, built from their one declaration (cli/plan_options.py).

`plan_command(command)` gives a command function the options PlanOptions declares for `command`, as typer
parameters beside the function's own, and calls it with them gathered into one PlanOptions (`options`), plus, when
the function asks for it, the names of the options the command line gave (`stated`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

from cli.plan_options import REQUIRED, CommandOption, options_of, plan_options, stated_options

F = TypeVar("F", bound=Callable[..., Any])
_TYPES: dict[str, Any] = {"str": str, "int": int, "float": float, "flag": bool, "list": list[str]}


def _annotation(option: CommandOption) -> Any:
    opt = option.opt
    value_type = _TYPES[opt.kind]
    if option.default is None or opt.kind == "list":
        value_type = value_type | None
    bounds = {k: v for k, v in (("min", opt.lower), ("max", opt.upper)) if v is not None}
    return Annotated[value_type, typer.Option(*opt.flags, help=option.help, **bounds)]


def typer_parameters(command: str) -> list[inspect.Parameter]:
    """The declared options of `command` as the keyword parameters typer reads."""
    out = []
    for option in options_of(command):
        default = inspect.Parameter.empty if option.default is REQUIRED else option.default
        if option.opt.kind == "list" and default == ():
            default = None  # typer gives a repeatable option left out as None
        out.append(inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                     annotation=_annotation(option)))
    return out


def plan_command(command: str, after: str | None = None) -> Callable[[F], F]:
    """Give the decorated function the declared options of `command` (its own parameters go after the option named
    `after`, else first); it is called with `options` (a PlanOptions) and, if it has that parameter, `stated`."""

    def wrap(func: F) -> F:
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
               for p in inspect.signature(func, eval_str=True).parameters.values()
               if p.name not in ("options", "stated")]
        shared = typer_parameters(command)
        names = [p.name for p in shared]
        cut = names.index(after) + 1 if after else 0
        params = shared[:cut] + own + shared[cut:]
        wants_stated = "stated" in inspect.signature(func).parameters

        @functools.wraps(func)
        def run(**kwargs: Any) -> Any:
            values = {name: kwargs.pop(name) for name in names}
            if wants_stated:
                kwargs["stated"] = stated_options(command, values)
            return func(**kwargs, options=plan_options(values))

        run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run  # type: ignore[return-value]

    return wrap


def _declared(name: str, command: str = "plan") -> CommandOption:
    return next(o for o in options_of(command) if o.name == name)


# `plan dsp` takes a cluster too (not a planning command: it has its own default)
ClusterOpt = Annotated[str, typer.Option(*_declared("cluster").opt.flags, help=_declared("cluster").help)]
SetOpt = Annotated[list[str] | None, typer.Option(
    "--set", help="with --from: NAME=VALUE for what the file leaves open: a shell variable or positional argument "
    "(1=...), a torchtitan or NeMo key (training.local_batch_size=4; training=PATH for a NeMo launcher's base config), "
    "the function of a torchtitan config registry (CONFIG=llama3_70b), "
    "a Trainer argument behind a ds_config's \"auto\" (per_device_train_batch_size=4); repeatable",
    show_default=False)]
