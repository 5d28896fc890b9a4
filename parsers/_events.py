"""Events emitted by parsers. Small frozen values; an empty event list means "need more input"."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ReasoningDelta", "ContentDelta", "ToolCallStart", "ToolArgsDelta", "Event", "ToolCall",
           "push_content", "push_args"]


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


def push_content(events: list[Event], text: str) -> None:
    """Append content, merged into a content delta that ends `events`."""
    if not text:
        return
    last = events[-1] if events else None
    if isinstance(last, ContentDelta):
        events[-1] = ContentDelta(last.text + text)
    else:
        events.append(ContentDelta(text))


def push_args(events: list[Event], index: int, text: str) -> None:
    """Append an argument fragment of call `index`, merged into one that ends `events`."""
    if not text:
        return
    last = events[-1] if events else None
    if isinstance(last, ToolArgsDelta) and last.index == index:
        events[-1] = ToolArgsDelta(index, last.text + text)
    else:
        events.append(ToolArgsDelta(index, text))
