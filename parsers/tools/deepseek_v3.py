"""DeepSeek-V3 tool calls (vLLM 0.33 `deepseek_v3`), on the shared DeepSeek machinery.

One call: `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\nARGS\\n```<｜tool▁call▁end｜>`
(vLLM's regex: the type and name fill the first line, the type up to its last separator;
ARGS is the shortest text up to "\\n```<｜tool▁call▁end｜>"). Content is the text before the
block plus the text after `<｜tool▁calls▁end｜>`. A type other than "function" makes vLLM's
batch return all output as content.

Divergences from vLLM's batch (stream == our batch instead): after `<｜tool▁calls▁end｜>` all
text is content (vLLM would also extract calls there and keep only the text after the *last*
block end); a later call with a bad type becomes content itself (vLLM: all content, taking
back the calls already streamed; test `test_deepseek_v3_divergence_later_bad_type`).
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
    prefix_state,
)

__all__ = ["DeepSeekV3ToolParser"]

FENCE_OPEN = "\n```json\n"
FENCE_CLOSE = "\n```" + CALL_END


class DeepSeekV3ToolParser(DeepSeekToolParserBase):
    name: ClassVar[str] = "deepseek_v3"
    content_after_block: ClassVar[bool] = True

    def match_call(self, buf: str, eos: bool) -> CallMatch | str:
        more = NO_MATCH if eos else NEED_MORE
        body = buf[len(CALL_BEGIN) :]
        nl = body.find("\n")
        if nl == -1:
            return more
        line = body[:nl]
        sep = line.rfind(SEP)
        if sep == -1:
            return NO_MATCH
        fence = prefix_state(body[nl:], FENCE_OPEN)
        if fence is not None:
            return more if fence == NEED_MORE else NO_MATCH
        args_start = nl + len(FENCE_OPEN)
        close = body.find(FENCE_CLOSE, args_start)
        if close == -1:
            return more
        call_type = line[:sep]
        return CallMatch(
            end=len(CALL_BEGIN) + close + len(FENCE_CLOSE),
            name=line[sep + len(SEP) :],
            arguments=body[args_start:close],
            valid=call_type == "function",
        )
