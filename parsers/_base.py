"""Shared base of every parser family: the contract the combined parser and derender rely on.

A parser object holds only configuration (marker strings, vocabulary ids, tool schemas); it is
built once per (model, request settings) and is immutable. All streaming progress lives in a
`JsonState` value that the caller threads through `feed`/`finish`:

    state = parser.initial_state(...)
    state, events = parser.feed(state, delta_text)      # any number of times
    state, events = parser.finish(state)                # once, at the end of the output

Concatenating the events of any split of an output equals `parse(output)` (the batch result),
whatever the split and even when the state is serialised and restored between calls.
"""

from __future__ import annotations

import abc
import copy
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, Self

from parsers._events import Event, ToolCall
from parsers._state import JsonState

__all__ = [
    "Vocab",
    "ReasoningParser",
    "ReasoningResult",
    "ToolParser",
    "ToolParseResult",
    "make_tool_call_id",
    "MAX_HELD_CHARS",
]

# Text held back because it may be the start of a marker. Markers are short (< 64 chars);
# 4 KiB leaves room for whitespace runs some formats allow before a marker.
MAX_HELD_CHARS = 4096


class Vocab(Protocol):
    """The part of a tokenizer parsers may use: marker strings to ids."""

    def token_to_id(self, token: str) -> int | None: ...


def make_tool_call_id(request_id: str, index: int) -> str:
    """Deterministic tool-call id, shaped like vLLM 0.33's `chatcmpl-tool-<16 hex>`."""
    digest = hashlib.blake2b(f"{request_id}:{index}".encode(), digest_size=8).hexdigest()
    return f"chatcmpl-tool-{digest}"


@dataclass(frozen=True, slots=True)
class ReasoningResult:
    reasoning: str | None
    content: str | None


class ReasoningParser(abc.ABC):
    """Splits model output into reasoning and content. Content is passed on (to tool parsing)."""

    name: ClassVar[str]

    # True for families vLLM runs on its declarative parser engine (vllm/parser/engine): the
    # combined parser needs it to reproduce DelegatingParser's engine-only content rules.
    engine_based: ClassVar[bool] = False
    # True where vLLM's composed parser recovers escaped newlines (`\\n`) in reasoning and
    # content (MiniCPM-V); the combined parser applies it (parsers/_newlines.py).
    recovers_escaped_newlines: ClassVar[bool] = False

    def __init__(
        self,
        vocab: Vocab,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        special_tokens: Iterable[str] = (),
    ):
        """`special_tokens`: the tokenizer's `all_special_tokens` (transformers' list, which
        vLLM's parser engine drops from text when they are not one of the family's markers)."""
        self.vocab = vocab
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.special_tokens = tuple(special_tokens)

    @abc.abstractmethod
    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> JsonState:
        """Starting phase, decided from the rendered prompt as upstream does."""

    @abc.abstractmethod
    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        """vLLM's `is_reasoning_end` on prompt ids (feeds `reasoning_ended` at render)."""

    @abc.abstractmethod
    def feed(self, state: JsonState, text: str) -> tuple[JsonState, list[Event]]:
        """Consume a delta; emit ReasoningDelta / ContentDelta events."""

    @abc.abstractmethod
    def finish(self, state: JsonState) -> tuple[JsonState, list[Event]]:
        """Flush held-back text at the end of the output."""

    @abc.abstractmethod
    def parse(self, text: str, prompt_token_ids: Sequence[int] = ()) -> ReasoningResult:
        """Batch split with vLLM 0.33 `extract_reasoning` semantics."""

    @classmethod
    @abc.abstractmethod
    def state_type(cls) -> type[JsonState]: ...

    def for_tool_parser(self, tool_parser: ToolParser) -> ReasoningParser:
        """This parser as composed with `tool_parser` (itself, unless a family says otherwise)."""
        return self


@dataclass(frozen=True, slots=True)
class ToolParseResult:
    content: str | None
    tool_calls: tuple[ToolCall, ...]


class ToolParser(abc.ABC):
    """Splits (post-reasoning) content into content and tool calls."""

    name: ClassVar[str]

    def __init__(
        self,
        vocab: Vocab | None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        max_call_chars: int | None = None,
    ):
        """`max_call_chars`: bound on one in-flight tool call's text (None: the family's
        default); it can only lower the family's ceiling, which bounds restored states too."""
        self.vocab = vocab
        self.tools = [dict(t) for t in (tools or [])]
        self.max_call_chars = max_call_chars

    # tool_choice="none" on vLLM's parser engine (with tools): the lexer still runs, but call
    # events are ignored, so call markup is dropped and all other text is content verbatim
    # (none of the whitespace rules that depend on calls). Honoured by the engine families.
    suppress_calls: bool = False
    # vLLM composes this family in its own unified parser (vllm/parser/kimi_k3.py): the tool
    # stage runs for every tool_choice (none included) and its content is the answer.
    own_composition: ClassVar[bool] = False

    def tool_choice_none_content(self, text: str, request_id: str) -> str | None:
        """DelegatingParser's tool_choice="none" content: the tool parser's content as is."""
        return self.parse(text, request_id).content

    def with_calls_suppressed(self) -> Self:
        """A copy of this (immutable) parser with `suppress_calls` set."""
        clone = copy.copy(self)
        clone.suppress_calls = True
        return clone

    @abc.abstractmethod
    def initial_state(self) -> JsonState: ...

    @abc.abstractmethod
    def feed(
        self, state: JsonState, text: str, request_id: str
    ) -> tuple[JsonState, list[Event]]:
        """Consume a delta; emit ContentDelta / ToolCallStart / ToolArgsDelta events."""

    @abc.abstractmethod
    def finish(self, state: JsonState, request_id: str) -> tuple[JsonState, list[Event]]: ...

    @abc.abstractmethod
    def parse(self, text: str, request_id: str) -> ToolParseResult:
        """Batch result with vLLM 0.33 `extract_tool_calls` semantics (ids deterministic)."""

    @classmethod
    @abc.abstractmethod
    def state_type(cls) -> type[JsonState]: ...
