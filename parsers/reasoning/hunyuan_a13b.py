"""`hunyuan_a13b` reasoning (vLLM 0.33 `HunyuanA13BReasoningParser`).

Hunyuan-A13B writes `<think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>`. vLLM's batch
(`extract_reasoning`, two regexes) gives:

* output starting with `<think>\\n` and holding `\\n</think>\\n<answer>\\n`: the reasoning is
  what lies between them, the content what follows, up to the first `\\n</answer>`;
* otherwise the content is the output up to the first `\\n</answer>` (all of it without one);
* text after that `\\n</answer>` is dropped; empty parts are None.

Streaming runs that as phases over the three literals (`<think>\\n` only at the start).

Divergences from vLLM's batch (stream == our batch instead; named in the tests), where vLLM
decides on text that had streamed before it could be known:
* a `<think>\\n` opening never followed by `\\n</think>\\n<answer>\\n` (an output cut short):
  the text is reasoning (vLLM: all content, or up to a `\\n</answer>`);
* `<think>\\n...\\n</think>\\n<answer>\\n` after other text, with no `\\n</answer>`: content
  (vLLM drops the text before it and splits there).
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

__all__ = ["HunyuanA13BReasoningParser", "HunyuanState"]

THINK = "<think>\n"
ANSWER = "\n</think>\n<answer>\n"
ANSWER_END = "\n</answer>"
_MARKERS = MarkerSet((ANSWER, ANSWER_END))


class H(str, enum.Enum):
    START = "start"  # whether the output opens with <think>\n is not known yet
    THINK = "think"
    ANSWER = "answer"  # after the think part
    PLAIN = "plain"  # no think part
    DONE = "done"  # after \n</answer>: dropped


@dataclasses.dataclass(frozen=True, slots=True)
class HunyuanState(JsonState):
    VERSION = 1

    phase: H = H.START
    held: str = ""  # START: a prefix of <think>\n; else a partial marker

    def __post_init__(self) -> None:
        if not isinstance(self.phase, H):
            raise ValueError("unknown phase")
        if len(self.held) >= max(_MARKERS.max_len, len(THINK)):
            raise ValueError("held text longer than a marker")
        if self.phase is H.START and not THINK.startswith(self.held):
            raise ValueError("START holds only a prefix of <think>")


class HunyuanA13BReasoningParser(ReasoningParser):
    name: ClassVar[str] = "hunyuan_a13b"

    @classmethod
    def state_type(cls) -> type[HunyuanState]:
        return HunyuanState

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        return False  # vLLM's answer is its streaming state, never set from a prompt

    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> HunyuanState:
        return HunyuanState()

    def feed(self, state: JsonState, text: str) -> tuple[HunyuanState, list[Event]]:
        return self._run(self._check(state), text, final=False)

    def finish(self, state: JsonState) -> tuple[HunyuanState, list[Event]]:
        return self._run(self._check(state), "", final=True)

    def parse(self, text: str, prompt_token_ids: Sequence[int] = ()) -> ReasoningResult:
        if not text:
            return ReasoningResult(None, text)  # vLLM's fallback returns the output as is
        state, events = self.feed(self.initial_state(prompt_token_ids), text)
        _, tail = self.finish(state)
        events += tail
        reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
        content = "".join(e.text for e in events if isinstance(e, ContentDelta))
        return ReasoningResult(reasoning or None, content or None)

    def _check(self, state: JsonState) -> HunyuanState:
        if not isinstance(state, HunyuanState):
            raise StateError(f"{type(self).__name__}: expected HunyuanState")
        return state

    def _run(self, state: HunyuanState, text: str, *, final: bool) -> tuple[HunyuanState, list[Event]]:
        sink = EventSink()
        phase, buf = state.phase, state.held + text
        if phase is H.START:
            if buf.startswith(THINK):
                phase, buf = H.THINK, buf[len(THINK):]
            elif THINK.startswith(buf) and not final:
                return state.replace(held=buf), sink.events
            else:
                phase = H.PLAIN
        if phase is H.DONE:
            return state.replace(phase=phase, held=""), sink.events
        segments, held = _MARKERS.split(buf, final=final)
        for segment, is_marker in segments:
            if phase is H.DONE:
                break
            if phase is H.THINK:
                if is_marker and segment == ANSWER:
                    phase = H.ANSWER
                else:
                    sink.reasoning(segment)
            elif is_marker and segment == ANSWER_END:
                phase = H.DONE
            else:
                sink.content(segment)
        return HunyuanState(phase, "" if phase is H.DONE else held), sink.events
