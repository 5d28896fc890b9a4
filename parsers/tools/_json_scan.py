"""An incremental JSON scanner with CPython's exact grammar and a bounded state.

`scan(state, text)` reads any chunk of one JSON value (plus surrounding whitespace) and
returns events; `scan_end(state)` says how the input ended. What it accepts is exactly what
`json.loads` accepts for one value: strings with `\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX`
escapes (surrogate pairs combined as `json` combines them, lone surrogates kept, raw control
characters refused), numbers and `true false null NaN Infinity -Infinity` (a token is decided
with `json.loads` itself once a delimiter or the end shows it is complete, so huge-int and
float rules are Python's), objects with string keys, arrays.

Events, each with the raw text it consumed (so a writer can pass raw text through):

    Ev("{"|"}"|"["|"]", raw)    container open / close
    Ev("key", raw, text)        a complete object key (decoded)
    Ev("str", raw)              a string value opens
    Ev("chars", raw, text)      decoded characters of the open string value (in bulk)
    Ev("end", raw)              the string value closes
    Ev("scalar", raw, value)    a complete number or literal (the Python value)
    Ev("ws", raw)               whitespace, `:` and `,`: no meaning for a canonical writer

The state holds the open containers, the grammar's expectation and the small unfinished
piece (an escape, a high surrogate, a number or literal token, a key): never the text of a
string value. Depth is bounded by MAX_JSON_DEPTH.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers._state import JsonState

__all__ = ["Ev", "ScanState", "scan", "scan_end", "MORE", "DONE", "ERROR", "TRUNCATED",
           "MAX_JSON_DEPTH"]  # fmt: skip

# CPython's C scanner recurses per container and fails with RecursionError near the default
# recursion limit (1000); arguments nest a few levels. 512 keeps the state bounded well before.
MAX_JSON_DEPTH = 512
# A key or a number/literal token longer than this is held whole: keys are names, numbers short.
MORE, DONE, ERROR, TRUNCATED = "more", "done", "error", "truncated"

_WS = " \t\n\r"
_PLAIN = re.compile(r'[^"\\\x00-\x1f]+')
_WS_RUN = re.compile(r"[ \t\n\r]+")
_TOKEN = re.compile(r'[^ \t\n\r{}\[\]:,"]+')
_SHORT_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
                  "t": "\t"}  # fmt: skip
_HEX = frozenset("0123456789abcdefABCDEF")


@dataclass(frozen=True, slots=True)
class Ev:
    kind: str
    raw: str
    value: Any = None


@dataclass(frozen=True, slots=True)
class ScanState(JsonState):
    """doc: open containers ("{" / "["), outermost first. expect: "v" a value, "k" a key or
    "}", "K" a key, ":" a colon, "," a comma or a close, "a" a value or "]", "d" done.
    inside: "" / "k" (a key) / "v" (a string value). esc: an unfinished escape. hi: a high
    surrogate waiting for its low half. tok: an unfinished number/literal. key / kraw: the
    key decoded so far, and its raw text."""

    VERSION: ClassVar[int] = 1

    doc: str = ""
    expect: str = "v"
    inside: str = ""
    esc: str = ""
    hi: str = ""
    tok: str = ""
    key: str = ""
    kraw: str = ""

    def __post_init__(self) -> None:
        if len(self.doc) > MAX_JSON_DEPTH or set(self.doc) - {"{", "["}:
            raise ValueError("bad container stack")
        if self.expect not in ("v", "k", "K", ":", ",", "a", "d") or self.inside not in ("", "k", "v"):
            raise ValueError("bad scanner expectation")
        if len(self.esc) > 6 or len(self.hi) > 1:
            raise ValueError("bad escape state")

    def held_chars(self) -> int:
        return len(self.tok) + len(self.key) + len(self.kraw)


class _Cursor:
    """The mutable copy of a ScanState one `scan` call works on."""

    __slots__ = ("doc", "expect", "inside", "esc", "hi", "tok", "key", "kraw", "events", "text",
                 "pos")  # fmt: skip

    def __init__(self, state: ScanState, text: str) -> None:
        self.doc, self.expect, self.inside = state.doc, state.expect, state.inside
        self.esc, self.hi, self.tok, self.key = state.esc, state.hi, state.tok, state.key
        self.kraw = state.kraw
        self.events: list[Ev] = []
        self.text, self.pos = text, 0

    def state(self) -> ScanState:
        return ScanState(
            self.doc, self.expect, self.inside, self.esc, self.hi, self.tok, self.key, self.kraw
        )


def scan(state: ScanState, text: str) -> tuple[ScanState, list[Ev], int, str]:
    """(state, events, end, status): MORE (all text read), DONE (the value ended at `end`;
    text after it is not read), ERROR (`end` is the offending character)."""
    cur = _Cursor(state, text)
    while cur.pos < len(text):
        if cur.expect == "d":
            return cur.state(), cur.events, cur.pos, DONE
        if not _step(cur):
            return cur.state(), cur.events, cur.pos, ERROR
    if cur.expect == "d":
        return cur.state(), cur.events, cur.pos, DONE
    return cur.state(), cur.events, cur.pos, MORE


def scan_end(state: ScanState) -> tuple[ScanState, list[Ev], str]:
    """The input ended: a pending top-level number or literal completes (DONE); an
    unfinished value is TRUNCATED; a bad pending token is an ERROR."""
    if state.expect == "d":
        return state, [], DONE
    if state.tok and not state.inside:
        cur = _Cursor(state, "")
        if not _finish_token(cur):
            return state, [], ERROR
        return cur.state(), cur.events, DONE if cur.expect == "d" else TRUNCATED
    return state, [], TRUNCATED


# -- the grammar ----------------------------------------------------------------------------


def _step(cur: _Cursor) -> bool:
    """Consume at least one character; False on a grammar error."""
    if cur.inside:
        return _string(cur)
    if cur.tok:
        return _token(cur)
    text, pos = cur.text, cur.pos
    ch = text[pos]
    if ch in _WS:
        end = _WS_RUN.match(text, pos).end()  # type: ignore[union-attr]
        cur.events.append(Ev("ws", text[pos:end]))
        cur.pos = end
        return True
    expect = cur.expect
    if expect in ("v", "a"):
        return _value_start(cur, ch)
    if expect in ("k", "K"):
        if ch == '"':
            cur.inside, cur.key, cur.kraw = "k", "", ""
            cur.pos += 1
            return True
        return expect == "k" and ch == "}" and _close(cur, "}")
    if expect == ":":
        return ch == ":" and _separator(cur, ":", "v")
    # expect == ",": a comma or the close of the open container
    top = cur.doc[-1]
    if ch == ",":
        return _separator(cur, ",", "K" if top == "{" else "v")
    return ch == ("}" if top == "{" else "]") and _close(cur, ch)


def _separator(cur: _Cursor, ch: str, expect: str) -> bool:
    cur.events.append(Ev("ws", ch))
    cur.expect = expect
    cur.pos += 1
    return True


def _value_start(cur: _Cursor, ch: str) -> bool:
    if ch in "{[":
        if len(cur.doc) >= MAX_JSON_DEPTH:
            return False
        cur.doc += ch
        cur.expect = "k" if ch == "{" else "a"
        cur.events.append(Ev(ch, ch))
        cur.pos += 1
        return True
    if ch == "]":
        return cur.expect == "a" and _close(cur, "]")
    if ch == '"':
        cur.inside = "v"
        cur.events.append(Ev("str", '"'))
        cur.pos += 1
        return True
    if ch in "}:,":
        return False
    return _token(cur)


def _close(cur: _Cursor, ch: str) -> bool:
    cur.doc = cur.doc[:-1]
    cur.events.append(Ev(ch, ch))
    cur.pos += 1
    _after_value(cur)
    return True


def _after_value(cur: _Cursor) -> None:
    cur.expect = "," if cur.doc else "d"


def _token(cur: _Cursor) -> bool:
    found = _TOKEN.match(cur.text, cur.pos)
    if found is not None:
        cur.tok += found.group()
        cur.pos = found.end()
    if cur.pos >= len(cur.text):
        return True  # the token may go on in the next chunk
    return _finish_token(cur)


def _finish_token(cur: _Cursor) -> bool:
    token = cur.tok
    try:
        value = json.loads(token)
    except (ValueError, RecursionError):
        return False  # the token stays in the state: its text is not lost
    if isinstance(value, str | list | dict):
        return False
    cur.tok = ""
    cur.events.append(Ev("scalar", token, value))
    _after_value(cur)
    return True


# -- strings ------------------------------------------------------------------------------------


def _string(cur: _Cursor) -> bool:
    if cur.esc or cur.hi:
        return _escape(cur)
    text, pos = cur.text, cur.pos
    plain = _PLAIN.match(text, pos)
    if plain is not None:
        _chars(cur, plain.group(), plain.group())
        cur.pos = plain.end()
        return True
    ch = text[pos]
    if ch == "\\":
        cur.esc = "\\"
        cur.pos += 1
        return True
    if ch == '"':
        cur.pos += 1
        if cur.inside == "k":
            cur.inside = ""
            cur.events.append(Ev("key", f'"{cur.kraw}"', cur.key))
            cur.key = cur.kraw = ""
            cur.expect = ":"
        else:
            cur.inside = ""
            cur.events.append(Ev("end", '"'))
            _after_value(cur)
        return True
    return False  # a raw control character


def _chars(cur: _Cursor, raw: str, decoded: str) -> None:
    if cur.inside == "k":
        cur.key += decoded
        cur.kraw += raw
        return
    last = cur.events[-1] if cur.events else None
    if last is not None and last.kind == "chars":
        cur.events[-1] = Ev("chars", last.raw + raw, last.value + decoded)
    else:
        cur.events.append(Ev("chars", raw, decoded))


def _escape(cur: _Cursor) -> bool:
    """Continue an escape (or a held high surrogate) with the next characters."""
    text = cur.text
    while cur.pos < len(text):
        ch = text[cur.pos]
        if cur.hi and not cur.esc:
            if ch != "\\":  # no low half follows: the high surrogate stands alone
                _chars(cur, "", cur.hi)
                cur.hi = ""
                return True
        cur.esc += ch
        cur.pos += 1
        done = _escape_done(cur)
        if done is not None:
            return done
    return True


def _escape_done(cur: _Cursor) -> bool | None:
    """None: the escape needs more characters; else whether it was valid."""
    esc = cur.esc
    if len(esc) < 2:
        return None
    kind = esc[1]
    if cur.hi and kind != "u":  # another escape after a high surrogate
        _chars(cur, "", cur.hi)
        cur.hi = ""
    if kind in _SHORT_ESCAPES:
        cur.esc = ""
        _chars(cur, esc, _SHORT_ESCAPES[kind])
        return True
    if kind != "u":
        return False
    if len(esc) < 6:
        return None if all(c in _HEX for c in esc[2:]) else False
    if not all(c in _HEX for c in esc[2:]):
        return False
    code = int(esc[2:], 16)
    cur.esc = ""
    if cur.hi:
        high, cur.hi = cur.hi, ""
        if 0xDC00 <= code <= 0xDFFF:
            combined = 0x10000 + ((ord(high) - 0xD800) << 10) + (code - 0xDC00)
            _chars(cur, esc, chr(combined))
            return True
        _chars(cur, "", high)
    if 0xD800 <= code <= 0xDBFF:
        cur.hi = chr(code)  # wait: a low half may follow
        _pending_raw(cur, esc)
        return True
    _chars(cur, esc, chr(code))
    return True


def _pending_raw(cur: _Cursor, raw: str) -> None:
    """Raw text of a held high surrogate: it travels with the characters decoded later."""
    _chars(cur, raw, "")
