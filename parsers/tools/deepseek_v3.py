"""DeepSeek-V3 tool calls (vLLM 0.33 `deepseek_v3`), on the shared DeepSeek machinery.

One call: `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\nARGS\\n```<｜tool▁call▁end｜>`
(vLLM's regex: the type and name fill the first line, the type up to its last separator;
ARGS is the shortest text up to "\\n```<｜tool▁call▁end｜>"). Content is the text before the
block plus the text after `<｜tool▁calls▁end｜>`. A type other than "function" makes vLLM's
batch return all output as content (once that call matches; one that never closes is simply
not a match).

Divergences from vLLM's batch (stream == our batch instead), besides `_deepseek`'s: after
`<｜tool▁calls▁end｜>` all text is content (vLLM would also extract calls there and keep only
the text after the *last* block end); a later call with a bad type becomes content itself
(vLLM: all content, taking back the calls already streamed; test
`test_deepseek_v3_divergence_later_bad_type`).
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
    prefix_state,
)

__all__ = ["DeepSeekV3ToolParser"]

FENCE_OPEN = "\n```json\n"
FENCE_CLOSE = "\n```" + CALL_END


class DeepSeekV3ToolParser(DeepSeekToolParserBase):
    name: ClassVar[str] = "deepseek_v3"
    args_end: ClassVar[str] = FENCE_CLOSE

    def read_header(self, raw: str, eos: bool) -> Header | str:
        more = NO_MATCH if eos else NEED_MORE
        nl = raw.find("\n")
        if nl == -1:
            return more
        line = raw[:nl]
        sep = line.rfind(SEP)
        if sep == -1:
            return NO_MATCH
        fence = prefix_state(raw[nl:], FENCE_OPEN)
        if fence is not None:
            return more if fence == NEED_MORE else NO_MATCH
        name = line[sep + len(SEP) :]
        return Header(name, valid=line[:sep] == "function", length=nl + len(FENCE_OPEN))


DeepSeekV3ToolParser.table = deepseek_table(DeepSeekV3ToolParser, after_block=True)
