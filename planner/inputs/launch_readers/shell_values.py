"""Values of shell expressions for planner.inputs.launch_readers.shell: words split into fields as bash splits
unquoted expansions, `test` / `[ ]` / `[[ ]]` outcomes, `$((...))` integer arithmetic and the pattern edits of
`${VAR%...}`, `${VAR/...}` and friends. Each answers None ("cannot tell") where an operand is in doubt; nothing is
ever run or evaluated as Python."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from dataclasses import dataclass

Segment = tuple[str, frozenset]


@dataclass(frozen=True)
class Field:
    """One word after expansion, and the variables whose unknown (or branch-dependent) values went into it. A value
    joined from several (GPT_ARGS="--tp $TP --save $DIR") keeps each piece's own doubt in `segments`, so splitting
    it again gives `--tp` and `$TP`'s value only their own."""

    text: str
    doubt: frozenset[str] = frozenset()
    segments: tuple[Segment, ...] = ()

    def pieces(self) -> tuple[Segment, ...]:
        return self.segments or ((self.text, self.doubt),)

    def with_doubt(self, extra: frozenset[str]) -> Field:
        return Field(self.text, self.doubt | extra, tuple((t, d | extra) for t, d in self.pieces()))


def joined(fields: list[Field], sep: str = " ") -> Field:
    """Fields joined into one (a quoted "${arr[*]}" or an assignment's value), pieces and all."""
    pieces: list[Segment] = []
    for i, f in enumerate(fields):
        if i and sep:
            pieces.append((sep, frozenset()))
        pieces.extend(f.pieces())
    return Field("".join(t for t, _ in pieces), frozenset().union(*(d for _, d in pieces)), tuple(pieces))


class Builder:
    """Collects the fields of one word: literal and quoted text glue onto the current field, unquoted expansions are
    split on blanks (IFS at its default), and an empty quoted string still makes a field ("")."""

    def __init__(self) -> None:
        self.fields: list[Field] = []
        self.current: list[Segment] | None = None

    def add(self, text: str, doubt: frozenset[str]) -> None:
        if self.current is None:
            self.current = []
        self.current.append((text, doubt))

    def add_field(self, value: Field) -> None:
        for text, doubt in value.pieces():
            self.add(text, doubt)

    def boundary(self) -> None:
        if self.current is not None:
            self.fields.append(joined([Field(t, d) for t, d in self.current], ""))
        self.current = None

    def split(self, value: Field) -> None:
        for text, doubt in value.pieces():
            words = text.split()
            if text[:1].isspace():
                self.boundary()
            for i, word in enumerate(words):
                if i:
                    self.boundary()
                self.add(word, doubt)
            if text[-1:].isspace():
                self.boundary()

    def done(self) -> list[Field]:
        self.boundary()
        return self.fields


_FILE_TESTS = {"-a", "-b", "-c", "-d", "-e", "-f", "-g", "-h", "-k", "-p", "-r", "-s", "-t", "-u", "-w", "-x", "-G",
               "-L", "-N", "-O", "-S"}
_INT_TESTS = {"-eq": int.__eq__, "-ne": int.__ne__, "-lt": int.__lt__, "-le": int.__le__, "-gt": int.__gt__,
              "-ge": int.__ge__}


def evaluate(args: list[Field], double: bool) -> bool | None:
    """A test's outcome (bash "Bash Conditional Expressions"): None where a file would be looked at, an operand is in
    doubt, or the expression is not one the reader knows."""
    tokens = list(args)
    pos = 0

    def peek() -> str | None:
        return tokens[pos].text if pos < len(tokens) else None

    def take() -> Field:
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def either() -> bool | None:
        left = both()
        while peek() in ("-o", "||"):
            take()
            right = both()
            left = True if True in (left, right) else None if None in (left, right) else False
        return left

    def both() -> bool | None:
        left = negation()
        while peek() in ("-a", "&&") and not (pos + 1 < len(tokens) and tokens[pos + 1].text in _BINARY):
            take()
            right = negation()
            left = False if False in (left, right) else None if None in (left, right) else True
        return left

    def negation() -> bool | None:
        if peek() == "!" and pos + 1 < len(tokens):
            take()
            inner = negation()
            return None if inner is None else not inner
        return primary()

    def primary() -> bool | None:
        if peek() == "(":
            take()
            inner = either()
            if peek() == ")":
                take()
            return inner
        if pos + 2 < len(tokens) + 0 and pos + 1 < len(tokens) and tokens[pos + 1].text in _BINARY:
            left, op, right = take(), take().text, take()
            return _binary(left, op, right, double)
        if peek() in _FILE_TESTS | {"-z", "-n", "-v"} and pos + 1 < len(tokens):
            op, operand = take().text, take()
            if op in _FILE_TESTS or operand.doubt:
                return None
            return {"-z": operand.text == "", "-n": operand.text != ""}.get(op)
        if pos < len(tokens):
            operand = take()
            return None if operand.doubt else operand.text != ""
        return False

    result = either()
    return result if pos == len(tokens) else None


_BINARY = {"=", "==", "!=", "<", ">", "=~", "-nt", "-ot", "-ef", *_INT_TESTS}


def _binary(left: Field, op: str, right: Field, double: bool) -> bool | None:
    if left.doubt or right.doubt or op in ("=~", "-nt", "-ot", "-ef"):
        return None
    if op in _INT_TESTS:
        if not (re.fullmatch(r"\s*-?\d+\s*", left.text) and re.fullmatch(r"\s*-?\d+\s*", right.text)):
            return None
        return _INT_TESTS[op](int(left.text), int(right.text))
    if op in ("<", ">"):
        return left.text < right.text if op == "<" else left.text > right.text
    same = fnmatch.fnmatchcase(left.text, right.text) if double else left.text == right.text
    return same if op in ("=", "==") else not same


def arithmetic(text: str, lookup: Callable[[str], int | None]) -> int | None:
    """Integer arithmetic as $((...)) does it, over + - * / % ** ( ), comparisons, && || and unary - + !; names are
    read with `lookup`. None for anything else (assignments, ternaries, floats, division by zero)."""
    tokens = re.findall(r"\s*(0[xX][0-9a-fA-F]+|\d+|[A-Za-z_]\w*|\*\*|<=|>=|==|!=|&&|\|\||[-+*/%()<>!])", text)
    if "".join(tokens).replace(" ", "") != text.replace(" ", "").replace("\t", "").replace("\n", ""):
        return None
    tokens = [t.strip() for t in tokens]
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    levels = [("||",), ("&&",), ("==", "!="), ("<", ">", "<=", ">="), ("+", "-"), ("*", "/", "%")]

    def binary(level: int) -> int | None:
        if level == len(levels):
            return power()
        left = binary(level + 1)
        while peek() in levels[level]:
            op, right = take(), binary(level + 1)
            if left is None or right is None or (op in "/%" and right == 0):
                left = None
                continue
            left = _apply(op, left, right)
        return left

    def power() -> int | None:
        base = unary()
        if peek() == "**":
            take()
            exponent = power()
            if base is None or exponent is None or exponent < 0 or exponent > 64:
                return None
            return base ** exponent
        return base

    def unary() -> int | None:
        if peek() in ("-", "+", "!"):
            op, value = take(), unary()
            return None if value is None else -value if op == "-" else int(not value) if op == "!" else value
        if peek() == "(":
            take()
            value = binary(0)
            if peek() != ")":
                return None
            take()
            return value
        token = take() if peek() is not None else ""
        if re.fullmatch(r"0[xX][0-9a-fA-F]+", token):
            return int(token, 16)
        if token.isdigit():
            return int(token)
        return lookup(token) if token.isidentifier() else None

    try:
        result = binary(0)
    except RecursionError:
        return None
    return result if pos == len(tokens) and result is not None and abs(result) < 2 ** 63 else None


def _apply(op: str, a: int, b: int) -> int:
    if op == "/":
        return int(a / b)  # bash truncates towards zero
    if op == "%":
        return a - b * int(a / b)
    table = {"+": a + b, "-": a - b, "*": a * b, "<": int(a < b), ">": int(a > b), "<=": int(a <= b),
             ">=": int(a >= b), "==": int(a == b), "!=": int(a != b), "&&": int(bool(a and b)),
             "||": int(bool(a or b))}
    return table[op]


def pattern_edit(value: Field, op: str, pattern: Field) -> Field:
    """${VAR%pat} ${VAR%%pat} ${VAR#pat} ${VAR##pat} ${VAR/pat/rep} ${VAR//pat/rep} ${VAR^^} ${VAR,,} ${VAR:off:len}
    on a known value; in doubt when either side is."""
    doubt = value.doubt | pattern.doubt
    text, pat = value.text, pattern.text
    if op in ("^^", "^"):
        return Field(text.upper() if op == "^^" else text[:1].upper() + text[1:], doubt)
    if op in (",,", ","):
        return Field(text.lower() if op == ",," else text[:1].lower() + text[1:], doubt)
    if op in ("%", "%%", "#", "##"):
        cuts = range(len(text) + 1)
        if op in ("%", "%%"):
            order = sorted(cuts, reverse=op == "%")
            for i in order:
                if fnmatch.fnmatchcase(text[i:], pat):
                    return Field(text[:i], doubt)
        else:
            order = sorted(cuts, reverse=op == "##")
            for i in order:
                if fnmatch.fnmatchcase(text[:i], pat):
                    return Field(text[i:], doubt)
        return Field(text, doubt)
    if op in ("/", "//"):
        find, _, repl = pat.partition("/")
        if not find:
            return Field(text, doubt)
        return Field(text.replace(find, repl) if op == "//" else text.replace(find, repl, 1), doubt)
    if op == ":":
        bits = pat.split(":")
        try:
            start = int(bits[0])
            end = start + int(bits[1]) if len(bits) > 1 and bits[1].strip() else None
        except ValueError:
            return Field(text, doubt | {"${...:...}"})
        return Field(text[start:end], doubt)
    return Field(text, doubt)
