"""Step3's `<steptml:parameter name="K">V</steptml:parameter>` arguments, streamed
(`parsers/tools/step3.py` describes the batch rule and the divergences).

vLLM reads the parameters with `findall` over the invoke text: the leftmost header whose name
(no quote) ends in `">`, then the value up to the first closing tag; a header that fails is
retried one character later. Values are stripped, then cast by the tool's schema type
(integer, number, boolean, null; anything else stays the stripped string). A string value
streams: leading whitespace dropped, a trailing whitespace run and a possible closing tag held
back. A value cast by its type is held to its closing tag.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from parsers._state import JsonState
from parsers._text import partial_marker_len
from parsers.tools._args import json_string_body
from parsers.tools._base import json_dumps

__all__ = ["StepParams", "StepParamsState", "CAST_TYPES"]

PARAM_START, PARAM_END = '<steptml:parameter name="', "</steptml:parameter>"
CAST_TYPES = frozenset({"integer", "number", "boolean", "null"})


class Where(enum.StrEnum):
    SEEK = "seek"  # between parameters: text is ignored until PARAM_START (a partial one in buf)
    NAME = "name"  # at PARAM_START: a header whose name is still being read (in buf)
    VALUE = "value"  # inside a value


@dataclass(frozen=True, slots=True)
class StepParamsState(JsonState):
    """buf: a possible tag still being read. key: the open parameter. stream: its value
    streams (else it is held in value). started: a streamed value is past its leading
    whitespace; ws: its trailing whitespace, held. opened: the `{` was written."""

    where: Where = Where.SEEK
    buf: str = ""
    key: str = ""
    stream: bool = False
    value: str = ""
    started: bool = False
    ws: str = ""
    opened: bool = False

    def held_chars(self) -> int:
        return len(self.buf) + len(self.key) + len(self.value) + len(self.ws)


def _partial_at_end(text: str, pos: int, tag: str) -> int:
    """Where a suffix of text[pos:] that may still grow into `tag` starts (len(text): none)."""
    return len(text) - partial_marker_len(text[pos:], (tag,))


Scan = tuple[StepParamsState, int]


class StepParams:
    """`<steptml:parameter name="K">V</steptml:parameter>` (findall over the invoke text) ->
    the arguments JSON, values stripped and cast by `kinds` (key -> schema type)."""

    def __init__(self, kinds: Mapping[str, object]) -> None:
        self.kinds = kinds

    def start(self, name: str) -> StepParamsState:
        return StepParamsState()

    def feed(self, state: StepParamsState, text: str) -> tuple[StepParamsState, str, None]:
        out: list[str] = []
        text, state = state.buf + text, state.replace(buf="")
        pos = 0
        while pos < len(text):
            if state.where is Where.SEEK:
                state, pos = self._seek(state, text, pos)
            elif state.where is Where.NAME:
                state, pos = self._name(state, text, pos, out)
            else:
                state, pos = self._value(state, text, pos, out)
        return state, "".join(out), None

    def end(self, state: StepParamsState) -> tuple[StepParamsState, str]:
        tail = ""
        if state.where is Where.VALUE and state.stream:  # documented: an open value is kept
            tail = (json_string_body(state.ws + state.buf) if state.buf else "") + '"'
        return StepParamsState(), tail + "}" if state.opened else "{}"

    def _seek(self, state: StepParamsState, text: str, pos: int) -> Scan:
        at = text.find(PARAM_START, pos)
        if at != -1:
            return state.replace(where=Where.NAME), at
        return state.replace(buf=text[_partial_at_end(text, pos, PARAM_START) :]), len(text)

    def _name(self, state: StepParamsState, text: str, pos: int, out: list[str]) -> Scan:
        """text[pos:] starts with PARAM_START: the header is decided at its name's quote."""
        quote = text.find('"', pos + len(PARAM_START))
        if quote == -1 or quote + 1 == len(text):
            return state.replace(buf=text[pos:]), len(text)
        key = text[pos + len(PARAM_START) : quote]
        if not key or text[quote + 1] != ">":  # no header here: findall tries one later
            return state.replace(where=Where.SEEK), pos + 1
        return self._open_value(state, key, out), quote + 2

    def _open_value(self, state: StepParamsState, key: str, out: list[str]) -> StepParamsState:
        stream = self.kinds.get(key) not in CAST_TYPES
        if stream:
            out.append(_member(state, key) + '"')
            state = state.replace(opened=True)
        return state.replace(where=Where.VALUE, buf="", key=key, stream=stream, value="",
                             started=False, ws="")  # fmt: skip

    def _value(self, state: StepParamsState, text: str, pos: int, out: list[str]) -> Scan:
        at = text.find(PARAM_END, pos)
        stop = at if at != -1 else _partial_at_end(text, pos, PARAM_END)
        state = self._value_text(state, text[pos:stop], out)
        if at == -1:
            return state.replace(buf=text[stop:]), len(text)
        if state.stream:
            out.append('"')
        else:
            value = _cast_value(state.value.strip(), self.kinds.get(state.key))
            out.append(_member(state, state.key) + json_dumps(value))
            state = state.replace(opened=True)
        return state.replace(where=Where.SEEK, key="", value="", ws=""), at + len(PARAM_END)

    def _value_text(self, state: StepParamsState, text: str, out: list[str]) -> StepParamsState:
        if not state.stream:
            return state.replace(value=state.value + text)
        if not state.started:
            text = text.lstrip()
            state = state.replace(started=bool(text))
        body = text.rstrip()
        if body:
            out.append(json_string_body(state.ws + body))
            return state.replace(ws=text[len(body) :])
        return state.replace(ws=state.ws + text)


def _member(state: StepParamsState, key: str) -> str:
    return ("{" if not state.opened else ", ") + json_dumps(key) + ": "


def _cast_value(value: str, kind: object) -> Any:
    """vLLM's `_cast_arguments` for one stripped value."""
    if kind in ("integer", "number"):
        with contextlib.suppress(ValueError):
            return int(value) if kind == "integer" else float(value)
        return value
    if kind == "boolean":
        lower = value.lower()
        return lower == "true" if lower in ("true", "false") else value
    if kind == "null":
        return None if value.lower() == "null" else value
    return value
