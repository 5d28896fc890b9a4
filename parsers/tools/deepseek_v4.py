"""DeepSeek-V4 and V4.1 tool calls (vLLM 0.33 `deepseek_v4`, `deepseek_v41`: the engine tool
adapters over `vllm/parser/deepseek_v4.py` / `deepseek_v41.py`): DSML invokes in a
`<｜DSML｜tool_calls>` block (V4 also accepts the `toolcalls` / `tool` spellings seen in
production), V4.1 in `<｜DSML｜ calls>` with spaced tags. `<think>` in content opens reasoning,
which the tool pass drops (text when no reasoning parser is configured). Format, arguments,
streaming and divergences: `_dsml`."""

from __future__ import annotations

from typing import ClassVar

from parsers.tools._dsml import DSML, DSML_SPACED, Dialect, dsml_spec
from parsers.tools.deepseek_v32 import DSMLToolParser

__all__ = ["DeepSeekV4ToolParser", "DeepSeekV41ToolParser", "V4_BLOCK", "V41_BLOCK"]

V4_BLOCK = ("<｜DSML｜tool_calls>", "<｜DSML｜toolcalls>", "<｜DSML｜tool>")
V41_BLOCK = ("<｜DSML｜ calls>",)


class DeepSeekV4ToolParser(DSMLToolParser):
    name: ClassVar[str] = "deepseek_v4"
    spec = dsml_spec(DSML, V4_BLOCK, "</｜DSML｜tool_calls>", think=True)


class DeepSeekV41ToolParser(DSMLToolParser):
    name: ClassVar[str] = "deepseek_v41"
    dialect: ClassVar[Dialect] = DSML_SPACED
    spec = dsml_spec(DSML_SPACED, V41_BLOCK, "</｜DSML｜ calls>", think=True)
