"""Constants and helpers shared by the tool-call families (the machine is `_machine.py`).

* `MAX_TOOL_CALL_CHARS`: the ceiling of model text one parser state may hold for a call.
* vLLM's JSON conventions: `json_dumps` (`ensure_ascii=False`), `json_loads` /
  `json_raw_decode` that report failure as a value (`is_json`), as vLLM's parsers catch them.
* `assemble`: the batch result of a complete event list.
"""

from __future__ import annotations

import json
from typing import Any

from parsers._base import ToolParseResult
from parsers._events import ContentDelta, Event, ToolArgsDelta, ToolCall, ToolCallStart

__all__ = [
    "MAX_TOOL_CALL_CHARS",
    "json_dumps",
    "json_loads",
    "json_raw_decode",
    "is_json",
    "assemble",
]

# The text of one tool call a state may hold (a call held whole, a value held for coercion).
# Tool calls carrying whole files reach tens of thousands of tokens (~4 chars each); 512 Ki
# chars leaves room for a 128k-token call while keeping the echoed state far below
# request-body limits.
MAX_TOOL_CALL_CHARS = 512 * 1024

def assemble(events: list[Event]) -> ToolParseResult:
    """Batch result from a complete event list (content None when empty, as vLLM)."""
    content: list[str] = []
    calls: dict[int, list[str]] = {}
    heads: dict[int, ToolCallStart] = {}
    for event in events:
        if isinstance(event, ContentDelta):
            content.append(event.text)
        elif isinstance(event, ToolCallStart):
            heads[event.index] = event
            calls[event.index] = []
        elif isinstance(event, ToolArgsDelta):
            calls[event.index].append(event.text)
    text = "".join(content)
    return ToolParseResult(
        content=text or None,
        tool_calls=tuple(
            ToolCall(id=heads[i].id, name=heads[i].name, arguments="".join(calls[i]))
            for i in sorted(heads)
        ),
    )


def json_dumps(value: Any) -> str:
    """vLLM's canonical arguments string: `json.dumps(value, ensure_ascii=False)`."""
    return json.dumps(value, ensure_ascii=False)


_NOT_JSON = object()


def json_loads(text: str) -> Any:
    """`json.loads`, or `_NOT_JSON` for anything Python's json rejects (vLLM catches all of
    these and falls back to content). RecursionError: deeply nested input."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _NOT_JSON


def json_raw_decode(text: str) -> tuple[Any, int]:
    """`JSONDecoder.raw_decode`, or (_NOT_JSON, 0)."""
    try:
        return json.JSONDecoder().raw_decode(text)
    except (ValueError, RecursionError):
        return _NOT_JSON, 0


def is_json(value: Any) -> bool:
    return value is not _NOT_JSON
