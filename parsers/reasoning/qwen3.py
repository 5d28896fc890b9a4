"""`qwen3` reasoning (vLLM 0.33 `Qwen3ParserReasoningAdapter` over `vllm/parser/qwen3.py`).

* Thinking is on unless `chat_template_kwargs["enable_thinking"]` is falsy; off means the whole
  output is content, verbatim.
* Starts in reasoning (the Qwen3 template opens `<think>` itself or the model does), or in
  content when the prompt already closed reasoning in this turn (e.g. continue_final_message).
* In reasoning: `<think>` is dropped, `</think>` ends reasoning, `<tool_call>` ends it
  implicitly and stays in the content (for the tool parser).
* In content: a duplicate `</think>` is absorbed; other markup is content.
* Special tokens that are not Qwen3 markers (`<|im_end|>`, `<|endoftext|>`, ...) are dropped.
* Reasoning whitespace is kept as generated (no trailing strip for this family).
"""

from __future__ import annotations

from parsers.reasoning._engine import Action, EngineReasoningParser, EngineSpec, Phase

__all__ = ["Qwen3ReasoningParser", "MimoReasoningParser", "QWEN3_SPEC"]

THINK_START = "<think>"
THINK_END = "</think>"
TOOL_CALL_START = "<tool_call>"

QWEN3_SPEC = EngineSpec(
    # All text terminals of upstream's qwen3_config (tool-call ones included: they shape the
    # scan even though reasoning extraction passes them through as text).
    markers=(
        THINK_START,
        THINK_END,
        TOOL_CALL_START,
        "</tool_call>",
        "<function=",
        "</function>",
        "<parameter=",
        "</parameter>",
        ">",
    ),
    actions={
        (Phase.REASONING, THINK_START): Action.DROP,
        (Phase.REASONING, THINK_END): Action.TO_CONTENT,
        (Phase.REASONING, TOOL_CALL_START): Action.KEEP_TO_CONTENT,
        (Phase.CONTENT, THINK_END): Action.DROP,
    },
    strip_trailing_reasoning_ws=False,
    start_marker=THINK_START,
    end_markers=((THINK_END, True), (TOOL_CALL_START, False)),
    turn_boundaries=("<|im_start|>", "<|im_end|>"),
)


class Qwen3ReasoningParser(EngineReasoningParser):
    name = "qwen3"
    spec = QWEN3_SPEC

    def _thinking_enabled(self) -> bool:
        return bool(self.chat_template_kwargs.get("enable_thinking", True))


class MimoReasoningParser(Qwen3ReasoningParser):
    """`mimo` (vLLM's MiMoParserReasoningAdapter): the qwen3 grammar, ChatML turn boundaries."""

    name = "mimo"
