"""Poolside Laguna tool calls (vLLM 0.33 `PoolsideV1ToolParser`, GLM-4 style):

    <tool_call>get_weather
    <arg_key>city</arg_key><arg_value>Paris</arg_value>
    </tool_call>

Batch upstream: every `<tool_call>...</tool_call>` (shortest, in order) is a candidate; its
detail (`<tool_call>\\s*NAME\\s*\\n?\\s*(<arg_key>...)?</tool_call>`, NAME without newline or
`<`, searched in the candidate) gives the name (stripped) and the pairs
`<arg_key>K</arg_key>\\s*<arg_value>V</arg_value>`; a candidate without detail is skipped. K is
stripped; V is verbatim when the tool's schema types K as "string", else `V.strip()` read as
JSON, then as a Python literal, else kept as a string; arguments are `json.dumps` of the pairs
(a repeated key: first position, last value). Any error while doing so (a value that is no
JSON, such as a set literal) makes the whole output content. With a call, content is the text
before the first `<tool_call>` (None when blank); with none, the output verbatim.

Streaming: content before the first `<tool_call>` streams, a whitespace-only start held; from
there the raw text is held while no call is decided (a call-less output is content verbatim at
its end). In a candidate the name is read (`Head`: the whitespace, the name line, the
whitespace after it, a `<` that may open `<arg_key>`); the call commits at its first
`<arg_key>` (the detail then matches once the candidate closes) or at a `</tool_call>` right
after the name, and a `<tool_call>` before that restarts the search there, as `search` does.
Arguments then stream through glm47's `ArgPairs`: a value the schema types exactly "string"
streams as fragments (only a possible `</arg_value>` held back); any other value (another
type, an unknown key or tool) is held until its `</arg_value>`, since stripping and reading it
as JSON or a literal need its whole text. State: the name line, a key, a typed value or a tag
tail, never text already sent.

Divergences from vLLM's batch (stream == our batch instead; "a call that streamed stays a
call", tests name them): a candidate that never closes (the output ends first) keeps its call
and the arguments read so far (a string value cut open is kept; vLLM: no such call, and with
no other call all content); a value with no JSON form (a set or bytes literal, an over-long
integer), or a property schema vLLM's lookup fails on, makes vLLM's whole output content:
ours writes that value as its stripped text and keeps every call; a repeated key is written
twice (`json.loads` gives vLLM's object).
"""

from __future__ import annotations

import ast
import enum
import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import regex

from parsers._errors import StateError
from parsers._state import JsonState
from parsers.tools._engine import WS
from parsers.tools._machine import (
    EOS,
    TEXT,
    CallState,
    Run,
    Step,
    Table,
    TableToolParser,
    ToolStreamState,
    drop,
    end_call_args,
    feed_call_args,
)
from parsers.tools.glm47 import KEY_START, ArgPairs, ArgPairsState

__all__ = ["PoolsideV1ToolParser"]

CALL_START, CALL_END = "<tool_call>", "</tool_call>"
_WS = regex.compile(WS)
_NAME_LINE = regex.compile(r"[^\n<]*")


class P(enum.StrEnum):
    CONTENT = "content"  # before the first <tool_call>
    HEAD = "head"  # a candidate's name is being read
    ARGS = "args"  # a committed call's arguments
    SKIP = "skip"  # the detail failed here: wait for a nested <tool_call> or the close
    BETWEEN = "between"  # after a candidate: text is dropped


class Head(enum.StrEnum):
    LEAD = "lead"  # whitespace after <tool_call> (`space`: some of it is not a newline)
    NAME = "name"  # the name line, held in `name`
    GAP = "gap"  # whitespace after the name line
    TAG = "tag"  # a "<" that may open <arg_key>, held in `raw`


@dataclass(frozen=True, slots=True)
class PoolsideCall(CallState):
    head: Head = Head.LEAD
    space: bool = False
    args: ArgPairsState | None = None


@dataclass(frozen=True, slots=True)
class PoolsideExt(JsonState):
    """ws: the whitespace-only start of the content, held; nonws: other content was sent."""

    ws: str = ""
    nonws: bool = False


@dataclass(frozen=True, slots=True)
class PoolsideState(ToolStreamState):
    call: PoolsideCall | None = None
    ext: PoolsideExt = PoolsideExt()


PRun = Run["PoolsideV1ToolParser"]


def _ext(run: PRun) -> PoolsideExt:
    ext = run.ext
    assert isinstance(ext, PoolsideExt)
    return ext


# -- content -------------------------------------------------------------------------------


def _content_text(run: PRun, text: str) -> None:
    ext = _ext(run)
    if ext.nonws:
        run.content(text)
    elif text.strip():
        run.content(ext.ws + text)
        run.ext = ext.replace(ws="", nonws=True)
    else:
        run.ext = ext.replace(ws=ext.ws + text)


def _content_end(run: PRun, text: str) -> None:
    ext = _ext(run)
    run.content(ext.ws)
    run.ext = ext.replace(ws="")


def _end(run: PRun, text: str) -> None:
    """End of output after the first <tool_call>: without a call it is all content; a call
    still open keeps what it has (documented divergence)."""
    if run.phase == P.ARGS:
        end_call_args(run)
    ext = _ext(run)
    if run.n_calls == 0:
        run.content(ext.ws + run.pending)
    run.pending = ""
    run.call = None
    run.phase = P.BETWEEN
    run.ext = ext.replace(ws="")


# -- the candidate's head ----------------------------------------------------------------------


def _open(run: PRun, marker: str) -> None:
    """A `<tool_call>`: a candidate starts (or, inside one, the search restarts here)."""
    run.keep_raw(marker)
    run.call = PoolsideCall()


def _run_end(pattern: regex.Pattern[str], text: str, pos: int) -> int:
    """Where a run of `pattern` (a starred class: it always matches) starting at pos ends."""
    found = pattern.match(text, pos)
    assert found is not None
    return found.end()


def _head_text(run: PRun, text: str) -> None:
    run.keep_raw(text)
    call: PoolsideCall = run.call
    pos = 0
    while pos < len(text):
        if call.head is Head.TAG:
            need = KEY_START[len(call.raw) :]
            take = text[pos : pos + len(need)]
            if not need.startswith(take):
                _fail(run)
                return
            call, pos = call.replace(raw=call.raw + take), pos + len(take)
            if call.raw == KEY_START:
                _commit(run, call, text[pos:])
                return
        elif call.head is Head.NAME:
            line_end = _run_end(_NAME_LINE, text, pos)
            call, pos = call.replace(name=call.name + text[pos:line_end]), line_end
            if pos < len(text):  # a newline (then whitespace may follow) or a "<"
                call = call.replace(head=Head.GAP if text[pos] == "\n" else Head.TAG)
                pos += text[pos] == "\n"
        else:  # LEAD or GAP: whitespace
            ws_end = _run_end(_WS, text, pos)
            if call.head is Head.LEAD and any(c != "\n" for c in text[pos:ws_end]):
                call = call.replace(space=True)
            pos = ws_end
            if pos == len(text):
                break
            if text[pos] == "<" and (call.head is Head.GAP or call.space):
                call = call.replace(head=Head.TAG)
            elif call.head is Head.LEAD and text[pos] != "<":
                call = call.replace(head=Head.NAME)
            else:  # text after the name line, or "<" with no name at all
                _fail(run)
                return
    run.call = call


def _head_name(call: PoolsideCall) -> str | None:
    """At a `</tool_call>`: the call's name if the detail's head matches what was read."""
    if call.head is Head.TAG or (call.head is Head.LEAD and not call.space):
        return None
    return call.name.strip()


def _fail(run: PRun) -> None:
    """The detail does not match at this `<tool_call>`; a nested one may still match."""
    run.call = None
    run.phase = P.SKIP


def _commit(run: PRun, call: PoolsideCall, rest: str) -> None:
    name = call.name.strip()  # TAG is only entered where the head matches
    fmt = run.parser.arg_format(name)
    run.call = call.replace(name=name, raw="", args=fmt.start(name))
    run.start_call(name)
    run.phase = P.ARGS
    feed_call_args(run, KEY_START + rest)


def _head_close(run: PRun, marker: str) -> None:
    """`</tool_call>` right after the name: a call without arguments."""
    name = _head_name(run.call)
    run.call = None
    if name is not None:
        run.emit_call(name, "{}")
    run.keep_raw(marker)


class PoolsideV1ToolParser(TableToolParser):
    name: ClassVar[str] = "poolside_v1"
    state_class = PoolsideState
    initial_phase = P.CONTENT
    call_phases = frozenset({P.HEAD, P.ARGS})

    def check_ext(self, state: ToolStreamState) -> None:
        call = state.call
        if call is not None and (call.args is None) != (state.phase == P.HEAD):
            raise StateError(f"{self.name}: argument state outside a call's arguments")

    def arg_format(self, name: str) -> ArgPairs:
        return ArgPairs({}, convert=_typed_value, streams=lambda key: self._is_string(name, key))

    def _is_string(self, name: str, key: str) -> bool:
        """vLLM's `_is_string_type`; a schema its lookup fails on reads as not a string."""
        for tool in self.tools:
            function = tool.get("function", tool)
            if not isinstance(function, Mapping) or function.get("name") != name:
                continue
            params = function.get("parameters")
            if not isinstance(params, Mapping):
                return False
            properties = params.get("properties", {})
            prop = properties.get(key, {}) if isinstance(properties, Mapping) else None
            return isinstance(prop, Mapping) and prop.get("type") == "string"
        return False


def _typed_value(key: str, value: str) -> Any:
    """A non-string value: vLLM's `_deserialize(value.strip())`; one with no JSON form (where
    vLLM's extraction raises) is its stripped text (documented divergence)."""
    found = _deserialize(value.strip())
    try:
        json.dumps(found, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):  # a set or bytes literal, say
        return value.strip()
    return found


def _deserialize(value: str) -> Any:
    """vLLM's `_deserialize`: JSON, else a Python literal, else the text (where vLLM raises:
    the text)."""
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        pass
    except (ValueError, RecursionError):  # over-long integers, deep nesting: vLLM raises
        return value
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):  # "{[1]}": unhashable
        return value


PoolsideV1ToolParser.table = Table(
    tuple(P),
    (CALL_START, CALL_END),
    {
        (P.CONTENT, TEXT): Step(_content_text),
        (P.CONTENT, CALL_START): Step(_open, P.HEAD),
        (P.CONTENT, EOS): Step(_content_end),
        (P.HEAD, TEXT): Step(_head_text),
        (P.HEAD, CALL_START): Step(_open),
        (P.HEAD, CALL_END): Step(_head_close, P.BETWEEN),
        (P.HEAD, EOS): Step(_end),
        (P.ARGS, TEXT): Step(feed_call_args),
        (P.ARGS, CALL_START): Step(feed_call_args),
        (P.ARGS, CALL_END): Step(end_call_args, P.BETWEEN),
        (P.ARGS, EOS): Step(_end),
        (P.SKIP, TEXT): Step(drop),
        (P.SKIP, CALL_START): Step(_open, P.HEAD),
        (P.SKIP, CALL_END): Step(drop, P.BETWEEN),
        (P.SKIP, EOS): Step(_end),
        (P.BETWEEN, TEXT): Step(drop),
        (P.BETWEEN, CALL_START): Step(_open, P.HEAD),
        (P.BETWEEN, EOS): Step(_end),
    },
)
