"""DeepSeek-V3.1 tool calls (vLLM 0.33 `deepseek_v31`), on the shared DeepSeek machinery.

One call: `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>` (vLLM's regex: NAME is
the shortest single-line text up to a separator, ARGS the shortest text up to the call end).
Content is only the text before the block; `<｜tool▁calls▁end｜>` and everything outside calls
after the block start are dropped, and calls after it are still extracted (as upstream).
"""

from __future__ import annotations

from typing import ClassVar

from parsers.tools._deepseek import (
    CALL_BEGIN,
    CALL_END,
    NEED_MORE,
    NO_MATCH,
    SEP,
    CallMatch,
    DeepSeekToolParserBase,
)

__all__ = ["DeepSeekV31ToolParser"]


class DeepSeekV31ToolParser(DeepSeekToolParserBase):
    name: ClassVar[str] = "deepseek_v31"
    content_after_block: ClassVar[bool] = False

    def match_call(self, buf: str, eos: bool) -> CallMatch | str:
        more = NO_MATCH if eos else NEED_MORE
        body = buf[len(CALL_BEGIN) :]
        sep = body.find(SEP)
        newline = body.find("\n")
        if sep == -1:
            return NO_MATCH if newline != -1 else more
        if newline != -1 and newline < sep:
            return NO_MATCH
        end = body.find(CALL_END, sep + len(SEP))
        if end == -1:
            return more
        return CallMatch(
            end=len(CALL_BEGIN) + end + len(CALL_END),
            name=body[:sep],
            arguments=body[sep + len(SEP) : end],
        )
