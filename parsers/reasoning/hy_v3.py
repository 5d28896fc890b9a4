"""`hy_v3` reasoning (vLLM 0.33 `HYV3ReasoningParser`).

With the chat-template kwarg `reasoning_effort` unset or "no_think" (vLLM's default) the parser
is the identity: the output is content, verbatim. Otherwise it is `deepseek_r1`'s split over
the checkpoint's suffixed markers (`<think{suffix}>`, `</think{suffix}>`; the suffix as the
hy_v3 tool parser reads it), with deepseek_r1's documented divergence.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from parsers.reasoning.deepseek_r1 import DeepSeekR1ReasoningParser, ThinkPhase, ThinkState
from parsers.tools.hy_v3 import hy_suffix

__all__ = ["HyV3ReasoningParser"]


class HyV3ReasoningParser(DeepSeekR1ReasoningParser):
    name: ClassVar[str] = "hy_v3"

    @property
    def thinking(self) -> bool:
        return (self.chat_template_kwargs.get("reasoning_effort") or "no_think") != "no_think"

    def think_markers(self) -> tuple[str, str]:
        suffix = hy_suffix(self.vocab)
        return f"<think{suffix}>", f"</think{suffix}>"

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        # vLLM's identity parser: reasoning is over from the start.
        return super().is_reasoning_end(token_ids) if self.thinking else True

    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> ThinkState:
        return ThinkState() if self.thinking else ThinkState(phase=ThinkPhase.VERBATIM)
