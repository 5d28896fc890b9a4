"""`deepseek_v3` reasoning (vLLM 0.33 `DeepSeekV3ReasoningParser`).

Thinking is on when `thinking` or `enable_thinking` is truthy in the chat template kwargs
(default off). On: the `deepseek_r1` semantics. Off: identity, the output is content verbatim
and `is_reasoning_end` is always true.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from parsers.reasoning.deepseek_r1 import DeepSeekR1ReasoningParser, ThinkPhase, ThinkState

__all__ = ["DeepSeekV3ReasoningParser"]


class DeepSeekV3ReasoningParser(DeepSeekR1ReasoningParser):
    name: ClassVar[str] = "deepseek_v3"

    @property
    def thinking(self) -> bool:
        kwargs = self.chat_template_kwargs
        return bool(kwargs.get("thinking", False)) or bool(kwargs.get("enable_thinking", False))

    def _needs_think_tokens(self) -> bool:
        return self.thinking

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        return super().is_reasoning_end(token_ids) if self.thinking else True

    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> ThinkState:
        return ThinkState() if self.thinking else ThinkState(phase=ThinkPhase.VERBATIM)
