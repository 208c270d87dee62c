"""A launch script's commands with their arguments as bash would pass them, worked out without running anything
(no subprocess, no eval): variables and arrays, `${VAR:-default}` and the other parameter expansions, `$((...))` over
known integers, word splitting of unquoted expansions, `if`/`case` branches decided where their tests can be, loops,
functions, `bash -c "..."` strings and here-documents fed to `sbatch` or `bash`, and here-documents written to files
(a ds_config a script writes for itself). `#SBATCH` directives seed the variables Slurm sets (SLURM_NNODES, ...).

Every value carries its doubt: the variables it came from that the script leaves unknown (never set, set by the
scheduler at launch, a positional argument, a command's output) or sets in a branch the reader could not decide.
Readers name only the doubts behind the flags they use, in one warning. `given` (plan explain --set NAME=VALUE) fixes
a variable's value in place of the script's own assignments and the environment.

size: one evaluator over the parsed tree; expansion, conditions and arithmetic share its variable state.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from planner.errors import PlanInputError
from planner.inputs.launch_readers import shell_syntax as sx
from planner.inputs.launch_readers.shell_values import Builder, Field, arithmetic, evaluate, joined, pattern_edit

_MAX_CALLS = 60  # function calls and nested scripts (bash -c, heredocs) one reading follows
_MAX_ITEMS = 64  # loop items read one by one; a longer loop is read once with its variable unknown
# Variables a scheduler or launcher sets when the job starts: a default written beside them (${SLURM_NNODES:-1}) is
# what runs outside that scheduler only, so values taken from them stay in doubt unless the file or --set fixes them.
_LAUNCH_ENV = re.compile(r"^(SLURM_|OMPI_|PMI_|PMIX_|PBS_|LSB_|KUBERNETES_|MLP_|PET_)|^(WORLD_SIZE|RANK|LOCAL_RANK|"
                         r"NODE_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|MASTER_ADDR|MASTER_PORT|NNODES|NUM_NODES|"
                         r"GPUS_PER_NODE|NPROC_PER_NODE|NODE_COUNT)$")
_SHELLS = {"bash", "sh", "zsh", "dash"}
_PARAM = re.compile(r"(?P<len>#)?(?P<name>[A-Za-z_]\w*|\d+|[@*#?$!-])(?:\[(?P<index>[^\]]*)\])?"
                    r"(?P<op>:-|:=|:\+|:\?|-|=|\+|\?|%%|%|##|#|//|/|\^\^|\^|,,|,|:)?(?P<arg>.*)", re.S)


@dataclass
class Command:
    argv: list[Field]
    line: int
    conditional: bool  # read inside a branch the reader could not decide, or a loop body read once

    @property
    def words(self) -> list[str]:
        return [f.text for f in self.argv]


@dataclass
class Script:
    commands: list[Command] = field(default_factory=list)
    variables: dict[str, Field] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # here-documents written to a path (as the script names it)
    sbatch: dict[str, str] = field(default_factory=dict)  # #SBATCH options, long names without dashes
    unresolved: dict[str, int] = field(default_factory=dict)  # variable -> first line using it without a value
    undecided: list[str] = field(default_factory=list)  # tests the reader could not decide (all branches read)
    sourced: list[str] = field(default_factory=list)  # files the script sources, not read
    used_given: set[str] = field(default_factory=set)
    exit_line: int | None = None  # the line of an `exit` reached on a decided path (nothing after it runs)

    def why(self, doubt: frozenset[str]) -> str:
        """The doubts behind a value, in words: which variables, and whether they were unset or branch-dependent."""
        out = []
        for name in sorted(doubt):
            label = name if name.startswith("$") else f"${name}"
            if name.isdigit():
                out.append(f"positional argument ${name} (not given)")
            elif _LAUNCH_ENV.search(name):
                out.append(f"{label} (set by the scheduler or launcher at launch)")
            elif name in self.unresolved:
                out.append(f"{label} (not set in the file)" if not name.startswith("$") else f"{label} (a command's"
                           " output)")
            else:
                out.append(f"{label} (set in a branch the reader could not decide)")
        return ", ".join(out)


class _Exit(Exception):
    """`exit` reached on a decided path: nothing after it runs."""

    def __init__(self, line: int | None = None) -> None:
        super().__init__(line)
        self.line = line


class _Return(Exception):
    """`return` inside a function."""


def sbatch_directives(text: str) -> dict[str, str]:
    """#SBATCH options as sbatch reads them: from the top of the script up to its first command."""
    out: dict[str, str] = {}
    short = {"N": "nodes", "n": "ntasks", "G": "gpus", "c": "cpus-per-task", "t": "time", "J": "job-name"}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        match = re.match(r"#SBATCH\s+(-{1,2})([A-Za-z-]+)(?:[=\s]\s*(\S+))?", stripped)
        if match:
            name = match[2] if match[1] == "--" else short.get(match[2], match[2])
            out[name] = (match[3] or "").split("#")[0]
    return out


def _slurm_seed(directives: dict[str, str]) -> dict[str, str]:
    """The variables Slurm sets from the directives (sbatch(1) OUTPUT ENVIRONMENT VARIABLES)."""
    out: dict[str, str] = {}
    nodes = directives.get("nodes", "").split("-")[0]
    if nodes.isdigit():
        out["SLURM_NNODES"] = out["SLURM_JOB_NUM_NODES"] = nodes
    gres = re.search(r"gpu(?::[\w-]+)?:(\d+)", directives.get("gres", ""))
    per_node = directives.get("gpus-per-node", "").split(":")[-1]
    gpus = gres[1] if gres else per_node if per_node.isdigit() else None
    if gpus:
        out["SLURM_GPUS_ON_NODE"] = out["SLURM_GPUS_PER_NODE"] = gpus
    if directives.get("ntasks-per-node", "").isdigit():
        out["SLURM_NTASKS_PER_NODE"] = directives["ntasks-per-node"]
    return out


def read_script(text: str, source: str, given: Mapping[str, str] | None = None) -> Script:
    """The script's commands and variables; one PlanInputError for syntax the reader cannot follow."""
    shell = _Shell(source, dict(given or {}))
    shell.script.sbatch = sbatch_directives(text)
    for name, value in _slurm_seed(shell.script.sbatch).items():
        shell.vars.setdefault(name, Field(value))
    try:
        shell.run_text(text, 1)
    except _Exit as stop:
        shell.script.exit_line = stop.line
    except _Return:
        pass  # a `return` outside any function ends the script, as it ends a sourced one
    except RecursionError:
        raise PlanInputError("the script nests too deeply to read", source=source, fix="flatten the script") from None
    shell.script.variables = dict(shell.vars)
    return shell.script


class _Shell:
    def __init__(self, source: str, given: dict[str, str]) -> None:
        self.source, self.given = source, given
        self.script = Script()
        self.vars: dict[str, Field] = {k: Field(v) for k, v in given.items()}
        self.arrays: dict[str, list[Field]] = {}
        self.positional: list[Field] | None = None  # None: the script's own arguments, unknown
        self.functions: dict[str, list] = {}
        self.depth = 0  # undecided branches around the current command
        self.calls = 0

    # --- running --------------------------------------------------------------------------------------------------
    def run_text(self, text: str, line: int) -> None:
        self.calls += 1
        if self.calls > _MAX_CALLS:
            raise PlanInputError(f"the script runs more than {_MAX_CALLS} nested scripts or functions",
                                 source=self.source, fix="flatten the script")
        self.run(sx.parse(text, self.source, line))

    def run(self, nodes: list) -> None:
        for node in nodes:
            self.node(node)

    def undecided(self, nodes: list) -> None:
        self.depth += 1
        try:
            self.run(nodes)
        except (_Exit, _Return):
            pass  # an exit on a path that may not be taken ends only that path
        finally:
            self.depth -= 1

    def node(self, node: object) -> None:
        if isinstance(node, sx.Simple):
            self.simple(node)
        elif isinstance(node, sx.If):
            self.if_(node)
        elif isinstance(node, sx.Loop):
            self.loop(node)
        elif isinstance(node, sx.Case):
            self.case(node)
        elif isinstance(node, sx.Function):
            self.functions[node.name] = node.body
        elif isinstance(node, sx.Group):
            saved = (dict(self.vars), dict(self.arrays)) if node.subshell else None
            self.run(node.body)
            if saved:
                self.vars, self.arrays = saved
        elif isinstance(node, sx.AndOr):
            self.and_or(node)
        elif isinstance(node, sx.Not):
            self.node(node.node)
        elif isinstance(node, sx.Pipeline):
            for part in node.nodes:
                self.node(part)

    def and_or(self, node: sx.AndOr) -> None:
        """`a && b` runs b when a succeeds, `a || b` when it fails: decided by a's test, where a is one; another
        command is taken to succeed (`mkdir -p x || exit 1`)."""
        self.node(node.left)
        status = self.status(node.left)
        runs = status if node.op == "&&" else (None if status is None else not status)
        if runs is None:
            self.undecided([node.right])
        elif runs:
            self.node(node.right)

    def if_(self, node: sx.If) -> None:
        """The first clause whose test holds runs; clauses after an undecided test are read as undecided."""
        open_paths = False
        for cond, body in node.clauses:
            result = self.condition(cond)
            if result is False:
                continue
            if result is True:
                self.undecided(body) if open_paths else self.run(body)
                return
            open_paths = True
            self.undecided(body)
        if node.orelse is not None:
            self.undecided(node.orelse) if open_paths else self.run(node.orelse)

    def condition(self, nodes: list) -> bool | None:
        """An if/while condition's outcome: the last command's status, None where it cannot be told."""
        result: bool | None = True
        for item in nodes:
            if isinstance(item, sx.Simple) and item.assigns and not item.words:
                self.node(item)
            result = self.status(item)
        if result is None:
            self.script.undecided.append(" ".join(_raw_words(nodes))[:120])
        return result

    def status(self, node: object) -> bool | None:
        if isinstance(node, sx.Not):
            inner = self.status(node.node)
            return None if inner is None else not inner
        if isinstance(node, sx.AndOr):
            left, right = self.status(node.left), self.status(node.right)
            if node.op == "&&":
                return False if False in (left, right) else None if None in (left, right) else True
            return True if True in (left, right) else None if None in (left, right) else False
        if not isinstance(node, sx.Simple) or not node.words:
            return True if isinstance(node, sx.Simple) else None
        argv = self.expand_words(node.words)
        name = argv[0].text if argv else ""
        if name in ("[", "test", "[["):
            args = argv[1:-1] if name in ("[", "[[") else argv[1:]
            return evaluate(args, name == "[[")
        if name in ("true", ":"):
            return True
        if name == "false":
            return False
        return None

    def loop(self, node: sx.Loop) -> None:
        items = self.expand_words(node.items) if node.items is not None else None
        if node.kind == "for" and items is not None and len(items) <= _MAX_ITEMS:
            for item in items:
                self.assign(node.var or "_", item)
                self.undecided(node.body) if item.doubt else self.run(node.body)
            return
        if node.var:
            self.assign(node.var, Field(f"${node.var}", frozenset({node.var})))
            self.script.unresolved.setdefault(node.var, 0)
        self.condition(node.cond) if node.cond else None
        self.undecided(node.body)

    def case(self, node: sx.Case) -> None:
        subject = self.join(self.expand_words([node.word], quoted=True))
        for patterns, body in node.arms:
            texts = [self.join(self.expand_words([p], quoted=True)) for p in patterns]
            if subject.doubt or any(t.doubt for t in texts):
                self.script.undecided.append(f"case {node.word.raw}")
                for _patterns, other in node.arms:
                    self.undecided(other)
                return
            if any(fnmatch.fnmatchcase(subject.text, t.text) for t in texts):
                self.run(body)
                return

    # --- simple commands -----------------------------------------------------------------------------------------
    def simple(self, node: sx.Simple) -> None:
        for assign in node.assigns:
            self.apply(assign)
        if not node.words:
            return
        argv = self.expand_words(node.words)
        if not argv:
            return
        name = PurePosixPath(argv[0].text).name
        if name in self.functions and self.calls < _MAX_CALLS:
            self.call(name, argv)
            return
        if self.builtin(name, argv, node):
            return
        self.script.commands.append(Command(argv, node.line, self.depth > 0))
        self.nested(argv, node)

    def call(self, name: str, argv: list[Field]) -> None:
        saved, self.positional = self.positional, argv[1:]
        self.calls += 1
        try:
            self.run(self.functions[name])
        except _Return:
            pass
        finally:
            self.positional = saved

    def builtin(self, name: str, argv: list[Field], node: sx.Simple) -> bool:
        args = argv[1:]
        if name in ("export", "local", "declare", "typeset", "readonly"):
            for arg in args:
                key, eq, value = arg.text.partition("=")
                if eq and key.rstrip("+").isidentifier():
                    self.assign(key.rstrip("+"), _after(arg, len(key) + 1), append=key.endswith("+"))
            for assign in node.arg_assigns:
                self.apply(assign)
            return True
        if name == "unset":
            for arg in args:
                self.vars.pop(arg.text, None)
                self.arrays.pop(arg.text, None)
            return True
        if name == "shift":
            if self.positional:
                count = int(args[0].text) if args and args[0].text.isdigit() else 1
                self.positional = self.positional[count:]
            return True
        if name == "set":
            if args and args[0].text == "--":
                self.positional = args[1:]
            return True
        if name in ("source", "."):
            self.script.sourced.append(args[0].text if args else "")
            return True
        if name == "eval":
            self.run_text(" ".join(a.text for a in args), node.line)
            return True
        if name in ("exit", "return"):
            if self.depth == 0:
                raise _Exit(node.line) if name == "exit" else _Return()
            return True
        return False

    def nested(self, argv: list[Field], node: sx.Simple) -> None:
        """Scripts inside a command: `bash -c STRING` (also behind srun, docker, ...), a here-document fed to a
        shell or to sbatch, and here-documents written to files (`cat <<EOF > ds_config.json`)."""
        names = [PurePosixPath(a.text).name for a in argv]
        for i, name in enumerate(names):
            if name in _SHELLS:
                rest = argv[i + 1:]
                for j, arg in enumerate(rest):
                    if not arg.text.startswith("-"):
                        break
                    if "c" in arg.text[1:] and j + 1 < len(rest):
                        self.run_text(rest[j + 1].text, node.line)
                        break
                break
        for redirect in node.redirects:
            if redirect.heredoc is None:
                continue
            body = self.heredoc(redirect)
            targets = [r for r in node.redirects if r.op in (">", ">>", ">|") and r.target is not None]
            for target in targets:
                path = self.join(self.expand_words([target.target], quoted=True)).text  # type: ignore[list-item]
                self.script.files[path] = body.text
            if names[0] in ("tee",) and len(argv) > 1:
                self.script.files[argv[-1].text] = body.text
            if names[0] in _SHELLS or names[0] == "sbatch":
                directives = sbatch_directives(body.text)
                for key, value in _slurm_seed(directives).items():
                    self.vars.setdefault(key, Field(value))
                self.script.sbatch.update(directives)
                self.run_text(body.text, node.line)

    def heredoc(self, redirect: sx.Redirect) -> Field:
        body = redirect.heredoc or ""
        if redirect.quoted:
            return Field(body)
        return self.join(self.expand_parts(sx.loose_parts(body, self.source, quotes=False), True))

    # --- variables -----------------------------------------------------------------------------------------------
    def apply(self, assign: sx.Assign) -> None:
        if assign.array is not None:
            values = [f for w in assign.array for f in self.expand_words([w])]
            if assign.name in self.given:
                self.script.used_given.add(assign.name)
                return
            doubt = frozenset({assign.name}) if self.depth else frozenset()
            values = [v.with_doubt(doubt) for v in values]
            old = self.arrays.get(assign.name, []) if assign.append else []
            self.arrays[assign.name] = old + values
            self.vars.pop(assign.name, None)
            return
        value = self.join(self.expand_words([assign.value], quoted=True)) if assign.value else Field("")
        if assign.index is not None and assign.index not in ("0",):
            return  # an element other than the first: no flag reads it
        self.assign(assign.name, value, append=assign.append)

    def assign(self, name: str, value: Field, append: bool = False) -> None:
        if name in self.given:
            self.script.used_given.add(name)
            return
        if append:
            value = joined([self.vars.get(name, Field("")), value], "")
        if self.depth:
            value = value.with_doubt(frozenset({name}))
        self.vars[name] = value
        self.arrays.pop(name, None)

    def lookup(self, name: str, index: str | None) -> list[Field] | None:
        """A parameter's value(s); None when unset."""
        if name in self.given:
            self.script.used_given.add(name)
            return [Field(self.given[name])]
        if name.isdigit() or name in "@*#":
            if self.positional is None:
                return None
            if name == "#":
                return [Field(str(len(self.positional)))]
            if name in "@*":
                return list(self.positional)
            i = int(name) - 1
            return [self.positional[i]] if 0 <= i < len(self.positional) else None
        if name in self.arrays:
            values = self.arrays[name]
            if index in ("@", "*"):
                return list(values)
            i = int(index) if index and index.lstrip("-").isdigit() else 0
            return [values[i]] if -len(values) <= i < len(values) else None
        if name in self.vars:
            return [self.vars[name]] if index in (None, "@", "*", "0") else None
        return None

    # --- expansion -----------------------------------------------------------------------------------------------
    def expand_words(self, words: list, quoted: bool = False) -> list[Field]:
        out: list[Field] = []
        for word in words:
            out.extend(self.expand_parts(word.parts, quoted))
        return out

    @staticmethod
    def join(fields: list[Field]) -> Field:
        return joined(fields)

    def expand_parts(self, parts: list, quoted: bool) -> list[Field]:
        out = Builder()
        self._parts(parts, quoted, out)
        return out.done()

    def _parts(self, parts: list, quoted: bool, out: Builder, inner: frozenset[str] | None = None) -> None:
        """Expand parts into `out`; `inner` (the extra doubt) is set while expanding the word of ${X:-word}, whose
        unquoted literal text is split like an expansion's result."""
        extra = inner or frozenset()
        for kind, value in parts:
            if kind == "lit" and inner is not None and not quoted:
                out.split(Field(str(value), extra))
            elif kind in ("lit", "sq"):
                out.add(str(value), extra)
            elif kind == "dq":
                out.add("", extra)
                self._parts(value, True, out, inner)  # type: ignore[arg-type]
                continue
            else:
                if kind == "param":
                    values, listed = self.param(str(value))
                    if isinstance(values, tuple):  # a default / alternative word: expanded here, in this quoting
                        self._parts(values[0], quoted, out, extra | values[1])
                        continue
                else:
                    values, listed = [self.arith(str(value)) if kind == "arith" else self.command_output(
                        str(value))], False
                for i, f in enumerate(values):
                    if listed and i:
                        out.boundary()  # ${arr[@]} and "$@": one word per element (then split when unquoted)
                    f = f.with_doubt(extra) if extra else f
                    out.add_field(f) if quoted else out.split(f)

    def command_output(self, text: str) -> Field:
        """$(...): a command's output is unknown; `pwd`, `dirname`, `basename` and `date` do not matter to a plan."""
        words = text.split()
        key = f"$({words[0] if words else ''}{'...' if len(words) > 1 else ''})"  # one word, whatever it splits into
        self.script.unresolved.setdefault(key, 0)
        return Field(key, frozenset({key}))

    def unset(self, name: str) -> Field:
        self.script.unresolved.setdefault(name, 0)
        return Field(f"${name}", frozenset({name}))

    def param(self, expr: str) -> tuple[Any, bool]:
        """${expr} (or a bare $NAME): the values, and whether they are a list ("$@", "${arr[@]}"); for a default or
        alternative word, (its parts, their doubt) to expand where the expansion stands."""
        match = _PARAM.fullmatch(expr) if expr != "#" else None
        if match is None:
            if expr == "#":
                return self.lookup("#", None) or [self.unset("#")], False
            return [self.unset(expr[:40])], False
        name, index, op, arg = match["name"], match["index"], match["op"], match["arg"]
        values = self.lookup(name, index)
        listed = (index in ("@", "*") or name in "@*") and values is not None
        if match["len"]:
            if values is None:
                return [self.unset(name)], False
            count = len(values) if index in ("@", "*") else len(values[0].text) if values else 0
            return [Field(str(count), frozenset().union(*(v.doubt for v in values)))], False
        launch = frozenset({name}) if _LAUNCH_ENV.search(name) and values is None else frozenset()
        if launch:
            self.script.unresolved.setdefault(name, 0)
        if op in (None, "") and arg:
            return [self.unset(expr[:40])], False
        empty = values is None or (op and op.startswith(":") and not "".join(v.text for v in values))
        if op in (":-", "-", ":=", "="):
            if empty if op.startswith(":") else values is None:
                parts = sx.loose_parts(arg, self.source, True)
                if op in (":=", "="):
                    self.assign(name, self.join(self.expand_parts(parts, True)).with_doubt(launch))
                return (parts, launch), False
            return values or [], listed
        if op in (":+", "+"):
            if empty if op.startswith(":") else values is None:
                return [], False
            return (sx.loose_parts(arg, self.source, True), frozenset()), False
        if values is None:
            return [self.unset(name)], False
        if op in (":?", "?", None):
            return values, listed
        pattern = self.join(self.expand_parts(sx.loose_parts(arg, self.source, True), True))
        return [pattern_edit(v, op, pattern) for v in values], listed

    def arith(self, expr: str) -> Field:
        """$((expr)) over known integers; an unknown or non-integer operand leaves the result unknown."""
        text = self.join(self.expand_parts(sx.loose_parts(expr, self.source, True), True))
        doubt = set(text.doubt)

        def value(name: str) -> int | None:
            found = self.lookup(name, None)
            if found is None:
                doubt.add(self.unset(name).text.lstrip("$"))
                return None
            doubt.update(found[0].doubt)
            number = found[0].text.strip()
            return int(number) if re.fullmatch(r"-?\d+", number) else None

        result = arithmetic(text.text, value)
        if result is None or doubt:
            key = f"$(({expr.strip()[:60]}))"
            return Field(key, frozenset(doubt) or frozenset({key}))
        return Field(str(result))


def _after(value: Field, start: int) -> Field:
    """The field from character `start` on, pieces and doubts kept (the value of an `export NAME=value` argument)."""
    pieces, pos = [], 0
    for text, doubt in value.pieces():
        keep = text[max(start - pos, 0):]
        if keep:
            pieces.append(Field(keep, doubt))
        pos += len(text)
    return joined(pieces, "")


def _raw_words(nodes: list) -> list[str]:
    out: list[str] = []
    for node in nodes:
        if isinstance(node, sx.Simple):
            out.extend(w.raw for w in node.words)
        elif isinstance(node, sx.AndOr):
            out.extend([*_raw_words([node.left]), node.op, *_raw_words([node.right])])
        elif isinstance(node, sx.Not):
            out.extend(["!", *_raw_words([node.node])])
    return out
