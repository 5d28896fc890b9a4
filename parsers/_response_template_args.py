"""A `response_template` tool region's call, streamed (the hf / beam tool parser).

vLLM parses a tool region only when it closes (`content_parsers._json`): strings between the
template's `string_delims` are pulled out first, bare keys are quoted by the regex
`(?<=[{,])(\\w+):`, the result goes through `json.loads`, the transform builds
`{"function": {"name": <capture>, "arguments": <the value>}}`, top-level string members (and
string items of a top-level list member) are coerced by the tool's schema, and the
arguments are written with `json.dumps(ensure_ascii=False)` (a string value is the arguments
text itself).

Here the same runs as the text comes, in three small stages whose state is bounded:

* `_Rewriter`: the dialect to plain JSON. It holds only a partial string delimiter or a bare
  word that may still be a key (until the character after it shows whether a `:` follows).
  Like vLLM's regexes it ignores ordinary JSON strings: a delimiter or `,key:` inside `"..."`
  is rewritten there too.
* the JSON scanner (`parsers.tools._json_scan`, CPython's grammar), which holds a number,
  literal, escape or key until it ends;
* `_Writer`: canonical output. A member string the schema may coerce is held until it closes;
  a root scalar until the region closes (a `null` makes no call).

The call starts at the first token of an object, array or string value. A region that then
stops being JSON keeps what it wrote and drops the rest of its text, and one cut by the end
of the output keeps its arguments (vLLM drops both: README "Known differences"); a repeated
key is written twice (json keeps the last value, at the first key's place).

Only the shape vLLM's tool templates use streams (`STREAMED`): `content: json` without
`allow_non_json`, at most one delimiter pair, a transform whose `function.arguments` is
`"{content}"` and whose other placeholders name the opener's captures. Another tool field is
parsed whole at its close (`Machine(whole_regions=True)`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import regex

from parsers._errors import LimitExceededError
from parsers._state import JsonState
from parsers.response_template import (
    PLACEHOLDER,
    Field,
    coerce_text,
    schema_types,
    transform_value,
)
from parsers.tools._json_scan import DONE, ERROR, MORE, ScanState, scan, scan_end

__all__ = ["RegionArgs", "RegionState", "streamed"]

_WORD = regex.compile(r"\w+")
_WS = frozenset(" \t\n\r")
_SENTINELS = ("\x01", "\x02")  # vLLM refuses a delimited body holding them
# Types vLLM's `_coerce` may turn a string into (a "string"-only member streams).
_COERCIBLE = frozenset({"integer", "number", "boolean", "null", "object", "array"})
BROKEN = "broken"  # the region stopped being JSON: the rest of its text is dropped


def _placeholders(transform: Any) -> list[str]:
    if isinstance(transform, dict):
        return [p for v in transform.values() for p in _placeholders(v)]
    if isinstance(transform, list):
        return [p for v in transform for p in _placeholders(v)]
    whole = PLACEHOLDER.fullmatch(transform) if isinstance(transform, str) else None
    return [whole.group(1)] if whole else []


def streamed(field: Field) -> bool:
    """Whether this tool field's calls stream (module docstring); else held whole."""
    args = field.content_args
    delims = args.get("string_delims") or []
    transform = field.transform
    function = transform.get("function") if isinstance(transform, dict) else None
    if field.content != "json" or args.get("allow_non_json") or len(delims) > 1:
        return False
    if delims and not (
        len(delims[0]) == 2
        and all(isinstance(d, str) and d for d in delims[0])
        and not _WORD.match(delims[0][0])  # a word-initial delimiter could split a bare key
    ):
        return False
    if not isinstance(function, dict) or function.get("arguments") != "{content}":
        return False
    return _placeholders(transform).count("content") == 1 and not any(
        p.split(".")[0] == "content" for p in _placeholders(transform) if p != "content"
    )


@dataclass(frozen=True, slots=True)
class RegionState(JsonState):
    """One open tool region. Dialect: `inside` a delimited string, `part` a possible
    delimiter, `prev` the last JSON character (for the key rule), `word` a bare word that may
    be a key, `done` the root value ended (only whitespace may follow). Writer: `out` the
    open containers ("{" / "[" before their first member, "}" / "]" after), `types` the
    schema types of the current top-level member, `sdisp` the open string's handling ("w"
    written, "h" held in `held`, "v" the root string, written decoded), `scalar` a root
    scalar's JSON. Call: `name` ("" makes no call), `index` (-1 before it starts),
    `wrote` (arguments text written), `status` (MORE, or BROKEN)."""

    VERSION: ClassVar[int] = 1

    name: str = ""
    inside: bool = False
    part: str = ""
    prev: str = ""
    word: str = ""
    done: bool = False
    scan: ScanState = ScanState()
    out: str = ""
    types: tuple[str, ...] = ()
    sdisp: str = ""
    held: str = ""
    scalar: str = ""
    index: int = -1
    wrote: bool = False
    status: str = MORE

    def __post_init__(self) -> None:
        if set(self.out) - set("{}[]") or self.sdisp not in ("", "w", "h", "v"):
            raise ValueError("bad region writer state")
        if self.status not in (MORE, BROKEN) or self.index < -1:
            raise ValueError("bad region progress")


@dataclass(frozen=True, slots=True)
class Step:
    """What a region step wrote: `start` the call begins here (before `text`)."""

    start: bool = False
    text: str = ""


class RegionArgs:
    """Streams one tool field's calls (module docstring)."""

    def __init__(
        self, field: Field, properties: Mapping[str, Mapping[str, Any]], limit: int
    ) -> None:
        delims = field.content_args.get("string_delims") or []
        self.delims: tuple[str, str] | None = (delims[0][0], delims[0][1]) if delims else None
        self.keys = bool(field.content_args.get("unquoted_keys"))
        # Where plain text stops: a possible bare key after `{` / `,`, a delimiter.
        opener = regex.escape(self.delims[0][0]) if self.delims else ""
        self.stops = regex.compile(f"[{{,{opener}]")
        self.field, self.properties, self.limit = field, properties, limit

    def open(self, captures: Mapping[str, str]) -> RegionState:
        """A region opened: its call's name, or "" when the transform fails (vLLM reports
        the region malformed whatever its body) or names nothing."""
        try:
            value = transform_value(self.field.transform, {**captures, "content": None})
        except (KeyError, TypeError, ValueError):
            return RegionState(status=BROKEN)
        name = value["function"].get("name")
        return (
            RegionState(name=name) if isinstance(name, str) and name else RegionState(status=BROKEN)
        )

    def feed(self, state: RegionState, text: str) -> tuple[RegionState, Step]:
        if state.status == BROKEN or not text:
            return state, Step()
        rewriter = _Rewriter(self, state)
        work = rewriter.rewrite(text)
        state = rewriter.state()
        state, step = self._json(state, work)
        if rewriter.fault and state.status != BROKEN:
            state = state.replace(status=BROKEN)
        return state, step

    def close(self, state: RegionState) -> Step:
        """The region ended (its closer, or the end of the output)."""
        if state.status == BROKEN:
            return Step()
        rewriter = _Rewriter(self, state)
        work = rewriter.flush()
        state, step = self._json(rewriter.state(), work)
        if rewriter.fault or state.status == BROKEN:
            return step
        writer = _Writer(self, state)
        if not state.done:
            scanned, events, status = scan_end(state.scan)
            for event in events:
                writer.event(event)
            if status != DONE:
                return Step(step.start, step.text + writer.text())  # cut: keeps what it wrote
        state = writer.state()
        if state.scalar and state.index < 0:  # a root scalar: a call unless it is null
            return Step() if state.scalar == "null" else Step(True, state.scalar)
        tail = writer.text() + (
            "{}"
            if state.sdisp == "" and state.out == "" and not state.wrote and state.index >= 0
            else ""
        )
        return Step(step.start, step.text + tail)

    def _json(self, state: RegionState, work: str) -> tuple[RegionState, Step]:
        if not work:
            return state, Step()
        if state.done:
            broken = any(ch not in _WS for ch in work)
            return (state.replace(status=BROKEN) if broken else state), Step()
        scanned, events, end, status = scan(state.scan, work)
        writer = _Writer(self, state)
        for event in events:
            writer.event(event)
        new = writer.state().replace(scan=scanned)
        if status == ERROR:
            new = new.replace(status=BROKEN)
        elif status == DONE:
            new = new.replace(done=True)
            if any(ch not in _WS for ch in work[end:]):
                new = new.replace(status=BROKEN)
        if len(new.held) + len(new.word) + len(new.part) > self.limit:
            raise LimitExceededError(f"a held tool argument exceeds {self.limit} characters")
        return new, Step(writer.started, writer.text())


class _Rewriter:
    """The template's JSON dialect to plain JSON (module docstring), on one state."""

    def __init__(self, fmt: RegionArgs, state: RegionState) -> None:
        self.fmt, self.base = fmt, state
        self.inside, self.part, self.prev, self.word = (
            state.inside,
            state.part,
            state.prev,
            state.word,
        )
        self.fault = False
        self.parts: list[str] = []

    def state(self) -> RegionState:
        return self.base.replace(inside=self.inside, part=self.part, prev=self.prev, word=self.word)

    def rewrite(self, text: str) -> str:
        if self.fmt.delims:
            cut = min((i for i in (text.find(s) for s in _SENTINELS) if i >= 0), default=-1)
            if cut >= 0:
                text, self.fault = text[:cut], True
        buf, self.part = self.part + text, ""
        i = 0
        while i < len(buf):
            i = self._inside(buf, i) if self.inside else self._outside(buf, i)
        return "".join(self.parts)

    def flush(self) -> str:
        """The region ended: a held word is no key, a partial delimiter is text; an open
        delimited string never closed (vLLM's regex finds no pair: not JSON)."""
        self.fault = self.inside
        self.parts.append(self.word + self.part)
        self.word = self.part = ""
        return "".join(self.parts)

    def _inside(self, buf: str, i: int) -> int:
        assert self.fmt.delims is not None
        close = self.fmt.delims[1]
        j = buf.find(close, i)
        if j < 0:
            keep = _partial_suffix(buf, i, close)
            self._string(buf[i : len(buf) - keep])
            self.part = buf[len(buf) - keep :]
            return len(buf)
        self._string(buf[i:j])
        self.parts.append('"')
        self.inside, self.prev = False, "\x02"  # vLLM's sentinel stands there
        return j + len(close)

    def _outside(self, buf: str, i: int) -> int:
        if self.word or (self.fmt.keys and self.prev in ("{", ",") and _WORD.match(buf, i)):
            return self._bare_word(buf, i)
        opener = self.fmt.delims[0] if self.fmt.delims else None
        if opener is not None and buf.startswith(opener, i):
            self.parts.append('"')
            self.inside = True
            return i + len(opener)
        if opener is not None and opener.startswith(buf[i:]):
            self.part = buf[i:]
            return len(buf)
        if buf[i] in "{,":  # a bare key may follow
            j = i + 1
        else:
            stop = self.fmt.stops.search(buf, i + 1)
            j = stop.start() if stop is not None else len(buf)
        self.parts.append(buf[i:j])
        self.prev = buf[j - 1]
        return j

    def _bare_word(self, buf: str, i: int) -> int:
        m = _WORD.match(buf, i)
        if m is not None:
            self.word += m.group()
            i = m.end()
        if i == len(buf):
            return i  # the next character decides
        word, self.word = self.word, ""
        self.parts.append(f'"{word}"' if buf[i] == ":" else word)
        self.prev = word[-1]
        return i

    def _string(self, text: str) -> None:
        if text:
            self.parts.append(json.dumps(text, ensure_ascii=False)[1:-1])


def _partial_suffix(buf: str, start: int, marker: str) -> int:
    """Length of the longest end of buf[start:] that begins `marker`."""
    for keep in range(min(len(marker) - 1, len(buf) - start), 0, -1):
        if marker.startswith(buf[len(buf) - keep :]):
            return keep
    return 0


class _Writer:
    """Scanner events to canonical arguments (module docstring), on one state."""

    def __init__(self, fmt: RegionArgs, state: RegionState) -> None:
        self.fmt, self.base = fmt, state
        self.out, self.types, self.sdisp = state.out, state.types, state.sdisp
        self.held, self.scalar, self.index, self.wrote = (
            state.held,
            state.scalar,
            state.index,
            state.wrote,
        )
        self.started = False
        self.parts: list[str] = []

    def state(self) -> RegionState:
        return self.base.replace(
            out=self.out,
            types=self.types,
            sdisp=self.sdisp,
            held=self.held,
            scalar=self.scalar,
            index=self.index,
            wrote=self.wrote,
        )

    def text(self) -> str:
        text, self.parts = "".join(self.parts), []
        return text

    def _write(self, text: str) -> None:
        if text:
            self.parts.append(text)
            self.wrote = True

    def _root(self) -> None:
        if self.index < 0:
            self.index, self.started = 0, True  # the parser assigns the real index

    def _item(self) -> None:
        """Separator before a value inside an array."""
        if self.out and self.out[-1] in "[]":
            if self.out[-1] == "]":
                self._write(", ")
            self.out = self.out[:-1] + "]"

    def event(self, ev: Any) -> None:
        kind = ev.kind
        if kind == "ws":
            return
        if kind in ("{", "["):
            self._root() if not self.out else self._item()
            self.out += kind
            self._write(kind)
        elif kind in ("}", "]"):
            self.out = self.out[:-1]
            self._write(kind)
        elif kind == "key":
            first = self.out[-1] == "{"
            self.out = self.out[:-1] + "}"
            self._write(("" if first else ", ") + json.dumps(ev.value, ensure_ascii=False) + ": ")
            if len(self.out) == 1:
                props = self.fmt.properties.get(self.base.name) or {}
                self.types = schema_types(props.get(ev.value)) if ev.value in props else ()
        elif kind == "str":
            self._string_start()
        elif kind == "chars":
            if self.sdisp == "h":
                self.held += ev.raw
            else:
                self._write(
                    ev.value
                    if self.sdisp == "v"
                    else json.dumps(ev.value, ensure_ascii=False)[1:-1]
                )
        elif kind == "end":
            self._string_end()
        elif kind == "scalar":
            if not self.out:
                self.scalar = json.dumps(ev.value, ensure_ascii=False)
            else:
                self._item()
                self._write(json.dumps(ev.value, ensure_ascii=False))

    def _holds(self) -> bool:
        """vLLM coerces top-level member strings and string items of a top-level list."""
        if not _COERCIBLE & set(self.types) or not self.out or self.out[0] not in "{}":
            return False
        return len(self.out) == 1 or (
            len(self.out) == 2 and self.out[1] in "[]" and "array" not in self.types
        )

    def _string_start(self) -> None:
        if not self.out:
            self._root()
            self.sdisp = "v"
            return
        self._item()
        if self._holds():
            self.sdisp, self.held = "h", ""
        else:
            self.sdisp = "w"
            self._write('"')

    def _string_end(self) -> None:
        sdisp, self.sdisp = self.sdisp, ""
        if sdisp == "w":
            self._write('"')
        elif sdisp == "h":
            value = json.loads('"' + self.held + '"')
            self.held = ""
            self._write(json.dumps(coerce_text(value, self.types), ensure_ascii=False))
