"""Marker-table reasoning parser: the families vLLM 0.33 runs on its parser engine.

Theory of operation
-------------------
vLLM's `qwen3`, `glm45` and `mistral` reasoning parsers are adapters over a declarative
`ParserEngine` (vllm/parser/engine). For reasoning extraction the adapter runs the engine with
`skip_tool_parsing=True`, and the batch result (`extract_reasoning`, what derender uses) feeds
the whole text *without token ids*. What that engine does then reduces to a small table:

* the text is cut into markers and plain text by a leftmost-longest literal scan over the
  family's terminals plus every tokenizer special token that is not a terminal (the engine's
  "drop" terminals);
* each (phase, marker) pair has one action: drop the marker, switch phase (dropping the
  marker), switch to content keeping the marker as content (a tool-call opener ends reasoning
  implicitly), or - with no entry - emit the marker as text of the current phase;
* plain text goes to reasoning or content by phase;
* batch reasoning is the concatenation of reasoning text (right-stripped for families with
  `strip_trailing_reasoning_whitespace`), content the concatenation of content; empty -> None.

`EngineReasoningParser` is that table run incrementally. Streaming holds back only a marker
prefix (`MarkerSet`) and, for stripping families, the trailing whitespace of reasoning (run
length encoded; it is emitted if more reasoning follows, dropped at the end), so any split of
the output concatenates to the batch result. Families with thinking switched off return the
output verbatim as content (the VERBATIM phase), as upstream's `extract_reasoning` does.

The starting phase comes from the rendered prompt as upstream's batch path does: thinking
families whose config has turn-boundary tokens start in CONTENT when the prompt already
closes reasoning in the current turn (`ParserEngine.set_prompt_token_ids`).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers._base import ReasoningParser, ReasoningResult, Vocab
from parsers._errors import StateError
from parsers._events import ContentDelta, Event, ReasoningDelta
from parsers._state import JsonState
from parsers._text import MarkerSet, check_ws_runs, ws_runs_append, ws_runs_text

__all__ = [
    "Phase",
    "Action",
    "EngineSpec",
    "EngineReasoningState",
    "EngineReasoningParser",
    "EventSink",
]


class Phase(str, enum.Enum):
    REASONING = "reasoning"
    CONTENT = "content"
    VERBATIM = "verbatim"  # thinking off: everything is content, no marker processing


class Action(enum.Enum):
    DROP = "drop"  # marker vanishes, phase unchanged
    TO_CONTENT = "to_content"  # reasoning ends; marker vanishes
    TO_REASONING = "to_reasoning"  # reasoning (re)starts; marker vanishes
    KEEP_TO_CONTENT = "keep_to_content"  # reasoning ends; marker is content (tool opener)
    OPEN = "open"  # a tool opener in content: marker is content, a tool span opens
    CLOSE = "close"  # a tool closer with a content transition: text inside a span, else dropped


@dataclass(frozen=True)
class EngineSpec:
    """One family's grammar, as far as reasoning extraction sees it."""

    markers: tuple[str, ...]  # every text terminal of the upstream config
    actions: Mapping[tuple[Phase, str], Action]
    strip_trailing_reasoning_ws: bool
    # is_reasoning_end inputs (ParserEngine.is_reasoning_end over the prompt ids)
    start_marker: str | None
    end_markers: tuple[tuple[str, bool], ...]  # (marker, leads to CONTENT) for REASONING ends
    turn_boundaries: tuple[str, ...] = ()
    start_opens_reasoning: bool = True
    drop_special_tokens: bool = True
    # Tool exits (markers leaving a tool state): text wherever they have no action, and they
    # close the tool span (vLLM's `_in_skipped_tool_span`, read by Action.CLOSE).
    tool_exits: frozenset[str] = frozenset()


class EventSink:
    """Collects deltas, merging consecutive text of the same kind."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def reasoning(self, text: str) -> None:
        if not text:
            return
        if self.events and isinstance(self.events[-1], ReasoningDelta):
            self.events[-1] = ReasoningDelta(self.events[-1].text + text)
        else:
            self.events.append(ReasoningDelta(text))

    def content(self, text: str) -> None:
        if not text:
            return
        if self.events and isinstance(self.events[-1], ContentDelta):
            self.events[-1] = ContentDelta(self.events[-1].text + text)
        else:
            self.events.append(ContentDelta(text))


@dataclasses.dataclass(frozen=True, slots=True)
class EngineReasoningState(JsonState):
    VERSION = 1

    phase: Phase = Phase.REASONING
    held: str = ""  # tail that may be the start of a marker
    ws_chars: str = ""  # trailing reasoning whitespace not yet emitted (run-length encoded)
    ws_counts: tuple[int, ...] = ()
    span: bool = False  # inside a tool span the reasoning pass forwards as content

    def __post_init__(self) -> None:
        if not isinstance(self.phase, Phase):
            raise ValueError("unknown phase")
        check_ws_runs(self.ws_chars, self.ws_counts)


class EngineReasoningParser(ReasoningParser):
    """Base of the engine-table families; subclasses provide `spec` and the thinking switch."""

    engine_based: ClassVar[bool] = True
    spec: EngineSpec  # a class default; a family may pick its spec per instance

    def __init__(
        self,
        vocab: Vocab,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        special_tokens: Iterable[str] = (),
    ) -> None:
        super().__init__(vocab, chat_template_kwargs, special_tokens=special_tokens)
        spec = self.spec
        configured = set(spec.markers)
        drops = (
            {t for t in self.special_tokens if t and t not in configured}
            if spec.drop_special_tokens
            else set()
        )
        self._drops = frozenset(drops)
        self._markers = MarkerSet((*spec.markers, *drops))
        self.thinking = self._thinking_enabled()
        self._start_id = self._id(spec.start_marker)
        self._end_ids = self._reasoning_end_ids()
        self._boundary_ids = frozenset(
            i for i in (self._id(t) for t in spec.turn_boundaries) if i is not None
        )

    # -- family hooks ------------------------------------------------------------------

    def _thinking_enabled(self) -> bool:
        """Whether reasoning extraction is on (False -> output is content verbatim)."""
        return True

    def _starts_in_reasoning(self) -> bool:
        """Upstream config's initial state when thinking is on."""
        return True

    # -- prompt-derived start ----------------------------------------------------------

    def _id(self, token: str | None) -> int | None:
        return self.vocab.token_to_id(token) if token else None

    def _reasoning_end_ids(self) -> frozenset[int]:
        """ParserEngine._derive_reasoning_end_token_ids: empty if a content end has no id."""
        ids = set()
        for marker, leads_to_content in self.spec.end_markers:
            token_id = self._id(marker)
            if token_id is not None:
                ids.add(token_id)
            elif leads_to_content:
                return frozenset()
        return frozenset(ids)

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        wait_for_reasoning = self.thinking and self._waits_for_reasoning()
        start_opens = self.thinking and self.spec.start_opens_reasoning
        for token_id in reversed(token_ids):
            if token_id in self._end_ids:
                return True
            if token_id == self._start_id:
                if start_opens:
                    return False
                break
            if token_id in self._boundary_ids:
                break
        return not wait_for_reasoning

    def _waits_for_reasoning(self) -> bool:
        return True

    def _prompt_closes_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        return (
            self.thinking
            and self._starts_in_reasoning()
            and bool(self._boundary_ids)
            and self.is_reasoning_end(prompt_token_ids)
        )

    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> EngineReasoningState:
        return self._start_state(prompt_token_ids)

    def _start_state(self, prompt_token_ids: Sequence[int]) -> EngineReasoningState:
        """The grammar's starting state (a family wrapping it in its own state keeps this)."""
        if not self.thinking:
            return EngineReasoningState(phase=Phase.VERBATIM)
        if not self._starts_in_reasoning() or self._prompt_closes_reasoning(prompt_token_ids):
            return EngineReasoningState(phase=Phase.CONTENT)
        return EngineReasoningState(phase=Phase.REASONING)

    @classmethod
    def state_type(cls) -> type[EngineReasoningState]:
        return EngineReasoningState

    # -- streaming -------------------------------------------------------------------

    def feed(self, state: JsonState, text: str) -> tuple[EngineReasoningState, list[Event]]:
        return self._run(self._check(state), text, final=False)

    def finish(self, state: JsonState) -> tuple[EngineReasoningState, list[Event]]:
        state, events = self._run(self._check(state), "", final=True)
        # Trailing reasoning whitespace is stripped by the batch result: drop it.
        return state.replace(ws_chars="", ws_counts=()), events

    def parse(self, text: str, prompt_token_ids: Sequence[int] = ()) -> ReasoningResult:
        state = self._start_state(prompt_token_ids)
        if state.phase is Phase.VERBATIM:
            return ReasoningResult(None, text)
        state, events = self._run(state, text, final=True)
        reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
        content = "".join(e.text for e in events if isinstance(e, ContentDelta))
        return ReasoningResult(reasoning or None, content or None)

    def _check(self, state: JsonState) -> EngineReasoningState:
        if not isinstance(state, EngineReasoningState):
            raise StateError(f"{type(self).__name__}: expected EngineReasoningState")
        if state.phase is Phase.VERBATIM and (state.held or state.ws_chars):
            raise StateError(f"{type(self).__name__}: verbatim state holds text")
        if len(state.held) >= max(self._markers.max_len, 1):
            raise StateError(f"{type(self).__name__}: held text longer than any marker")
        return state

    def _run(
        self, state: EngineReasoningState, text: str, *, final: bool
    ) -> tuple[EngineReasoningState, list[Event]]:
        sink = EventSink()
        if state.phase is Phase.VERBATIM:
            sink.content(text)
            return state, sink.events
        segments, held = self._markers.split(state.held + text, final=final)
        phase = state.phase
        ws_chars, ws_counts = state.ws_chars, state.ws_counts
        span = state.span
        for segment, is_marker in segments:
            action = self._action(phase, segment) if is_marker else None
            if action is Action.CLOSE:
                action, span = (None if span else Action.DROP), False
            elif action is None and is_marker and segment in self.spec.tool_exits:
                span = False
            if action is None:
                if phase is Phase.REASONING:
                    ws_chars, ws_counts = self._emit_reasoning(sink, segment, ws_chars, ws_counts)
                else:
                    sink.content(segment)
            elif action is Action.TO_CONTENT:
                phase = Phase.CONTENT
            elif action is Action.TO_REASONING:
                phase = Phase.REASONING
            elif action in (Action.KEEP_TO_CONTENT, Action.OPEN):
                phase, span = Phase.CONTENT, True
                sink.content(segment)
            # Action.DROP: the marker vanishes.
        new_state = EngineReasoningState(phase, held, ws_chars, ws_counts, span)
        return new_state, sink.events

    def _action(self, phase: Phase, marker: str) -> Action | None:
        if marker in self._drops:
            return Action.DROP
        return self.spec.actions.get((phase, marker))

    def _emit_reasoning(
        self, sink: EventSink, text: str, ws_chars: str, ws_counts: tuple[int, ...]
    ) -> tuple[str, tuple[int, ...]]:
        if not self.spec.strip_trailing_reasoning_ws:
            sink.reasoning(text)
            return ws_chars, ws_counts
        body = text.rstrip()
        if not body:
            return ws_runs_append(ws_chars, ws_counts, text)
        sink.reasoning(ws_runs_text(ws_chars, ws_counts) + body)
        return ws_runs_append("", (), text[len(body) :])
