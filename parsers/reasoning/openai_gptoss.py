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

from parsers._base import Vocab
from parsers._whole_output import WholeOutputReasoningParser
from parsers.harmony import HarmonyMachine, HarmonyState

__all__ = ["GptOssReasoningParser"]


class GptOssReasoningParser(WholeOutputReasoningParser):
    name: ClassVar[str] = "openai_gptoss"

    def __init__(
        self,
        vocab: Vocab,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        special_tokens: Iterable[str] = (),
    ) -> None:
        super().__init__(vocab, chat_template_kwargs, special_tokens=special_tokens)
        self.machine = HarmonyMachine()

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        return True

    @classmethod
    def state_type(cls) -> type[HarmonyState]:
        return HarmonyState
