"""`cohere_command3` / `cohere_command4` tool calls (vLLM 0.33 `CohereCommand3/4ToolParser`).

vLLM's classes are stubs naming a `cohere_melody` preset; `CohereCommandParser` parses the
whole output with it (`parsers.cohere`), which the combined chat parser runs once for the
tool and the reasoning name. Used alone, this parser gives the filter's content and calls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from parsers._base import ToolParser, ToolParseResult, Vocab
from parsers._events import Event, ReasoningDelta
from parsers._state import JsonState
from parsers.cohere import CohereMachine, CohereState

__all__ = ["CohereCommand3ToolParser", "CohereCommand4ToolParser"]


class CohereCommand3ToolParser(ToolParser):
    name: ClassVar[str] = "cohere_command3"
    harmony: ClassVar[bool] = True  # one machine replaces the reasoning -> tools pipeline
    preset: ClassVar[str] = "cmd3"

    def __init__(
        self,
        vocab: Vocab,
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        max_call_chars: int | None = None,
    ) -> None:
        super().__init__(vocab, tools, max_call_chars=max_call_chars)
        self.machine = CohereMachine(self.preset)

    def initial_state(self) -> CohereState:
        return self.machine.initial_state()

    def feed(self, state: JsonState, text: str, request_id: str) -> tuple[JsonState, list[Event]]:
        assert isinstance(state, CohereState)
        state, events = self.machine.feed(state, text, request_id)
        return state, [e for e in events if not isinstance(e, ReasoningDelta)]

    def finish(self, state: JsonState, request_id: str) -> tuple[JsonState, list[Event]]:
        assert isinstance(state, CohereState)
        state, events = self.machine.finish(state, request_id)
        return state, [e for e in events if not isinstance(e, ReasoningDelta)]

    def parse(self, text: str, request_id: str) -> ToolParseResult:
        result = self.machine.parse(text, request_id)
        return ToolParseResult(result.content, result.tool_calls)

    @classmethod
    def state_type(cls) -> type[CohereState]:
        return CohereState


class CohereCommand4ToolParser(CohereCommand3ToolParser):
    name: ClassVar[str] = "cohere_command4"
    preset: ClassVar[str] = "cmd4"
