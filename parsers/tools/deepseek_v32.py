"""DeepSeek-V3.2 tool calls (vLLM 0.33 `deepseek_v32`: `DeepSeekV32EngineToolParser` over
`vllm/parser/deepseek_v32.py`): DSML invokes in a `<｜DSML｜function_calls>` block, no
reasoning terminals. Format, arguments, streaming and divergences: `_dsml`."""

from __future__ import annotations

from typing import ClassVar

from parsers._state import JsonState
from parsers.tools._dsml import DSML, Dialect, DsmlArgs, DsmlArgsState, dsml_spec
from parsers.tools._engine import EngineToolParser

__all__ = ["DeepSeekV32ToolParser", "DSMLToolParser"]


class DSMLToolParser(EngineToolParser):
    """A DSML family: subclasses set `name`, `spec` and `dialect`."""

    dialect: ClassVar[Dialect] = DSML
    args_state: ClassVar[type[JsonState]] = DsmlArgsState

    def arg_format(self, name: str) -> DsmlArgs:
        return DsmlArgs(self.dialect, self.tool_properties(name), self.call_limit)


class DeepSeekV32ToolParser(DSMLToolParser):
    name: ClassVar[str] = "deepseek_v32"
    spec = dsml_spec(DSML, ("<｜DSML｜function_calls>",), "</｜DSML｜function_calls>", think=False)


