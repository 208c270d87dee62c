"""Reading user files safely: YAML/JSON with safe loaders and a size cap, unknown-key warnings with a "did you mean",
and pydantic validation errors turned into one PlanInputError line naming the file, the field and the fix."""

from __future__ import annotations

import difflib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from planner.errors import PlanInputError

MAX_FILE_BYTES = 4 * 1024 * 1024  # a model or cluster description is a few KB; refuse anything absurd


def warn(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr)


def exists(path: Path) -> bool:
    """Path.exists() that treats unusable names (NUL bytes, names too long for the OS) as absent."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def read_text(path: Path, what: str = "describe the model or cluster in YAML or JSON") -> str:
    """A user's text file, bounded and UTF-8, with every I/O problem as one PlanInputError line (`what`: the fix
    for an empty file)."""
    src = str(path)
    if not exists(path):
        raise PlanInputError("file not found", source=src, fix="check the path")
    if path.is_dir():
        raise PlanInputError("is a directory, not a file", source=src, fix="point at a .yaml or config.json file")
    too_big = PlanInputError(f"file is larger than the limit of {MAX_FILE_BYTES} bytes", source=src,
                             fix="pass the model/cluster description, not a checkpoint or dataset")
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise too_big
        with path.open("rb") as fh:  # bounded read: a device or pipe (/dev/zero) reports size 0 and never ends
            raw = fh.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise too_big
    except PermissionError:
        raise PlanInputError("cannot read file (permission denied)", source=src, fix="check its permissions") from None
    except OSError as exc:
        raise PlanInputError(f"cannot read file ({exc.strerror})", source=src, fix="check the path") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlanInputError(f"not UTF-8 text (byte {exc.start})", source=src, fix="save the file as UTF-8") from None
    if not text.strip():
        raise PlanInputError("file is empty", source=src, fix=what)
    return text


def read_structured_file(path: Path) -> Any:
    """Read YAML or JSON safely, turning every I/O or syntax problem into one PlanInputError line."""
    src = str(path)
    text = read_text(path)
    try:
        if path.suffix.lower() == ".json":
            return json.loads(text)
        return yaml.safe_load(text)  # safe loader: plain data only, a tag that would construct an object is refused
    except json.JSONDecodeError as exc:
        raise PlanInputError(f"invalid JSON at line {exc.lineno}: {exc.msg}", source=src,
                             fix="fix the JSON syntax") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = (getattr(exc, "problem", None) or str(exc)).splitlines()[0]
        if "constructor for the tag" in problem:  # e.g. !!python/object/apply:os.system: never constructed
            raise PlanInputError(f"refused YAML tag{where}: {problem}", source=src,
                                 fix="remove the tag; only plain mappings, lists, strings and numbers are read"
                                 ) from None
        raise PlanInputError(f"invalid YAML{where}: {problem}", source=src, fix="fix the YAML syntax") from None
    except RecursionError:
        raise PlanInputError("nested too deeply to read", source=src, fix="flatten the file") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits, or a date such as 2024-13-45
        raise PlanInputError(f"unreadable value ({str(exc).split(';')[0][:100]})", source=src,
                             fix="write sizes as plain numbers") from None


def _fix_for(kind: str, field: str | None, ctx: dict[str, Any]) -> str:
    """A concrete fix for one pydantic error type (bounds come from the spec's own constraints)."""
    name = field or "the value"
    bounds = {"gt": "above", "ge": "at least", "lt": "below", "le": "at most"}
    for key, phrase in bounds.items():
        if key in ctx:
            limit = ctx[key]
            return f"set {name} {phrase} {limit:,}" if isinstance(limit, int) else f"set {name} {phrase} {limit:g}"
    if kind == "missing":
        parent, _, leaf = name.rpartition(".")
        return f"add '{leaf}: ...'" + (f" under '{parent}'" if parent else "")
    if kind.startswith("int"):
        return f"write {name} as a whole number"
    if "expected a number" in str(ctx.get("error", "")):
        return f"write {name} as a number"
    if kind.startswith(("float", "finite")):
        return f"write {name} as a finite number"
    if kind.startswith("bool"):
        return f"write {name} as true or false"
    if kind.startswith("string"):
        return f"write {name} as text"
    if kind == "literal_error":
        return f"use {ctx.get('expected', 'one of the listed values')}"
    return "change the values named in the message"


def pydantic_error(exc: ValidationError, source: str | None, names: dict[str, str] | None = None,
                   prefix: str = "", unknown: UnknownKeys | None = None) -> PlanInputError:
    """The first validation error as one line; `names` maps spec fields to what the user typed (CLI flags)."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or None
    field = (names or {}).get(loc, prefix + loc) if loc else None
    fix = _fix_for(err["type"], field, err.get("ctx") or {})
    if unknown and loc and err["type"] == "missing":
        fix = unknown.fix_for_missing(loc, fix)
    msg = err["msg"].removeprefix("Value error, ")
    got = err.get("input")
    if field and not isinstance(got, dict | list) and err["type"] != "missing":
        shown = repr(got)
        msg = f"{msg} (got {shown[:60] + '...' if len(shown) > 60 else shown})"
    return PlanInputError(msg, field=field, source=source, fix=fix)


_SHOWN_KEYS = 8  # unknown keys named in the warning; the rest are counted
_MATCHED_KEYS = 200  # unknown keys checked for a "did you mean" (bounds the work on a hostile file)


@dataclass
class UnknownKeys:
    """Keys a file gave that the planner does not read. Warned about (one line) only once the file has validated;
    when it fails, the error's fix names the likely typo instead, so a bad file still gets exactly one line."""

    source: str
    where: str | None = None
    notes: list[str] = field(default_factory=list)
    typos: dict[str, str] = field(default_factory=dict)  # known field -> the unknown key that looks like it

    def warn(self) -> None:
        if self.notes:
            more = f" and {len(self.notes) - _SHOWN_KEYS} more" if len(self.notes) > _SHOWN_KEYS else ""
            plural = "s" if len(self.notes) > 1 else ""
            warn(f"{self.source}: {self.where + ': ' if self.where else ''}unknown key{plural} ignored: "
                  f"{', '.join(self.notes[:_SHOWN_KEYS])}{more}")

    def fix_for_missing(self, name: str, default: str) -> str:
        return f"rename '{self.typos[name]}' to '{name}'" if name in self.typos else default


def check_keys(doc: dict, source: str, known: set[str], *, ignored: set[str] | frozenset[str] = frozenset(),
               where: str | None = None, cutoff: float = 0.75,
               name_unmatched: bool | Callable[[str], object] = True) -> UnknownKeys:
    """Every key must be text; unknown keys are collected with the closest known key ("did you mean"). Keys with no
    close match are named when `name_unmatched` is true, or when it is a predicate that accepts them."""
    for key in doc:
        if not isinstance(key, str):
            raise PlanInputError(f"key {key!r} is not text", field=where, source=source,
                                 fix="quote the key, or remove it")
    out = UnknownKeys(source, where)
    for i, key in enumerate(sorted(k for k in doc if k not in known and k not in ignored)):
        close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=cutoff) if i < _MATCHED_KEYS else []
        label = repr(key[:40] + ("..." if len(key) > 40 else ""))
        if close:
            out.notes.append(f"{label} (did you mean '{close[0]}'?)")
            out.typos.setdefault(close[0], key)
        elif name_unmatched if isinstance(name_unmatched, bool) else name_unmatched(key):
            out.notes.append(label)
    return out


def did_you_mean(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else f"choose one of: {', '.join(sorted(options))}"


# --- models ----------------------------------------------------------------------------------------------------
