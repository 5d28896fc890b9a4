"""DeepSeek-V3.1 tool calls (vLLM 0.33 `deepseek_v31`), on the shared DeepSeek machinery.

One call: `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>` (vLLM's regex: NAME is
the shortest single-line text up to a separator, ARGS the shortest text up to the call end).
Content is only the text before the block; `<｜tool▁calls▁end｜>` and everything outside calls
after the block start are dropped, and calls after it are still extracted (as upstream).
"""

from __future__ import annotations

from typing import ClassVar

from parsers.tools._deepseek import (
    CALL_END,
    NEED_MORE,
    NO_MATCH,
    SEP,
    DeepSeekToolParserBase,
    Header,
    deepseek_table,
)

__all__ = ["DeepSeekV31ToolParser"]


class DeepSeekV31ToolParser(DeepSeekToolParserBase):
    name: ClassVar[str] = "deepseek_v31"
    args_end: ClassVar[str] = CALL_END

    def read_header(self, raw: str, eos: bool) -> Header | str:
        sep = raw.find(SEP)
        newline = raw.find("\n")
        if sep == -1:
            return NO_MATCH if newline != -1 or eos else NEED_MORE
        if newline != -1 and newline < sep:
            return NO_MATCH
        return Header(raw[:sep], valid=True, length=sep + len(SEP))


DeepSeekV31ToolParser.table = deepseek_table(DeepSeekV31ToolParser, after_block=False)
