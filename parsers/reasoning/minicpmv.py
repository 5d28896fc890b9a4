"""`minicpmv` reasoning (vLLM 0.33 `MiniCPMVParserReasoningAdapter` over `vllm/parser/minicpmv.py`).

The `qwen3` grammar with MiniCPM-V's extras:

* thinking is on unless `chat_template_kwargs["enable_thinking"]` is falsy (the template opens
  `<think>` by default); there are no turn boundaries, so the prompt never starts the output
  in content;
* `<|im_end|>`, `<reserved_12..15>` and `<|reserved_12..15|>` are dropped wherever they occur;
* thinking off: the output starts in content, `<think>` opens a span that is dropped with its
  `</think>` (reasoning is discarded, never printed), `<tool_call>` still ends it; no trailing
  whitespace strip either way;
* the composed parser turns escaped newlines (`\\n`) back into newlines in reasoning and content
  (`recovers_escaped_newlines`, applied by parsers/chat.py with parsers/_newlines.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from parsers._base import ReasoningResult, Vocab
from parsers._events import Event, ReasoningDelta
from parsers._state import JsonState
from parsers.reasoning._engine import (
    Action,
    EngineReasoningParser,
    EngineReasoningState,
    EngineSpec,
    Phase,
)
from parsers.reasoning.qwen3 import QWEN3_SPEC, THINK_START

__all__ = ["MiniCPMVReasoningParser"]

_PASSTHROUGH = (
    "<|im_end|>",
    *(f"<reserved_{i}>" for i in range(12, 16)),
    *(f"<|reserved_{i}|>" for i in range(12, 16)),
)


def _spec(thinking: bool) -> EngineSpec:
    actions = dict(QWEN3_SPEC.actions)
    for marker in _PASSTHROUGH:
        actions[(Phase.REASONING, marker)] = Action.DROP
        actions[(Phase.CONTENT, marker)] = Action.DROP
    if not thinking:
        actions[(Phase.CONTENT, THINK_START)] = Action.TO_REASONING
    return EngineSpec(
        markers=(*QWEN3_SPEC.markers, *_PASSTHROUGH),
        actions=actions,
        strip_trailing_reasoning_ws=False,
        start_marker=QWEN3_SPEC.start_marker,
        end_markers=QWEN3_SPEC.end_markers,
    )


_SPECS = {True: _spec(True), False: _spec(False)}


class MiniCPMVReasoningParser(EngineReasoningParser):
    name = "minicpmv"
    recovers_escaped_newlines = True

    def __init__(
        self,
        vocab: Vocab,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        special_tokens: Iterable[str] = (),
    ) -> None:
        self.minicpm_thinking = bool((chat_template_kwargs or {}).get("enable_thinking", True))
        self.spec = _SPECS[self.minicpm_thinking]
        super().__init__(vocab, chat_template_kwargs, special_tokens=special_tokens)

    # The engine runs in both modes (markers are processed); only the start and the fate
    # of reasoning text differ.
    def _starts_in_reasoning(self) -> bool:
        return self.minicpm_thinking

    def _waits_for_reasoning(self) -> bool:
        return self.minicpm_thinking

    def feed(self, state: JsonState, text: str) -> tuple[EngineReasoningState, list[Event]]:
        state, events = super().feed(state, text)
        return state, self._visible(events)

    def finish(self, state: JsonState) -> tuple[EngineReasoningState, list[Event]]:
        state, events = super().finish(state)
        return state, self._visible(events)

    def parse(self, text: str, prompt_token_ids: Sequence[int] = ()) -> ReasoningResult:
        result = super().parse(text, prompt_token_ids)
        return result if self.minicpm_thinking else ReasoningResult(None, result.content)

    def _visible(self, events: list[Event]) -> list[Event]:
        if self.minicpm_thinking:
            return events
        return [e for e in events if not isinstance(e, ReasoningDelta)]
