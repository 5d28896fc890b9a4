"""vLLM 0.33's `hf` / `beam` parsers (ResponseTemplateParser, BeamParser) split in two.

The reasoning parser routes `thinking` to reasoning and passes every other field on as
content, tool regions verbatim as they come; the tool parser runs the same template over that
content (thinking, if any is left, is content there, as vLLM's without a reasoning parser) and
streams each region's call (parsers/_response_template_args.py). The template comes from the
tokenizer's `response_template` metadata (an attribute of the vocab object, or passed in), as
vLLM reads it from tokenizer_config.json.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from parsers._base import (
    ReasoningParser,
    ReasoningResult,
    ToolParser,
    ToolParseResult,
    Vocab,
    make_tool_call_id,
)
from parsers._errors import ParserConfigError, StateError
from parsers._events import (
    ContentDelta,
    Event,
    ReasoningDelta,
    ToolArgsDelta,
    ToolCall,
    ToolCallStart,
)
from parsers._response_template_args import RegionArgs, RegionState, Step, streamed
from parsers._state import JsonState
from parsers.response_template import (
    THINKING,
    TOOLS,
    Chunk,
    Closed,
    Machine,
    Opened,
    Out,
    Region,
    RTState,
    Template,
    coerce_arguments,
    region_calls,
    template_of,
    tool_properties,
)
from parsers.tools._base import MAX_TOOL_CALL_CHARS

S = TypeVar("S", bound=RTState)


def load_template(vocab: object, template: Mapping[str, Any] | None, *, need: str) -> Template:
    spec = template if template is not None else template_of(vocab)
    if not isinstance(spec, Mapping):
        raise ParserConfigError("requires `response_template` metadata in the tokenizer configuration")
    loaded = Template.load(spec)
    if need not in loaded.fields:
        raise ParserConfigError(f"requires a response_template with a {need} field")
    return loaded


def _check(state: object, kind: type[S]) -> S:
    if not isinstance(state, kind) or type(state) is not kind:
        raise StateError(f"expected {kind.__name__}, got {type(state).__name__}")
    return state


@dataclass(frozen=True, slots=True)
class RTToolState(RTState):
    region: RegionState | None = None  # the open tool region's call (streamed regions)


def _step(machine: Machine, state: S, text: str, *, final: bool) -> tuple[S, list[Out]]:
    # The machine keeps the state's class (dataclasses.replace): RTToolState stays one.
    if not final:
        new, out = machine.run(state, text, eos=False)
        return cast(S, new), out
    rest = machine.closer_rest(state)
    new, out = machine.run(state, rest, eos=False) if rest else (state, [])
    new, tail = machine.run(new, "", eos=True)
    return cast(S, new), out + tail


class ResponseTemplateReasoning(ReasoningParser):
    name = "hf"
    engine_based = True  # composes as one parser: content rules are the template's
    takes_response_template = True  # the service passes the tokenizer's metadata

    def __init__(
        self,
        vocab: Vocab,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        special_tokens: Iterable[str] = (),
        response_template: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(vocab, chat_template_kwargs, special_tokens=special_tokens)
        self.machine = Machine(load_template(vocab, response_template, need=THINKING))

    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> RTState:
        return self.machine.initial_state()

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        # A prompt that ends at the message start: reasoning ends only if thinking is off.
        return not self.chat_template_kwargs.get("enable_thinking", True)

    @classmethod
    def state_type(cls) -> type[JsonState]:
        return RTState

    def _events(self, out: list[Out]) -> list[Event]:
        events: list[Event] = []
        for item in out:
            if not isinstance(item, Chunk):  # a tool region is content to this parser
                events.extend([ContentDelta(item.raw)] if item.raw else [])
            elif item.field == THINKING:
                events.append(ReasoningDelta(item.text))
            else:
                events.append(ContentDelta(item.text))
        return events

    def feed(self, state: JsonState, text: str) -> tuple[JsonState, list[Event]]:
        new, out = _step(self.machine, _check(state, RTState), text, final=False)
        return new, self._events(out)

    def finish(self, state: JsonState) -> tuple[JsonState, list[Event]]:
        new, out = _step(self.machine, _check(state, RTState), "", final=True)
        return new, self._events(out)

    def parse(self, text: str, prompt_token_ids: Sequence[int] = ()) -> ReasoningResult:
        state, events = self.feed(self.initial_state(prompt_token_ids), text)
        _, tail = self.finish(state)
        reasoning = "".join(e.text for e in [*events, *tail] if isinstance(e, ReasoningDelta))
        content = "".join(e.text for e in [*events, *tail] if isinstance(e, ContentDelta))
        return ReasoningResult(reasoning or None, content or None)


class ResponseTemplateTools(ToolParser):
    name = "hf"
    takes_response_template = True

    def __init__(
        self,
        vocab: Vocab | None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        max_call_chars: int | None = None,
        response_template: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(vocab, tools, max_call_chars=max_call_chars)
        template = load_template(vocab, response_template, need=TOOLS)
        self.properties = tool_properties(self.tools)
        field = template.fields[TOOLS]
        self.machine = Machine(template, whole_regions=not streamed(field))
        self.args = RegionArgs(field, self.properties, max_call_chars or MAX_TOOL_CALL_CHARS)

    def initial_state(self) -> RTToolState:
        return RTToolState(field=None)

    @classmethod
    def state_type(cls) -> type[JsonState]:
        return RTToolState

    def _events(self, state: RTToolState, out: list[Out], request_id: str) -> tuple[RTToolState, list[Event]]:
        events: list[Event] = []
        for item in out:
            if isinstance(item, Chunk) and item.field != TOOLS:
                events.append(ContentDelta(item.text))
            elif self.suppress_calls:  # tool markup passes through as content
                text = item.text if isinstance(item, Chunk) else item.raw
                events.extend([ContentDelta(text)] if text else [])
            elif isinstance(item, Region):
                state = self._region_calls(state, item, request_id, events)
            elif isinstance(item, Opened):
                state = state.replace(region=self.args.open(dict(item.captures)))
            else:
                before = state.region
                if before is None:
                    raise StateError("a tool region's text without its region state")
                if isinstance(item, Closed):
                    region, step = None, self.args.close(before)
                else:
                    region, step = self.args.feed(before, item.text)
                state = self._emit(state.replace(region=region), before, step, request_id, events)
        return state, events

    def _emit(self, state: RTToolState, before: RegionState, step: Step, request_id: str,
              events: list[Event]) -> RTToolState:
        index = before.index
        if step.start:
            index = state.calls
            events.append(ToolCallStart(index, make_tool_call_id(request_id, index), before.name))
            state = state.replace(calls=index + 1)
            if state.region is not None:
                state = state.replace(region=state.region.replace(index=index))
        if step.text:
            events.append(ToolArgsDelta(index, step.text))
        return state

    def _region_calls(self, state: RTToolState, item: Region, request_id: str,
                      events: list[Event]) -> RTToolState:
        """A region parsed whole (a dialect that does not stream)."""
        index = state.calls
        for name, arguments in region_calls(item.value):  # a malformed region is dropped
            if self.properties.get(name) and isinstance(arguments, dict):
                arguments = coerce_arguments(arguments, self.properties[name])
            text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
            events += [ToolCallStart(index, make_tool_call_id(request_id, index), name),
                       ToolArgsDelta(index, text)]
            index += 1
        return state.replace(calls=index)

    def feed(self, state: JsonState, text: str, request_id: str) -> tuple[JsonState, list[Event]]:
        new, out = _step(self.machine, _check(state, RTToolState), text, final=False)
        return self._events(new, out, request_id)

    def finish(self, state: JsonState, request_id: str) -> tuple[JsonState, list[Event]]:
        new, out = _step(self.machine, _check(state, RTToolState), "", final=True)
        return self._events(new, out, request_id)

    def parse(self, text: str, request_id: str) -> ToolParseResult:
        state, events = self.feed(self.initial_state(), text, request_id)
        _, tail = self.finish(state, request_id)
        content, calls = "", []
        for e in [*events, *tail]:
            if isinstance(e, ContentDelta):
                content += e.text
            elif isinstance(e, ToolCallStart):
                calls.append(ToolCall(e.id, e.name, ""))
            elif isinstance(e, ToolArgsDelta):
                call = calls[e.index]
                calls[e.index] = ToolCall(call.id, call.name, call.arguments + e.text)
        return ToolParseResult(content or None, tuple(calls))
