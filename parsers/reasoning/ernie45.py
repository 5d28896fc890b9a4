"""`ernie45` reasoning (vLLM 0.33 `Ernie45ReasoningParser`).

The reasoning split is `deepseek_r1`'s (`BaseThinkingReasoningParser`: the first `<think>` is
dropped, everything up to the first `</think>` is reasoning). Then, when the content holds a
`<response>` and, after it, a `</response>`, the content is what lies between the first
`<response>` and the last `</response>`.

Streaming filters the content: blanks before a `<response>` are held (dropped by it); the
response streams; the text after a `</response>` is held until another `</response>` shows it
was part of the response, and dropped at the end.

Divergences from vLLM's batch (stream == our batch instead; named in the tests), each where
vLLM decides on text that had to stream before it could be known:
* a `<response>` after other content: the content is kept verbatim (vLLM also drops what came
  before the `<response>` and after the last `</response>`);
* a `<response>` never closed (an output cut short): the response text is content without the
  `<response>` marker and the blanks before it (vLLM keeps both verbatim);
* more than MAX_HELD_CHARS after a `</response>`: that text streams as response text;
* deepseek_r1's own (a late first `<think>` does not erase the text before it).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from parsers._base import MAX_HELD_CHARS, ReasoningParser, ReasoningResult, Vocab
from parsers._errors import StateError
from parsers._events import ContentDelta, Event, ReasoningDelta
from parsers._state import JsonState
from parsers._text import MarkerSet
from parsers.reasoning.deepseek_r1 import DeepSeekR1ReasoningParser, ThinkState

__all__ = ["Ernie45ReasoningParser", "Ernie45State"]

RESPONSE_START = "<response>"
RESPONSE_END = "</response>"
_MARKERS = MarkerSet((RESPONSE_START, RESPONSE_END))


class R(str, enum.Enum):
    LEAD = "lead"  # only blanks so far (held)
    PLAIN = "plain"  # no response wrapping: verbatim
    INNER = "inner"  # inside <response>
    AFTER = "after"  # after a </response>: held


@dataclasses.dataclass(frozen=True, slots=True)
class Ernie45State(JsonState):
    VERSION = 1

    think: ThinkState = ThinkState()
    phase: R = R.LEAD
    held: str = ""  # partial response marker
    kept: str = ""  # LEAD: the blanks; AFTER: the text after the last </response>

    def __post_init__(self) -> None:
        if not isinstance(self.phase, R):
            raise ValueError("unknown phase")
        if len(self.held) >= _MARKERS.max_len:
            raise ValueError("held text longer than a marker")
        if self.kept and self.phase not in (R.LEAD, R.AFTER):
            raise ValueError("text kept outside the lead or a response's tail")
        if self.phase is R.LEAD and self.kept.strip():
            raise ValueError("non-blank lead")
        if len(self.kept) > MAX_HELD_CHARS:
            raise ValueError("kept text over the bound")


class Ernie45ReasoningParser(ReasoningParser):
    name: ClassVar[str] = "ernie45"

    def __init__(
        self,
        vocab: Vocab,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        special_tokens: Iterable[str] = (),
    ) -> None:
        super().__init__(vocab, chat_template_kwargs, special_tokens=special_tokens)
        self._think = DeepSeekR1ReasoningParser(vocab, chat_template_kwargs, special_tokens=special_tokens)

    @classmethod
    def state_type(cls) -> type[Ernie45State]:
        return Ernie45State

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        return self._think.is_reasoning_end(token_ids)

    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> Ernie45State:
        return Ernie45State(think=self._think.initial_state(prompt_token_ids))

    def feed(self, state: JsonState, text: str) -> tuple[Ernie45State, list[Event]]:
        state = self._check(state)
        think, events = self._think.feed(state.think, text)
        return self._filter(state.replace(think=think), events, final=False)

    def finish(self, state: JsonState) -> tuple[Ernie45State, list[Event]]:
        state = self._check(state)
        think, events = self._think.finish(state.think)
        return self._filter(state.replace(think=think), events, final=True)

    def parse(self, text: str, prompt_token_ids: Sequence[int] = ()) -> ReasoningResult:
        state, events = self.feed(self.initial_state(prompt_token_ids), text)
        _, tail = self.finish(state)
        events += tail
        reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
        content = "".join(e.text for e in events if isinstance(e, ContentDelta))
        return ReasoningResult(reasoning, content or None)

    def _check(self, state: JsonState) -> Ernie45State:
        if not isinstance(state, Ernie45State):
            raise StateError(f"{type(self).__name__}: expected Ernie45State")
        return state

    def _filter(
        self, state: Ernie45State, events: list[Event], *, final: bool
    ) -> tuple[Ernie45State, list[Event]]:
        out: list[Event] = []
        text = "".join(e.text for e in events if isinstance(e, ContentDelta))
        for event in events:
            if isinstance(event, ReasoningDelta):
                out.append(event)  # the think parser emits all reasoning before any content
        segments, held = _MARKERS.split(state.held + text, final=final)
        phase, kept = state.phase, state.kept
        parts: list[str] = []
        for segment, is_marker in segments:
            if phase is R.PLAIN:
                parts.append(segment)
            elif phase is R.LEAD:
                if is_marker and segment == RESPONSE_START:
                    phase, kept = R.INNER, ""
                elif not is_marker and not segment.strip() and len(kept) + len(segment) <= MAX_HELD_CHARS:
                    kept += segment
                else:
                    parts.append(kept + segment)
                    phase, kept = R.PLAIN, ""
            elif phase is R.INNER:
                if is_marker and segment == RESPONSE_END:
                    phase = R.AFTER
                else:
                    parts.append(segment)
            elif is_marker and segment == RESPONSE_END:  # AFTER: the tail was response text
                parts.append(RESPONSE_END + kept)
                kept = ""
            elif len(kept) + len(segment) > MAX_HELD_CHARS:  # documented bound
                parts.append(RESPONSE_END + kept + segment)
                phase, kept = R.INNER, ""
            else:
                kept += segment
        if final:
            if phase is R.LEAD:
                parts.append(kept)
            kept = ""  # AFTER: the text after the last </response> is dropped
        content = "".join(parts)
        if content:
            out.append(ContentDelta(content))
        return state.replace(phase=phase, held=held, kept=kept), out
