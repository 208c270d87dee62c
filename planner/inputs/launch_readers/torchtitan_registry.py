"""Read a torchtitan config registry: evaluate the function run_train.sh's CONFIG names into records of the config
objects it builds (planner.inputs.launch_readers.torchtitan_trainer_config maps them onto the job-config document
planner.inputs.launch_readers.torchtitan reads).

torchtitan replaced its TOML job configs with Python (pytorch/torchtitan@b5bcd76c, 2026-08): each model keeps a
`config_registry.py` of functions returning a `Trainer.Config`, and `./run_train.sh` picks one with the environment
(`MODULE=llama3 CONFIG=llama3_70b`), command-line overrides (`--parallelism.tensor_parallel_degree 4`) applied on top.
Here `--set CONFIG=<function>` names the function and `--set section.key=value` overrides a key as that command line
does.

The file is parsed, never imported or run. The function's body is evaluated statement by statement over the small part
of Python the registries use: literals and arithmetic, names bound earlier, the config classes called with keyword
arguments (`Trainer.Config(...)`, `TrainingConfig(...)`, `SelectiveAC.Config()`: a record of those arguments), the
file's own functions (`config = llama3_8b()`, `enable_fused_swiglu(config)`), assignments into the config
(`config.compile = CompileConfig(enable=True)`), `model_registry(flavor, converters=[...])`, and `if`s whose test it can
decide. Anything else (another module's helper, a loop) is a value it does not know; one that lands on a key the price
depends on is named.
"""

from __future__ import annotations

import ast
import copy
import operator
import re
from dataclasses import dataclass, field
from typing import Any

from planner.errors import PlanInputError

# The run_train.sh variable that names the registry function (CONFIG=llama3_8b), as --set takes it.
CONFIG_KEYS = ("CONFIG", "config")
_REGISTRY = re.compile(r"^def\s+\w+\s*\([^)]*\)\s*->\s*\w*Trainer\.Config\s*:", re.M)  # GraphTrainer's too


def is_registry(text: str) -> bool:
    """Whether `text` is a torchtitan config registry: functions returning Trainer.Config."""
    return bool(_REGISTRY.search(text))


class Unknown:
    """A value the reader cannot evaluate, with what it was (for the warning)."""

    def __init__(self, what: str) -> None:
        self.what = what

    def __repr__(self) -> str:
        return f"Unknown({self.what})"


@dataclass
class Record:
    """A config object as its keyword arguments: `kind` is the class as called (`TrainingConfig`, `FullAC.Config`),
    `model_registry` for a model spec."""

    kind: str
    fields: dict[str, Any] = field(default_factory=dict)
    args: list[Any] = field(default_factory=list)


# The Trainer.Config fields whose defaults are configs the registries assign into (`config.parallelism.x = ...`):
# torchtitan/trainer.py Trainer.Config (field default_factory=...).
_DEFAULT_CHILDREN = {"training": "TrainingConfig", "parallelism": "ParallelismConfig", "compile": "CompileConfig",
                     "activation_checkpoint": "SelectiveAC.Config", "debug": "DebugConfig"}
# Defaults the registries read back (`config.compile.enable and "model" in config.compile.components`).
_DEFAULTS = {"CompileConfig": {"enable": False, "components": ["model", "loss"], "enable_async_tensor_parallel": False},
             "TrainingConfig": {"max_context_length": 2048, "num_tokens_per_microbatch_per_dp_rank": 16384,
                                "num_tokens_per_train_step": -1},
             "ParallelismConfig": {"pipeline_parallel_degree": 1, "num_pp_microbatches": 1}}
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b,
            ast.NotIn: lambda a, b: a not in b, ast.Is: operator.is_, ast.IsNot: operator.is_not}
_MAX_DEPTH = 20  # registry functions calling each other (llama3_8b_mxfp8 -> llama3_8b): far below any real chain


class _Evaluator:
    def __init__(self, tree: ast.Module, source: str) -> None:
        self.functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        self.constants: dict[str, Any] = {}
        self.source = source
        self.doubts: list[str] = []
        for node in tree.body:  # module-level constants (_NVFP4_BF16_TAIL_FRACTION = 0.15), calling nothing
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and not any(isinstance(n, ast.Call) for n in ast.walk(node.value)):
                value = self.expr(node.value, {})
                if not isinstance(value, Unknown):
                    self.constants[node.targets[0].id] = value

    def call_function(self, name: str, args: list[Any], depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise PlanInputError(f"{name}() calls itself too deeply to read", source=self.source,
                                 fix="pass a registry whose functions do not recurse")
        node = self.functions[name]
        env: dict[str, Any] = {}
        params = [a.arg for a in node.args.args]
        defaults = node.args.defaults
        for i, param in enumerate(params):
            if i < len(args):
                env[param] = args[i]
            elif i >= len(params) - len(defaults):
                env[param] = self.expr(defaults[i - (len(params) - len(defaults))], env, depth)
        return self.block(node.body, env, depth)

    def block(self, body: list[ast.stmt], env: dict[str, Any], depth: int) -> Any:
        for stmt in body:
            if isinstance(stmt, ast.Return):
                return self.expr(stmt.value, env, depth) if stmt.value is not None else None
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                value = self.expr(stmt.value, env, depth) if stmt.value is not None else None
                for target in targets:
                    self.assign(target, value, env, depth)
            elif isinstance(stmt, ast.Expr):
                self.expr(stmt.value, env, depth)  # a helper that edits the config (enable_fused_swiglu(config))
            elif isinstance(stmt, ast.If):
                test = self.expr(stmt.test, env, depth)
                if isinstance(test, Unknown):
                    self.doubts.append(f"an if on {test.what} (neither branch read)")
                    continue
                result = self.block(stmt.body if test else stmt.orelse, env, depth)
                if result is not None:
                    return result
            elif isinstance(stmt, (ast.Assert, ast.Pass, ast.Import, ast.ImportFrom)):
                continue
            else:
                self.doubts.append(f"a {type(stmt).__name__.lower()} statement on line {stmt.lineno} (not read)")
        return None

    def assign(self, target: ast.expr, value: Any, env: dict[str, Any], depth: int) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, ast.Attribute):
            owner = self.expr(target.value, env, depth)
            if isinstance(owner, Record):
                owner.fields[target.attr] = value

    def expr(self, node: ast.expr | None, env: dict[str, Any], depth: int = 0) -> Any:
        if node is None:
            return None
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.expr(e, env, depth) for e in node.elts]
        if isinstance(node, ast.Dict):
            return {self.expr(k, env, depth): self.expr(v, env, depth) for k, v in
                    zip(node.keys, node.values, strict=True) if k is not None}
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id in self.constants:
                return self.constants[node.id]
            return {"True": True, "False": False, "None": None}.get(node.id, Unknown(node.id))
        if isinstance(node, ast.Attribute):
            owner = self.expr(node.value, env, depth)
            return _attribute(owner, node.attr, ast.unparse(node))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            a, b = self.expr(node.left, env, depth), self.expr(node.right, env, depth)
            return _apply(_BINARY[type(node.op)], a, b, ast.unparse(node))
        if isinstance(node, ast.UnaryOp):
            a = self.expr(node.operand, env, depth)
            if isinstance(a, Unknown):
                return a
            return not a if isinstance(node.op, ast.Not) else -a if isinstance(node.op, ast.USub) else a
        if isinstance(node, ast.BoolOp):
            values = [self.expr(v, env, depth) for v in node.values]
            if any(isinstance(v, Unknown) for v in values):
                return Unknown(ast.unparse(node))
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
            left = self.expr(node.left, env, depth)
            for op, right_node in zip(node.ops, node.comparators, strict=True):
                right = self.expr(right_node, env, depth)
                result = _apply(_COMPARE[type(op)], left, right, ast.unparse(node))
                if result is not True:
                    return result
                left = right
            return True
        if isinstance(node, ast.Subscript):
            base, key = self.expr(node.value, env, depth), self.expr(node.slice, env, depth)
            try:
                return base[key]
            except (TypeError, KeyError, IndexError):
                return Unknown(ast.unparse(node))
        if isinstance(node, ast.Call):
            return self.call(node, env, depth)
        return Unknown(ast.unparse(node))

    def call(self, node: ast.Call, env: dict[str, Any], depth: int) -> Any:
        name = ast.unparse(node.func)
        args = [self.expr(a, env, depth) for a in node.args]
        kwargs = {k.arg: self.expr(k.value, env, depth) for k in node.keywords if k.arg is not None}
        if name in self.functions:
            return self.call_function(name, args, depth + 1)
        if name == "model_registry":
            return Record("model_registry", kwargs, args)
        if name in ("replace", "dataclasses.replace") and args and isinstance(args[0], Record):
            return Record(args[0].kind, {**copy.deepcopy(args[0].fields), **kwargs}, list(args[0].args))
        if name == "cast" and len(args) == 2:
            return args[1]
        if name == "len" and len(args) == 1 and isinstance(args[0], list):
            return len(args[0])
        if name.endswith("Config"):  # TrainingConfig(...), SelectiveAC.Config(...), Trainer.Config(...)
            return Record(name, kwargs, args)
        return Unknown(f"{name}()")


def _attribute(owner: Any, attr: str, text: str) -> Any:
    if isinstance(owner, Record):
        if attr in owner.fields:
            return owner.fields[attr]
        if owner.kind == "Trainer.Config" and attr in _DEFAULT_CHILDREN:
            child = Record(_DEFAULT_CHILDREN[attr])  # the default the dataclass builds, now edited in place
            owner.fields[attr] = child
            return child
        if attr in _DEFAULTS.get(owner.kind, {}):
            return copy.deepcopy(_DEFAULTS[owner.kind][attr])
    return Unknown(text)


def _apply(op: Any, a: Any, b: Any, text: str) -> Any:
    if isinstance(a, Unknown) or isinstance(b, Unknown):
        return Unknown(text)
    try:
        return op(a, b)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError):
        return Unknown(text)


def evaluate(text: str, source: str, function: str | None,
             overrides: dict[str, str]) -> tuple[Record, str, list[str]]:
    """(the Trainer.Config record, the function's name, what the reader left open) of `function` in the registry."""
    try:
        tree = ast.parse(text, filename=source)
    except SyntaxError as exc:
        raise PlanInputError(f"is not valid Python (line {exc.lineno}: {exc.msg})", source=source,
                             fix="pass the registry file as torchtitan has it") from None
    ev = _Evaluator(tree, source)
    names = [n for n, f in ev.functions.items() if f.returns is not None
             and re.fullmatch(r"\w*Trainer\.Config", ast.unparse(f.returns))]
    if function is None:
        example = next((n for n in names if "debug" not in n), names[0] if names else "<name>")
        raise PlanInputError(f"a config registry of {len(names)} configs ({', '.join(names[:8])}"
                             f"{', ...' if len(names) > 8 else ''}): which one runs is run_train.sh's CONFIG",
                             field="--set", source=source, fix=f"pass --set CONFIG=<name>, e.g. --set CONFIG={example}")
    if function not in names:
        raise PlanInputError(f"names no config '{function[:60]}' (it has {', '.join(names[:8])}"
                             f"{', ...' if len(names) > 8 else ''})", field="--set CONFIG", source=source,
                             fix="pass one of the registry's config functions")
    config = ev.call_function(function, [], 0)
    if not isinstance(config, Record) or config.kind != "Trainer.Config":
        what = f" (it returns {config.what})" if isinstance(config, Unknown) else ""
        raise PlanInputError(f"{function}() does not build a Trainer.Config the reader can follow{what}",
                             source=source, fix="pass the registry that builds it (a config in torchtitan/models/"
                             "<model>/config_registry.py), or a config function that returns Trainer.Config(...)")
    for key, value in overrides.items():  # torchtitan's CLI: --section.key value (dataclass path)
        _override(config, key, value, source)
    return config, function, ev.doubts


def _override(config: Record, key: str, raw: str, source: str) -> None:
    path = key.split(".")
    if len(path) < 2 or not all(path):
        raise PlanInputError(f"'{key}' is not section.key", field="--set", source=source,
                             fix="e.g. --set parallelism.tensor_parallel_degree=4")
    owner: Any = config
    for part in path[:-1]:
        owner = _attribute(owner, part, key)
        if not isinstance(owner, Record):
            raise PlanInputError(f"'{'.'.join(path[:-1])}' is not a config section", field="--set", source=source,
                                 fix="name a section of Trainer.Config (training, parallelism, compile, ...)")
    owner.fields[path[-1]] = _literal(raw)


def _literal(raw: str) -> Any:
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        lowered = raw.strip().lower()
        return {"true": True, "false": False}.get(lowered, raw)
