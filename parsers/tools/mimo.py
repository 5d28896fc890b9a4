"""MiMo XML tool calls (vLLM name `mimo`), on vLLM's parser engine: Qwen3-Coder's grammar
(`qwen3_coder`'s spec) whose parameter values are verbatim (vLLM's `_mimo_arg_converter`: no
newline is trimmed), so `ParamArgs` runs without the trim. The divergences are
`qwen3_coder`'s.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from parsers.tools.qwen3_coder import QWEN3_PARAMS, ParamArgs, Qwen3CoderToolParser

__all__ = ["MimoToolParser", "MIMO_PARAMS"]

MIMO_PARAMS = dataclasses.replace(QWEN3_PARAMS, trim_newline=False)


class MimoToolParser(Qwen3CoderToolParser):
    name: ClassVar[str] = "mimo"

    def arg_format(self, name: str) -> ParamArgs:
        return ParamArgs(self.tool_properties(name), MIMO_PARAMS)
