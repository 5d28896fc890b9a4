"""MiniMax-M3 reasoning (vLLM name `minimax_m3`, `MiniMaxM3ReasoningParser`; not engine-based).

Batch (`extract_reasoning`, text markers `<mm:think>` / `</mm:think>`):

* thinking_mode "enabled" (chat-template kwarg: the template opened `<mm:think>`): reasoning
  up to the first `</mm:think>`, content after it (all of it reasoning without one);
* otherwise a `</mm:think>` at the very start is dropped and the rest is content, verbatim;
  else the text before the first `<mm:think>` is content, reasoning runs to the next
  `</mm:think>` and the text after it is content again (without an end: all reasoning);
  without a `<mm:think>` everything is content.

Streaming follows the batch: only a possible marker prefix is held. Divergence (stream ==
our batch; test `test_minimax_m3_reasoning_*`): with thinking_mode "enabled", a `<mm:think>`
in the output is text (vLLM's batch then re-reads everything before it as content, which
had streamed as reasoning).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from parsers._base import ReasoningParser, ReasoningResult
from parsers._errors import StateError
from parsers._events import ContentDelta, Event, ReasoningDelta
from parsers._state import JsonState

__all__ = ["MinimaxM3ReasoningParser"]

START, END = "<mm:think>", "</mm:think>"


class Phase(enum.StrEnum):
    LEAD = "lead"  # the output's start: a `</mm:think>` here is dropped
    CONTENT = "content"  # before the first `<mm:think>`
    REASONING = "reasoning"  # until the first `</mm:think>` after it
    AFTER = "after"  # verbatim content to the end


@dataclass(frozen=True, slots=True)
class M3State(JsonState):
    VERSION = 1

    phase: Phase = Phase.LEAD
    held: str = ""  # a possible marker prefix


def _partial(text: str, marker: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `marker`."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


class MinimaxM3ReasoningParser(ReasoningParser):
    name = "minimax_m3"

    @property
    def _prefilled(self) -> bool:
        return self.chat_template_kwargs.get("thinking_mode") == "enabled"

    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> M3State:
        return M3State(Phase.REASONING if self._prefilled else Phase.LEAD)

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        """The last `</mm:think>` of the prompt comes after its last `<mm:think>`."""
        start, end = self.vocab.token_to_id(START), self.vocab.token_to_id(END)
        ids = list(token_ids)
        last_end = max((i for i, t in enumerate(ids) if t == end), default=-1)
        last_start = max((i for i, t in enumerate(ids) if t == start), default=-1)
        return last_end >= 0 and last_end > last_start

    def parse(self, text: str, prompt_token_ids: Sequence[int] = ()) -> ReasoningResult:
        if self._prefilled:
            reasoning, end, content = text.partition(END)
            return ReasoningResult(text, None) if not end else ReasoningResult(reasoning, content or None)
        if text.startswith(END):
            return ReasoningResult(None, text[len(END):] or None)
        if START not in text:
            return ReasoningResult(None, text)
        before, _, after = text.partition(START)
        reasoning, end, rest = after.partition(END)
        return ReasoningResult(reasoning, ((before + rest) if end else before) or None)

    def feed(self, state: JsonState, text: str) -> tuple[M3State, list[Event]]:
        return self._run(self._check(state), text, final=False)

    def finish(self, state: JsonState) -> tuple[M3State, list[Event]]:
        return self._run(self._check(state), "", final=True)

    @classmethod
    def state_type(cls) -> type[M3State]:
        return M3State

    def _check(self, state: JsonState) -> M3State:
        if not isinstance(state, M3State) or len(state.held) >= len(END):
            raise StateError(f"{self.name}: bad state")
        return state

    def _run(self, state: M3State, text: str, *, final: bool) -> tuple[M3State, list[Event]]:
        events: list[Event] = []
        text = state.held + text
        phase = state.phase
        while True:
            if phase is Phase.LEAD:
                if text.startswith(END):
                    phase, text = Phase.AFTER, text[len(END):]
                elif END.startswith(text) and not final:
                    return M3State(phase, text), events
                else:
                    phase = Phase.CONTENT
                continue
            if phase is Phase.AFTER:
                _emit(events, ContentDelta, text)
                return M3State(phase), events
            marker = START if phase is Phase.CONTENT else END
            kind = ContentDelta if phase is Phase.CONTENT else ReasoningDelta
            at = text.find(marker)
            if at >= 0:
                _emit(events, kind, text[:at])
                phase, text = (Phase.REASONING if phase is Phase.CONTENT else Phase.AFTER), text[at + len(marker):]
                continue
            held = 0 if final else _partial(text, marker)
            _emit(events, kind, text[: len(text) - held])
            return M3State(phase, text[len(text) - held:]), events


def _emit(events: list[Event], kind: type[ContentDelta] | type[ReasoningDelta], text: str) -> None:
    if not text:
        return
    if events and type(events[-1]) is kind:
        events[-1] = kind(events[-1].text + text)
    else:
        events.append(kind(text))
