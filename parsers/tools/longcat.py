"""LongCat-Flash tool calls: Hermes JSON calls between `<longcat_tool_call>` and
`</longcat_tool_call>`.

vLLM 0.33's `LongcatFlashToolParser` is `Hermes2ProToolParser` with these markers (same regex
shape, same batch rules), so this is the Hermes machine over them; see `hermes_parser` for
the semantics, the streaming and the divergences, which are the same.
"""

from __future__ import annotations

from typing import ClassVar

from parsers.tools.hermes_parser import HermesToolParser, hermes_table

__all__ = ["LongcatToolParser"]

START, END = "<longcat_tool_call>", "</longcat_tool_call>"


class LongcatToolParser(HermesToolParser):
    name: ClassVar[str] = "longcat"


LongcatToolParser.table = hermes_table(START, END)
