"""Sans-IO streaming parsers whose whole state is a small JSON value.

Everything here is synchronous and imports nothing from the web layer. The public surface:

* `IncrementalDetokenizer` (`parsers.detokenizer`): token ids -> text with vLLM 0.33 derender
  semantics; its `DetokState` is a short window of token strings and two offsets.
* `get_reasoning_parser(name)` / `get_tool_parser(name)` (`parsers.registry`): parser classes
  by vLLM `--reasoning-parser` / `--tool-call-parser` name.
* `ChatParser` + `ChatOptions` (`parsers.chat`): reasoning -> content -> tool calls as chat
  derender does, honouring tool_choice, parallel_tool_calls and include_reasoning.
* Events (`ReasoningDelta`, `ContentDelta`, `ToolCallStart`, `ToolArgsDelta`), `ToolCall`,
  `JsonState`, and the typed errors (`ParserError` and subclasses).

Streaming contract, for every parser P: `state = P.initial_state(...)`, then
`state, events = P.feed(state, delta, ...)` per chunk and `P.finish(state, ...)` once. The
concatenation of all events equals `P.parse(whole_output, ...)` for any split, also when the
state is serialised (`state.to_json()`) and restored (`type.from_json(...)`) between chunks.
A corrupt or foreign state raises `StateError`; bad input raises a `ParserError` subclass.
"""

from __future__ import annotations

from parsers._base import ReasoningParser, ReasoningResult, ToolParser, ToolParseResult
from parsers._errors import (
    LimitExceededError,
    ParseError,
    ParserConfigError,
    ParserError,
    StateError,
    UnknownParserError,
)
from parsers._events import (
    ContentDelta,
    Event,
    ReasoningDelta,
    ToolArgsDelta,
    ToolCall,
    ToolCallStart,
)
from parsers._state import JsonState
from parsers.chat import ChatOptions, ChatParser, ChatParseResult
from parsers.detokenizer import DetokState, IncrementalDetokenizer
from parsers.registry import (
    get_reasoning_parser,
    get_tool_parser,
    reasoning_parser_names,
    tool_parser_names,
)

__all__ = [
    "ChatOptions",
    "ChatParseResult",
    "ChatParser",
    "ContentDelta",
    "DetokState",
    "Event",
    "IncrementalDetokenizer",
    "JsonState",
    "LimitExceededError",
    "ParseError",
    "ParserConfigError",
    "ParserError",
    "ReasoningDelta",
    "ReasoningParser",
    "ReasoningResult",
    "StateError",
    "ToolArgsDelta",
    "ToolCall",
    "ToolCallStart",
    "ToolParseResult",
    "ToolParser",
    "UnknownParserError",
    "get_reasoning_parser",
    "get_tool_parser",
    "reasoning_parser_names",
    "tool_parser_names",
]
