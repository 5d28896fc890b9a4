"""Parsers whose vLLM 0.33 family reads the whole output with one machine (Harmony for
gpt-oss, the melody filter for Cohere Command): the reasoning and the tool parser object
only hold that machine, and the chat parser runs it once in place of reasoning -> tools.

A machine has `initial_state()`, `feed(state, text, request_id)`, `finish(state,
request_id)`, `parse(text, request_id)` (a `WholeOutputResult`) and `state_type()`. Used
alone, the tool parser drops the reasoning events and the reasoning parser keeps only
reasoning and content.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from parsers._base import ReasoningParser, ReasoningResult, ToolParser, ToolParseResult
from parsers._events import (
    ContentDelta,
    Event,
    ReasoningDelta,
    ToolArgsDelta,
    ToolCall,
    ToolCallStart,
)
from parsers._state import JsonState

__all__ = ["WholeOutputMachine", "WholeOutputReasoningParser", "WholeOutputResult",
           "WholeOutputToolParser", "collect"]  # fmt: skip


@dataclass(frozen=True, slots=True)
class WholeOutputResult:
    reasoning: str | None
    content: str | None
    tool_calls: tuple[ToolCall, ...]


class WholeOutputMachine(Protocol):
    def initial_state(self) -> Any: ...
    def feed(self, state: Any, text: str, request_id: str) -> tuple[Any, list[Event]]: ...
    def finish(self, state: Any, request_id: str) -> tuple[Any, list[Event]]: ...
    def parse(self, text: str, request_id: str) -> WholeOutputResult: ...
    def state_type(self) -> type[JsonState]: ...

    # How vLLM composes the one parser it builds around the machine:
    prefers_reasoning_side: bool  # both parsers set: the reasoning parser's machine counts
    needs_auto_tools_alone: bool  # from a tool parser alone, built only with auto tool choice

    def kept(self, reasoning_set: bool, tools_set: bool, include_reasoning: bool,
             tool_choice: object) -> tuple[bool, bool]:
        """(reasoning, calls) kept from the machine's events."""
        ...


def collect(events: Sequence[Event]) -> WholeOutputResult:
    """The batch result the events of a whole output add up to."""
    reasoning: list[str] = []
    content: list[str] = []
    calls: dict[int, list[str]] = {}
    for event in events:
        if isinstance(event, ReasoningDelta):
            reasoning.append(event.text)
        elif isinstance(event, ContentDelta):
            content.append(event.text)
        elif isinstance(event, ToolCallStart):
            calls[event.index] = [event.id, event.name, ""]
        elif isinstance(event, ToolArgsDelta):
            calls[event.index][2] += event.text
    return WholeOutputResult(
        "".join(reasoning) or None,
        "".join(content) or None,
        tuple(ToolCall(*calls[i]) for i in sorted(calls)),
    )


class WholeOutputToolParser(ToolParser):
    """A tool parser that is its family's whole-output machine (`self.machine`)."""

    harmony: ClassVar[bool] = True  # the chat parser runs `machine` in place of the pipeline
    machine: WholeOutputMachine

    def initial_state(self) -> JsonState:
        state: JsonState = self.machine.initial_state()
        return state

    def feed(self, state: JsonState, text: str, request_id: str) -> tuple[JsonState, list[Event]]:
        state, events = self.machine.feed(self._check(state), text, request_id)
        return state, [e for e in events if not isinstance(e, ReasoningDelta)]

    def finish(self, state: JsonState, request_id: str) -> tuple[JsonState, list[Event]]:
        state, events = self.machine.finish(self._check(state), request_id)
        return state, [e for e in events if not isinstance(e, ReasoningDelta)]

    def parse(self, text: str, request_id: str) -> ToolParseResult:
        result = self.machine.parse(text, request_id)
        return ToolParseResult(result.content, result.tool_calls)

    def _check(self, state: JsonState) -> JsonState:
        assert isinstance(state, self.machine.state_type())
        return state


class WholeOutputReasoningParser(ReasoningParser):
    """A reasoning parser that is its family's whole-output machine (`self.machine`)."""

    harmony: ClassVar[bool] = True
    machine: WholeOutputMachine

    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> JsonState:
        state: JsonState = self.machine.initial_state()
        return state

    def feed(self, state: JsonState, text: str) -> tuple[JsonState, list[Event]]:
        assert isinstance(state, self.machine.state_type())
        state, events = self.machine.feed(state, text, "")
        return state, _split(events)

    def finish(self, state: JsonState) -> tuple[JsonState, list[Event]]:
        assert isinstance(state, self.machine.state_type())
        state, events = self.machine.finish(state, "")
        return state, _split(events)

    def parse(self, text: str, prompt_token_ids: Sequence[int] = ()) -> ReasoningResult:
        result = self.machine.parse(text, "")
        return ReasoningResult(result.reasoning, result.content)


def _split(events: list[Event]) -> list[Event]:
    return [e for e in events if isinstance(e, ReasoningDelta | ContentDelta)]
