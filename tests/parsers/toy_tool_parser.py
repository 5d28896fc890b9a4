"""A tiny test-only ToolParser: `<call>name {json}</call>` blocks, everything else content.

It exists so the combined parser can be tested independently of the real families. Calls are
emitted whole when `</call>` arrives; an unterminated call at the end becomes content.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import ClassVar

from parsers._base import ToolParser, ToolParseResult, make_tool_call_id
from parsers._errors import StateError
from parsers._events import ContentDelta, Event, ToolArgsDelta, ToolCall, ToolCallStart
from parsers._state import JsonState
from parsers._text import MarkerSet

OPEN, CLOSE = "<call>", "</call>"
_MARKERS = MarkerSet((OPEN, CLOSE))


@dataclasses.dataclass(frozen=True, slots=True)
class ToyState(JsonState):
    VERSION = 1
    held: str = ""
    in_call: bool = False
    call_text: str = ""
    calls: int = 0


class ToyToolParser(ToolParser):
    name: ClassVar[str] = "toy"

    def initial_state(self) -> ToyState:
        return ToyState()

    @classmethod
    def state_type(cls) -> type[ToyState]:
        return ToyState

    def feed(self, state: JsonState, text: str, request_id: str) -> tuple[ToyState, list[Event]]:
        return self._run(state, text, request_id, final=False)

    def finish(self, state: JsonState, request_id: str) -> tuple[ToyState, list[Event]]:
        return self._run(state, "", request_id, final=True)

    def parse(self, text: str, request_id: str) -> ToolParseResult:
        state, events = self._run(ToyState(), text, request_id, final=True)
        content = "".join(e.text for e in events if isinstance(e, ContentDelta))
        calls: list[ToolCall] = []
        for e in events:
            if isinstance(e, ToolCallStart):
                calls.append(ToolCall(e.id, e.name, ""))
            elif isinstance(e, ToolArgsDelta):
                calls[-1] = dataclasses.replace(calls[-1], arguments=calls[-1].arguments + e.text)
        return ToolParseResult(content if calls else text, tuple(calls))

    def _run(
        self, state: JsonState, text: str, request_id: str, *, final: bool
    ) -> tuple[ToyState, list[Event]]:
        if not isinstance(state, ToyState):
            raise StateError("expected ToyState")
        segments, held = _MARKERS.split(state.held + text, final=final)
        events: list[Event] = []
        in_call, call_text, calls = state.in_call, state.call_text, state.calls
        for segment, is_marker in segments:
            if in_call and is_marker and segment == CLOSE:
                events += self._emit(call_text, calls, request_id)
                in_call, call_text, calls = False, "", calls + 1
            elif in_call:
                call_text += segment
            elif is_marker and segment == OPEN:
                in_call = True
            else:
                events.append(ContentDelta(segment))
        if final and in_call:
            events.append(ContentDelta(OPEN + call_text))
            in_call, call_text = False, ""
        return ToyState(held, in_call, call_text, calls), events

    @staticmethod
    def _emit(body: str, index: int, request_id: str) -> Sequence[Event]:
        name, _, args = body.strip().partition(" ")
        arguments = json.dumps(json.loads(args or "{}"), ensure_ascii=False)
        return [
            ToolCallStart(index, make_tool_call_id(request_id, index), name),
            ToolArgsDelta(index, arguments),
        ]
