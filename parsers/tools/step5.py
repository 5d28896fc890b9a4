"""Step-5 XML tool calls (vLLM 0.33 `Step5ToolParser`): the Qwen3-Coder grammar with the
content's whitespace preserved around calls (`drop_whitespace_only_content_before_tools` and
`strip_content_whitespace_with_tools` off), structural tag `qwen_3_coder`.

Its reasoning parser (`step5` = deepseek_r1) is not engine-based, so vLLM's composed batch keeps
a content with no call verbatim, markup included; the combined parser runs this engine with
`with_raw_without_calls` for that. Divergence: a marker the engine absorbs in content (a stray
`</think>`) before a call has streamed as content, where vLLM's batch drops it."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from parsers.tools._engine import EngineSpec
from parsers.tools.qwen3_coder import QWEN3_XML_SPEC, Qwen3CoderToolParser

__all__ = ["Step5ToolParser", "STEP5_SPEC"]

STEP5_SPEC: EngineSpec = dataclasses.replace(
    QWEN3_XML_SPEC, strip_content_ws_with_tools=False, drop_ws_only_content_before_tools=False
)


class Step5ToolParser(Qwen3CoderToolParser):
    name: ClassVar[str] = "step5"
    spec = STEP5_SPEC
