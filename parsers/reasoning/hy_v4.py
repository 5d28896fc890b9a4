"""`hy_v4` reasoning (vLLM 0.33 `HYV4ReasoningParser`).

As hy_v3 (deepseek_r1's split over the suffixed `<think{suffix}>` / `</think{suffix}>`), but
thinking is on by default: only the chat-template kwarg `reasoning_effort` == "no_think" makes
the parser the identity (the whole output is content). vLLM also reads a `reasoning_effort`
constructor kwarg when the template kwarg is unset; the serving layer does not pass one, so
only the template kwarg is read here. Text before a late `<think>` stays reasoning (as in
vLLM's stream; its batch drops it).
"""

from __future__ import annotations

from typing import ClassVar

from parsers.reasoning.hy_v3 import HyV3ReasoningParser

__all__ = ["HyV4ReasoningParser"]


class HyV4ReasoningParser(HyV3ReasoningParser):
    name: ClassVar[str] = "hy_v4"

    @property
    def thinking(self) -> bool:
        return (self.chat_template_kwargs.get("reasoning_effort") or "high") != "no_think"
