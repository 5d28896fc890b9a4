"""`glm45` / `glm47` / `ling3` reasoning (vLLM 0.33: `Glm47MoeParserReasoningAdapter`,
vllm/parser/glm47_moe.py, and Ling3's adapter over the same config, vllm/parser/ling3.py).

* Thinking is on unless `thinking` or `enable_thinking` is given in the chat template kwargs
  and both are falsy (upstream: on when both are absent, else `bool(thinking) or
  bool(enable_thinking)`); off means the output is content, verbatim.
* Starts in reasoning, or in content when the prompt closed reasoning in this turn (turn
  boundaries `<|system|>`, `<|user|>`, `<|assistant|>`, `<|observation|>`).
* In reasoning: `<think>` dropped, `</think>` ends reasoning, `<tool_call>` ends it and stays
  in the content. In content: `<think>` re-opens reasoning, a stray `</think>` is absorbed.
* Non-marker special tokens are dropped; trailing reasoning whitespace is stripped.

Gap: upstream ignores a thinking switch for GLM-5.3 templates (detected from the tokenizer's
chat template); this parser has no template and honours the switch.
"""

from __future__ import annotations

from parsers.reasoning._engine import Action, EngineReasoningParser, EngineSpec, Phase

__all__ = ["Glm45ReasoningParser", "Glm47ReasoningParser", "Ling3ReasoningParser", "GLM45_SPEC"]

THINK_START = "<think>"
THINK_END = "</think>"
TOOL_CALL_START = "<tool_call>"

GLM45_SPEC = EngineSpec(
    markers=(
        THINK_START,
        THINK_END,
        TOOL_CALL_START,
        "</tool_call>",
        "<arg_key>",
        "</arg_key>",
        "<arg_value>",
        "</arg_value>",
    ),
    actions={
        (Phase.REASONING, THINK_START): Action.DROP,
        (Phase.REASONING, THINK_END): Action.TO_CONTENT,
        (Phase.REASONING, TOOL_CALL_START): Action.KEEP_TO_CONTENT,
        (Phase.CONTENT, THINK_START): Action.TO_REASONING,
        (Phase.CONTENT, THINK_END): Action.DROP,
    },
    strip_trailing_reasoning_ws=True,
    start_marker=THINK_START,
    end_markers=((THINK_END, True), (TOOL_CALL_START, False)),
    turn_boundaries=("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"),
)


class Glm45ReasoningParser(EngineReasoningParser):
    name = "glm45"
    spec = GLM45_SPEC

    def _thinking_enabled(self) -> bool:
        thinking = self.chat_template_kwargs.get("thinking")
        enable_thinking = self.chat_template_kwargs.get("enable_thinking")
        if thinking is None and enable_thinking is None:
            return True
        return bool(thinking) or bool(enable_thinking)


class Glm47ReasoningParser(Glm45ReasoningParser):
    """`glm47`: the same vLLM class as `glm45`."""

    name = "glm47"


class Ling3ReasoningParser(Glm45ReasoningParser):
    """`ling3`: vLLM's Ling3Parser reasons as GLM-4.7 does (thinking on by default)."""

    name = "ling3"
