"""`granite` reasoning (vLLM 0.33 `GraniteReasoningParser`, Granite 3.x text markers).

Upstream batch: `(?:Here's|Here is) my thought process:(.*?)(?:Here's|Here is) my
response:(.*)` searched in the output; no match means the whole output is content.

Streaming here (bounded state):

* START: text that may still become "Here is my thought process:" / "Here's my thought
  process:" at the very start of the output is held; once it cannot, the output is content,
  verbatim (VERBATIM).
* REASONING: after the thought-process marker; text is reasoning until the first
  "Here is my response:" / "Here's my response:" (partial markers are held).
* CONTENT: the rest, verbatim. Empty content is None, reasoning may be "".

Documented divergences from upstream's batch result, both cases where it would have to
retract streamed text (upstream's own stream behaves like this parser): a thought-process
marker with no response marker after it gives reasoning here (upstream batch: all content);
a thought-process marker that is not at the very start leaves the output content here
(upstream batch: text before it dropped, split as above).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import ClassVar

from parsers._base import ReasoningParser, ReasoningResult
from parsers._errors import StateError
from parsers._events import ContentDelta, Event, ReasoningDelta
from parsers._state import JsonState
from parsers._text import MarkerSet
from parsers.reasoning._engine import EventSink

__all__ = ["GraniteReasoningParser", "GraniteState", "GranitePhase"]

THINK_STARTS = ("Here's my thought process:", "Here is my thought process:")
RESPONSE_STARTS = ("Here's my response:", "Here is my response:")
_RESPONSE_MARKERS = MarkerSet(RESPONSE_STARTS)
_MAX_START = max(len(s) for s in THINK_STARTS)


class GranitePhase(str, enum.Enum):
    START = "start"
    REASONING = "reasoning"
    CONTENT = "content"
    VERBATIM = "verbatim"


@dataclasses.dataclass(frozen=True, slots=True)
class GraniteState(JsonState):
    VERSION = 1

    phase: GranitePhase = GranitePhase.START
    held: str = ""  # START: possible thought-process marker; REASONING: partial response marker

    def __post_init__(self) -> None:
        if not isinstance(self.phase, GranitePhase):
            raise ValueError("unknown phase")
        if len(self.held) >= _MAX_START:
            raise ValueError("held text longer than a marker")


class GraniteReasoningParser(ReasoningParser):
    name: ClassVar[str] = "granite"

    @classmethod
    def state_type(cls) -> type[GraniteState]:
        return GraniteState

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        # Upstream does not implement it (the abstract method returns None).
        return False

    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> GraniteState:
        return GraniteState()

    def feed(self, state: JsonState, text: str) -> tuple[GraniteState, list[Event]]:
        return self._run(self._check(state), text, final=False)

    def finish(self, state: JsonState) -> tuple[GraniteState, list[Event]]:
        return self._run(self._check(state), "", final=True)

    def parse(self, text: str, prompt_token_ids: Sequence[int] = ()) -> ReasoningResult:
        state, events = self._run(self.initial_state(prompt_token_ids), text, final=True)
        reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
        content = "".join(e.text for e in events if isinstance(e, ContentDelta))
        if state.phase is GranitePhase.VERBATIM:
            return ReasoningResult(None, content)
        return ReasoningResult(reasoning, content or None)

    def _check(self, state: JsonState) -> GraniteState:
        if not isinstance(state, GraniteState):
            raise StateError(f"{type(self).__name__}: expected GraniteState")
        return state

    def _run(
        self, state: GraniteState, text: str, *, final: bool
    ) -> tuple[GraniteState, list[Event]]:
        sink = EventSink()
        phase, buffer = state.phase, state.held + text
        if phase is GranitePhase.START:
            marker = next((m for m in THINK_STARTS if buffer.startswith(m)), None)
            if marker is not None:
                phase, buffer = GranitePhase.REASONING, buffer[len(marker) :]
            elif not final and any(m.startswith(buffer) for m in THINK_STARTS):
                return GraniteState(phase, buffer), sink.events
            else:
                phase = GranitePhase.VERBATIM
        if phase is GranitePhase.REASONING:
            segments, held = _RESPONSE_MARKERS.split(buffer, final=final)
            for index, (segment, is_marker) in enumerate(segments):
                if is_marker:
                    sink.content("".join(s for s, _ in segments[index + 1 :]) + held)
                    return GraniteState(GranitePhase.CONTENT, ""), sink.events
                sink.reasoning(segment)
            return GraniteState(phase, held), sink.events
        sink.content(buffer)
        return GraniteState(phase, ""), sink.events
