"""`inkling` reasoning (vLLM 0.33 `InklingParserReasoningAdapter` over vllm/parser/inkling.py).

vLLM's reasoning pass over `inkling_config` (see parsers/tools/inkling.py for the blocks):

* Output starts inside a message header (the prompt ends with `<|message_model|>`), as
  vLLM's batch does whatever the prompt (its stream seeds the state from the prompt's last
  block marker, and then differs from its batch; ours follows the batch). A header's text is
  dropped when a block kind follows, content when a block end follows or the output ends.
* `<|content_thinking|>` opens reasoning; `<|end_message|>` / `<|content_model_end_sampling|>`
  end any block; the text block kinds open visible content; markers without a transition in
  reasoning (`<|message_model|>`, `<|content_text|>`, ...) are reasoning text.
* `<|content_invoke_tool_json|>` ends reasoning and stays content, opening the tool span the
  reasoning pass forwards to the tool pass: the next block end is content too (inside
  reasoning: reasoning), and closes the span.
* Trailing reasoning whitespace is stripped; other special tokens are dropped.
* A header's text is held until decided, up to MAX_HEADER_CHARS (then a LimitExceededError).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from parsers._errors import LimitExceededError, StateError
from parsers._events import Event
from parsers._state import JsonState
from parsers.reasoning._engine import (
    EngineReasoningParser,
    EngineReasoningState,
    EngineSpec,
    EventSink,
    Phase,
)
from parsers.tools.inkling import (
    CONTENT_INVOKE_TOOL_JSON,
    CONTENT_INVOKE_TOOL_TEXT,
    CONTENT_MODEL_END_SAMPLING,
    CONTENT_TEXT,
    CONTENT_THINKING,
    CONTENT_TOOL_ERROR,
    END_MESSAGE,
    MESSAGE_MODEL,
)

__all__ = ["InklingReasoningParser", "InklingReasoningState"]

MARKERS = (MESSAGE_MODEL, CONTENT_TEXT, CONTENT_THINKING, CONTENT_INVOKE_TOOL_JSON,
           CONTENT_INVOKE_TOOL_TEXT, CONTENT_TOOL_ERROR, CONTENT_MODEL_END_SAMPLING, END_MESSAGE)  # fmt: skip
ENDS = frozenset({END_MESSAGE, CONTENT_MODEL_END_SAMPLING})
# A header holds a function name; its text is held until the block kind decides it (the
# same bound as one in-flight tool call's text).
MAX_HEADER_CHARS = 512 * 1024

INKLING_REASONING_SPEC = EngineSpec(
    markers=MARKERS,
    actions={},  # the block rules are `InklingReasoningParser._marker`
    strip_trailing_reasoning_ws=True,
    start_marker=None,
    end_markers=(),
)


@dataclass(frozen=True, slots=True)
class InklingReasoningState(EngineReasoningState):
    """in_header: inside a message header (phase is CONTENT then); header: its text."""

    in_header: bool = False
    header: str = ""

    def __post_init__(self) -> None:
        EngineReasoningState.__post_init__(self)
        if self.header and not self.in_header:
            raise ValueError("header text outside a header")
        if self.in_header and self.phase is not Phase.CONTENT:
            raise ValueError("a header outside content")


class InklingReasoningParser(EngineReasoningParser):
    name = "inkling"
    spec = INKLING_REASONING_SPEC

    @classmethod
    def state_type(cls) -> type[InklingReasoningState]:
        return InklingReasoningState

    def _start_state(self, prompt_token_ids: Sequence[int]) -> InklingReasoningState:
        """Inside a message header, whatever the prompt: vLLM's batch resets the engine to
        the config's initial state (only its stream seeds the state from the prompt)."""
        return InklingReasoningState(phase=Phase.CONTENT, in_header=True)

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        ids = {self._id(m): m for m in MARKERS}
        for token_id in reversed(token_ids):
            marker = ids.get(token_id)
            if marker in (CONTENT_THINKING, MESSAGE_MODEL):
                return False
            if marker in (CONTENT_TEXT, CONTENT_MODEL_END_SAMPLING):
                return True
        return False

    def _run(
        self, state: EngineReasoningState, text: str, *, final: bool
    ) -> tuple[InklingReasoningState, list[Event]]:
        if not isinstance(state, InklingReasoningState):
            raise StateError("inkling: expected InklingReasoningState")
        sink = EventSink()
        segments, held = self._markers.split(state.held + text, final=final)
        st = state.replace(held=held)
        for segment, is_marker in segments:
            if not is_marker:
                st = self._text(st, sink, segment)
            elif segment not in self._drops:
                st = self._marker(st, sink, segment)
        if final and st.in_header:  # vLLM's finish(): the header's text is content
            sink.content(st.header)
            st = st.replace(in_header=False, header="")
        return st, sink.events

    def _text(self, st: InklingReasoningState, sink: EventSink, text: str) -> InklingReasoningState:
        if st.in_header:
            if len(st.header) + len(text) > MAX_HEADER_CHARS:
                raise LimitExceededError(f"inkling: a message header over {MAX_HEADER_CHARS} characters")
            return st.replace(header=st.header + text)
        if st.phase is Phase.REASONING:
            ws_chars, ws_counts = self._emit_reasoning(sink, text, st.ws_chars, st.ws_counts)
            return st.replace(ws_chars=ws_chars, ws_counts=ws_counts)
        sink.content(text)
        return st

    def _marker(self, st: InklingReasoningState, sink: EventSink, marker: str) -> InklingReasoningState:
        content = Phase.CONTENT
        left = st.replace(in_header=False, header="")  # any transition drops the header text
        reasoning = st.phase is Phase.REASONING
        if marker == CONTENT_INVOKE_TOOL_JSON:  # the tool opener: ends reasoning, is content
            sink.content(marker)
            return left.replace(phase=content, span=True)
        if marker in ENDS:
            if st.span:  # inside the forwarded tool span: the end is the span's text
                left = left.replace(span=False)
                if reasoning and marker == END_MESSAGE:
                    return self._text(left, sink, marker)
                sink.content(marker)
                return left.replace(phase=content)
            if st.in_header:
                sink.content(st.header)
            return left.replace(phase=content)
        if reasoning:
            if marker == CONTENT_THINKING:
                return st
            return self._text(st, sink, marker)  # no transition in reasoning: text
        if marker == MESSAGE_MODEL:
            return left.replace(in_header=True)
        if marker == CONTENT_THINKING:
            return left.replace(phase=Phase.REASONING)
        return left.replace(phase=content)  # a visible block opens (text, tool text, error)

    def _check(self, state: JsonState) -> EngineReasoningState:
        checked = super()._check(state)
        if not isinstance(checked, InklingReasoningState):
            raise StateError("inkling: expected InklingReasoningState")
        return checked
