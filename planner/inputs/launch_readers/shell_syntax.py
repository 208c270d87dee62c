"""Bash syntax for launch scripts, parsed and never run: words with their quoting (single, double, escapes,
`$NAME`, `${...}`, `$((...))`, `$(...)`, backticks), line continuations, comments, here-documents, array assignments,
and the compound commands launch scripts use (if/elif/else, for, while/until, case, functions, subshells and brace
groups, `&&`/`||` lists, pipelines). The grammar follows the bash manual's "Shell Syntax" and "Shell Commands"
chapters; planner.inputs.launch_readers.shell gives the tree its values.

Two liberties, both for text people paste from guides: an unquoted `(` inside a command's arguments (`--moe-layer-freq
([0]*3+[1]*58)`, which bash refuses) is read as part of the word, and a backslash before the end of the file ends the
command. Anything else malformed (an open quote, an unclosed `if`) is one PlanInputError naming the line.

size: the lexer and the recursive-descent parser share one token stream and its lookahead (a `(` is a subshell or
part of a word depending on where the parser stands); split in two, each half would reach into the other's state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.errors import PlanInputError

# A word's pieces: ("lit", str) unquoted text, ("sq", str) quoted text taken literally, ("dq", list) a double-quoted
# run, ("param", str) the inside of ${...} or a bare $NAME, ("arith", str) $((...)), ("cmd", str) $(...) or `...`.
Part = tuple[str, object]
_MAX_DEPTH = 40  # nested $( ), ${ }, quotes and compound commands: real scripts use a handful
_META = set(" \t\n;&|<>()")
_RESERVED = {"if", "then", "elif", "else", "fi", "for", "in", "do", "done", "while", "until", "case", "esac",
             "function", "{", "}", "!", "select"}
_REDIRECTS = ("<<<", "<<-", "&>>", "<<", ">>", ">&", "<&", "&>", ">|", "<>", ">", "<")
_OPERATORS = (";;&", ";;", ";&", "&&", "||", "|&", ";", "&", "|", "(", ")")


@dataclass
class Word:
    parts: list[Part]
    raw: str  # the source text, for messages and for words that must stay literal (test operators, patterns)
    line: int

    @property
    def plain(self) -> str | None:
        """The text when the word is one unquoted literal (a reserved word can only be that)."""
        if len(self.parts) == 1 and self.parts[0][0] == "lit":
            return str(self.parts[0][1])
        return None


@dataclass
class Redirect:
    op: str
    target: Word | None
    heredoc: str | None = None  # a here-document's body
    quoted: bool = False  # a quoted delimiter: the body is taken literally


@dataclass
class Assign:
    name: str
    value: Word | None  # scalar value (None for an array)
    array: list[Word] | None = None
    append: bool = False
    index: str | None = None  # NAME[index]=value


@dataclass
class Simple:
    line: int
    assigns: list[Assign] = field(default_factory=list)
    words: list[Word] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    arg_assigns: list[Assign] = field(default_factory=list)  # `declare -a X=(...)`: array assignments as arguments


@dataclass
class If:
    clauses: list[tuple[list, list]]  # (condition, body) for if and each elif
    orelse: list | None


@dataclass
class Loop:  # for NAME in WORDS; while/until COND (items None)
    kind: str
    var: str | None
    items: list[Word] | None
    cond: list
    body: list


@dataclass
class Case:
    word: Word
    arms: list[tuple[list[Word], list]]


@dataclass
class Function:
    name: str
    body: list


@dataclass
class Group:
    body: list
    subshell: bool


@dataclass
class AndOr:
    op: str
    left: object
    right: object


@dataclass
class Not:
    node: object


@dataclass
class Pipeline:
    nodes: list


def syntax_error(message: str, line: int, source: str) -> PlanInputError:
    return PlanInputError(f"cannot read the script at line {line}: {message}", source=source,
                          fix="fix the shell syntax there (plan reads the script without running it)")


class _Lexer:
    """Turns the text into words and operators on demand; here-document bodies are read at the next newline."""

    def __init__(self, text: str, source: str, first_line: int = 1) -> None:
        self.text, self.source, self.pos, self.line = text, source, 0, first_line
        self.pending: list[tuple[Redirect, str, bool]] = []  # here-documents waiting for their bodies
        self.depth = 0

    def error(self, message: str) -> PlanInputError:
        return syntax_error(message, self.line, self.source)

    def peek(self, n: int = 0) -> str:
        i = self.pos + n
        return self.text[i] if i < len(self.text) else ""

    def skip_blank(self) -> None:
        while True:
            c = self.peek()
            if c in (" ", "\t", "\r"):
                self.pos += 1
            elif c == "\\" and self.peek(1) == "\n":
                self.pos += 2
                self.line += 1
            elif c == "\\" and self.peek(1) == "":
                self.pos += 1  # a continuation at the end of the file ends the command
            elif c == "#":
                while self.peek() not in ("\n", ""):
                    self.pos += 1
            else:
                return

    def token(self, command_start: bool) -> tuple[str, object]:
        """("newline", None), ("eof", None), ("op", str), ("redirect", str), ("word", Word) or ("array", Assign)."""
        self.skip_blank()
        c = self.peek()
        if c == "":
            return "eof", None
        if c == "\n":
            self.pos += 1
            self.line += 1
            self._read_heredocs()
            return "newline", None
        for op in _REDIRECTS:
            if self.text.startswith(op, self.pos):
                self.pos += len(op)
                return "redirect", op
        for op in _OPERATORS:
            if self.text.startswith(op, self.pos) and (op != "(" or command_start):
                self.pos += len(op)
                return "op", op
        return self._word(command_start)

    def _word(self, command_start: bool) -> tuple[str, object]:
        line, start = self.line, self.pos
        parts: list[Part] = []
        literal: list[str] = []

        def flush() -> None:
            if literal:
                parts.append(("lit", "".join(literal)))
                literal.clear()

        while True:
            c = self.peek()
            if c == "" or (c in _META and c != "("):
                if c and c in "<>" and not parts and literal and "".join(literal).isdigit():
                    literal.clear()  # `2>&1`: the digits name a file descriptor
                    return self.token(False)
                break
            if c == "(":
                sofar = "".join(literal)
                name = sofar[:-2] if sofar.endswith("+=") else sofar[:-1]
                if not parts and sofar.endswith("=") and name.isidentifier():
                    self.pos += 1
                    return "array", Assign(name, None, self._array_items(), sofar.endswith("+="))
                literal.append(self._balanced("(", ")"))  # an argument such as ([0]*3+[1]*58): bash refuses it
                continue
            if c == "\\":
                nxt = self.peek(1)
                self.pos += 2
                if nxt == "\n":
                    self.line += 1
                elif nxt:
                    flush()
                    parts.append(("sq", nxt))
                continue
            if c == "'":
                flush()
                parts.append(("sq", self._until("'")))
                continue
            if c == '"':
                flush()
                self.pos += 1
                parts.append(("dq", self._double()))
                continue
            if c in "$`":
                flush()
                parts.append(self._dollar())
                continue
            literal.append(c)
            self.pos += 1
        flush()
        return "word", Word(parts, self.text[start:self.pos], line)

    def loose(self, quotes: bool) -> list[Part]:
        """The whole text as one word whose blanks and operators are literal: the word of ${X:-word} (`quotes`:
        quoting applies) or an unquoted here-document's body (quotes are plain characters, as in double quotes)."""
        parts: list[Part] = []
        literal: list[str] = []
        while self.pos < len(self.text):
            c = self.peek()
            special = c in "$`" or (c == "\\" and (quotes or self.peek(1) in "$`\\\n")) or (quotes and c in "'\"")
            if not special:
                literal.append(c)
                self.pos += 1
                continue
            if literal:
                parts.append(("lit", "".join(literal)))
                literal.clear()
            if c == "\\":
                if self.peek(1) != "\n":
                    parts.append(("sq", self.peek(1)))
                self.pos += 2
            elif c == "'":
                parts.append(("sq", self._until("'")))
            elif c == '"':
                self.pos += 1
                parts.append(("dq", self._double()))
            else:
                parts.append(self._dollar())
        if literal:
            parts.append(("lit", "".join(literal)))
        return parts

    def _until(self, quote: str) -> str:
        """A single-quoted run: everything up to the closing quote, taken literally."""
        end = self.text.find(quote, self.pos + 1)
        if end < 0:
            raise self.error(f"the {quote} quote opened here is never closed")
        body = self.text[self.pos + 1:end]
        self.line += body.count("\n")
        self.pos = end + 1
        return body

    def _double(self) -> list[Part]:
        """A double-quoted run (after the opening quote): \\ escapes only $ ` " \\ and newline."""
        parts: list[Part] = []
        literal: list[str] = []
        start_line = self.line
        while True:
            c = self.peek()
            if c == "":
                raise syntax_error('the " quote opened here is never closed', start_line, self.source)
            if c == '"':
                self.pos += 1
                break
            if c == "\\" and self.peek(1) in ('$', '`', '"', "\\", "\n"):
                if self.peek(1) == "\n":
                    self.line += 1
                else:
                    literal.append(self.peek(1))
                self.pos += 2
                continue
            if c in "$`" and (c == "`" or self.peek(1) in "({" or self.peek(1).isalnum() or self.peek(1) in "_@*#?$!-"):
                if literal:
                    parts.append(("lit", "".join(literal)))
                    literal.clear()
                parts.append(self._dollar())
                continue
            if c == "\n":
                self.line += 1
            literal.append(c)
            self.pos += 1
        if literal:
            parts.append(("lit", "".join(literal)))
        return parts

    def _dollar(self) -> Part:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise self.error(f"expansions nested more than {_MAX_DEPTH} deep")
        try:
            if self.peek() == "`":
                self.pos += 1
                end = self.text.find("`", self.pos)
                if end < 0:
                    raise self.error("the ` quote opened here is never closed")
                body, self.pos = self.text[self.pos:end], end + 1
                self.line += body.count("\n")
                return "cmd", body
            nxt = self.peek(1)
            if self.text.startswith("$((", self.pos):
                self.pos += 1
                return "arith", self._balanced("(", ")")[2:-2]
            if nxt == "(":
                self.pos += 1
                return "cmd", self._balanced("(", ")")[1:-1]
            if nxt == "{":
                self.pos += 1
                return "param", self._balanced("{", "}")[1:-1]
            if nxt == "'":  # $'...': ANSI-C quoting, read as plain text
                self.pos += 1
                return "sq", self._until("'").replace("\\n", "\n").replace("\\t", "\t")
            if nxt.isdigit() or (nxt and nxt in "@*#?$!-"):
                self.pos += 2
                return "param", nxt
            end = self.pos + 1
            while end < len(self.text) and (self.text[end].isalnum() or self.text[end] == "_"):
                end += 1
            if end == self.pos + 1:
                self.pos += 1
                return "lit", "$"
            name, self.pos = self.text[self.pos + 1:end], end
            return "param", name
        finally:
            self.depth -= 1

    def _balanced(self, opening: str, closing: str) -> str:
        """The text from an opening bracket to its match, brackets included; quotes inside are skipped over."""
        start, depth, i, quote = self.pos, 0, self.pos, ""
        while i < len(self.text):
            c = self.text[i]
            if quote:
                if c == "\\" and quote == '"':
                    i += 1
                elif c == quote:
                    quote = ""
            elif c == "\\":
                i += 1
            elif c in "'\"`":
                quote = c
            elif c == opening:
                depth += 1
            elif c == closing:
                depth -= 1
                if depth == 0:
                    body = self.text[start:i + 1]
                    self.line += body.count("\n")
                    self.pos = i + 1
                    return body
            i += 1
        raise self.error(f"the '{opening}' opened here is never closed")

    def _array_items(self) -> list[Word]:
        """The words of NAME=( ... ), across lines and comments, up to the closing parenthesis."""
        items: list[Word] = []
        while True:
            self.skip_blank()
            c = self.peek()
            if c == "":
                raise self.error("the array's ( is never closed")
            if c == ")":
                self.pos += 1
                return items
            if c == "\n":
                self.pos += 1
                self.line += 1
                continue
            kind, word = self._word(False)
            if kind != "word" or not isinstance(word, Word) or not word.raw:
                raise self.error(f"unexpected '{c}' inside an array")
            items.append(word)

    def _read_heredocs(self) -> None:
        for redirect, delimiter, strip in self.pending:
            lines: list[str] = []
            while True:
                if self.pos >= len(self.text):
                    break  # bash warns and takes the rest of the file
                end = self.text.find("\n", self.pos)
                end = len(self.text) if end < 0 else end
                line = self.text[self.pos:end]
                self.pos, self.line = end + 1, self.line + 1
                if (line.lstrip("\t") if strip else line).rstrip("\r") == delimiter:
                    break
                lines.append(line.lstrip("\t") if strip else line)
            redirect.heredoc = "\n".join(lines) + ("\n" if lines else "")
        self.pending.clear()


def loose_parts(text: str, source: str, quotes: bool) -> list[Part]:
    """`text` as the parts of one word in which blanks are literal (see _Lexer.loose)."""
    return _Lexer(text, source).loose(quotes)


def parse(text: str, source: str, first_line: int = 1) -> list:
    """The script as a list of command nodes; one PlanInputError for malformed syntax."""
    try:
        return _Parser(_Lexer(text, source, first_line)).program()
    except RecursionError:
        raise syntax_error("commands nested too deeply", 1, source) from None


class _Parser:
    def __init__(self, lexer: _Lexer) -> None:
        self.lex = lexer
        self.ahead: tuple[str, object] | None = None
        self.depth = 0

    def peek(self, command_start: bool = True) -> tuple[str, object]:
        """The next token; `command_start` decides whether a `(` opens a subshell or belongs to a word (a token
        already read keeps the reading it got: the two differ only on `(`)."""
        if self.ahead is None:
            self.ahead = self.lex.token(command_start)
        return self.ahead

    def take(self, command_start: bool = True) -> tuple[str, object]:
        tok = self.peek(command_start)
        self.ahead = None
        return tok

    def reserved(self) -> str | None:
        kind, value = self.peek()
        return value.plain if kind == "word" and isinstance(value, Word) and value.plain in _RESERVED else None

    def expect(self, word: str) -> None:
        self.skip_separators()
        if self.reserved() != word:
            raise syntax_error(f"expected '{word}'", self.lex.line, self.lex.source)
        self.take()

    def skip_separators(self) -> None:
        while self.peek() in (("newline", None), ("op", ";"), ("op", "&")):
            self.take()

    def program(self) -> list:
        nodes = self.body(())
        if self.peek()[0] != "eof":
            raise syntax_error(f"unexpected '{self.peek()[1]}'", self.lex.line, self.lex.source)
        return nodes

    def body(self, stop: tuple[str, ...]) -> list:
        """Commands up to one of the reserved words `stop` (or ';;', ')' where a case arm or subshell ends)."""
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise syntax_error(f"compound commands nested more than {_MAX_DEPTH} deep", self.lex.line,
                               self.lex.source)
        nodes: list = []
        while True:
            self.skip_separators()
            kind, value = self.peek()
            if kind == "eof" or (kind == "op" and value in (";;", ";&", ";;&", ")")) or self.reserved() in stop:
                break
            nodes.append(self.and_or())
        self.depth -= 1
        return nodes

    def and_or(self) -> object:
        node = self.pipeline()
        while self.peek() in (("op", "&&"), ("op", "||")):
            op = str(self.take()[1])
            while self.peek()[0] == "newline":
                self.take()
            node = AndOr(op, node, self.pipeline())
        return node

    def pipeline(self) -> object:
        negate = self.reserved() == "!"
        if negate:
            self.take()
        nodes = [self.command()]
        while self.peek() in (("op", "|"), ("op", "|&")):
            self.take()
            while self.peek()[0] == "newline":
                self.take()
            nodes.append(self.command())
        node = nodes[0] if len(nodes) == 1 else Pipeline(nodes)
        return Not(node) if negate else node

    def command(self) -> object:
        word = self.reserved()
        if word in ("if", "for", "while", "until", "case", "select", "function", "{"):
            self.take()
            return getattr(self, "compound_" + ("group" if word == "{" else word))()
        kind, value = self.peek()
        if kind == "op" and value == "(":
            self.take()
            nxt = self.peek(False)
            if nxt[0] == "word" and str(nxt[1].raw).startswith("("):  # (( expr )): an arithmetic command
                self._skip_arith_command()
                return Simple(self.lex.line)
            body = self.body(())
            if self.take() != ("op", ")"):
                raise syntax_error("the subshell's ( is never closed", self.lex.line, self.lex.source)
            return Group(body, True)
        return self.simple()

    def _skip_arith_command(self) -> None:
        """`(( i++ ))`: an arithmetic command; nothing a launch reads, skipped to its closing parentheses."""
        while self.take(False) not in (("op", ")"), ("eof", None)):
            pass
        if self.peek(False) == ("op", ")"):
            self.take(False)

    def simple(self) -> Simple | Function:
        node = Simple(self.lex.line)
        while True:
            if node.words and node.words[0].plain == "[[" and node.words[-1].plain != "]]":
                self._double_bracket(node)
                continue
            kind, value = self.peek(not node.words and not node.assigns)
            if kind == "array" and isinstance(value, Assign):
                self.take()
                (node.arg_assigns if node.words else node.assigns).append(value)
            elif kind == "redirect":
                self.take()
                node.redirects.append(self._redirect(str(value)))
            elif kind == "word" and isinstance(value, Word):
                if not node.words and self._assignment(node, value):
                    continue
                self.take()
                if not node.words and not node.assigns:
                    name = self._function_name(value)
                    if name:
                        return Function(name, self.function_body())
                node.words.append(value)
            else:
                return node

    def _function_name(self, word: Word) -> str | None:
        """NAME() or NAME () starts a function definition (the lexer keeps the parentheses in a word)."""
        raw = word.raw.replace(" ", "")
        if raw.endswith("()") and raw[:-2].replace("-", "_").replace(".", "_").replace(":", "_").isidentifier():
            return raw[:-2]
        kind, nxt = self.peek(False)
        if kind == "word" and isinstance(nxt, Word) and nxt.raw.replace(" ", "") == "()" \
                and word.raw.replace("-", "_").isidentifier():
            self.take()
            return word.raw
        return None

    def _assignment(self, node: Simple, word: Word) -> bool:
        first = word.parts[0] if word.parts else None
        text = str(first[1]) if first and first[0] == "lit" else ""
        head, eq, rest = text.partition("=")
        append = head.endswith("+")
        name = head[:-1] if append else head
        index = None
        if "[" in name and name.endswith("]"):
            name, index = name[:-1].split("[", 1)
        if not eq or not name.isidentifier():
            return False
        self.take()
        value = Word(([("lit", rest)] if rest else []) + word.parts[1:], word.raw[len(head) + 1:], word.line)
        node.assigns.append(Assign(name, value, None, append, index))
        return True

    def _double_bracket(self, node: Simple) -> None:
        """Inside [[ ]], && || < > ( ) are the test's own operators: kept as literal words up to ]]."""
        while True:
            kind, value = self.take(False)
            if kind == "eof" or kind == "newline":
                raise syntax_error("[[ is never closed with ]]", self.lex.line, self.lex.source)
            if kind == "word" and isinstance(value, Word):
                node.words.append(value)
                if value.plain == "]]":
                    return
            else:
                node.words.append(Word([("lit", str(value))], str(value), self.lex.line))

    def _redirect(self, op: str) -> Redirect:
        kind, target = self.take(False)
        if kind != "word" or not isinstance(target, Word):
            raise syntax_error(f"'{op}' needs a target", self.lex.line, self.lex.source)
        redirect = Redirect(op, target)
        if op in ("<<", "<<-"):
            quoted = any(p[0] != "lit" for p in target.parts)
            delimiter = "".join(str(p[1]) if p[0] != "dq" else "".join(str(x[1]) for x in p[1])  # type: ignore
                                for p in target.parts)
            redirect.quoted = quoted
            self.lex.pending.append((redirect, delimiter, op == "<<-"))
        return redirect

    def compound_if(self) -> If:
        clauses = [(self.body(("then",)), [])]
        self.expect("then")
        clauses[0] = (clauses[0][0], self.body(("elif", "else", "fi")))
        orelse = None
        while True:
            word = self.reserved()
            self.take()
            if word == "elif":
                cond = self.body(("then",))
                self.expect("then")
                clauses.append((cond, self.body(("elif", "else", "fi"))))
            elif word == "else":
                orelse = self.body(("fi",))
            elif word == "fi":
                return If(clauses, orelse)
            else:
                raise syntax_error("this if is never closed with fi", self.lex.line, self.lex.source)

    def compound_for(self) -> Loop:
        kind, name = self.take(False)
        if kind != "word" or not isinstance(name, Word):
            raise syntax_error("for needs a variable name", self.lex.line, self.lex.source)
        if name.raw.startswith("(("):  # for (( ; ; )): C-style, its body read once
            self.expect("do")
            body = self.body(("done",))
            self._end("done")
            return Loop("while", None, None, [], body)
        items: list[Word] | None = None
        while self.peek()[0] == "newline":
            self.take()
        if self.reserved() == "in":
            self.take()
            items = []
            while self.peek(False)[0] == "word":
                items.append(self.take(False)[1])  # type: ignore[arg-type]
        self.expect("do")
        body = self.body(("done",))
        self._end("done")
        return Loop("for", name.raw, items, [], body)

    compound_select = compound_for

    def _end(self, word: str) -> bool:
        if self.reserved() != word:
            raise syntax_error(f"expected '{word}'", self.lex.line, self.lex.source)
        self.take()
        return True

    def compound_while(self, kind: str = "while") -> Loop:
        cond = self.body(("do",))
        self.expect("do")
        body = self.body(("done",))
        self._end("done")
        return Loop(kind, None, None, cond, body)

    def compound_until(self) -> Loop:
        return self.compound_while("until")

    def compound_case(self) -> Case:
        kind, word = self.take(False)
        if kind != "word" or not isinstance(word, Word):
            raise syntax_error("case needs a word", self.lex.line, self.lex.source)
        self.expect("in")
        arms: list[tuple[list[Word], list]] = []
        while True:
            self.skip_separators()
            if self.reserved() == "esac":
                self.take()
                return Case(word, arms)
            if self.peek() == ("op", "("):
                self.take()
            patterns: list[Word] = []
            while True:
                kind, value = self.take(False)
                if kind == "word" and isinstance(value, Word):
                    patterns.append(value)
                elif (kind, value) == ("op", ")"):
                    break
                elif (kind, value) != ("op", "|"):
                    raise syntax_error("a case pattern must end with )", self.lex.line, self.lex.source)
            arms.append((patterns, self.body(("esac",))))
            if self.peek()[0] == "op" and self.peek()[1] in (";;", ";&", ";;&"):
                self.take()

    def compound_function(self) -> Function:
        kind, name = self.take(False)
        if kind != "word" or not isinstance(name, Word):
            raise syntax_error("function needs a name", self.lex.line, self.lex.source)
        if self.peek(False)[0] == "word" and str(self.peek(False)[1].raw).replace(" ", "") == "()":
            self.take()
        return Function(name.raw.removesuffix("()"), self.function_body())

    def function_body(self) -> list:
        self.skip_separators()
        body = self.command()
        return [body]

    def compound_group(self) -> Group:
        body = self.body(("}",))
        self._end("}")
        return Group(body, False)
