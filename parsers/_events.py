"""Events emitted by parsers. Small frozen values; an empty event list means "need more input"."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ReasoningDelta", "ContentDelta", "ToolCallStart", "ToolArgsDelta", "Event", "ToolCall"]


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ContentDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    """A new tool call: its index in this choice, its id and its function name."""

    index: int
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolArgsDelta:
    """A fragment of the JSON arguments string of tool call `index`."""

    index: int
    text: str


Event = ReasoningDelta | ContentDelta | ToolCallStart | ToolArgsDelta


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A complete tool call as batch parsing returns it (arguments is a JSON string)."""

    id: str
    name: str
    arguments: str
