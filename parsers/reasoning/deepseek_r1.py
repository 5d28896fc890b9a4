"""`deepseek_r1` reasoning (vLLM 0.33 `DeepSeekR1ReasoningParser` / `BaseThinkingReasoningParser`).

Batch semantics upstream (`extract_reasoning`): drop everything up to and including the first
`<think>`; with no `</think>` after that the whole rest is reasoning (content None); else split
at the first `</think>` (empty content -> None). The prompt plays no part in the batch result.

Streaming here reproduces that with a bounded state:

* PRE: nothing decided yet. Whitespace is held (run-length encoded) because a following
  `<think>` would drop it; `<think>` drops it and opens reasoning; `</think>` makes it the
  reasoning and starts content; any other text commits it (and the text) as reasoning.
* REASONING: text is reasoning; `</think>` starts content; a `<think>` after the first one is
  kept as reasoning text (upstream only strips the first).
* CONTENT: everything verbatim, markers included.

Documented divergence (unreachable without unbounded buffering): when a `<think>` appears
*after* non-whitespace text that was not preceded by a `<think>`, upstream's batch result
retroactively drops all the text before it (and, after a `</think>`, even the content). Here
that text stays (as upstream's stream keeps it): in REASONING the late `<think>` marker itself
is dropped, in CONTENT it is content. Tests name these cases.

Upstream requires `<think>` and `</think>` to be single vocabulary tokens (RuntimeError);
here that is a ParserConfigError.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from parsers._base import ReasoningParser, ReasoningResult, Vocab
from parsers._errors import ParserConfigError, StateError
from parsers._events import ContentDelta, Event, ReasoningDelta
from parsers._state import JsonState
from parsers._text import MarkerSet, check_ws_runs, ws_runs_append, ws_runs_text
from parsers.reasoning._engine import EventSink

__all__ = ["DeepSeekR1ReasoningParser", "ThinkState", "ThinkPhase"]

THINK_START = "<think>"
THINK_END = "</think>"
# Families spell the think markers their own way (a checkpoint suffix); the parser checks
# a state's held text against its own markers.
MAX_THINK_MARKER = 64


class ThinkPhase(str, enum.Enum):
    PRE = "pre"
    REASONING = "reasoning"
    CONTENT = "content"
    VERBATIM = "verbatim"  # identity (deepseek_v3 with thinking off)


@dataclasses.dataclass(frozen=True, slots=True)
class ThinkState(JsonState):
    VERSION = 1

    phase: ThinkPhase = ThinkPhase.PRE
    held: str = ""  # partial marker
    ws_chars: str = ""  # whitespace held in PRE (run-length encoded)
    ws_counts: tuple[int, ...] = ()
    think_seen: bool = False  # the first <think> has been consumed

    def __post_init__(self) -> None:
        if not isinstance(self.phase, ThinkPhase):
            raise ValueError("unknown phase")
        check_ws_runs(self.ws_chars, self.ws_counts)
        if len(self.held) >= MAX_THINK_MARKER:
            raise ValueError("held text longer than a marker")
        if self.ws_chars and self.phase is not ThinkPhase.PRE:
            raise ValueError("whitespace held outside PRE")


class DeepSeekR1ReasoningParser(ReasoningParser):
    name: ClassVar[str] = "deepseek_r1"

    def __init__(
        self,
        vocab: Vocab,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        special_tokens: Iterable[str] = (),
    ) -> None:
        super().__init__(vocab, chat_template_kwargs, special_tokens=special_tokens)
        self.think_start, self.think_end = self.think_markers()
        self._markers = MarkerSet((self.think_start, self.think_end))
        if self._markers.max_len > MAX_THINK_MARKER:
            raise ParserConfigError(f"{type(self).__name__}: think markers over {MAX_THINK_MARKER} chars")
        start_id = vocab.token_to_id(self.think_start)
        end_id = vocab.token_to_id(self.think_end)
        if (start_id is None or end_id is None) and self._needs_think_tokens():
            raise ParserConfigError(
                f"{type(self).__name__} could not locate think start/end tokens in the tokenizer"
            )
        self.start_token_id = start_id
        self.end_token_id = end_id

    def _needs_think_tokens(self) -> bool:
        return True

    def think_markers(self) -> tuple[str, str]:
        """The family's (start, end) think markers."""
        return THINK_START, THINK_END

    @classmethod
    def state_type(cls) -> type[ThinkState]:
        return ThinkState

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        for token_id in reversed(token_ids):
            if token_id == self.start_token_id:
                return False
            if token_id == self.end_token_id:
                return True
        return False

    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> ThinkState:
        # Upstream's batch result ignores the prompt (see module docstring).
        return ThinkState()

    def feed(self, state: JsonState, text: str) -> tuple[ThinkState, list[Event]]:
        return self._run(self._check(state), text, final=False)

    def finish(self, state: JsonState) -> tuple[ThinkState, list[Event]]:
        state, events = self._run(self._check(state), "", final=True)
        if state.phase is ThinkPhase.PRE and state.ws_chars:
            # Only whitespace and no marker: it is the (whole) reasoning.
            sink = EventSink()
            sink.events = events
            sink.reasoning(ws_runs_text(state.ws_chars, state.ws_counts))
            state = state.replace(ws_chars="", ws_counts=())
        return state, events

    def parse(self, text: str, prompt_token_ids: Sequence[int] = ()) -> ReasoningResult:
        state = self.initial_state(prompt_token_ids)
        if state.phase is ThinkPhase.VERBATIM:
            return ReasoningResult(None, text)
        state, events = self.feed(state, text)
        _, tail = self.finish(state)
        events += tail
        reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
        content = "".join(e.text for e in events if isinstance(e, ContentDelta))
        return ReasoningResult(reasoning, content or None)

    def _check(self, state: JsonState) -> ThinkState:
        if not isinstance(state, ThinkState):
            raise StateError(f"{type(self).__name__}: expected ThinkState")
        if len(state.held) >= self._markers.max_len:
            raise StateError(f"{type(self).__name__}: held text longer than a marker")
        return state

    def _run(self, state: ThinkState, text: str, *, final: bool) -> tuple[ThinkState, list[Event]]:
        sink = EventSink()
        if state.phase is ThinkPhase.VERBATIM:
            sink.content(text)
            return state, sink.events
        if state.phase is ThinkPhase.CONTENT:
            sink.content(state.held + text)
            return state.replace(held=""), sink.events
        segments, held = self._markers.split(state.held + text, final=final)
        # Typed wide: the earlier returns narrowed state.phase, the loop moves it on.
        phase: ThinkPhase = state.phase
        think_seen = state.think_seen
        ws_chars, ws_counts = state.ws_chars, state.ws_counts
        for index, (segment, is_marker) in enumerate(segments):
            if phase is ThinkPhase.CONTENT:
                # Everything after the end marker is content, verbatim.
                sink.content("".join(s for s, _ in segments[index:]) + held)
                return ThinkState(ThinkPhase.CONTENT, "", "", (), think_seen), sink.events
            if phase is ThinkPhase.PRE:
                pending = ws_runs_text(ws_chars, ws_counts)
                if not is_marker and not segment.strip():
                    ws_chars, ws_counts = ws_runs_append(ws_chars, ws_counts, segment)
                    continue
                ws_chars, ws_counts = "", ()
                if is_marker and segment == self.think_start:
                    think_seen = True  # drops the whitespace before it
                elif is_marker:  # </think>
                    sink.reasoning(pending)
                    phase = ThinkPhase.CONTENT
                else:
                    sink.reasoning(pending + segment)
                phase = ThinkPhase.REASONING if phase is ThinkPhase.PRE else phase
                continue
            # REASONING
            if not is_marker:
                sink.reasoning(segment)
            elif segment == self.think_end:
                phase = ThinkPhase.CONTENT
            elif think_seen:
                sink.reasoning(segment)  # only the first <think> is stripped
            else:
                think_seen = True  # late first <think>: dropped (divergence, see docstring)
        if phase is ThinkPhase.CONTENT:
            sink.content(held)
            held = ""
        return ThinkState(phase, held, ws_chars, ws_counts, think_seen), sink.events
