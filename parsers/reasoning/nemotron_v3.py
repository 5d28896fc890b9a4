"""`nemotron_v3` reasoning (vLLM 0.33 `NemotronV3ParserReasoningAdapter`, vllm/parser/nemotron_v3.py).

* The qwen3 grammar (`<think>`/`</think>`, `<tool_call>` ends reasoning and stays content,
  ChatML turn boundaries), with trailing reasoning whitespace stripped.
* Thinking is on unless `enable_thinking` is falsy; off means the output is content, verbatim.
* The swap: when `enable_thinking` is False or `force_nonempty_content` is True and the
  content is None or blank, reasoning and content trade places (a truncated thought becomes
  the content; a blank thinking-off output becomes the reasoning).

Streaming the swap: while it may still happen, reasoning and the blank content are held;
the first non-blank content settles it (both are sent), the end of the output applies it.
Divergence (named in the tests): the held text is bounded by MAX_SWAP_HELD_CHARS; past it
the reasoning streams and the swap is off, in batch too (vLLM swaps at any length, but its
stream never takes back the reasoning it sent: it repeats it as content).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from parsers._base import ReasoningResult, Vocab
from parsers._errors import StateError
from parsers._events import ContentDelta, Event, ReasoningDelta
from parsers._state import JsonState
from parsers.reasoning._engine import EngineReasoningParser, EngineReasoningState
from parsers.reasoning.qwen3 import QWEN3_SPEC

__all__ = ["NemotronV3ReasoningParser", "NEMOTRON_V3_SPEC", "MAX_SWAP_HELD_CHARS"]

NEMOTRON_V3_SPEC = dataclasses.replace(QWEN3_SPEC, strip_trailing_reasoning_ws=True)

# Same bound as forced tool-call text (parsers/chat.py): 512 Ki characters.
MAX_SWAP_HELD_CHARS = 512 * 1024


@dataclass(frozen=True, slots=True)
class NemotronV3State(JsonState):
    """engine: the qwen3-grammar state. settled: the swap can no longer happen (or is off).
    reasoning / content: what is held while it can (content is blank)."""

    engine: EngineReasoningState = EngineReasoningState()
    settled: bool = True
    reasoning: str = ""
    content: str = ""

    def __post_init__(self) -> None:
        if self.content.strip():
            raise ValueError("held content is not blank")
        if self.settled and (self.reasoning or self.content):
            raise ValueError("a settled state holds text")


class NemotronV3ReasoningParser(EngineReasoningParser):
    name = "nemotron_v3"
    spec = NEMOTRON_V3_SPEC

    def __init__(
        self,
        vocab: Vocab,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        special_tokens: Iterable[str] = (),
    ) -> None:
        super().__init__(vocab, chat_template_kwargs, special_tokens=special_tokens)
        kwargs = self.chat_template_kwargs
        # vLLM's _should_force_content: identity checks, not truthiness.
        self.force = kwargs.get("enable_thinking") is False or kwargs.get("force_nonempty_content") is True

    def _thinking_enabled(self) -> bool:
        return bool(self.chat_template_kwargs.get("enable_thinking", True))

    @classmethod
    def state_type(cls) -> type[NemotronV3State]:  # type: ignore[override]
        return NemotronV3State

    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> NemotronV3State:  # type: ignore[override]
        return NemotronV3State(self._start_state(prompt_token_ids), settled=not self.force)

    def parse(self, text: str, prompt_token_ids: Sequence[int] = ()) -> ReasoningResult:
        result = super().parse(text, prompt_token_ids)
        reasoning, content = result.reasoning, result.content
        held = len(reasoning or "") + len(content or "")
        if self.force and (content is None or not content.strip()) and held <= MAX_SWAP_HELD_CHARS:
            return ReasoningResult(content, reasoning)
        return result

    # The grammar's state is wrapped, so these narrow the engine's signatures differently.
    def feed(self, state: JsonState, text: str) -> tuple[NemotronV3State, list[Event]]:  # type: ignore[override]
        own = self._own(state)
        engine, events = super().feed(own.engine, text)
        return self._swap(own.replace(engine=engine), events, final=False)

    def finish(self, state: JsonState) -> tuple[NemotronV3State, list[Event]]:  # type: ignore[override]
        own = self._own(state)
        engine, events = super().finish(own.engine)
        return self._swap(own.replace(engine=engine), events, final=True)

    def _own(self, state: JsonState) -> NemotronV3State:
        if not isinstance(state, NemotronV3State):
            raise StateError("nemotron_v3: expected NemotronV3State")
        if not state.settled and not self.force:
            raise StateError("nemotron_v3: a held swap without the force switch")
        return state

    def _swap(
        self, state: NemotronV3State, events: list[Event], *, final: bool
    ) -> tuple[NemotronV3State, list[Event]]:
        if state.settled:
            return state, events
        reasoning, content = state.reasoning, state.content
        out: list[Event] = []
        settled = False
        for event in events:
            if settled:
                out.append(event)
                continue
            if isinstance(event, ReasoningDelta):
                reasoning += event.text
            elif isinstance(event, ContentDelta):
                content += event.text
            # In this grammar content never precedes reasoning: held order is model order.
            if content.strip() or len(reasoning) + len(content) > MAX_SWAP_HELD_CHARS:
                out.extend(_deltas(reasoning, content))
                settled = True
        if settled:
            return NemotronV3State(state.engine), out
        if final:
            out.extend(_deltas(content, reasoning))  # the swap
            return NemotronV3State(state.engine), out
        return state.replace(reasoning=reasoning, content=content), out


def _deltas(reasoning: str, content: str) -> list[Event]:
    out: list[Event] = []
    if reasoning:
        out.append(ReasoningDelta(reasoning))
    if content:
        out.append(ContentDelta(content))
    return out
