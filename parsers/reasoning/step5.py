"""`step5` reasoning: vLLM 0.33 registers `DeepSeekR1ReasoningParser` under this name, so it is
the `deepseek_r1` split exactly (see parsers/reasoning/deepseek_r1.py)."""

from __future__ import annotations

from typing import ClassVar

from parsers.reasoning.deepseek_r1 import DeepSeekR1ReasoningParser

__all__ = ["Step5ReasoningParser"]


class Step5ReasoningParser(DeepSeekR1ReasoningParser):
    name: ClassVar[str] = "step5"
