"""`openai_gptoss` reasoning: gpt-oss's Harmony analysis channel (vLLM 0.33 `HarmonyParser`).

vLLM's `GptOssReasoningParser` is a stub that only declares the capability: with it, the
Harmony parser returns the analysis channel as reasoning (without it, analysis is dropped).
`is_reasoning_end` is always true, as vLLM's. The parsing itself is `parsers.harmony`; the
combined chat parser runs it once for both this and the `openai` tool parser. Used alone, the
analysis channel is the reasoning and every other kept part (final, commentary) the content.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from parsers._base import ReasoningParser, ReasoningResult, Vocab
from parsers._events import ContentDelta, Event, ReasoningDelta
from parsers._state import JsonState
from parsers.harmony import HarmonyMachine, HarmonyState

__all__ = ["GptOssReasoningParser"]


class GptOssReasoningParser(ReasoningParser):
    name: ClassVar[str] = "openai_gptoss"
    harmony: ClassVar[bool] = True

    def __init__(
        self,
        vocab: Vocab,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        special_tokens: Iterable[str] = (),
    ) -> None:
        super().__init__(vocab, chat_template_kwargs, special_tokens=special_tokens)
        self.machine = HarmonyMachine()

    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> HarmonyState:
        return self.machine.initial_state()

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        return True

    def feed(self, state: JsonState, text: str) -> tuple[JsonState, list[Event]]:
        assert isinstance(state, HarmonyState)
        state, events = self.machine.feed(state, text, "")
        return state, _split(events)

    def finish(self, state: JsonState) -> tuple[JsonState, list[Event]]:
        assert isinstance(state, HarmonyState)
        state, events = self.machine.finish(state, "")
        return state, _split(events)

    def parse(self, text: str, prompt_token_ids: Sequence[int] = ()) -> ReasoningResult:
        result = self.machine.parse(text, "")
        return ReasoningResult(result.reasoning, result.content)

    @classmethod
    def state_type(cls) -> type[HarmonyState]:
        return HarmonyState


def _split(events: list[Event]) -> list[Event]:
    return [e for e in events if isinstance(e, ReasoningDelta | ContentDelta)]
