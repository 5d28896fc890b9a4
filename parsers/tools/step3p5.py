"""Step-3.5 / Step-3.7 XML tool calls (vLLM 0.33 `Step3p5ToolParser`): the Qwen3-Coder grammar
unchanged (`vllm/parser/step3p5.py` reuses `qwen3_config`; its changes concern reasoning
only), so this is `qwen3_coder` under its own name, structural tag `qwen_3_coder` included."""

from __future__ import annotations

from typing import ClassVar

from parsers.tools.qwen3_coder import Qwen3CoderToolParser

__all__ = ["Step3p5ToolParser"]


class Step3p5ToolParser(Qwen3CoderToolParser):
    name: ClassVar[str] = "step3p5"
