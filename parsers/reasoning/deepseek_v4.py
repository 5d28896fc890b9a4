"""`deepseek_v4` / `deepseek_v41` reasoning (vLLM 0.33 `DeepSeekV4ParserReasoningAdapter` /
`DeepSeekV41ParserReasoningAdapter` over `vllm/parser/deepseek_v4.py` / `deepseek_v41.py`).

* Thinking is on unless `thinking` / `enable_thinking` is given and both are falsy, or
  `reasoning_effort` is "none"; it only picks the start: reasoning (on) or content (off).
* `<think>` opens reasoning from content, and is dropped inside it; `</think>` ends it, and is
  absorbed in content; the block marker ends reasoning and stays in the content (for the tool
  parser). Other markup is content; non-marker special tokens are dropped; trailing reasoning
  whitespace is stripped.
"""

from __future__ import annotations

from parsers.reasoning._engine import Action, EngineReasoningParser, EngineSpec, Phase
from parsers.tools._dsml import THINK_END, THINK_START
from parsers.tools.deepseek_v4 import (
    V4_BLOCK,
    V41_BLOCK,
    DeepSeekV4ToolParser,
    DeepSeekV41ToolParser,
)

__all__ = ["DeepSeekV4ReasoningParser", "DeepSeekV41ReasoningParser"]


def _spec(markers: tuple[str, ...], block: tuple[str, ...]) -> EngineSpec:
    return EngineSpec(
        markers=markers,
        actions={
            (Phase.CONTENT, THINK_START): Action.TO_REASONING,
            (Phase.CONTENT, THINK_END): Action.DROP,
            (Phase.REASONING, THINK_START): Action.DROP,
            (Phase.REASONING, THINK_END): Action.TO_CONTENT,
            **{(Phase.REASONING, b): Action.KEEP_TO_CONTENT for b in block},
        },
        strip_trailing_reasoning_ws=True,
        start_marker=THINK_START,
        end_markers=((THINK_END, True), (block[0], False)),
    )


class DeepSeekV4ReasoningParser(EngineReasoningParser):
    name = "deepseek_v4"
    spec = _spec(tuple(DeepSeekV4ToolParser.spec.literal_terminals()), V4_BLOCK)

    def _thinking_enabled(self) -> bool:
        return True  # the switch only picks the start (both configs have the markers)

    def _thinking(self) -> bool:
        kwargs = self.chat_template_kwargs
        thinking = bool(kwargs.get("thinking") or kwargs.get("enable_thinking"))
        if "thinking" not in kwargs and "enable_thinking" not in kwargs:
            thinking = True
        return thinking and kwargs.get("reasoning_effort") != "none"

    def _starts_in_reasoning(self) -> bool:
        return self._thinking()

    def _waits_for_reasoning(self) -> bool:
        return self._thinking()


class DeepSeekV41ReasoningParser(DeepSeekV4ReasoningParser):
    name = "deepseek_v41"
    spec = _spec(tuple(DeepSeekV41ToolParser.spec.literal_terminals()), V41_BLOCK)
