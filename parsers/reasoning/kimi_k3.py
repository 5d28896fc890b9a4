"""`kimi_k3` reasoning (vLLM 0.33 `KimiK3ReasoningParser`, composed by `vllm/parser/kimi_k3.py`).

    <|open|>think<|sep|>reasoning<|close|>think<|sep|><|open|>response<|sep|>answer...

Markup is read by the tool family's XTML lexer (`parsers.tools.kimi_k3`).

* Thinking is `chat_template_kwargs["thinking"]`, else `["enable_thinking"]`, else on. Off:
  the whole output is content.
* On: reasoning starts at the output's start, after a first `<|open|>think<|sep|>`, and ends
  at `<|close|>think<|sep|>`; with neither think marker but a `<|open|>response<|sep|>`, the
  output is content. A truncated output is all reasoning.
* The content after reasoning: when the request has tools and tool_choice is not "none"
  (`request_tools`, `tool_choice`: vLLM reads them off the request) it is kept raw for the
  tool parser; otherwise the response channel is unwrapped (`ContentRules`, tools markup is
  text). vLLM's batch ignores the prompt, so does this parser (`is_reasoning_end` reads it
  for render: the last think marker in the prompt is a close).

Divergences from vLLM's batch (stream == our batch; tests/parsers/test_reasoning_kimi_k3.py):
text before a late `<|open|>think<|sep|>` (or before a response channel with no think marker)
stays reasoning, as it had streamed (vLLM drops it / reads it as content); a leading
whitespace run is held until it is decided. A `<|close|>think<|sep|>` after a leading response
channel, or an `<|open|>think<|sep|>` after the close, is text (vLLM re-reads the whole output
around them); the content rules' own divergences (parsers/tools/kimi_k3.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers._base import MAX_HELD_CHARS, ReasoningParser, ReasoningResult, Vocab
from parsers._errors import StateError
from parsers._events import ContentDelta, Event, ReasoningDelta, push_content
from parsers._state import JsonState
from parsers.tools.kimi_k3 import (
    CLOSE,
    OPEN,
    SEP,
    ContentRules,
    ContentState,
    Tag,
    XtmlLexer,
    tag_name,
)

__all__ = ["KimiK3ReasoningParser", "KimiK3ReasoningState", "k3_thinking", "marker_ids"]

_STRIP = ContentRules(tools=False)


def k3_thinking(chat_template_kwargs: Mapping[str, Any] | None) -> bool:
    """vLLM's switch: `thinking` if given (not None), else `enable_thinking` (default on)."""
    kwargs = chat_template_kwargs or {}
    thinking = kwargs.get("thinking")
    return bool(kwargs.get("enable_thinking", True) if thinking is None else thinking)


@dataclass(frozen=True, slots=True)
class KimiK3ReasoningState(JsonState):
    """phase: "start" (nothing but whitespace yet), "reasoning", "content". opened: the think
    open marker was read. ws: the held leading whitespace. lex: the lexer's held text (not
    used for raw content). content: the unwrapping rules' state."""

    phase: str = "start"
    opened: bool = False
    ws: str = ""
    lex: str = ""
    content: ContentState = ContentState()

    def __post_init__(self) -> None:
        if self.phase not in ("start", "reasoning", "content") or len(self.ws) > MAX_HELD_CHARS:
            raise ValueError("bad reasoning state")
        if len(self.lex) > 2 * MAX_HELD_CHARS:
            raise ValueError("held text over its limit")


class KimiK3ReasoningParser(ReasoningParser):
    name: ClassVar[str] = "kimi_k3"
    # The derender factory passes the request's tools / tool_choice (vLLM's parser reads them).
    takes_tool_request: ClassVar[bool] = True
    # vLLM's KimiK3Parser composes it with any tool parser (parsers/chat.py).
    own_composition: ClassVar[bool] = True

    def __init__(
        self,
        vocab: Vocab,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        special_tokens: Iterable[str] = (),
        request_tools: bool = False,
        tool_choice: Any = None,
    ) -> None:
        super().__init__(vocab, chat_template_kwargs, special_tokens=special_tokens)
        self.thinking = k3_thinking(self.chat_template_kwargs)
        self.raw_content = bool(request_tools) and tool_choice != "none"
        self._open_ids = marker_ids(vocab, f"{OPEN}think{SEP}")
        self._close_ids = marker_ids(vocab, f"{CLOSE}think{SEP}")

    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> KimiK3ReasoningState:
        return KimiK3ReasoningState(phase="start" if self.thinking else "content")

    @classmethod
    def state_type(cls) -> type[KimiK3ReasoningState]:
        return KimiK3ReasoningState

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        """The newest think marker in `token_ids` is the close (thinking off: always)."""
        if not self.thinking:
            return True
        ids = list(token_ids)
        for i in range(len(ids) - 1, -1, -1):
            for marker, ends in ((self._close_ids, True), (self._open_ids, False)):
                if marker and ids[i : i + len(marker)] == marker:
                    return ends
        return False

    def parse(self, text: str, prompt_token_ids: Sequence[int] = ()) -> ReasoningResult:
        state, events = self.feed(self.initial_state(), text)
        _, tail = self.finish(state)
        reasoning = "".join(e.text for e in events + tail if isinstance(e, ReasoningDelta))
        content = "".join(e.text for e in events + tail if isinstance(e, ContentDelta))
        return ReasoningResult(reasoning or None, content or None)

    def feed(self, state: JsonState, text: str) -> tuple[KimiK3ReasoningState, list[Event]]:
        return self._run(self._check(state), text, final=False)

    def finish(self, state: JsonState) -> tuple[KimiK3ReasoningState, list[Event]]:
        return self._run(self._check(state), "", final=True)

    def _check(self, state: JsonState) -> KimiK3ReasoningState:
        if not isinstance(state, KimiK3ReasoningState):
            raise StateError(f"{self.name}: expected KimiK3ReasoningState, got {type(state).__name__}")
        return state

    def _run(self, state: KimiK3ReasoningState, text: str, *, final: bool) -> tuple[KimiK3ReasoningState, list[Event]]:
        out: list[Event] = []
        if state.phase == "content" and self.raw_content:
            return state, [ContentDelta(text)] if text else []
        lex, items = XtmlLexer.feed(state.lex, text, final)
        state = state.replace(lex=lex)
        for index, item in enumerate(items):
            if state.phase == "content" and self.raw_content:  # the rest is raw content
                rest = "".join(i.literal if isinstance(i, Tag) else i for i in items[index:]) + lex
                _push(out, ContentDelta(rest))
                return state.replace(lex=""), out
            state = self._item(state, item, out)
        if state.phase == "content" and self.raw_content and state.lex:
            _push(out, ContentDelta(state.lex))  # reasoning ended: held text is raw content
            state = state.replace(lex="")
        if final:
            if state.phase == "start" and state.ws:
                _push(out, ReasoningDelta(state.ws))
            elif state.phase == "content" and not self.raw_content:
                texts: list[str] = []
                state = state.replace(content=_STRIP.finish(state.content, texts))
                push_content(out, "".join(texts))
            state = state.replace(ws="")
        return state, out

    def _item(self, state: KimiK3ReasoningState, item: str | Tag, out: list[Event]) -> KimiK3ReasoningState:
        if state.phase == "content":
            texts: list[str] = []
            state = state.replace(content=_STRIP.item(state.content, item, texts))
            push_content(out, "".join(texts))
            return state
        kind, name = tag_name(item) if isinstance(item, Tag) else ("", "")
        if (kind, name) == ("close", "think"):
            if state.ws:
                _push(out, ReasoningDelta(state.ws))
            return state.replace(phase="content", ws="")
        if (kind, name) == ("open", "think") and not state.opened:
            return state.replace(phase="reasoning", opened=True, ws="")
        if (kind, name) == ("open", "response") and isinstance(item, Tag) and state.phase == "start":
            # No think channel: the whole output is content (the held whitespace included).
            held, state = state.ws, state.replace(phase="content", ws="")
            if self.raw_content:
                _push(out, ContentDelta(held + item.literal))
                return state
            for part in (held, item):
                state = self._item(state, part, out) if part else state
            return state
        text = item.literal if isinstance(item, Tag) else item
        if state.phase == "start":
            if not text.strip() and len(state.ws + text) <= MAX_HELD_CHARS:
                return state.replace(ws=state.ws + text)
            _push(out, ReasoningDelta(state.ws + text))
            return state.replace(phase="reasoning", ws="")
        _push(out, ReasoningDelta(text))
        return state


def marker_ids(vocab: Any, text: str) -> list[int]:
    """`tokenizer.encode(text, add_special_tokens=False)` (HF or `tokenizers`), [] if none."""
    encode = getattr(vocab, "encode", None)
    if encode is None:
        return []
    try:
        encoded = encode(text, add_special_tokens=False)
    except (TypeError, ValueError):
        return []
    ids = getattr(encoded, "ids", encoded)
    return [int(i) for i in ids] if isinstance(ids, list) else []


def _push(events: list[Event], event: ReasoningDelta | ContentDelta) -> None:
    """Append, merged into a delta of the same kind that ends `events`."""
    if isinstance(event, ContentDelta):
        push_content(events, event.text)
    elif event.text:
        last = events[-1] if events else None
        if isinstance(last, ReasoningDelta):
            events[-1] = ReasoningDelta(last.text + event.text)
        else:
            events.append(event)
