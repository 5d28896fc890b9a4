"""`openai` tool calls: gpt-oss's Harmony commentary messages to `functions.NAME` (vLLM 0.33).

vLLM's `GptOssToolParser` is a stub that declares the capability (and the xgrammar
"harmony" structural tag); `HarmonyParser` does the parsing, here `parsers.harmony`, which
the combined chat parser runs once for both this and the `openai_gptoss` reasoning parser.
Every message to a function recipient is a call (the name is not checked against the tools,
as vLLM's); its arguments are `json.dumps(json.loads(text))`, or the text when it is not JSON
or its content type names no json. Used alone, reasoning (the analysis channel) is dropped,
as vLLM's Harmony parser does without a reasoning parser.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from parsers._base import Vocab
from parsers._whole_output import WholeOutputToolParser
from parsers.harmony import HarmonyMachine, HarmonyState
from parsers.tools._base import MAX_TOOL_CALL_CHARS

__all__ = ["OpenAIToolParser"]


class OpenAIToolParser(WholeOutputToolParser):
    name: ClassVar[str] = "openai"

    def __init__(
        self,
        vocab: Vocab,
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        max_call_chars: int | None = None,
    ) -> None:
        super().__init__(vocab, tools, max_call_chars=max_call_chars)
        limit = min(max_call_chars or MAX_TOOL_CALL_CHARS, MAX_TOOL_CALL_CHARS)
        self.machine = HarmonyMachine(limit=limit)

    @classmethod
    def state_type(cls) -> type[HarmonyState]:
        return HarmonyState
