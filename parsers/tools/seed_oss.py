"""Seed-OSS XML tool calls (vLLM name `seed_oss`), on vLLM's parser engine:

    <seed:tool_call>
    <function=get_weather>
    <parameter=city>Paris</parameter>
    </function>
    </seed:tool_call>

Spec: vLLM 0.33 `SeedOssParser` (`vllm/parser/seed_oss.py`): Qwen3's XML grammar and argument
converter with the wrapper markers `<seed:think>`, `</seed:think>`, `<seed:tool_call>`,
`</seed:tool_call>`; so this is `qwen3_coder`'s spec with those four terminals respelled and
its `ParamArgs` (one newline trimmed at each end of a value). The divergences are
`qwen3_coder`'s. vLLM's class sets no structural tag.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from parsers.tools._engine import EngineSpec
from parsers.tools.qwen3_coder import QWEN3_XML_SPEC, Qwen3CoderToolParser

__all__ = ["SeedOssToolParser", "SEED_OSS_SPEC"]

SEED_OSS_SPEC = dataclasses.replace(QWEN3_XML_SPEC, terminals={
    **QWEN3_XML_SPEC.terminals,
    "THINK_START": "<seed:think>", "THINK_END": "</seed:think>",
    "TOOL_START": "<seed:tool_call>", "TOOL_END": "</seed:tool_call>",
})  # fmt: skip


class SeedOssToolParser(Qwen3CoderToolParser):
    name: ClassVar[str] = "seed_oss"
    spec: EngineSpec = SEED_OSS_SPEC
