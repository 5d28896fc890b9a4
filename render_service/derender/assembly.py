"""A chat choice's finish_reason and stream delta fields (vLLM 0.33 semantics).

`resolve_finish_reason` mirrors vLLM's; `delta_parts` folds one chunk's parser events into
delta fields. Which calls are kept (tool_choice, parallel_tool_calls) and include_reasoning are
decided by the chat parser (`parsers.chat`); the filters here only repeat them defensively.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from parsers._events import ContentDelta, Event, ReasoningDelta, ToolArgsDelta, ToolCallStart
from render_service.derender.settings import ChatSettings

__all__ = ["resolve_finish_reason", "DeltaParts", "delta_parts"]


def resolve_finish_reason(engine_finish: str | None, settings: ChatSettings | None, tools_made: bool) -> str:
    """`tool_calls` when calls were made, the engine stopped by itself and no tool was forced."""
    finish = engine_finish or "stop"
    forced_named = settings is not None and settings.forced_named_tool
    if tools_made and finish == "stop" and not forced_named:
        return "tool_calls"
    return finish


@dataclass(slots=True)
class DeltaParts:
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def has_tool_calls(self) -> bool:
        return bool(self.tool_calls)


def _append(current: str | None, text: str) -> str | None:
    if not text:
        return current
    return text if current is None else current + text


def delta_parts(events: Iterable[Event], settings: ChatSettings, keep_tools: bool) -> DeltaParts:
    """Fold one chunk's events into delta fields, applying the request's filters."""
    parts = DeltaParts()
    by_index: dict[int, dict[str, Any]] = {}
    for event in events:
        if isinstance(event, ContentDelta):
            parts.content = _append(parts.content, event.text)
        elif isinstance(event, ReasoningDelta):
            if settings.include_reasoning:
                parts.reasoning = _append(parts.reasoning, event.text)
        elif not keep_tools or (settings.parallel_tool_calls is False and event.index != 0):
            continue
        elif isinstance(event, ToolCallStart):
            call = {
                "id": event.id,
                "type": "function",
                "index": event.index,
                "function": {"name": event.name, "arguments": None},
            }
            by_index[event.index] = call
            parts.tool_calls.append(call)
        elif isinstance(event, ToolArgsDelta):
            pending = by_index.get(event.index)
            if pending is None:
                pending = {"id": None, "type": None, "index": event.index,
                        "function": {"name": None, "arguments": None}}  # fmt: skip
                by_index[event.index] = pending
                parts.tool_calls.append(pending)
            function = pending["function"]
            function["arguments"] = (function["arguments"] or "") + event.text
    return parts
