"""`poolside_v1` reasoning (vLLM 0.33 `PoolsideV1ReasoningParser`, Poolside Laguna).

`deepseek_v3` (thinking on iff `thinking` or `enable_thinking` is truthy; off: content
verbatim) whose `is_reasoning_end` only looks back to the current assistant turn: the
backward walk over the prompt ids stops at `<assistant>` (not ended), so a `</think>` in an
earlier turn no longer counts. The tokenizer must have `<assistant>` (upstream: ValueError;
here ParserConfigError).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from parsers._base import Vocab
from parsers._errors import ParserConfigError
from parsers.reasoning.deepseek_v3 import DeepSeekV3ReasoningParser

__all__ = ["PoolsideV1ReasoningParser"]

ASSISTANT_START = "<assistant>"


class PoolsideV1ReasoningParser(DeepSeekV3ReasoningParser):
    name: ClassVar[str] = "poolside_v1"

    def __init__(
        self,
        vocab: Vocab,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        special_tokens: Iterable[str] = (),
    ) -> None:
        super().__init__(vocab, chat_template_kwargs, special_tokens=special_tokens)
        assistant_id = vocab.token_to_id(ASSISTANT_START)
        if assistant_id is None:
            raise ParserConfigError(f"Tokenizer must contain {ASSISTANT_START!r} token")
        self.assistant_id = assistant_id

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        if not self.thinking:
            return True
        for token_id in reversed(token_ids):
            if token_id == self.start_token_id or token_id == self.assistant_id:
                return False
            if token_id == self.end_token_id:
                return True
        return False
