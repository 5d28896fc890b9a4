"""`holo2` reasoning (vLLM 0.33 `DeepSeekV3ReasoningWithThinkingParser`).

`deepseek_v3` with thinking on by default: when neither `thinking` nor `enable_thinking` is in
the chat template kwargs, thinking is on (the `deepseek_r1` split); when either is given, it is
on iff one of them is truthy, else the output is content verbatim.
"""

from __future__ import annotations

from typing import ClassVar

from parsers.reasoning.deepseek_v3 import DeepSeekV3ReasoningParser

__all__ = ["Holo2ReasoningParser"]


class Holo2ReasoningParser(DeepSeekV3ReasoningParser):
    name: ClassVar[str] = "holo2"

    @property
    def thinking(self) -> bool:
        kwargs = self.chat_template_kwargs
        if kwargs.get("thinking") is None and kwargs.get("enable_thinking") is None:
            return True
        return bool(kwargs.get("thinking", False)) or bool(kwargs.get("enable_thinking", False))
