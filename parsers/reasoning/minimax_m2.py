"""MiniMax-M2 reasoning (vLLM names `minimax_m2`, `minimax_m2_append_think`).

`minimax_m2` is vLLM 0.33's `MinimaxM2ParserReasoningAdapter` over `vllm/parser/minimax_m2.py`:
the model never writes `<think>` (the template opens it), so the output starts in reasoning
until `</think>`; `<think>` in reasoning is dropped, `<minimax:tool_call>` ends reasoning and
stays in the content (for the tool parser), a stray `</think>` in content is absorbed, and
so is a `</minimax:tool_call>` outside a tool span (one opened by `<minimax:tool_call>` or an
`<invoke name=`: the reasoning pass forwards the span as content);
non-marker special tokens are dropped; trailing reasoning whitespace is stripped. No turn
boundaries: the prompt never switches the start to content.

`minimax_m2_append_think` (`MiniMaxM2AppendThinkReasoningParser`, not engine-based) extracts no
reasoning: the content is `<think>` followed by the output, verbatim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from parsers._base import ReasoningParser, ReasoningResult
from parsers._errors import StateError
from parsers._events import ContentDelta, Event
from parsers._state import JsonState
from parsers.reasoning._engine import Action, EngineReasoningParser, EngineSpec, Phase

__all__ = ["MinimaxM2ReasoningParser", "MinimaxM2AppendThinkReasoningParser", "MINIMAX_M2_SPEC"]

THINK_START, THINK_END = "<think>", "</think>"
TOOL_CALL_START, TOOL_CALL_END = "<minimax:tool_call>", "</minimax:tool_call>"
_INVOKES = ('<invoke name="', "<invoke name='", "<invoke name=")

MINIMAX_M2_SPEC = EngineSpec(
    # Every text terminal of upstream's minimax_m2_config: they shape the scan.
    markers=(THINK_START, THINK_END, TOOL_CALL_START, TOOL_CALL_END, "<parameter name=",
             "</parameter>", *_INVOKES, "</invoke>", '">', "'>", ">"),  # fmt: skip
    actions={
        (Phase.REASONING, THINK_START): Action.DROP,
        (Phase.REASONING, THINK_END): Action.TO_CONTENT,
        (Phase.REASONING, TOOL_CALL_START): Action.KEEP_TO_CONTENT,
        (Phase.CONTENT, THINK_END): Action.DROP,
        (Phase.CONTENT, TOOL_CALL_START): Action.OPEN,
        **{(Phase.CONTENT, invoke): Action.OPEN for invoke in _INVOKES},
        (Phase.CONTENT, TOOL_CALL_END): Action.CLOSE,
    },
    tool_exits=frozenset({TOOL_CALL_END}),
    strip_trailing_reasoning_ws=True,
    start_marker=THINK_START,
    end_markers=((THINK_END, True), (TOOL_CALL_START, False)),
)


class MinimaxM2ReasoningParser(EngineReasoningParser):
    name = "minimax_m2"
    spec = MINIMAX_M2_SPEC


@dataclass(frozen=True, slots=True)
class AppendThinkState(JsonState):
    VERSION = 1

    started: bool = False  # the `<think>` prefix was sent


class MinimaxM2AppendThinkReasoningParser(ReasoningParser):
    name = "minimax_m2_append_think"

    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> AppendThinkState:
        return AppendThinkState()

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        """The last `</think>` or `<think>` of the prompt decides; neither: not ended."""
        end, start = self.vocab.token_to_id(THINK_END), self.vocab.token_to_id(THINK_START)
        for token_id in reversed(token_ids):
            if token_id in (end, start):
                return token_id == end
        return False

    def feed(self, state: JsonState, text: str) -> tuple[AppendThinkState, list[Event]]:
        state = self._check(state)
        prefix = "" if state.started else THINK_START
        return AppendThinkState(started=True), [ContentDelta(prefix + text)] if prefix + text else []

    def finish(self, state: JsonState) -> tuple[AppendThinkState, list[Event]]:
        return self.feed(state, "")

    def parse(self, text: str, prompt_token_ids: Sequence[int] = ()) -> ReasoningResult:
        return ReasoningResult(None, THINK_START + text)

    @classmethod
    def state_type(cls) -> type[AppendThinkState]:
        return AppendThinkState

    def _check(self, state: JsonState) -> AppendThinkState:
        if not isinstance(state, AppendThinkState):
            raise StateError(f"{self.name}: expected AppendThinkState")
        return state
