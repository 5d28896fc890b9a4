"""Every tool family's transition table is total: from every state a real output reaches,
every token kind (each marker, plain text, the end of the output) is handled, with either a
new state or a typed `ParserError`, never another exception (h2's state-machine property)."""

from __future__ import annotations

import pytest

from parsers._errors import ParserError
from parsers.registry import get_tool_parser, tool_parser_names
from parsers.tools._machine import EOS, TEXT, TableToolParser

from .table_cases import CASES, family_cases

FAMILIES = sorted(
    {name for name in tool_parser_names() if issubclass(get_tool_parser(name), TableToolParser)}
    | set(CASES)
)


@pytest.mark.parametrize("name", FAMILIES)
def test_every_phase_and_kind_is_handled(name: str) -> None:
    parser, texts = family_cases(name)
    table = parser.table
    for phase, kind in table.kinds():
        assert table.lookup(phase, kind) is not None, (phase, kind)
    seen_phases: set[str] = set()
    for text in texts:
        state = parser.initial_state()
        for ch in text:
            seen_phases.add(state.phase)
            for kind in (*table.markers, TEXT, EOS):
                _step(parser, state, kind)
            state, _ = parser.feed(state, ch, "r")
    assert seen_phases, name


def _step(parser: TableToolParser, state, kind: str) -> None:
    try:
        if kind == EOS:
            parser.finish(state, "r")
        else:
            parser.feed(state, "x" if kind == TEXT else kind, "r")
    except ParserError:
        pass  # a typed refusal is a handled outcome
