"""Gemma 4 tool calls (vLLM name `gemma4`), on vLLM's parser engine:

    <|tool_call>call:get_weather{city:<|"|>Tokyo<|"|>,days:3}<tool_call|>

Spec: vLLM 0.33 `gemma4_config` (`vllm/parser/gemma4.py`), run by `_engine` as its tool
adapter does. `call:` (or a bare `:`) starts the name, `{` or `(` the arguments; `:`, `{`,
`(` and `call:` are terminals everywhere, text where no transition names them. `<|"|>` is a
special token kept as text (the string delimiter).

Arguments (`_gemma4_arg_converter`, then `_fix_arg_types`): the raw text is stripped and one
closing `}` (or `)`, when the text has more `)` than `(`) is dropped; then members
`key:value` separated by blanks and commas: a key runs to the next `:` (stripped, a
`<|"|>`-quoted key unquoted); a value is a `<|"|>`-delimited string (unterminated: the rest
of the text), a `{..}` object or `[..]` array in the same syntax (brackets counted outside
strings; an unclosed one is read leniently: a bare value at its end is dropped), or a bare
word up to `,` `}` `]`, kept as a string. A key whose colon ends the text gets "". A value
that starts with `,` `}` `]` ends the arguments. The object is `json.dumps`ed and values are
coerced to the tool's schema types.

Streaming (`Gemma4Args`): a string value whose schema type is only "string" (or that the
schema does not mention) streams as it is read; other values are held until they end, then
coerced. Trailing whitespace and a trailing closer are held until more text shows they are
not the end. State: the open key or held value and that tail, never streamed text.

Divergences from vLLM's batch (stream == our batch; tests `test_gemma4_*`): a repeated key is
written twice (vLLM keeps the first position with the last value: `json.loads` of both gives
the same object); the engine's leading-whitespace rule (`_engine`); and vLLM's first-feed
rewrite (`Gemma4Parser._preprocess_feed`) is not applied: its batch prepends a `<|channel>`
the model never wrote when the text starts with `thought\n`, equals `thought` or contains
`<channel|>` anywhere (its one feed is the whole text), which a stream cannot know at its
start; see `parsers.reasoning.gemma4`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers._state import JsonState
from parsers.tools._args import json_string_body
from parsers.tools._base import json_dumps
from parsers.tools._coerce import coerce_value
from parsers.tools._engine import EngineSpec, EngineToolParser, Ev, S, Tr, string_only

__all__ = [
    "GEMMA4_SPEC",
    "Gemma4Args",
    "Gemma4ArgsState",
    "Gemma4ToolParser",
    "convert_arguments",
    "parse_array",
    "parse_fields",
]

CHANNEL_START, CHANNEL_END = "<|channel>", "<channel|>"
TOOL_START, TOOL_END = "<|tool_call>", "<tool_call|>"
DELIM = '<|"|>'

_END = (Ev.CALL_END,)
_START = (Ev.REASONING_END, Ev.CALL_START)
GEMMA4_SPEC = EngineSpec(
    terminals={
        "THINK_START": CHANNEL_START, "THINK_END": CHANNEL_END,
        "TOOL_START": TOOL_START, "TOOL_END": TOOL_END,
        "CALL_PREFIX": "call:", "COLON": ":", "OPEN_BRACE": "{", "OPEN_PAREN": "(",
    },
    transitions={
        (S.CONTENT, "THINK_START"): Tr(S.REASONING, (Ev.REASONING_START,)),
        (S.REASONING, "THINK_START"): Tr(S.REASONING),
        (S.REASONING, "THINK_END"): Tr(S.CONTENT, (Ev.REASONING_END,)),
        (S.REASONING, "TOOL_START"): Tr(S.PREAMBLE, _START),
        (S.CONTENT, "TOOL_START"): Tr(S.PREAMBLE, _START),
        (S.PREAMBLE, "TOOL_END"): Tr(S.CONTENT, _END),
        (S.PREAMBLE, "CALL_PREFIX"): Tr(S.NAME),
        (S.PREAMBLE, "COLON"): Tr(S.NAME),
        (S.NAME, "OPEN_BRACE"): Tr(S.ARGS),
        (S.NAME, "OPEN_PAREN"): Tr(S.ARGS),
        (S.NAME, "TOOL_END"): Tr(S.CONTENT, _END),
        (S.ARGS, "TOOL_END"): Tr(S.CONTENT, _END),
        (S.CONTENT, "TOOL_END"): Tr(S.CONTENT),
        (S.CONTENT, "THINK_END"): Tr(S.CONTENT),
    },
    preserve_tokens=frozenset({DELIM}),
)  # fmt: skip

_SEPS = " ,\n\t"  # skipped before a key
_VALUE_WS = " \n\t"  # skipped after a colon
_BARE_END = ",}]"
_ARRAY_BARE_END = ",]"
_CLOSERS = "})"


# -- the batch reading (vLLM's `_parse_gemma4_fields` / `_parse_gemma4_array`) ----------------


def _partial_delim_len(text: str) -> int:
    """Length of the longest proper prefix of DELIM that `text` ends with."""
    for k in range(len(DELIM) - 1, 0, -1):
        if text.endswith(DELIM[:k]):
            return k
    return 0


def _scan_nested(text: str, i: int, opener: str, closer: str) -> tuple[int, bool]:
    """From the opener at `i`: (index past its matching closer, or len(text); closed)."""
    depth, n = 1, len(text)
    i += 1
    while i < n and depth > 0:
        if text.startswith(DELIM, i):
            end = text.find(DELIM, i + len(DELIM))
            i = n if end == -1 else end + len(DELIM)
            continue
        if text[i] == opener:
            depth += 1
        elif text[i] == closer:
            depth -= 1
        i += 1
    return i, depth == 0


def _nested(text: str, i: int) -> tuple[Any, int]:
    """The `{..}` / `[..]` value at `i` and the index after it (unclosed: read leniently)."""
    opener = text[i]
    end, closed = _scan_nested(text, i, opener, "}" if opener == "{" else "]")
    inner = text[i + 1 : end - 1] if closed else text[i + 1 : end]
    read = parse_fields if opener == "{" else parse_array
    return read(inner, partial=not closed), end


def _key(raw: str) -> str:
    key = raw.strip()
    if key.startswith(DELIM) and key.endswith(DELIM):
        key = key[len(DELIM) : -len(DELIM)]
    return key


def parse_fields(text: str, *, partial: bool = False) -> dict[str, Any]:
    """Gemma's `key:value,...` members as a dict (`partial`: an unclosed object's inside)."""
    out: dict[str, Any] = {}
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in _SEPS:
            i += 1
        colon = text.find(":", i)
        if i >= n or colon == -1:
            break
        key = _key(text[i:colon])
        i = colon + 1
        while i < n and text[i] in _VALUE_WS:
            i += 1
        if i >= n:
            if not partial:
                out[key] = ""
            break
        if text.startswith(DELIM, i):
            end = text.find(DELIM, i + len(DELIM))
            if end == -1:
                value = text[i + len(DELIM) :]
                out[key] = value[: len(value) - _partial_delim_len(value)] if partial else value
                break
            out[key] = text[i + len(DELIM) : end]
            i = end + len(DELIM)
        elif text[i] in "{[":
            out[key], i = _nested(text, i)
        else:
            bare, i = _bare(text, i, _BARE_END, partial)
            if bare is None:
                break
            out[key] = bare
    return out


def _bare(text: str, i: int, enders: str, partial: bool) -> tuple[str | None, int]:
    """A bare value from `i` (None: the reading stops here)."""
    start, n = i, len(text)
    while i < n and text[i] not in enders:
        i += 1
    if (partial and i >= n) or i == start:
        return None, i
    raw = text[start:i].strip()
    if partial and raw.endswith("."):  # digits may follow
        return None, i
    return raw, i


def parse_array(text: str, *, partial: bool = False) -> list[Any]:
    """Gemma's `[..]` items as a list (`partial`: an unclosed array's inside)."""
    items: list[Any] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in _SEPS:
            i += 1
        if i >= n:
            break
        if text.startswith(DELIM, i):
            end = text.find(DELIM, i + len(DELIM))
            if end == -1:
                items.append(text[i + len(DELIM) :])
                break
            items.append(text[i + len(DELIM) : end])
            i = end + len(DELIM)
        elif text[i] in "{[":
            item, i = _nested(text, i)
            items.append(item)
        else:
            bare, i = _bare(text, i, _ARRAY_BARE_END, partial)
            if bare is None:
                break
            items.append(bare)
    return items


def _drop_closer(text: str) -> str:
    if text.endswith("}") or (text.endswith(")") and text.count("(") < text.count(")")):
        return text[:-1]
    return text


def convert_arguments(raw: str) -> str:
    """vLLM's batch conversion of a call's raw argument text (before coercion)."""
    return json_dumps(parse_fields(_drop_closer(raw.strip())))


# -- the streaming format ----------------------------------------------------------------------


class Ph(enum.StrEnum):
    SEP = "sep"  # before a key
    KEY = "key"  # reading a key (buf), up to its colon
    PRE = "pre"  # after the colon: blanks, or a possible DELIM (buf)
    STR = "str"  # inside a DELIM string (buf: a possible closing DELIM)
    VALUE = "value"  # a held object, array or bare value (buf: its raw text)
    DONE = "done"  # a value started with `,` `}` `]`: the rest is ignored


@dataclass(frozen=True, slots=True)
class Gemma4ArgsState(JsonState):
    """tail: trailing whitespace / closer not yet known not to end the text. opens, closes:
    `(` and `)` seen. key: the open member's key. stream: its string value streams (else held
    in value). scan, depth, in_str: progress through a held object or array (buf). opened:
    the `{` was written."""

    tail: str = ""
    opens: int = 0
    closes: int = 0
    phase: Ph = Ph.SEP
    buf: str = ""
    key: str = ""
    stream: bool = False
    value: str = ""
    scan: int = 0
    depth: int = 0
    in_str: bool = False
    opened: bool = False

    def held_chars(self) -> int:
        return len(self.tail) + len(self.buf) + len(self.key) + len(self.value)


class Gemma4Args:
    """Gemma's argument text -> the JSON object (module docstring)."""

    def __init__(self, properties: Mapping[str, Any]) -> None:
        self.properties = properties

    def start(self, name: str) -> Gemma4ArgsState:
        return Gemma4ArgsState()

    def feed(self, state: Gemma4ArgsState, text: str) -> tuple[Gemma4ArgsState, str, None]:
        state = state.replace(opens=state.opens + text.count("("), closes=state.closes + text.count(")"))
        text = state.tail + text
        keep = len(text.rstrip())
        if keep and text[keep - 1] in _CLOSERS:
            keep -= 1
        out: list[str] = []
        state = self._run(state.replace(tail=text[keep:]), text[:keep], out)
        return state, "".join(out), None

    def end(self, state: Gemma4ArgsState) -> tuple[Gemma4ArgsState, str]:
        out: list[str] = []
        tail = state.tail.rstrip()
        if tail == "}" or (tail == ")" and state.opens < state.closes):
            tail = ""
        state = self._run(state.replace(tail=""), tail, out)
        wrote = self._finish(state, out)
        out.append("}" if state.opened or wrote else "{}")
        return Gemma4ArgsState(), "".join(out)

    # -- scanning ------------------------------------------------------------------------

    def _run(self, state: Gemma4ArgsState, text: str, out: list[str]) -> Gemma4ArgsState:
        pos = 0
        while pos < len(text) and state.phase is not Ph.DONE:
            state, pos = _STEPS[state.phase](self, state, text, pos, out)
        return state

    def _sep(self, state: Gemma4ArgsState, text: str, pos: int, out: list[str]) -> tuple[Gemma4ArgsState, int]:
        while pos < len(text) and text[pos] in _SEPS:
            pos += 1
        if pos < len(text):
            state = state.replace(phase=Ph.KEY, buf="")
        return state, pos

    def _key_text(self, state: Gemma4ArgsState, text: str, pos: int, out: list[str]) -> tuple[Gemma4ArgsState, int]:
        colon = text.find(":", pos)
        if colon == -1:
            return state.replace(buf=state.buf + text[pos:]), len(text)
        key = _key(state.buf + text[pos:colon])
        return state.replace(phase=Ph.PRE, buf="", key=key), colon + 1

    def _pre(self, state: Gemma4ArgsState, text: str, pos: int, out: list[str]) -> tuple[Gemma4ArgsState, int]:
        if not state.buf:
            while pos < len(text) and text[pos] in _VALUE_WS:
                pos += 1
            if pos == len(text):
                return state, pos
        if state.buf or text[pos] == "<":
            probe = state.buf + text[pos : pos + len(DELIM) - len(state.buf)]
            if probe == DELIM:
                return self._open_string(state, out), pos + len(DELIM) - len(state.buf)
            if DELIM.startswith(probe):  # the text ends inside a possible DELIM
                return state.replace(buf=probe), len(text)
            # Not a string: a bare value that starts with the held text.
            state = state.replace(phase=Ph.VALUE, buf=state.buf, scan=len(state.buf), depth=0)
            return state, pos
        ch = text[pos]
        if ch in _BARE_END:
            return state.replace(phase=Ph.DONE), len(text)
        depth = 1 if ch in "{[" else 0
        return state.replace(phase=Ph.VALUE, buf=ch, scan=1, depth=depth, in_str=False), pos + 1

    def _open_string(self, state: Gemma4ArgsState, out: list[str]) -> Gemma4ArgsState:
        stream = string_only(self.properties, state.key)
        if stream:
            out.append(self._member_prefix(state) + '"')
            state = state.replace(opened=True)
        return state.replace(phase=Ph.STR, buf="", stream=stream, value="")

    def _string(self, state: Gemma4ArgsState, text: str, pos: int, out: list[str]) -> tuple[Gemma4ArgsState, int]:
        held = len(state.buf)
        body = state.buf + text[pos:]
        end = body.find(DELIM)
        if end == -1:
            keep = len(body) - _partial_delim_len(body)
            return self._string_text(state, body[:keep], out).replace(buf=body[keep:]), len(text)
        state = self._string_text(state, body[:end], out)
        self._close_string(state, "", out)
        return self._next_member(state), pos + end + len(DELIM) - held

    def _string_text(self, state: Gemma4ArgsState, text: str, out: list[str]) -> Gemma4ArgsState:
        if state.stream:
            out.append(json_string_body(text))
            return state
        return state.replace(value=state.value + text)

    def _close_string(self, state: Gemma4ArgsState, rest: str, out: list[str]) -> None:
        if state.stream:
            out.append(json_string_body(rest) + '"')
        else:
            out.append(self._member(state, state.value + rest))

    def _held_value(self, state: Gemma4ArgsState, text: str, pos: int, out: list[str]) -> tuple[Gemma4ArgsState, int]:
        buf = state.buf + text[pos:]
        start = len(state.buf)
        if state.depth == 0:  # bare: up to `,` `}` `]`
            ends = [i for i in (buf.find(c, state.scan) for c in _BARE_END) if i != -1]
            if not ends:
                return state.replace(buf=buf, scan=len(buf)), len(text)
            stop = min(ends)
            out.append(self._member(state, buf[:stop].strip()))
            return self._next_member(state), pos + stop - start
        opener = state.buf[0]
        closer = "}" if opener == "{" else "]"
        i, depth, in_str = state.scan, state.depth, state.in_str
        while i < len(buf):
            if in_str:
                found = buf.find(DELIM, i)
                if found == -1:
                    i = max(i, len(buf) - len(DELIM) + 1)
                    break
                i, in_str = found + len(DELIM), False
            elif buf.startswith(DELIM, i):
                i, in_str = i + len(DELIM), True
            elif DELIM.startswith(buf[i:]):  # a possible DELIM at the end: wait
                break
            else:
                depth += (buf[i] == opener) - (buf[i] == closer)
                i += 1
                if depth == 0:
                    read = parse_fields if opener == "{" else parse_array
                    out.append(self._member(state, read(buf[1 : i - 1])))
                    return self._next_member(state), pos + i - start
        return state.replace(buf=buf, scan=i, depth=depth, in_str=in_str), len(text)

    def _next_member(self, state: Gemma4ArgsState) -> Gemma4ArgsState:
        return state.replace(phase=Ph.SEP, buf="", key="", stream=False, value="", scan=0,
                             depth=0, in_str=False, opened=True)  # fmt: skip

    def _finish(self, state: Gemma4ArgsState, out: list[str]) -> bool:
        """The text ended inside a member (vLLM's non-partial reading of the last one);
        whether a member was written."""
        if state.phase is Ph.PRE:
            out.append(self._member(state, state.buf))  # "" or a bare `<|`-like word
        elif state.phase is Ph.STR:
            self._close_string(state, state.buf, out)
        elif state.phase is Ph.VALUE and state.depth == 0:
            out.append(self._member(state, state.buf.strip()))
        elif state.phase is Ph.VALUE:
            read = parse_fields if state.buf[0] == "{" else parse_array
            out.append(self._member(state, read(state.buf[1:], partial=True)))
        else:
            return False
        return True

    def _member_prefix(self, state: Gemma4ArgsState) -> str:
        return ("{" if not state.opened else ", ") + json_dumps(state.key) + ": "

    def _member(self, state: Gemma4ArgsState, value: Any) -> str:
        prop = self.properties.get(state.key)
        if isinstance(prop, dict):
            value, _ = coerce_value(value, prop)
        return self._member_prefix(state) + json_dumps(value)


_STEPS = {
    Ph.SEP: Gemma4Args._sep,
    Ph.KEY: Gemma4Args._key_text,
    Ph.PRE: Gemma4Args._pre,
    Ph.STR: Gemma4Args._string,
    Ph.VALUE: Gemma4Args._held_value,
}


class Gemma4ToolParser(EngineToolParser):
    name: ClassVar[str] = "gemma4"
    spec = GEMMA4_SPEC
    args_state: ClassVar[type[JsonState]] = Gemma4ArgsState

    def arg_format(self, name: str) -> Gemma4Args:
        return Gemma4Args(self.tool_properties(name))
