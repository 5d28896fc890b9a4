"""`step3p5` reasoning (vLLM 0.33 `Step3p5ParserReasoningAdapter` over `vllm/parser/step3p5.py`).

The `qwen3` grammar (ChatML turn boundaries included) with two changes: thinking is always on
(the Step 3.5 / 3.7 template prefills `<think>\\n` and has no switch, so `enable_thinking` is
ignored), and trailing reasoning whitespace is stripped (the model closes with
`\\n</think>\\n`).
"""

from __future__ import annotations

import dataclasses

from parsers.reasoning._engine import EngineReasoningParser, EngineSpec
from parsers.reasoning.qwen3 import QWEN3_SPEC

__all__ = ["Step3p5ReasoningParser", "STEP3P5_SPEC"]

STEP3P5_SPEC: EngineSpec = dataclasses.replace(QWEN3_SPEC, strip_trailing_reasoning_ws=True)


class Step3p5ReasoningParser(EngineReasoningParser):
    name = "step3p5"
    spec = STEP3P5_SPEC
