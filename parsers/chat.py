"""The combined chat parser derender uses: reasoning -> content -> tool calls, in model order.

Theory of operation
-------------------
It reproduces vLLM 0.33's batch chat derender: `DelegatingParser.parse` (reasoning split, then
`_extract_tool_calls` on the content according to `tool_choice`) followed by
`assemble_chat_message_fields` (`include_reasoning`, which calls are kept, `content=""` when a
tool is forced, `parallel_tool_calls=false`). Streaming runs the same pipeline incrementally,
and its whole state is one `ChatState`: the reasoning parser's state, the tool parser's state
and a few flags. Concatenated events always equal `parse()` of the whole output.

How `tool_choice` is handled (the mode is fixed when the parser is built):

* PASSTHROUGH - no tool parsing: no tool parser, `--enable-auto-tool-choice` off (vLLM then
  builds its parser without a tool parser), `tool_choice="none"`, or a choice that is neither
  auto nor supported. Content is the reasoning parser's content.
* AUTO - `auto` / unset, or required/named on a family that does not support them: the tool
  parser's own format. A content made only of whitespace becomes null when calls were made
  (and, for the required/named fallback, when none were); to stream that, a whitespace-only
  content prefix is held (run-length encoded) until other content arrives or the output ends.
* NAMED - a named function: the content *is* the arguments string. Leading whitespace is held
  until the first other character (a blank content makes no call); then the call starts.
* REQUIRED - `required`: the content must be a JSON array of {"name", "parameters"} objects,
  validated like vLLM's `TypeAdapter(list[FunctionDefinition])`. Any invalid element, trailing
  text or truncation means no calls at all in vLLM's batch result, which a stream can only
  match by holding the text until the output ends: calls are emitted at `finish`. (vLLM's own
  stream sends array elements early and diverges from its batch result when the array later
  turns out invalid.) The held text is tool-call text, bounded by MAX_FORCED_TOOL_TEXT_CHARS.
* HARMONY - gpt-oss (`openai_gptoss` / `openai`): vLLM's `HarmonyParser` replaces the whole
  pipeline and ignores `tool_choice` (assembly still applies it). One Harmony machine
  (`parsers.harmony`) reads the output; its reasoning is kept when the reasoning parser is
  configured, its calls when the tool parser is (auto tool choice on).
* A family vLLM composes in its own unified parser (`own_composition` on either parser:
  kimi_k3's `KimiK3Parser`, whatever the other parser) runs the tool stage for every
  tool_choice: "none" is SUPPRESS, required/named parse as auto, and without calls the
  content is the tool parser's.
* SUPPRESS - `tool_choice="none"` when both parsers are engine-based in vLLM: the tool
  parser runs and only its content is kept. With tools in the request the engine ignores
  call events (`ToolParser.with_calls_suppressed`): markup is dropped and every other
  character is content, unstripped (pre-v11 mistral: the whole output); without tools it
  is the family's "auto" content.

Tool-call ids are `make_tool_call_id(request_id, index)`, so a retried chunk yields the same ids.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from parsers._base import ReasoningParser, ToolParser, make_tool_call_id
from parsers._errors import LimitExceededError, ParserConfigError, StateError
from parsers._events import (
    ContentDelta,
    Event,
    ReasoningDelta,
    ToolArgsDelta,
    ToolCall,
    ToolCallStart,
)
from parsers._newlines import NewlineState, feed_newlines, recover_newlines
from parsers._state import JsonState
from parsers._text import check_ws_runs, ws_runs_append, ws_runs_text
from parsers._whole_output import WholeOutputMachine
from parsers.tools import ToolParserTraits, tool_parser_traits
from parsers.tools._engine import EngineToolParser
from parsers.tools.minicpm5 import MiniCPM5ToolParser

__all__ = [
    "ChatOptions",
    "ChatParser",
    "ChatParseResult",
    "ChatState",
    "ChatMode",
    "MAX_FORCED_TOOL_TEXT_CHARS",
]

# tool_choice="required" output is held until the end (see module docstring). It is tool-call
# text, the one thing allowed to grow; same bound as one in-flight call of a family parser
# (parsers/tools/_base.py MAX_TOOL_CALL_CHARS: 512 Ki characters ~ 128k tokens of JSON).
MAX_FORCED_TOOL_TEXT_CHARS = 512 * 1024


class ChatMode(str, enum.Enum):
    PASSTHROUGH = "passthrough"
    AUTO = "auto"
    NAMED = "named"
    REQUIRED = "required"
    SUPPRESS = "suppress"
    HARMONY = "harmony"


@dataclass(frozen=True)
class ChatOptions:
    """The request and server settings the combined parser honours.

    `tool_choice` takes the OpenAI shapes: None, "none", "auto", "required", or
    {"type": "function", "function": {"name": ...}} for a named function.
    """

    tool_choice: str | Mapping[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    include_reasoning: bool = True
    enable_auto_tools: bool = False

    @property
    def named_tool(self) -> str | None:
        if isinstance(self.tool_choice, Mapping):
            function = self.tool_choice.get("function")
            if isinstance(function, Mapping) and isinstance(function.get("name"), str):
                name: str = function["name"]
                return name
            raise ParserConfigError("named tool_choice needs function.name")
        return None


@dataclass(frozen=True, slots=True)
class ChatParseResult:
    reasoning: str | None
    content: str | None
    tool_calls: tuple[ToolCall, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class ChatState(JsonState):
    VERSION = 1

    mode: ChatMode
    reasoning: dict[str, Any] | None = None  # the reasoning parser's state (its to_json())
    tool: dict[str, Any] | None = None  # the tool parser's state (its to_json())
    ws_chars: str = ""  # held whitespace-only content (AUTO) or leading whitespace (NAMED)
    ws_counts: tuple[int, ...] = ()
    content_started: bool = False  # AUTO: non-whitespace content seen; NAMED: call started
    calls_made: bool = False  # AUTO: the tool parser started a call
    forced_text: str = ""  # REQUIRED: the whole content so far
    # Escaped-newline recovery of reasoning / content (reasoning families that ask for it).
    nl_reasoning: NewlineState | None = None
    nl_content: NewlineState | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.mode, ChatMode):
            raise ValueError("unknown mode")
        check_ws_runs(self.ws_chars, self.ws_counts)
        if len(self.forced_text) > MAX_FORCED_TOOL_TEXT_CHARS:
            raise ValueError("forced tool text over its limit")


class _FunctionDefinition(BaseModel):
    """vLLM's FunctionDefinition (OpenAIBaseModel: extra fields allowed)."""

    model_config = ConfigDict(extra="allow")

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    defer_loading: bool | None = None


_REQUIRED_CALLS = TypeAdapter(list[_FunctionDefinition])


class ChatParser:
    """Reasoning parser (optional) + tool parser (optional) + request options."""

    def __init__(
        self,
        reasoning_parser: ReasoningParser | None,
        tool_parser: ToolParser | None,
        options: ChatOptions = ChatOptions(),
    ) -> None:
        self.reasoning_parser = reasoning_parser
        self.options = options
        self.harmony: WholeOutputMachine | None = _harmony_machine(reasoning_parser, tool_parser)
        if self.harmony is not None and self.harmony.needs_auto_tools_alone and (
            reasoning_parser is None and not options.enable_auto_tools
        ):
            self.harmony = None  # vLLM builds no parser from a tool name without auto tools
        # vLLM builds its parser without a tool parser when auto tool choice is off.
        self.tool_parser = tool_parser if options.enable_auto_tools else None
        self.tool_traits: ToolParserTraits = (
            tool_parser_traits(type(tool_parser).name) if tool_parser is not None else
            ToolParserTraits()
        )
        self.named_tool = options.named_tool
        self.mode, self.forced_fallback = self._decide_mode()
        if reasoning_parser is not None and self.tool_parser is not None and self.mode is ChatMode.AUTO:
            # A reasoning parser may hand a tool parser of its family its framed text (Muse).
            self.reasoning_parser = reasoning_parser.for_tool_parser(self.tool_parser)
        if self.mode is ChatMode.SUPPRESS and self.tool_parser is not None and self.tool_parser.tools:
            # vLLM's engine ignores call events only when the request has tools; without
            # them it parses as "auto" and DelegatingParser keeps just the content.
            self.tool_parser = self.tool_parser.with_calls_suppressed()
        if (
            self.mode is ChatMode.AUTO
            and isinstance(self.tool_parser, (EngineToolParser, MiniCPM5ToolParser))
            and not self._engine_based()
            and not self._own_composition()
        ):
            # DelegatingParser keeps such a content verbatim when no call is made.
            self.tool_parser = self.tool_parser.with_raw_without_calls()
        self.keep_tool_calls = self._keeps_tool_calls()
        self.forces_tool_calls = self.named_tool is not None or options.tool_choice == "required"
        self.recovers_newlines = (
            reasoning_parser is not None and reasoning_parser.recovers_escaped_newlines
        )

    # -- configuration -------------------------------------------------------------------

    def _own_composition(self) -> bool:
        """vLLM picks the family's unified parser when either parser is the family's."""
        return any(getattr(p, "own_composition", False) for p in (self.reasoning_parser, self.tool_parser))

    def _engine_based(self) -> bool:
        reasoning_ok = self.reasoning_parser is None or self.reasoning_parser.engine_based
        tool_ok = self.tool_parser is None or self.tool_traits.engine_based
        return reasoning_ok and tool_ok

    def _decide_mode(self) -> tuple[ChatMode, bool]:
        """DelegatingParser._extract_tool_calls's branch, as a mode."""
        if self.harmony is not None:
            return ChatMode.HARMONY, False
        tool = self.tool_parser
        choice = self.options.tool_choice
        if tool is None:
            return ChatMode.PASSTHROUGH, False
        own = self._own_composition()
        if choice == "none":
            return (ChatMode.SUPPRESS if self._engine_based() or own else ChatMode.PASSTHROUGH), False
        named, required = self.named_tool is not None, choice == "required"
        supports = self.tool_traits.supports_required_and_named and not own  # its own parses as auto
        if named and supports:
            return ChatMode.NAMED, False
        if required and supports:
            return ChatMode.REQUIRED, False
        if choice in ("auto", None) or named or required:
            return ChatMode.AUTO, (named or required) and not own
        return ChatMode.PASSTHROUGH, False

    def _keeps_tool_calls(self) -> bool:
        """message_assembly.keeps_tool_calls."""
        if self.named_tool is not None or self.options.tool_choice == "required":
            return True
        if self.tool_parser is None or self.options.tool_choice != "auto":
            return False
        return bool(self.tool_parser.tools)

    # -- batch -----------------------------------------------------------------------------

    def parse(
        self, text: str, request_id: str, prompt_token_ids: Sequence[int] = ()
    ) -> ChatParseResult:
        if self.harmony is not None:
            result = self.harmony.parse(text, request_id)
            keep_reasoning, keep_calls = self._machine_keeps()
            return self._assemble(
                result.reasoning if keep_reasoning else None,
                result.content,
                result.tool_calls if keep_calls else (),
            )
        if self.reasoning_parser is not None:
            split = self.reasoning_parser.parse(text, prompt_token_ids)
            reasoning, content = split.reasoning, split.content
        else:
            reasoning, content = None, text
        calls, content = self._batch_tools(content, request_id)
        if self.recovers_newlines:
            reasoning, content = recover_newlines(reasoning), recover_newlines(content)
        return self._assemble(reasoning, content, calls)

    def _batch_tools(
        self, content: str | None, request_id: str
    ) -> tuple[tuple[ToolCall, ...], str | None]:
        tool = self.tool_parser
        if self.mode is ChatMode.PASSTHROUGH or tool is None:
            return (), content
        if self.mode is ChatMode.SUPPRESS:
            return (), tool.tool_choice_none_content(content or "", request_id)
        if self.mode is ChatMode.NAMED:
            if content is None or not content.strip():
                return (), None
            name = self.named_tool or ""
            return (ToolCall(make_tool_call_id(request_id, 0), name, content),), None
        if self.mode is ChatMode.REQUIRED:
            return _required_calls(content or "", request_id), None
        result = tool.parse(content if content is not None else "", request_id)
        if result.tool_calls:
            parsed = result.content
            return result.tool_calls, (None if parsed and not parsed.strip() else parsed)
        if self.forced_fallback and (content is None or not content.strip()):
            return (), None
        if (self._engine_based() or self._own_composition()
                or getattr(tool, "content_without_calls_is_parsed", False)):
            return (), result.content or None
        return (), content

    def _assemble(
        self, reasoning: str | None, content: str | None, calls: tuple[ToolCall, ...]
    ) -> ChatParseResult:
        """message_assembly.assemble_chat_message_fields."""
        if not self.options.include_reasoning:
            reasoning = None
        if not self.keep_tool_calls:
            return ChatParseResult(reasoning, content, ())
        if self.forces_tool_calls:
            content = content or ""
        if self.options.parallel_tool_calls is False:
            calls = calls[:1]
        return ChatParseResult(reasoning, content, calls)

    # -- streaming -------------------------------------------------------------------------

    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> ChatState:
        if self.harmony is not None:
            return ChatState(mode=self.mode, tool=self.harmony.initial_state().to_json())
        reasoning = (
            self.reasoning_parser.initial_state(prompt_token_ids).to_json()
            if self.reasoning_parser is not None
            else None
        )
        tool = (
            self.tool_parser.initial_state().to_json()
            if self.tool_parser is not None and self.mode in (ChatMode.AUTO, ChatMode.SUPPRESS)
            else None
        )
        newlines = NewlineState() if self.recovers_newlines else None
        return ChatState(
            mode=self.mode, reasoning=reasoning, tool=tool, nl_reasoning=newlines,
            nl_content=newlines,
        )

    @staticmethod
    def state_type() -> type[ChatState]:
        return ChatState

    def feed(self, state: ChatState, text: str, request_id: str) -> tuple[ChatState, list[Event]]:
        return self._step(state, text, request_id, final=False)

    def finish(self, state: ChatState, request_id: str) -> tuple[ChatState, list[Event]]:
        return self._step(state, "", request_id, final=True)

    def _step(
        self, state: ChatState, text: str, request_id: str, *, final: bool
    ) -> tuple[ChatState, list[Event]]:
        state = self._check(state)
        if self.harmony is not None:
            return self._harmony_step(state, text, request_id, final=final)
        if self.reasoning_parser is not None:
            r_parser = self.reasoning_parser
            r_state = r_parser.state_type().from_json(state.reasoning)
            r_state, split = (
                r_parser.finish(r_state) if final else r_parser.feed(r_state, text)
            )
            state = state.replace(reasoning=r_state.to_json())
        else:
            split = [ContentDelta(text)] if text else []
        out: list[Event] = []
        content_parts: list[str] = []
        for event in split:
            if isinstance(event, ContentDelta):
                content_parts.append(event.text)
            elif isinstance(event, ReasoningDelta):
                # Content before this reasoning keeps its place in model order.
                state = self._content(state, "".join(content_parts), request_id, out)
                content_parts = []
                if self.options.include_reasoning:
                    out.append(event)
        state = self._content(state, "".join(content_parts), request_id, out, final=final)
        if self.recovers_newlines:
            state, out = self._recover_newlines(state, out, final=final)
        return state, self._filter(out)

    def _check(self, state: object) -> ChatState:
        if not isinstance(state, ChatState):
            raise StateError(f"expected ChatState, got {type(state).__name__}")
        if state.mode is not self.mode:
            raise StateError("stream state belongs to another tool_choice mode")
        if self.harmony is not None:
            if state.reasoning is not None or state.tool is None:
                raise StateError("stream state is not a Harmony state")
            return state
        if (state.reasoning is None) != (self.reasoning_parser is None):
            raise StateError("stream state does not match the reasoning parser")
        if (state.nl_reasoning is None or state.nl_content is None) == self.recovers_newlines:
            raise StateError("stream state does not match the newline recovery")
        return state

    def _harmony_step(
        self, state: ChatState, text: str, request_id: str, *, final: bool
    ) -> tuple[ChatState, list[Event]]:
        machine = self.harmony
        assert machine is not None
        h_state: Any = machine.state_type().from_json(state.tool)
        if final:
            h_state, events = machine.finish(h_state, request_id)
        else:
            h_state, events = machine.feed(h_state, text, request_id)
        keep_reasoning, keep_calls = self._machine_keeps()
        out = [
            e
            for e in events
            if (keep_reasoning or not isinstance(e, ReasoningDelta))
            and (keep_calls or not isinstance(e, ToolCallStart | ToolArgsDelta))
        ]
        return state.replace(tool=h_state.to_json()), self._filter(out)
    def _machine_keeps(self) -> tuple[bool, bool]:
        """(reasoning, calls) kept from the one machine, by its family's rule."""
        assert self.harmony is not None
        return self.harmony.kept(self.reasoning_parser is not None, self.tool_parser is not None,
                                 self.options.include_reasoning, self.options.tool_choice)

    def _recover_newlines(
        self, state: ChatState, events: list[Event], *, final: bool
    ) -> tuple[ChatState, list[Event]]:
        """MiniCPM-V's composed parser: escaped newlines back to newlines in reasoning and
        content (not in tool-call arguments). Reasoning is flushed once anything else comes,
        as upstream's stream does."""
        r_state, c_state = state.nl_reasoning, state.nl_content
        assert r_state is not None and c_state is not None
        out: list[Event] = []
        for event in events:
            if isinstance(event, ReasoningDelta):
                r_state, text = feed_newlines(r_state, event.text, final=False)
                out.extend([ReasoningDelta(text)] if text else [])
                continue
            r_state, text = feed_newlines(r_state, "", final=True)
            out.extend([ReasoningDelta(text)] if text else [])
            if isinstance(event, ContentDelta):
                c_state, text = feed_newlines(c_state, event.text, final=False)
                out.extend([ContentDelta(text)] if text else [])
            else:
                out.append(event)
        if final:
            r_state, text = feed_newlines(r_state, "", final=True)
            out.extend([ReasoningDelta(text)] if text else [])
            c_state, text = feed_newlines(c_state, "", final=True)
            out.extend([ContentDelta(text)] if text else [])
        return state.replace(nl_reasoning=r_state, nl_content=c_state), out

    def _content(
        self,
        state: ChatState,
        text: str,
        request_id: str,
        out: list[Event],
        *,
        final: bool = False,
    ) -> ChatState:
        """Route reasoning-free content through the tool stage of this mode."""
        if not text and not final:
            return state
        mode = state.mode
        if mode is ChatMode.PASSTHROUGH:
            if text:
                out.append(ContentDelta(text))
            return state
        if mode is ChatMode.REQUIRED:
            return self._required(state, text, request_id, out, final=final)
        if mode is ChatMode.NAMED:
            return self._named(state, text, out, request_id, final=final)
        return self._auto(state, text, request_id, out, final=final)

    def _tool_step(
        self, state: ChatState, text: str, request_id: str, *, final: bool
    ) -> tuple[ChatState, list[Event]]:
        tool = self.tool_parser
        assert tool is not None
        t_state = tool.state_type().from_json(state.tool)
        if text:
            t_state, events = tool.feed(t_state, text, request_id)
        else:
            events = []
        if final:
            t_state, tail = tool.finish(t_state, request_id)
            events = [*events, *tail]
        return state.replace(tool=t_state.to_json()), events

    def _auto(
        self, state: ChatState, text: str, request_id: str, out: list[Event], *, final: bool
    ) -> ChatState:
        state, events = self._tool_step(state, text, request_id, final=final)
        suppress = state.mode is ChatMode.SUPPRESS
        for event in events:
            if isinstance(event, ContentDelta):
                state = self._auto_content(state, event.text, out)
            elif not suppress:
                state = state.replace(calls_made=True)
                out.append(event)
        if final:
            state = self._auto_flush(state, out)
        return state

    def _auto_content(self, state: ChatState, text: str, out: list[Event]) -> ChatState:
        if state.content_started or state.mode is ChatMode.SUPPRESS:
            out.append(ContentDelta(text))
            return state
        if not text.strip():
            chars, counts = ws_runs_append(state.ws_chars, state.ws_counts, text)
            return state.replace(ws_chars=chars, ws_counts=counts)
        out.append(ContentDelta(ws_runs_text(state.ws_chars, state.ws_counts) + text))
        return state.replace(ws_chars="", ws_counts=(), content_started=True)

    def _auto_flush(self, state: ChatState, out: list[Event]) -> ChatState:
        """End of output: a whitespace-only content survives only when no call was made."""
        held = ws_runs_text(state.ws_chars, state.ws_counts)
        if held and not state.calls_made and not self.forced_fallback:
            out.append(ContentDelta(held))
        return state.replace(ws_chars="", ws_counts=())

    def _named(
        self, state: ChatState, text: str, out: list[Event], request_id: str, *, final: bool
    ) -> ChatState:
        if state.content_started:
            if text:
                out.append(ToolArgsDelta(0, text))
            return state
        if not text.strip():
            if final:
                return state.replace(ws_chars="", ws_counts=())
            chars, counts = ws_runs_append(state.ws_chars, state.ws_counts, text)
            return state.replace(ws_chars=chars, ws_counts=counts)
        out.append(ToolCallStart(0, make_tool_call_id(request_id, 0), self.named_tool or ""))
        out.append(ToolArgsDelta(0, ws_runs_text(state.ws_chars, state.ws_counts) + text))
        return state.replace(ws_chars="", ws_counts=(), content_started=True)

    def _required(
        self, state: ChatState, text: str, request_id: str, out: list[Event], *, final: bool
    ) -> ChatState:
        buffered = state.forced_text + text
        if len(buffered) > MAX_FORCED_TOOL_TEXT_CHARS:
            raise LimitExceededError(
                f"tool_choice=required output over {MAX_FORCED_TOOL_TEXT_CHARS} characters"
            )
        if not final:
            return state.replace(forced_text=buffered)
        for index, call in enumerate(_required_calls(buffered, request_id)):
            out.append(ToolCallStart(index, call.id, call.name))
            out.append(ToolArgsDelta(index, call.arguments))
        return state.replace(forced_text="")

    def _filter(self, events: list[Event]) -> list[Event]:
        """assemble_chat_message_fields's tool-call rules, applied to deltas."""
        if not self.keep_tool_calls:
            return [e for e in events if not isinstance(e, ToolCallStart | ToolArgsDelta)]
        if self.options.parallel_tool_calls is False:
            return [
                e
                for e in events
                if not isinstance(e, ToolCallStart | ToolArgsDelta) or e.index == 0
            ]
        return events


def _harmony_machine(
    reasoning_parser: ReasoningParser | None, tool_parser: ToolParser | None
) -> WholeOutputMachine | None:
    """The one machine replacing the pipeline: gpt-oss's Harmony parser, or Cohere's
    (`CohereCommandParser`, whose preset is the reasoning parser's when both are set)."""
    machines: list[WholeOutputMachine | None] = [
        getattr(p, "machine", None) if getattr(p, "harmony", False) else None
        for p in (tool_parser, reasoning_parser)
        if p is not None
    ]
    if getattr(getattr(reasoning_parser, "machine", None), "prefers_reasoning_side", False):
        machines.reverse()
    if not machines or all(m is None for m in machines):
        return None
    if any(m is None for m in machines):
        raise ParserConfigError(
            "Harmony requires the openai_gptoss reasoning parser and the openai tool parser"
        )
    machine = machines[0]
    assert machine is not None
    return machine



def _required_calls(content: str, request_id: str) -> tuple[ToolCall, ...]:
    """vLLM's tool_choice="required" batch rule: all calls of a valid array, else none."""
    try:
        parsed = _REQUIRED_CALLS.validate_json(content)
    except ValidationError:
        return ()
    return tuple(
        ToolCall(
            make_tool_call_id(request_id, index),
            call.name,
            json.dumps(call.parameters, ensure_ascii=False),
        )
        for index, call in enumerate(parsed)
    )
