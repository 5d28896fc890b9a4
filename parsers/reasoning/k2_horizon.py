"""`k2_horizon` reasoning (vLLM 0.33 `K2HorizonReasoningParser`).

The think markers follow `reasoning_effort` in the chat template kwargs: "high" (default)
`<ifm|think>` / `</ifm|think>`, "medium" `<ifm|think_fast>` / ..., "low" `<ifm|think_faster>`
/ ...; any other effort is refused, as upstream.

Batch (`extract_reasoning`): one start marker at the very beginning is dropped; then, if the
end marker occurs, reasoning is the text before its first occurrence and content the text
after it; else, if `<ifm|tool_calls>` occurs, reasoning is the text before it and content
starts with it; else everything is content and the reasoning is "".

Streaming: the split depends on text that may come much later, so the output is held (raw)
until it is decided: the end marker decides at once, the end of the output decides the rest.
Divergence (bounded state; test `test_k2_horizon_divergence_*`): an undecided output longer
than MAX_HELD_CHARS is decided early as vLLM's own stream decides it: reasoning up to the
first `<ifm|tool_calls>` (content from there), or, without one, reasoning that streams until
an end or tool-calls marker (and stays reasoning if none comes).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from parsers._base import MAX_HELD_CHARS, ReasoningParser, ReasoningResult, Vocab
from parsers._errors import ParserConfigError, StateError
from parsers._events import ContentDelta, Event, ReasoningDelta
from parsers._state import JsonState
from parsers._text import MarkerSet
from parsers.reasoning._engine import EventSink

__all__ = ["K2HorizonReasoningParser", "K2HorizonState"]

TOOL_CALLS = "<ifm|tool_calls>"
EFFORT_MARKERS = {
    "high": ("<ifm|think>", "</ifm|think>"),
    "medium": ("<ifm|think_fast>", "</ifm|think_fast>"),
    "low": ("<ifm|think_faster>", "</ifm|think_faster>"),
}


class Phase(str, enum.Enum):
    START = "start"  # `held`: a possible start marker at the very beginning
    UNDECIDED = "undecided"  # `held`: the raw output since the start marker
    REASONING = "reasoning"  # decided early (long output): `held` a possible marker
    CONTENT = "content"


@dataclasses.dataclass(frozen=True, slots=True)
class K2HorizonState(JsonState):
    VERSION = 1

    phase: Phase = Phase.START
    held: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.phase, Phase):
            raise ValueError("unknown phase")


class K2HorizonReasoningParser(ReasoningParser):
    name: ClassVar[str] = "k2_horizon"

    def __init__(
        self,
        vocab: Vocab,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        special_tokens: Iterable[str] = (),
    ) -> None:
        super().__init__(vocab, chat_template_kwargs, special_tokens=special_tokens)
        effort = self.chat_template_kwargs.get("reasoning_effort", "high")
        if not isinstance(effort, str) or effort not in EFFORT_MARKERS:
            raise ParserConfigError(
                f"Unsupported reasoning_effort {effort!r}. Supported values: {', '.join(EFFORT_MARKERS)}."
            )
        self.think_start, self.think_end = EFFORT_MARKERS[effort]
        if vocab.token_to_id(self.think_start) is None or vocab.token_to_id(self.think_end) is None:
            raise ParserConfigError("k2_horizon could not locate think start/end tokens in the tokenizer")
        self._ids = {m: vocab.token_to_id(m) for m in (self.think_start, self.think_end, TOOL_CALLS)}
        self.start_token_id = self._ids[self.think_start]
        self.end_token_id = self._ids[self.think_end]
        self._markers = MarkerSet((self.think_end, TOOL_CALLS))

    @classmethod
    def state_type(cls) -> type[K2HorizonState]:
        return K2HorizonState

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        ends = {self._ids[self.think_end], self._ids[TOOL_CALLS]} - {None}
        for token_id in reversed(token_ids):
            if token_id == self._ids[self.think_start]:
                return False
            if token_id in ends:
                return True
        return False

    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> K2HorizonState:
        return K2HorizonState()  # upstream's batch result ignores the prompt

    def feed(self, state: JsonState, text: str) -> tuple[K2HorizonState, list[Event]]:
        return self._run(self._check(state), text, final=False)

    def finish(self, state: JsonState) -> tuple[K2HorizonState, list[Event]]:
        return self._run(self._check(state), "", final=True)

    def parse(self, text: str, prompt_token_ids: Sequence[int] = ()) -> ReasoningResult:
        state, events = self.feed(self.initial_state(prompt_token_ids), text)
        _, tail = self.finish(state)
        events += tail
        reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
        content = "".join(e.text for e in events if isinstance(e, ContentDelta))
        return ReasoningResult(reasoning, content or None)

    def _check(self, state: JsonState) -> K2HorizonState:
        if not isinstance(state, K2HorizonState):
            raise StateError(f"{type(self).__name__}: expected K2HorizonState")
        bound = {Phase.START: len(self.think_start), Phase.UNDECIDED: MAX_HELD_CHARS + 1,
                 Phase.REASONING: self._markers.max_len, Phase.CONTENT: 1}[state.phase]  # fmt: skip
        if len(state.held) >= bound:
            raise StateError(f"{type(self).__name__}: held text over its bound")
        return state

    def _run(self, state: K2HorizonState, text: str, *, final: bool) -> tuple[K2HorizonState, list[Event]]:
        sink = EventSink()
        phase, text = state.phase, state.held + text
        if phase is Phase.START:
            if self.think_start.startswith(text) and text != self.think_start and not final:
                return state.replace(held=text), sink.events
            phase, text = Phase.UNDECIDED, text.removeprefix(self.think_start)
        if phase is Phase.UNDECIDED:
            end = text.find(self.think_end)
            if end != -1:
                sink.reasoning(text[:end])
                sink.content(text[end + len(self.think_end) :])
                return K2HorizonState(Phase.CONTENT), sink.events
            tools = text.find(TOOL_CALLS)
            if final:
                if tools == -1:
                    sink.content(text)
                else:
                    sink.reasoning(text[:tools])
                    sink.content(text[tools:])
                return K2HorizonState(Phase.CONTENT), sink.events
            if len(text) <= MAX_HELD_CHARS:
                return K2HorizonState(Phase.UNDECIDED, text), sink.events
            if tools != -1:  # decided early (divergence): as vLLM's stream
                sink.reasoning(text[:tools])
                sink.content(text[tools:])
                return K2HorizonState(Phase.CONTENT), sink.events
            phase = Phase.REASONING
        if phase is Phase.CONTENT:
            sink.content(text)
            return K2HorizonState(Phase.CONTENT), sink.events
        segments, held = self._markers.split(text, final=final)
        for i, (segment, is_marker) in enumerate(segments):
            if not is_marker:
                sink.reasoning(segment)
                continue
            rest = "".join(s for s, _ in segments[i + 1 :]) + held
            sink.content(rest if segment == self.think_end else segment + rest)
            return K2HorizonState(Phase.CONTENT), sink.events
        return K2HorizonState(Phase.REASONING, held), sink.events
