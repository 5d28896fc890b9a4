"""`cohere_command3` / `cohere_command4` tool calls (vLLM 0.33 `CohereCommand3/4ToolParser`).

vLLM's classes are stubs naming a `cohere_melody` preset; `CohereCommandParser` parses the
whole output with it (`parsers.cohere`), which the combined chat parser runs once for the
tool and the reasoning name. Used alone, this parser gives the filter's content and calls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from parsers._base import Vocab
from parsers._whole_output import WholeOutputToolParser
from parsers.cohere import CohereMachine, CohereState

__all__ = ["CohereCommand3ToolParser", "CohereCommand4ToolParser"]


class CohereCommand3ToolParser(WholeOutputToolParser):
    name: ClassVar[str] = "cohere_command3"
    preset: ClassVar[str] = "cmd3"

    def __init__(
        self,
        vocab: Vocab,
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        max_call_chars: int | None = None,
    ) -> None:
        super().__init__(vocab, tools, max_call_chars=max_call_chars)
        self.machine = CohereMachine(self.preset)

    @classmethod
    def state_type(cls) -> type[CohereState]:
        return CohereState


class CohereCommand4ToolParser(CohereCommand3ToolParser):
    name: ClassVar[str] = "cohere_command4"
    preset: ClassVar[str] = "cmd4"
