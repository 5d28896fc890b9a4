"""`gemma4` reasoning (vLLM 0.33 `Gemma4ParserReasoningAdapter` over `vllm/parser/gemma4.py`).

    <|channel>thought
    ...reasoning...<channel|>answer

* Starts in content; `<|channel>` opens reasoning (dropped, also inside reasoning),
  `<channel|>` closes it (dropped, also in content). `<|tool_call>` ends reasoning implicitly
  and stays in the content; a `<tool_call|>` in content is kept after a `<|tool_call>` and
  dropped otherwise (the engine's skipped-tool span); other special tokens are dropped
  (`<|"|>` is kept).
* The reasoning loses its `thought\\n` channel label (a reasoning of just `thought` is none)
  and its trailing whitespace.
* `is_reasoning_end` waits for reasoning only with `enable_thinking` (vLLM's
  `wait_for_reasoning`).

Divergences (stream == our batch; tests `test_gemma4_reasoning_*`): vLLM's batch feeds the
whole text once and `_preprocess_feed` then prepends `<|channel>` when that text starts with
`thought\\n`, equals `thought` or contains `<channel|>` anywhere without a `<|channel>`; a
stream cannot know that at its start. Ours starts in reasoning exactly when the prompt ends
inside an open `<|channel>` (vLLM's stream, `adjust_initial_state_from_prompt`), which gives
vLLM's batch result for the case the rewrite exists for (a post-tool-response prompt ending in
`<|channel>thought\\n`, then `...<channel|>answer`), and keeps an output without any channel
markers as content.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from parsers._base import ReasoningResult, Vocab
from parsers._events import ContentDelta, Event, ReasoningDelta
from parsers._text import ws_runs_append, ws_runs_text
from parsers.reasoning._engine import (
    EngineReasoningParser,
    EngineReasoningState,
    EngineSpec,
    EventSink,
    Phase,
)

__all__ = ["Gemma4ReasoningParser", "Gemma4ReasoningState", "GEMMA4_REASONING_SPEC"]

CHANNEL_START, CHANNEL_END = "<|channel>", "<channel|>"
TOOL_START, TOOL_END = "<|tool_call>", "<tool_call|>"
DELIM = '<|"|>'
THOUGHT = "thought\n"

GEMMA4_REASONING_SPEC = EngineSpec(
    # Every text terminal of gemma4_config: the tool ones shape the scan and are text here.
    markers=(CHANNEL_START, CHANNEL_END, TOOL_START, TOOL_END, "call:", ":", "{", "("),
    actions={},  # the span-dependent rules are in `Gemma4ReasoningParser._marker`
    strip_trailing_reasoning_ws=True,
    start_marker=CHANNEL_START,
    end_markers=((CHANNEL_END, True), (TOOL_START, False)),
    turn_boundaries=("<|turn>", "<|tool_response>"),
)


@dataclasses.dataclass(frozen=True, slots=True)
class Gemma4ReasoningState(EngineReasoningState):
    """span: inside a `<|tool_call>` the content carries. head: the reasoning so far while it
    may still be the `thought\\n` label; labelled: that was decided."""

    span: bool = False
    head: str = ""
    labelled: bool = False


class Gemma4ReasoningParser(EngineReasoningParser):
    name: ClassVar[str] = "gemma4"
    spec = GEMMA4_REASONING_SPEC

    def __init__(
        self,
        vocab: Vocab,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        special_tokens: Iterable[str] = (),
    ) -> None:
        super().__init__(vocab, chat_template_kwargs, special_tokens=special_tokens)
        self._drops = self._drops - {DELIM}  # the string delimiter is preserved as text
        self._open_ids = frozenset(
            i for i in (self._id(t) for t in (CHANNEL_END, TOOL_START, "<|turn>", "<|tool_response>"))
            if i is not None
        )  # fmt: skip

    def _waits_for_reasoning(self) -> bool:
        return bool(self.chat_template_kwargs.get("enable_thinking", False))

    def _prompt_opens_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """The prompt ends inside an open `<|channel>` (vLLM's `_prompt_ends_in_open_reasoning`)."""
        if self._start_id is None:
            return False
        for token_id in reversed(prompt_token_ids):
            if token_id == self._start_id:
                return True
            if token_id in self._open_ids:
                return False
        return False

    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> Gemma4ReasoningState:
        phase = Phase.REASONING if self._prompt_opens_reasoning(prompt_token_ids) else Phase.CONTENT
        return Gemma4ReasoningState(phase=phase)

    @classmethod
    def state_type(cls) -> type[Gemma4ReasoningState]:
        return Gemma4ReasoningState

    def parse(self, text: str, prompt_token_ids: Sequence[int] = ()) -> ReasoningResult:
        state, events = self.feed(self.initial_state(prompt_token_ids), text)
        _, tail = self.finish(state)
        events += tail
        reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
        content = "".join(e.text for e in events if isinstance(e, ContentDelta))
        return ReasoningResult(reasoning or None, content or None)

    def _run(
        self, state: EngineReasoningState, text: str, *, final: bool
    ) -> tuple[Gemma4ReasoningState, list[Event]]:
        if not isinstance(state, Gemma4ReasoningState):
            state = Gemma4ReasoningState(state.phase, state.held, state.ws_chars, state.ws_counts)
        sink = EventSink()
        segments, held = self._markers.split(state.held + text, final=final)
        st = _Scratch(state)
        for segment, is_marker in segments:
            if not is_marker:
                self._text(st, sink, segment)
            elif segment in self._drops:
                continue
            else:
                self._marker(st, sink, segment)
        if final and not st.labelled:
            if st.head != THOUGHT.rstrip():  # a reasoning of just "thought" is none
                sink.reasoning(st.head)
            st.head, st.labelled = "", True
        new = Gemma4ReasoningState(st.phase, held, st.ws_chars, st.ws_counts, st.span, st.head, st.labelled)
        return new, sink.events

    def _marker(self, st: _Scratch, sink: EventSink, marker: str) -> None:
        if marker == CHANNEL_START:
            st.phase = Phase.REASONING
        elif marker == CHANNEL_END:
            st.phase = Phase.CONTENT
        elif marker == TOOL_START:
            st.phase, st.span = Phase.CONTENT, True
            sink.content(marker)
        elif marker == TOOL_END and st.phase is Phase.CONTENT:
            if st.span:
                sink.content(marker)
            st.span = False
        else:
            if marker == TOOL_END:
                st.span = False
            self._text(st, sink, marker)

    def _text(self, st: _Scratch, sink: EventSink, text: str) -> None:
        if st.phase is Phase.CONTENT:
            sink.content(text)
            return
        body = text.rstrip()  # trailing reasoning whitespace waits for more reasoning
        if not body:
            st.ws_chars, st.ws_counts = ws_runs_append(st.ws_chars, st.ws_counts, text)
            return
        self._reasoning(st, sink, ws_runs_text(st.ws_chars, st.ws_counts) + body)
        st.ws_chars, st.ws_counts = ws_runs_append("", (), text[len(body) :])

    def _reasoning(self, st: _Scratch, sink: EventSink, text: str) -> None:
        """Reasoning text, less a leading `thought\\n` label."""
        if st.labelled:
            sink.reasoning(text)
            return
        head = st.head + text
        if head.startswith(THOUGHT):
            sink.reasoning(head[len(THOUGHT) :])
        elif THOUGHT.startswith(head):
            st.head = head
            return
        else:
            sink.reasoning(head)
        st.head, st.labelled = "", True


class _Scratch:
    """Mutable copy of a state for one `_run`."""

    def __init__(self, state: Gemma4ReasoningState) -> None:
        self.phase = state.phase
        self.ws_chars, self.ws_counts = state.ws_chars, state.ws_counts
        self.span, self.head, self.labelled = state.span, state.head, state.labelled
