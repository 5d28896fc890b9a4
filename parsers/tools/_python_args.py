"""Python call arguments -> the JSON arguments string vLLM computes from them, incrementally.

vLLM 0.33's pythonic parsers (`tool_parsers/utils.py`: `handle_single_tool`,
`get_parameter_value`) parse a call with `ast` and write its arguments as
`json.dumps({keyword: value}, ensure_ascii=False)`, where a value must be a literal: a
constant (str, int, float, True/False/None), `null`/`true`/`false`, a list, tuple or set (a
JSON array), a dict whose keys are constants, a placeholder-free f-string, or a number under
unary signs. Positional arguments are ignored; `**literal` is written under the key "null"
(json.dumps's spelling of the None key). `PythonArgs` does the same as the text arrives: it
reads one call's arguments, from after its `(` to its `)`, and writes JSON as soon as it is
certain.

Layers
------
* `Lexer`: Python's tokens as far as literals need them, over streamed text: names (NFKC
  normalised, as Python does), numbers, operators, trivia (whitespace, newlines, comments,
  backslash continuations) and string literals, decoded piece by piece with Python's rules
  (quotes and prefixes, escapes `\\n \\xhh \\ooo \\uXXXX \\UXXXXXXXX \\N{...}`, unknown escapes
  kept, backslash-newline, CRLF/CR read as LF, `{{`/`}}` in f-strings). It holds back only an
  unfinished token: a name or number, an operator that may grow (`=`, `*`, `.`), a string
  prefix or opening quote run, an escape sequence, a closing-quote run of a triple-quoted
  string, a lone brace of an f-string, a CR.
* `PythonArgs`: a pushdown reader over those tokens. Its stack has one character per open
  level (`A` the call's arguments, `L` list, `T` tuple, `P` a parenthesis not yet known to be
  a tuple or a group, `B` a brace not yet known to be a dict or a set, `S` set, `D`/`E` dict
  reading a key / a value, `N` a parenthesis around a signed number).

What is held back, because exactness needs it (everything else is written at once):
* the separator and key of the next value (`, "b": `), until the value's first token shows it
  is a literal, so a value vLLM refuses never leaves a dangling key;
* a number, until it ends (then it is evaluated as Python does and written by json.dumps);
* the closing quote of a string, until the next token shows it is not concatenated;
* a `(` or `{` value until it shows what it is (`,` / `)` / `:` / `}`), and a dict key
  until its `:` (its JSON differs from the value's, and a key must be a constant): this JSON
  is kept in `held` segments. Real outputs hold a few characters; a long string inside a
  bare parenthesis (`a=('...' '...')`) is held whole, bounded by the tool-call limit;
* a positional argument's text, which is validated with `ast` at its end and skipped.

Failure: any token vLLM's batch would refuse (a syntax error, a value that is not a literal,
bytes, a placeholder in an f-string, a positional argument after a keyword, a number json
cannot write) ends the arguments as *broken*: what was written is closed (open string, arrays
and objects, never a dangling key) and the model text not represented in the written JSON
(`raw`: held separators, keys, trivia, undecided values) plus everything after is handed back
as content. `end` closes a call cut by the end of its text the same way.

Known differences from vLLM's JSON, by construction of streaming: a repeated key (keyword or
dict key) is written twice (vLLM's dict keeps the first position and the last value, which is
what json.loads of ours gives, unless the keys differ in type but compare equal: 1, 1.0,
True).

Line mode (olmo3): vLLM joins the lines of the text with ", " (each line stripped, blank
lines dropped) before parsing. The lexer reads the model's own text and applies that rule as
it goes: a whitespace run holding a line break reads as `, ` (a comma token in code, the text
", " inside a string), whitespace runs are held until they end, and comments or backslash
continuations (which the joined text can never close) are refused.
"""

from __future__ import annotations

import ast
import enum
import functools
import json
import keyword
import re
import tokenize
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from parsers._errors import ParseError
from parsers._state import JsonState
from parsers.tools._args import json_string_body

__all__ = [
    "Kind",
    "Token",
    "LexState",
    "Lexer",
    "ArgsState",
    "PythonArgs",
    "join_lines",
    "normalize_name",
    "is_python_keyword",
]

# -- lexer ----------------------------------------------------------------------------------

_QUOTES = "'\""
_DELIMITERS = frozenset(q * n for q in _QUOTES for n in (1, 3))
_STRING_PREFIXES = frozenset({"r", "u", "f", "b", "br", "rb", "fr", "rf"})
# Python's identifier characters are ASCII word characters and anything non-ASCII (checked
# with str.isidentifier afterwards), as its tokenizer reads them; whitespace ends a name.
_NAME_RUN = re.compile(r"(?:[A-Za-z0-9_]|[^\x00-\x7f\s])+")
# A number token, greedily (an invalid one is refused whole, as Python would refuse it).
_NUMBER_RUN = re.compile(r"(?:[0-9A-Za-z_.]|(?<=[eE])[+-])+")
_NUMBER = re.compile(f"(?:{tokenize.Floatnumber}|{tokenize.Intnumber})")
_BLANK = re.compile(r"[ \t\f\r\n]+")  # Python's whitespace (newlines are blank inside brackets)
_SPACE_RUN = re.compile(r"\s+")  # line mode: str.isspace runs (the chars str.strip removes)
_COMMENT = re.compile(r"[^\r\n]*")
_OCTAL = re.compile(r"[0-7]{1,3}")


def _match_end(pattern: re.Pattern[str], text: str, pos: int) -> int:
    """Where `pattern`'s match at `pos` ends; the lexer asks only where its first character
    matched, so a miss is a lexer bug, reported as a parse error rather than a crash."""
    found = pattern.match(text, pos)
    if found is None:
        raise ParseError(f"python lexer: {pattern.pattern!r} does not match at {pos}")
    return found.end()
_HEX = frozenset("0123456789abcdefABCDEF")
# str.splitlines boundaries (line mode).
LINE_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")
_SIMPLE_ESCAPES = {
    "\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b", "f": "\f",
    "n": "\n", "r": "\r", "t": "\t", "v": "\v",
}  # fmt: skip
_FIXED_ESCAPES = {"x": 2, "u": 4, "U": 8}
# Longest Unicode character name is 88 characters; a `\N{` still open after this many is
# refused rather than held.
MAX_CHAR_NAME = 128


class Mode(enum.StrEnum):
    CODE = "code"
    STRING = "string"
    COMMENT = "comment"


class Kind(enum.Enum):
    TRIVIA = "trivia"
    NAME = "name"
    NUMBER = "number"
    OP = "op"
    STRING_OPEN = "string_open"
    STRING_TEXT = "string_text"
    STRING_CLOSE = "string_close"
    BAD = "bad"  # text Python refuses here (consumes nothing)


class Token(NamedTuple):
    kind: Kind
    text: str  # NAME: normalised; STRING_OPEN: prefix flags; STRING_TEXT: decoded text
    raw: str  # the model text the token covers


@dataclass(frozen=True, slots=True)
class LexState(JsonState):
    """mode: in code, in a string literal, in a comment. tok: an unfinished token, held.
    quote: the open literal's closing delimiter. flags: its prefix letters ("r", "f", "b";
    "s": only scanned for its end, not decoded)."""

    mode: Mode = Mode.CODE
    tok: str = ""
    quote: str = ""
    flags: str = ""

    def __post_init__(self) -> None:
        in_string = self.quote in _DELIMITERS and set(self.flags) <= set("bfrs")
        stray = not in_string and bool(self.quote or self.flags)
        if (self.mode is Mode.STRING) != in_string or stray:
            raise ValueError("string delimiter contradicts the lexer mode")


def normalize_name(name: str) -> str:
    """Python reads non-ASCII identifiers in NFKC form."""
    return name if name.isascii() else unicodedata.normalize("NFKC", name)


def is_python_keyword(token: Token) -> bool:
    """Keywords are recognised before normalisation: only an ASCII spelling is one."""
    return token.raw.isascii() and keyword.iskeyword(token.text)


def join_lines(text: str) -> str:
    """olmo3's line joining: stripped non-blank lines joined with ", "."""
    return ", ".join(line.strip() for line in text.splitlines() if line.strip())


@functools.cache
def _string_specials(quote: str, braces: bool, line_mode: bool) -> re.Pattern[str]:
    """The characters that end a plain run inside a string literal."""
    chars = "\\\\" + re.escape(quote) + "\\x00" + ("\\s" if line_mode else "\\r\\n")
    return re.compile(f"[{chars}{'{}' if braces else ''}]")


class Lexer:
    """Tokens of `state.tok + text`; the unfinished tail is held (`to_state`). Scratch object
    for one feed; a consumer may stop early and take `rest()`."""

    def __init__(self, state: LexState, text: str, *, final: bool, line_mode: bool) -> None:
        self.text = state.tok + text
        self.pos = 0
        self.mode = state.mode
        self.quote = state.quote
        self.flags = state.flags
        self.final = final
        self.line_mode = line_mode
        self.tok = ""

    def to_state(self) -> LexState:
        return LexState(mode=self.mode, tok=self.tok, quote=self.quote, flags=self.flags)

    def rest(self) -> str:
        """The text after the last token handed out."""
        return self.text[self.pos :]

    def scan_string(self) -> None:
        """The open literal is skipped, not decoded (a positional argument's)."""
        self.flags += "s"

    def tokens(self) -> Iterator[Token]:
        while self.pos < len(self.text):
            token = self._next()
            if token is None:  # undecided until more text arrives
                self.tok, self.pos = self.text[self.pos :], len(self.text)
                return
            yield token
            if token.kind is Kind.BAD:
                return
        if self.final and self.mode is Mode.STRING:
            yield self._bad()  # unterminated literal

    def _next(self) -> Token | None:
        if self.mode is Mode.STRING:
            return self._string()
        if self.mode is Mode.COMMENT:
            return self._comment()
        return self._code()

    # -- helpers --------------------------------------------------------------------------

    def _take(self, n: int, kind: Kind, text: str | None = None) -> Token:
        raw = self.text[self.pos : self.pos + n]
        self.pos += n
        return Token(kind, raw if text is None else text, raw)

    def _bad(self) -> Token:
        return Token(Kind.BAD, "", "")

    def _at_end(self, end: int) -> bool:
        """A token reaching `end` may still grow: hold it, unless this is the end."""
        return end >= len(self.text) and not self.final

    # -- code -----------------------------------------------------------------------------

    def _code(self) -> Token | None:  # noqa: C901 - one branch per leading character
        c = self.text[self.pos]
        if self.line_mode and c.isspace():
            return self._line_space()
        if c in " \t\f\r\n":
            return self._take(_match_end(_BLANK, self.text, self.pos) - self.pos, Kind.TRIVIA)
        if c == "#":
            return self._bad() if self.line_mode else self._comment()
        if c == "\\":
            return self._continuation()
        if c in _QUOTES:
            return self._string_open(0)
        if "0" <= c <= "9" or (c == "." and "0" <= self.text[self.pos + 1 : self.pos + 2] <= "9"):
            return self._number()
        if c == "." and self._at_end(self.pos + 1):
            return None  # may start a number
        if c == "_" or c.isalpha() or (c >= "\x80" and not c.isspace()):
            return self._name()
        if c in "=*":
            return self._maybe_double(c)
        if c == "\x00":
            return self._bad()
        return self._take(1, Kind.OP)

    def _line_space(self) -> Token | None:
        """Line mode: a whitespace run with a line break is `, `; other runs are blank."""
        end = _match_end(_SPACE_RUN, self.text, self.pos)
        if self._at_end(end):
            return None
        run = self.text[self.pos : end]
        tail = end == len(self.text)  # the end of the text: the last line's tail is stripped
        if not tail and not LINE_BREAKS.isdisjoint(run):
            return self._take(len(run), Kind.OP, ",")
        if tail or set(run) <= set(" \t"):
            return self._take(len(run), Kind.TRIVIA)
        return self._bad()  # e.g. U+00A0 inside a line: not Python whitespace

    def _comment(self) -> Token:
        end = _match_end(_COMMENT, self.text, self.pos)
        if "\x00" in self.text[self.pos : end]:
            return self._bad()
        self.mode = Mode.COMMENT if end == len(self.text) and not self.final else Mode.CODE
        return self._take(end - self.pos, Kind.TRIVIA)

    def _continuation(self) -> Token | None:
        if self.line_mode:  # the joined text puts ", " after it: never a continuation
            return self._bad()
        if self._at_end(self.pos + 1):
            return None
        if self.text[self.pos + 1 : self.pos + 2] in ("\r", "\n"):
            return self._take(2, Kind.TRIVIA)
        return self._bad()

    def _number(self) -> Token | None:
        end = _match_end(_NUMBER_RUN, self.text, self.pos)
        return None if self._at_end(end) else self._take(end - self.pos, Kind.NUMBER)

    def _name(self) -> Token | None:
        end = _match_end(_NAME_RUN, self.text, self.pos)
        if self._at_end(end):
            return None
        run = self.text[self.pos : end]
        if self.text[end : end + 1] in ("'", '"') and run.lower() in _STRING_PREFIXES:
            return self._string_open(len(run))
        if not run.isidentifier():
            return self._bad()
        return self._take(len(run), Kind.NAME, normalize_name(run))

    def _maybe_double(self, c: str) -> Token | None:
        if self._at_end(self.pos + 1):
            return None
        return self._take(2 if self.text[self.pos + 1 : self.pos + 2] == c else 1, Kind.OP)

    # -- strings --------------------------------------------------------------------------

    def _string_open(self, prefix_len: int) -> Token | None:
        at = self.pos + prefix_len
        q = self.text[at]
        run = len(self.text[at : at + 3]) - len(self.text[at : at + 3].lstrip(q))
        if run < 3 and self._at_end(at + run):
            return None  # '' may still become '''
        self.quote = q * 3 if run == 3 else q
        self.flags = "".join(sorted(set(self.text[self.pos : at].lower()) - {"u"}))
        self.mode = Mode.STRING
        return self._take(prefix_len + len(self.quote), Kind.STRING_OPEN, self.flags)

    def _string(self) -> Token | None:
        braces = "f" in self.flags and "s" not in self.flags
        found = _string_specials(self.quote[0], braces, self.line_mode).search(self.text, self.pos)
        at = len(self.text) if found is None else found.start()
        if at > self.pos:
            return self._take(at - self.pos, Kind.STRING_TEXT)
        c = self.text[at]
        if c == self.quote[0]:
            return self._quote()
        if c == "\\":
            return self._escape()
        if c == "\x00":
            return self._bad()
        if self.line_mode and c.isspace():
            return self._string_space()
        if c in "\r\n":
            return self._string_newline()
        return self._brace()

    def _quote(self) -> Token | None:
        if len(self.quote) == 1:
            return self._close()
        window = self.text[self.pos : self.pos + 3]
        run = len(window) - len(window.lstrip(self.quote[0]))
        if run == 3:
            return self._close()
        if self._at_end(self.pos + run):
            return None
        return self._take(run, Kind.STRING_TEXT)  # quotes inside a triple-quoted literal

    def _close(self) -> Token:
        token = self._take(len(self.quote), Kind.STRING_CLOSE)
        self.mode, self.quote, self.flags = Mode.CODE, "", ""
        return token

    def _string_newline(self) -> Token | None:
        if len(self.quote) == 1:
            return self._bad()  # a line break ends a one-quote literal unterminated
        return self._newline(0, "\n")

    def _newline(self, skip: int, text: str) -> Token | None:
        """CRLF, CR and LF read as one LF (Python translates newlines in source), after
        `skip` characters (a backslash)."""
        at = self.pos + skip
        if self.text[at] == "\r":
            if self._at_end(at + 1):
                return None
            at += 1 if self.text[at + 1 : at + 2] == "\n" else 0
        return self._take(at + 1 - self.pos, Kind.STRING_TEXT, text)

    def _string_space(self, skip: int = 0, lead: str = "") -> Token | None:
        """Line mode inside a literal: a run with a line break becomes ", "."""
        end = _match_end(_SPACE_RUN, self.text, self.pos + skip)
        if self._at_end(end):
            return None
        run = self.text[self.pos + skip : end]
        text = ", " if not LINE_BREAKS.isdisjoint(run) else run
        return self._take(end - self.pos, Kind.STRING_TEXT, lead + text)

    def _brace(self) -> Token | None:
        """f-string: `{{` and `}}` are braces, a lone one a placeholder (not a literal)."""
        if self._at_end(self.pos + 1):
            return None
        c = self.text[self.pos]
        if self.text[self.pos + 1 : self.pos + 2] != c:
            return self._bad()
        return self._take(2, Kind.STRING_TEXT, c)

    def _escape(self) -> Token | None:  # noqa: C901 - one branch per escape form
        if self._at_end(self.pos + 1):
            return None
        e = self.text[self.pos + 1 : self.pos + 2]
        if not e:
            return self._bad()
        if self.line_mode and e.isspace():
            return self._string_space(1, "\\")
        if "f" in self.flags and "s" not in self.flags and e in "{}":
            return self._take(1, Kind.STRING_TEXT)  # kept; the brace is read next
        if "r" in self.flags or "s" in self.flags:
            return self._newline(1, "\\\n") if e in "\r\n" else self._take(2, Kind.STRING_TEXT)
        if e in "\r\n":
            return self._newline(1, "")  # backslash-newline: nothing
        if e in _SIMPLE_ESCAPES:
            return self._take(2, Kind.STRING_TEXT, _SIMPLE_ESCAPES[e])
        if e in _FIXED_ESCAPES:
            return self._hex_escape(_FIXED_ESCAPES[e])
        if e in "01234567":
            return self._octal_escape()
        if e == "N":
            return self._named_escape()
        if e == "\x00":
            return self._bad()
        return self._take(2, Kind.STRING_TEXT)  # an unknown escape is kept as written

    def _hex_escape(self, n: int) -> Token | None:
        digits = self.text[self.pos + 2 : self.pos + 2 + n]
        if not set(digits) <= _HEX:
            return self._bad()
        if len(digits) < n:
            return None if not self.final else self._bad()
        code = int(digits, 16)
        if code > 0x10FFFF:
            return self._bad()
        return self._take(2 + n, Kind.STRING_TEXT, chr(code))

    def _octal_escape(self) -> Token | None:
        digits = self.text[self.pos + 1 : _match_end(_OCTAL, self.text, self.pos + 1)]
        if len(digits) < 3 and self._at_end(self.pos + 1 + len(digits)):
            return None
        return self._take(1 + len(digits), Kind.STRING_TEXT, chr(int(digits, 8)))

    def _named_escape(self) -> Token | None:
        start = self.pos + 3
        if self.text[self.pos + 2 : start] != "{":
            return None if self._at_end(self.pos + 2) else self._bad()
        end = self.text.find("}", start)
        name = self.text[start : len(self.text) if end == -1 else end]
        if self.quote[0] in name or "\x00" in name or not LINE_BREAKS.isdisjoint(name):
            return self._bad()  # the literal would end (or break) inside the name
        if end == -1:
            return None if len(name) <= MAX_CHAR_NAME and not self.final else self._bad()
        try:  # Python's own lookup (names, aliases, case), exactly
            char = ast.literal_eval('"\\N{' + name + '}"')
        except (SyntaxError, ValueError):
            return self._bad()
        return self._take(end + 1 - self.pos, Kind.STRING_TEXT, char)


# -- the argument reader ---------------------------------------------------------------------


class Pos(enum.StrEnum):
    """What the innermost level expects next."""

    ARG = "arg"  # an argument or `)`
    EQ = "eq"  # after a name: `=` makes it a keyword, anything else a positional argument
    VALUE = "value"  # a value must start
    ITEM = "item"  # a value or the container's closer
    KEY = "key"  # a dict key or `}`
    SIGN = "sign"  # after a unary sign: a number, a sign or `(`
    STRING = "string"  # inside a string literal
    AFTER = "after"  # after a value: a separator or a closer
    SKIP = "skip"  # inside a positional argument (skipped)


@dataclass(slots=True)
class _Open:
    """A held segment while the transducer works (frozen as `Held` in the state)."""

    depth: int
    prefix: str
    body: str


@dataclass(frozen=True, slots=True)
class Held(JsonState):
    """JSON not yet written: a value that is still undecided, or a dict key before its `:`.
    depth: the stack depth when it began; prefix: the separator/key written before it."""

    depth: int
    prefix: str
    body: str


_CLOSE_TOKEN = {"A": ")", "L": "]", "T": ")", "P": ")", "S": "}", "B": "}", "D": "}", "E": "}",
                "N": ")"}  # fmt: skip
_JSON_CLOSER = {"A": "}", "L": "]", "T": "]", "S": "]", "D": "}", "E": "}", "N": ""}
# Which levels each position can be read in (restored states are checked against it).
_POS_TOPS = {
    Pos.ARG: "A", Pos.EQ: "A", Pos.SKIP: "A", Pos.VALUE: "AE", Pos.ITEM: "LTSPB", Pos.KEY: "D",
    Pos.SIGN: "AELTSPBN", Pos.STRING: "AELTSPBD", Pos.AFTER: "AELTSPBDN",
}  # fmt: skip
_PY_CONSTANTS = {"True": "true", "False": "false", "None": "null"}
_JSON_NAMES = {"null": "null", "true": "true", "false": "false"}


@dataclass(frozen=True, slots=True)
class ArgsState(JsonState):
    """One call's argument reader (see the module docstring for the stack and what is held).

    lex: the lexer. stack, pos: levels open and what the innermost expects. name: a name
    that may be a keyword (EQ). prefix: separator and key of the next value. held: undecided
    JSON. str_open: a JSON string is open (its literal may be concatenated). fstr: it has an
    f-string part. key_ok: the last value is a constant (may be a dict key). neg: unary minus
    parity (SIGN). opened: JSON was written (the `{`). kw: 1 after a keyword, 2 after `**`.
    first: no argument completed yet. skip_depth, skip_from: a positional argument's bracket
    depth and where its text starts in `raw`. raw: model text not represented in the
    written JSON. broken: the arguments ended refused (`raw` is then content).
    """

    lex: LexState = LexState()
    stack: str = "A"
    pos: Pos = Pos.ARG
    name: str = ""
    prefix: str = ""
    held: tuple[Held, ...] = ()
    str_open: bool = False
    fstr: bool = False
    key_ok: bool = False
    neg: bool = False
    opened: bool = False
    kw: int = 0
    first: bool = True
    skip_depth: int = 0
    skip_from: int = 0
    raw: str = ""
    broken: bool = False

    def __post_init__(self) -> None:
        stack = self.stack
        if not stack.startswith("A") or "A" in stack[1:] or not set(stack) <= set(_CLOSE_TOKEN):
            raise ValueError("malformed argument stack")
        if stack[-1] not in _POS_TOPS[self.pos] or self.kw not in (0, 1, 2):
            raise ValueError(f"position {self.pos} impossible in {stack[-1]!r}")
        if not 0 <= self.skip_from <= len(self.raw) or self.skip_depth < 0:
            raise ValueError("positional argument outside raw")
        if [h.depth for h in self.held] != self._held_depths():
            raise ValueError("held JSON does not match the stack")

    def _held_depths(self) -> list[int]:
        """Where held segments must be: one per undecided `(`/`{` (at its level), one for a
        dict key being read (just above its `D`)."""
        depths = []
        for i, level in enumerate(self.stack):
            if level in ("P", "B"):
                depths.append(i)
            elif level == "D" and (i + 1 < len(self.stack) or self.pos is not Pos.KEY):
                depths.append(i + 1)
        return sorted(depths)

    def held_chars(self) -> int:
        held = sum(len(h.prefix) + len(h.body) for h in self.held)
        return len(self.lex.tok) + len(self.name) + len(self.prefix) + len(self.raw) + held

    def unwritten(self) -> str:
        """The model text this reader took and did not write (all of it, before `opened`)."""
        return self.raw + self.lex.tok


class PythonArgs:
    """One call's argument text (after its `(`, up to and including its `)`) -> JSON.

    `feed` returns `rest` when the arguments end: the text after `)`, or, when `state.broken`,
    the model text that is content. `end` closes arguments cut by the end of their text;
    `state.raw` is then the content. Line mode: olmo3's line joining (module docstring)."""

    def __init__(self, *, line_mode: bool = False) -> None:
        self.line_mode = line_mode

    def start(self, name: str) -> ArgsState:
        return ArgsState()

    def feed(self, state: ArgsState, text: str) -> tuple[ArgsState, str, str | None]:
        reader = _Reader(state, self.line_mode)
        rest = reader.run(text, final=False)
        return reader.to_state(), "".join(reader.out), rest

    def end(self, state: ArgsState) -> tuple[ArgsState, str]:
        reader = _Reader(state, self.line_mode)
        if reader.run("", final=True) is None:
            reader.truncate()
        return reader.to_state(), "".join(reader.out)


class _Reader:
    """Mutable scratch copy of an `ArgsState` for one feed (fields as documented there)."""

    def __init__(self, state: ArgsState, line_mode: bool) -> None:
        self.line_mode = line_mode
        self.lex = state.lex
        self.stack, self.pos = state.stack, state.pos
        self.name, self.prefix = state.name, state.prefix
        self.held = [_Open(h.depth, h.prefix, h.body) for h in state.held]
        self.str_open, self.fstr, self.key_ok = state.str_open, state.fstr, state.key_ok
        self.neg, self.opened, self.kw, self.first = state.neg, state.opened, state.kw, state.first
        self.skip_depth, self.skip_from = state.skip_depth, state.skip_from
        self.raw, self.broken = state.raw, state.broken
        self.out: list[str] = []
        self.ended = False
        self.lexer: Lexer | None = None

    def to_state(self) -> ArgsState:
        return ArgsState(
            lex=self.lex, stack=self.stack, pos=self.pos, name=self.name, prefix=self.prefix,
            held=tuple(Held(h.depth, h.prefix, h.body) for h in self.held), str_open=self.str_open,
            fstr=self.fstr, key_ok=self.key_ok, neg=self.neg, opened=self.opened, kw=self.kw,
            first=self.first, skip_depth=self.skip_depth, skip_from=self.skip_from,
            raw=self.raw, broken=self.broken,
        )  # fmt: skip

    def run(self, text: str, *, final: bool) -> str | None:
        """Read `text`; returns the rest once the arguments end or break, else None."""
        lexer = self.lexer = Lexer(self.lex, text, final=final, line_mode=self.line_mode)
        for token in lexer.tokens():
            represented = self._token(token)
            if self.broken:
                return self._break(token.raw + lexer.rest())
            if not represented:
                self.raw += token.raw
            if self.ended:
                self.lex = LexState()
                return lexer.rest()
            if self.pos is Pos.SKIP and token.kind is Kind.STRING_OPEN:
                lexer.scan_string()
        self.lex = lexer.to_state()
        return None

    def truncate(self) -> None:
        """The text ended inside the arguments: close what was written."""
        if self.str_open and not self.held:
            self._close_string()  # the literal itself was closed
        self._break("")

    def _break(self, tail: str) -> str:
        """End the arguments refused: close the written JSON; the state keeps only the
        content (`raw`) and `broken`."""
        content = self.raw + tail
        self._close_written()
        self.stack, self.pos, self.held, self.prefix, self.name = "A", Pos.ARG, [], "", ""
        self.str_open, self.skip_from, self.lex = False, 0, LexState()
        self.broken, self.raw = True, content
        return content

    def _close_written(self) -> None:
        """Close the open string, arrays and objects of the written JSON (never a key)."""
        if not self.opened:
            return
        limit = self.held[0].depth if self.held else len(self.stack)
        if self.str_open and not self.held:
            self.out.append('"')
        self.out.extend(_JSON_CLOSER[level] for level in reversed(self.stack[:limit]))
        self.held, self.prefix, self.str_open = [], "", False

    # -- output ---------------------------------------------------------------------------

    def _emit(self, text: str) -> bool:
        """Write JSON (into the innermost held segment, if any). True if it was written out,
        which represents all model text read so far."""
        if self.held:
            self.held[-1].body += text
            return False
        self.out.append(text)
        self.opened, self.raw, self.skip_from = True, "", 0
        return True

    def _value(self, text: str) -> bool:
        written = self._emit(self.prefix + text)
        self.prefix = ""
        return written

    def _hold(self) -> None:
        self.held.append(_Open(len(self.stack), self.prefix, ""))
        self.prefix = ""

    def _decide(self, opening: str) -> bool:
        """The innermost held value is decided: write it with its opening."""
        segment = self.held.pop()
        prefix, body = segment.prefix, segment.body
        return self._emit(prefix + opening + body)

    def _fail(self) -> bool:
        self.broken = True
        return False

    # -- dispatch -------------------------------------------------------------------------

    def _token(self, token: Token) -> bool:
        """Handle one token; True if it is represented in the written JSON."""
        if token.kind is Kind.BAD:
            return self._fail()
        if self.pos is Pos.SKIP:
            return self._skip(token)
        if token.kind is Kind.TRIVIA:
            return False
        if self.pos is Pos.STRING:
            return self._string_part(token)
        if self.str_open:
            if token.kind is Kind.STRING_OPEN:
                return self._concat(token)
            self._close_string()
        return _POSITIONS[self.pos](self, token)

    # -- arguments ------------------------------------------------------------------------

    def _arg(self, token: Token) -> bool:
        if token.kind is Kind.NAME:
            self.skip_from, self.name, self.pos = len(self.raw), token.text, Pos.EQ
            return False
        if token.kind is Kind.OP and token.text == ")":
            return self._end_args()
        if token.kind is Kind.OP and token.text == "**":
            self.kw, self.pos = 2, Pos.VALUE
            self.prefix = self._separator() + '"null": '  # json.dumps's None key
            return False
        if token.kind is Kind.OP and token.text == ",":
            return self._fail()
        self.skip_from = len(self.raw)
        return self._positional(token)

    def _eq(self, token: Token) -> bool:
        if not (token.kind is Kind.OP and token.text == "="):
            return self._positional(token)  # the name starts a positional argument
        if keyword.iskeyword(self.name) and self.raw.startswith(self.name, self.skip_from):
            return self._fail()  # an ASCII keyword cannot be assigned to
        self.kw = self.kw or 1
        self.prefix = self._separator() + json.dumps(self.name, ensure_ascii=False) + ": "
        self.name, self.pos = "", Pos.VALUE
        return False

    def _separator(self) -> str:
        return ", " if self.opened else "{"

    def _positional(self, token: Token) -> bool:
        """Python refuses a positional argument after a keyword (and `*x` after `**`)."""
        starred = token.kind is Kind.OP and token.text == "*"
        if self.kw == 2 or (self.kw == 1 and not starred):
            return self._fail()
        self.name, self.skip_depth, self.pos = "", 0, Pos.SKIP
        return self._skip(token)

    def _skip(self, token: Token) -> bool:
        if token.kind is not Kind.OP:
            return False
        if token.text in ("(", "[", "{"):
            self.skip_depth += 1
        elif token.text in (")", "]", "}"):
            if self.skip_depth == 0:
                return self._end_positional(token) if token.text == ")" else self._fail()
            self.skip_depth -= 1
        elif token.text == "," and self.skip_depth == 0:
            return self._end_positional(token)
        return False

    def _end_positional(self, token: Token) -> bool:
        text = self.raw[self.skip_from :]
        if not _is_expression(text, sole=self.first and token.text == ")", lines=self.line_mode):
            return self._fail()
        if token.text == ")":
            return self._end_args()
        self.first, self.pos = False, Pos.ARG
        return False

    def _end_args(self) -> bool:
        self.ended = True
        return self._emit("}" if self.opened else "{}")

    # -- values ---------------------------------------------------------------------------

    def _value_start(self, token: Token) -> bool:  # noqa: C901 - one branch per literal kind
        top = self.stack[-1]
        if self.pos is not Pos.VALUE and token.kind is Kind.OP and token.text == _CLOSE_TOKEN[top]:
            return self._close_empty(top)
        if self.pos is Pos.KEY:
            if not _may_start_key(token):
                return self._fail()
            self._hold()  # a key is written at its `:`
        if token.kind is Kind.STRING_OPEN:
            return self._open_string(token)
        if token.kind is Kind.NUMBER:
            return self._number(token)
        if token.kind is Kind.NAME:
            return self._name_constant(token)
        if token.kind is Kind.OP and token.text == "[":
            written = self._value("[")
            self.stack, self.pos = self.stack + "L", Pos.ITEM
            return written
        if token.kind is Kind.OP and token.text in ("(", "{"):
            self._hold()  # a tuple or a group; a dict or a set
            self.stack, self.pos = self.stack + ("P" if token.text == "(" else "B"), Pos.ITEM
            return False
        if token.kind is Kind.OP and token.text in ("-", "+"):
            self.neg, self.pos = token.text == "-", Pos.SIGN
            return False
        return self._fail()

    def _close_empty(self, top: str) -> bool:
        """The closer where a value could start: empty container, or after a trailing comma."""
        if top in ("P", "B"):
            written = self._decide("[]" if top == "P" else "{}")
        else:
            self.prefix = ""
            written = self._emit(_JSON_CLOSER[top])
        self._pop()
        return written

    def _open_string(self, token: Token) -> bool:
        if "b" in token.text:
            return self._fail()  # bytes are no JSON value
        self.fstr, self.str_open, self.pos = "f" in token.text, True, Pos.STRING
        return self._value('"')

    def _string_part(self, token: Token) -> bool:
        if token.kind is Kind.STRING_CLOSE:
            self.pos = Pos.AFTER  # the JSON string stays open: a literal may follow
            return False
        return bool(token.text) and self._emit(json_string_body(token.text))

    def _concat(self, token: Token) -> bool:
        if "b" in token.text:
            return self._fail()  # Python cannot mix bytes and str literals
        self.fstr, self.pos = self.fstr or "f" in token.text, Pos.STRING
        return False

    def _close_string(self) -> None:
        self._emit('"')
        self.str_open, self.key_ok, self.fstr = False, not self.fstr, False

    def _number(self, token: Token) -> bool:
        value = _number_value(token.text)
        if value is None:
            return self._fail()
        signed = self.pos is Pos.SIGN
        try:
            text = json.dumps(-value if self.neg else value)
        except ValueError:  # an int too long for str() (vLLM's json.dumps fails too)
            return self._fail()
        self.neg, self.key_ok, self.pos = False, not signed, Pos.AFTER
        return self._value(text)

    def _name_constant(self, token: Token) -> bool:
        if token.raw.isascii() and token.text in _PY_CONSTANTS:
            text, self.key_ok = _PY_CONSTANTS[token.text], True
        elif token.text in _JSON_NAMES:
            text, self.key_ok = _JSON_NAMES[token.text], False
        else:
            return self._fail()
        self.pos = Pos.AFTER
        return self._value(text)

    def _sign(self, token: Token) -> bool:
        if token.kind is Kind.NUMBER:
            return self._number(token)
        if token.kind is Kind.OP and token.text in ("-", "+"):
            self.neg ^= token.text == "-"
            return False
        if token.kind is Kind.OP and token.text == "(":
            self.stack += "N"
            return False
        return self._fail()

    # -- after a value --------------------------------------------------------------------

    def _after(self, token: Token) -> bool:
        if token.kind is not Kind.OP:
            return self._fail()
        top = self.stack[-1]
        if token.text == ",":
            return self._comma(top)
        if token.text == ":" and top in ("B", "D"):
            return self._colon(top)
        if token.text == _CLOSE_TOKEN[top]:
            return self._close(top)
        return self._fail()

    def _comma(self, top: str) -> bool:
        if top == "A":
            self.first, self.pos = False, Pos.ARG
            return False
        if top in ("D", "N"):
            return self._fail()
        written = self._decide("[") if top in ("P", "B") else False
        self.stack = self.stack[:-1] + {"P": "T", "B": "S", "E": "D"}.get(top, top)
        self.prefix, self.pos = ", ", Pos.KEY if top == "E" else Pos.ITEM
        return written

    def _colon(self, top: str) -> bool:
        if not self.key_ok:
            return self._fail()  # dict keys must be constants
        segment = self.held.pop()
        prefix, body = segment.prefix, segment.body
        key = body if body.startswith('"') else f'"{body}"'  # json.dumps's key spelling
        written = self._emit(prefix + "{") if top == "B" else False
        self.prefix = ("" if top == "B" else prefix) + key + ": "
        self.stack, self.pos = self.stack[:-1] + "E", Pos.VALUE
        return written

    def _close(self, top: str) -> bool:
        if top == "A":
            return self._end_args()
        if top == "D":
            return self._fail()  # a key without a value
        if top == "P":  # a group: the value inside, as it is (a key if it was one)
            key_ok = self.key_ok
            written = self._decide("")
            self._pop()
            self.key_ok = key_ok
            return written
        if top == "B":  # a one-element set
            self._decide("[")
            written = self._emit("]")
        else:
            written = self._emit(_JSON_CLOSER[top]) if top != "N" else False
        self._pop()
        return written

    def _pop(self) -> None:
        self.stack, self.pos, self.key_ok = self.stack[:-1], Pos.AFTER, False


_POSITIONS = {
    Pos.ARG: _Reader._arg,
    Pos.EQ: _Reader._eq,
    Pos.VALUE: _Reader._value_start,
    Pos.ITEM: _Reader._value_start,
    Pos.KEY: _Reader._value_start,
    Pos.SIGN: _Reader._sign,
    Pos.AFTER: _Reader._after,
}


def _may_start_key(token: Token) -> bool:
    """vLLM takes only constants as dict keys: a str literal, an unsigned number,
    True/False/None, or one of these in parentheses."""
    if token.kind is Kind.NAME:
        return token.raw.isascii() and token.text in _PY_CONSTANTS
    if token.kind is Kind.OP:
        return token.text == "("
    return token.kind in (Kind.STRING_OPEN, Kind.NUMBER)


def _number_value(text: str) -> int | float | None:
    """The value of a Python int or float literal, exactly as Python reads it (None if it
    is not one, or is one Python refuses: e.g. over 4300 digits)."""
    if _NUMBER.fullmatch(text) is None:
        return None
    try:
        value = ast.literal_eval(text)
    except (SyntaxError, ValueError, MemoryError):
        return None
    return value if type(value) in (int, float) else None


def _is_expression(text: str, *, sole: bool, lines: bool) -> bool:
    """Whether `text` is a valid positional argument (a generator expression only when it
    is the call's sole argument, as Python requires)."""
    source = "_(" + text + (")" if sole else ", _)")
    try:
        ast.parse(join_lines(source) if lines else source, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True
