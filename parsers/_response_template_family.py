"""vLLM 0.33's `hf` / `beam` parsers (ResponseTemplateParser, BeamParser) split in two.

The reasoning parser routes `thinking` to reasoning and passes every other field on as
content, tool regions verbatim; the tool parser runs the same template over that content
(thinking, if any is left, is content there, as vLLM's without a reasoning parser). The
template comes from the tokenizer's `response_template` metadata (an attribute of the vocab
object, or passed in), as vLLM reads it from tokenizer_config.json.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

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
from parsers._state import JsonState
from parsers.response_template import (
    THINKING,
    TOOLS,
    Chunk,
    Machine,
    Out,
    Region,
    RTState,
    Template,
    coerce_arguments,
    region_calls,
    template_of,
    tool_properties,
)


def load_template(vocab: object, template: Mapping[str, Any] | None, *, need: str) -> Template:
    spec = template if template is not None else template_of(vocab)
    if not isinstance(spec, Mapping):
        raise ParserConfigError("requires `response_template` metadata in the tokenizer configuration")
    loaded = Template.load(spec)
    if need not in loaded.fields:
        raise ParserConfigError(f"requires a response_template with a {need} field")
    return loaded


def _check(state: object) -> RTState:
    if not isinstance(state, RTState):
        raise StateError(f"expected RTState, got {type(state).__name__}")
    return state


def _step(machine: Machine, state: RTState, text: str, *, final: bool) -> tuple[RTState, list[Out]]:
    if not final:
        return machine.run(state, text, eos=False)
    rest = machine.closer_rest(state)
    state, out = machine.run(state, rest, eos=False) if rest else (state, [])
    state, tail = machine.run(state, "", eos=True)
    return state, out + tail


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
            if isinstance(item, Region):  # a tool region is content to this parser
                events.extend([ContentDelta(item.raw)] if item.raw else [])
            elif item.field == THINKING:
                events.append(ReasoningDelta(item.text))
            else:
                events.append(ContentDelta(item.text))
        return events

    def feed(self, state: JsonState, text: str) -> tuple[JsonState, list[Event]]:
        new, out = _step(self.machine, _check(state), text, final=False)
        return new, self._events(out)

    def finish(self, state: JsonState) -> tuple[JsonState, list[Event]]:
        new, out = _step(self.machine, _check(state), "", final=True)
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
        self.machine = Machine(load_template(vocab, response_template, need=TOOLS))
        self.properties = tool_properties(self.tools)

    def initial_state(self) -> RTState:
        return self.machine.initial_state()

    @classmethod
    def state_type(cls) -> type[JsonState]:
        return RTState

    def _events(self, state: RTState, out: list[Out], request_id: str) -> tuple[RTState, list[Event]]:
        events: list[Event] = []
        index = state.calls
        for item in out:
            if isinstance(item, Chunk):
                events.append(ContentDelta(item.text))
                continue
            if self.suppress_calls:
                events.extend([ContentDelta(item.raw)] if item.raw else [])
                continue
            for name, arguments in region_calls(item.value):  # a malformed region is dropped
                if self.properties.get(name) and isinstance(arguments, dict):
                    arguments = coerce_arguments(arguments, self.properties[name])
                text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
                events += [ToolCallStart(index, make_tool_call_id(request_id, index), name),
                           ToolArgsDelta(index, text)]
                index += 1
        return state.replace(calls=index), events

    def feed(self, state: JsonState, text: str, request_id: str) -> tuple[JsonState, list[Event]]:
        new, out = _step(self.machine, _check(state), text, final=False)
        return self._events(new, out, request_id)

    def finish(self, state: JsonState, request_id: str) -> tuple[JsonState, list[Event]]:
        new, out = _step(self.machine, _check(state), "", final=True)
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
                calls[-1] = ToolCall(calls[-1].id, calls[-1].name, calls[-1].arguments + e.text)
        return ToolParseResult(content or None, tuple(calls))
