"""Granite 3.0 / 3.1 tool calls (vLLM name `granite`): a marker, then a JSON array of calls:

    <|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]    (3.0)
    <tool_call>[{"name": "get_weather", "arguments": {"city": "Paris"}}]      (3.1)

Spec: vLLM 0.33 `granite_config` (`vllm/parser/granite.py`) in the engine's
`tool_call_body_array` mode, run by `_engine`. The array region (`split_array`, vLLM's
`_feed_array_text`):

* either marker enters the region; blanks (space, tab, CR, LF) are skipped; the region must
  start with `[`; after it `,` is skipped, `{` opens one call, `]` ends the region; any other
  character ends the region, and it and the rest of its text are content;
* a call is the text from `{` to the `}` that brings the bracket depth (`{[` up, `}]` down,
  never below 0, outside strings) back to 0, or to the end of the output;
* its name is the first `"name": "..."` in that text (the engine's fallback for nameless
  slots), else the `name` of the text read as a JSON object;
* its arguments (`GraniteArgs`: vLLM's `_granite_arg_converter` / `extract_json_member_object`)
  are the raw text of the top-level `"arguments"` member's object, unterminated or not; "{}"
  without the member; when the member is not an object, the engine's JSON fallback
  (`arguments`, else `parameters`, else the object without `name`); then the values are
  coerced to the tool's schema types.

Streaming: a call commits when its name is found, and the raw text of its arguments streams
(values the schema may coerce are held, `_json_args` raw mode); a member that is not an
object is held to the call's end. Divergences (stream == our batch; tests
`test_granite_divergence_*`): the engine's leading-whitespace rule; a coerced value after
non-canonical text (the objects are then JSON-equal, not the strings). No Granite tokenizer is
installed: tests use Qwen3's (`<tool_call>` is one token there, as in Granite 3.1).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers._state import JsonState
from parsers.tools._engine import (
    EngineExt,
    EngineSpec,
    EngineToolParser,
    Ev,
    S,
    Tr,
    emit_event,
    name_and_args_from_json,
)
from parsers.tools._json_args import DONE, ERROR, JsonArgs, JsonArgsState, SchemaTable
from parsers.tools._machine import EOS, TEXT, Run, Step, Table

__all__ = ["GraniteToolParser", "GraniteArgs", "GRANITE_SPEC"]

MARKERS = ("<|tool_call|>", "<tool_call>")
BLANKS = " \t\r\n"
_JSON_WS = " \t\n\r"

GRANITE_SPEC = EngineSpec(
    terminals={"TOOL_TOKEN": MARKERS[0], "TOOL_STRING": MARKERS[1]},
    transitions={(S.CONTENT, "TOOL_TOKEN"): Tr(S.ARGS), (S.CONTENT, "TOOL_STRING"): Tr(S.ARGS)},
)


# -- the array region ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Brackets(JsonState):
    """A string-aware bracket counter (vLLM's `_feed_args_char`): depth never below 0."""

    depth: int = 0
    in_string: bool = False
    escaped: bool = False

    def scan(self, text: str, start: int, closer: str, floor: int = 0) -> tuple[Brackets, int | None]:
        """(counter after `text[start:]`, index just past the `closer` that brings the depth
        back to `floor`, or None)."""
        depth, in_string, escaped = self.depth, self.in_string, self.escaped
        for i in range(start, len(text)):
            ch = text[i]
            if escaped:
                escaped = False
            elif in_string:
                escaped, in_string = ch == "\\", ch != '"'
            elif ch == '"':
                in_string = True
            elif ch in "{[":
                depth += 1
            elif ch in "}]":
                depth = max(depth - 1, 0)
                if ch == closer and depth == floor:
                    return Brackets(depth, False, False), i + 1
        return Brackets(depth, in_string, escaped), None


@dataclass(frozen=True, slots=True)
class GraniteExt(EngineExt):
    """opened: the region's `[` was read. element: a call is open (`brackets` counts it)."""

    opened: bool = False
    element: bool = False
    brackets: Brackets = Brackets()


def split_array(run: Run[GraniteToolParser], text: str) -> None:
    i = 0
    while i < len(text):
        ext: GraniteExt = run.ext
        if ext.element:
            brackets, end = ext.brackets.scan(text, i, "}")
            emit_event(run, Ev.ARG, text[i : len(text) if end is None else end])
            run.ext = run.ext.replace(brackets=brackets, element=end is None)
            if end is None:
                return
            emit_event(run, Ev.CALL_END, "")
            i = end
            continue
        ch = text[i]
        if ch in BLANKS or (ext.opened and ch == ","):
            i += 1
        elif not ext.opened and ch == "[":
            run.ext = ext.replace(opened=True)
            i += 1
        elif ext.opened and ch == "{":
            emit_event(run, Ev.CALL_START, "")
            run.ext = run.ext.replace(element=True, brackets=Brackets())
        else:  # `]` closes the region; anything else ends it and is content
            run.ext = ext.replace(opened=False)
            run.phase = S.CONTENT
            emit_event(run, Ev.TEXT, text[i + 1 :] if ch == "]" and ext.opened else text[i:])
            return


def _array_end(run: Run[GraniteToolParser], text: str) -> None:
    """End of the output in the region: an open call closes; the engine does the rest."""
    run.ext = run.ext.replace(opened=False, element=False, brackets=Brackets())


# -- the arguments ---------------------------------------------------------------------------


class Seek(enum.StrEnum):
    KEY = "key"  # looking for the top-level `"arguments"` member
    VALUE = "value"  # after its `:`, before its value
    MEMBER = "member"  # inside its object: raw text streams
    DONE = "done"  # its object closed: the rest is not arguments
    HELD = "held"  # the member is not an object: the call is decided whole at its end


@dataclass(frozen=True, slots=True)
class GraniteArgsState(JsonState):
    """seek: progress. brackets: the call's counter (KEY / VALUE) or the member's (MEMBER).
    key: the top-level string being read, while it may still be "arguments"; keyed: the last
    top-level string was "arguments". json: the raw writer of the member (its coercion).
    broken: the member is not JSON: its text passes raw. raw: the call's text until its
    member starts (KEY / VALUE), and all of it when HELD."""

    seek: Seek = Seek.KEY
    brackets: Brackets = Brackets()
    key: str | None = None
    keyed: bool = False
    json: JsonArgsState = JsonArgsState()
    broken: bool = False
    raw: str = ""

    def held_chars(self) -> int:
        return self.json.held_chars() + len(self.raw)


class GraniteArgs:
    """vLLM's `_granite_arg_converter` + `_fix_arg_types` for the call named `name`."""

    def __init__(
        self,
        name: str,
        properties: Mapping[str, Any],
        limit: int,
        coerce: Any,
        key: str = "arguments",
        fallback: Any = None,
    ) -> None:
        """`key`: the member holding the arguments; `fallback`: the family's
        `(name, arguments)` of a whole body read as JSON (default: the engine's)."""
        self.name = name
        self.key = key
        self.fallback = fallback or name_and_args_from_json
        self.writer = JsonArgs(raw=True, schema=SchemaTable(properties), limit=limit)
        self.coerce = coerce  # the parser's `_fix_arg_types`, for a call decided whole

    def start(self, name: str = "") -> GraniteArgsState:
        return GraniteArgsState(json=self.writer.start())

    def feed(self, state: GraniteArgsState, text: str) -> tuple[GraniteArgsState, str, None]:
        out: list[str] = []
        i = 0
        while i < len(text) and state.seek not in (Seek.DONE, Seek.HELD):
            state, i = self._step(state, text, i, out)
        if state.seek is Seek.HELD:
            state = state.replace(raw=state.raw + text[i:])
        return state, "".join(out), None

    def _step(
        self, state: GraniteArgsState, text: str, i: int, out: list[str]
    ) -> tuple[GraniteArgsState, int]:
        if state.seek is Seek.MEMBER:
            brackets, end = state.brackets.scan(text, i, "}")
            stop = len(text) if end is None else end
            state = self._member(state.replace(brackets=brackets), text[i:stop], out)
            return (state if end is None else state.replace(seek=Seek.DONE)), stop
        if state.seek is Seek.VALUE:
            body = text[i:].lstrip(_JSON_WS)
            at = len(text) - len(body)
            state = state.replace(raw=state.raw + text[i:at])
            if not body:
                return state, len(text)
            if body[0] != "{":
                return state.replace(seek=Seek.HELD), at
            return state.replace(seek=Seek.MEMBER, brackets=Brackets(), raw=""), at
        return self._seek_key(state.replace(raw=state.raw + text[i]), text[i]), i + 1

    def _seek_key(self, state: GraniteArgsState, ch: str) -> GraniteArgsState:
        """vLLM's scan: the last top-level string followed by `:` names the member."""
        b = state.brackets
        if b.in_string:
            if b.escaped or ch == "\\":
                return state.replace(brackets=b.replace(escaped=not b.escaped), key=None)
            if ch == '"':
                keyed = b.depth == 1 and state.key == self.key
                return state.replace(brackets=b.replace(in_string=False), keyed=keyed)
            key = state.key + ch if state.key is not None else None
            return state.replace(key=key if key is not None and self.key.startswith(key) else None)
        if ch == '"':
            return state.replace(brackets=b.replace(in_string=True), key="")
        if ch == ":" and b.depth == 1 and state.keyed:
            return state.replace(seek=Seek.VALUE)
        if ch in "{[":
            return state.replace(brackets=b.replace(depth=b.depth + 1))
        if ch in "}]":
            return state.replace(brackets=b.replace(depth=b.depth - 1))
        return state

    def _member(self, state: GraniteArgsState, text: str, out: list[str]) -> GraniteArgsState:
        if state.broken:
            out.append(text)
            return state
        js, written, rest = self.writer.feed(state.json, text)
        out.append(written)
        if js.status == ERROR:  # not JSON: vLLM's coercion leaves the raw text as it is
            out.append(self.writer.held_raw(js) + (rest or ""))
            return state.replace(json=js, broken=True)
        return state.replace(json=js)

    def end(self, state: GraniteArgsState) -> tuple[GraniteArgsState, str]:
        if state.seek in (Seek.KEY, Seek.VALUE):
            return state, "{}"  # no member (or no value yet): the converter's "{}"
        if state.seek is Seek.HELD:  # the engine's fallback on the whole call
            return state, self.coerce(self.fallback(state.raw)[1], self.name)
        if state.broken or state.seek is Seek.DONE:
            return state, ""
        js, written = self.writer.end(state.json)
        tail = self.writer.held_raw(js) if js.status != DONE else ""
        return state.replace(json=js), written + tail


class GraniteToolParser(EngineToolParser):
    name: ClassVar[str] = "granite"
    spec = GRANITE_SPEC
    args_state: ClassVar[type[JsonState]] = GraniteArgsState
    ext_class: ClassVar[type[EngineExt]] = GraniteExt

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        steps = dict(self.table.steps)
        steps[(S.ARGS, TEXT)] = Step(split_array)
        for marker in MARKERS:  # a marker inside the region is text to the splitter
            steps[(S.ARGS, marker)] = Step(split_array)
        steps[(S.ARGS, EOS)] = Step(_array_then_engine_end(steps[(S.ARGS, EOS)].action))
        self.table = Table(self.table.phases, self.table.markers, steps)

    def arg_format(self, name: str) -> GraniteArgs:
        return GraniteArgs(name, self.tool_properties(name), self.call_limit, self.coerce)


def _array_then_engine_end(engine_end: Any) -> Any:
    def end(run: Run[GraniteToolParser], text: str) -> None:
        _array_end(run, text)
        engine_end(run, text)

    return end
