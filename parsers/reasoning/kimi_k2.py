"""`kimi_k2` reasoning (vLLM 0.33 `KimiK2ParserReasoningAdapter` over `vllm/parser/kimi_k2.py`).

* Thinking is on unless `thinking` or `enable_thinking` is given in the chat template kwargs
  and both are falsy; off means the output is content, verbatim.
* Starts in reasoning. In reasoning: `<think>` dropped, `</think>` ends reasoning,
  `<|tool_calls_section_begin|>` ends it and stays in the content (for the tool parser). In
  content a stray `</think>` is absorbed; other markup is content.
* Non-marker special tokens are dropped; trailing reasoning whitespace is stripped.
"""

from __future__ import annotations

from parsers.reasoning._engine import Action, EngineReasoningParser, EngineSpec, Phase
from parsers.tools.glm47 import thinking_enabled
from parsers.tools.kimi_k2 import KIMI_K2_SPEC, SECTION_BEGIN, THINK_END, THINK_START

__all__ = ["KimiK2ReasoningParser", "KIMI_K2_REASONING_SPEC"]

KIMI_K2_REASONING_SPEC = EngineSpec(
    markers=tuple(KIMI_K2_SPEC.literal_terminals()),
    actions={
        (Phase.REASONING, THINK_START): Action.DROP,
        (Phase.REASONING, THINK_END): Action.TO_CONTENT,
        (Phase.REASONING, SECTION_BEGIN): Action.KEEP_TO_CONTENT,
        (Phase.CONTENT, THINK_END): Action.DROP,
    },
    strip_trailing_reasoning_ws=True,
    start_marker=THINK_START,
    end_markers=((THINK_END, True), (SECTION_BEGIN, False)),
)


class KimiK2ReasoningParser(EngineReasoningParser):
    name = "kimi_k2"
    spec = KIMI_K2_REASONING_SPEC

    def _thinking_enabled(self) -> bool:
        return thinking_enabled(self.chat_template_kwargs)
