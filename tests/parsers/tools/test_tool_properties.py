"""Property tests over every tool-parser family: arbitrary deltas give events or a typed
ParserError, and a corrupted serialised state gives StateError, never another exception."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parsers._errors import ParserError, StateError
from parsers.tools._machine import TableToolParser
from parsers.tools.hermes_parser import HermesToolParser
from parsers.tools.llama3_json import Llama3JsonToolParser

from .table_cases import CASES, family_cases

# Every family on the machine, on its test vocabulary (tests/parsers/tools/table_cases.py).
PARSERS: list[TableToolParser] = [family_cases(name)[0] for name in sorted(CASES)]
IDS = sorted(CASES)

# Fragments of every family's syntax, so random text often hits the interesting paths.
ATOMS = [
    "<tool_call>", "</tool_call>", "<|python_tag|>", "<|python_start|>", "<|python_end|>",
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "function", "\n```json\n", "\n```",
    '{"name": "f", "arguments": {"a": 1}}', '{"name": "f", "parameters": {}}',
    "[f(a=1)]", "[TOOL_CALLS]", "{", "}", "[", "]", '"', "\\", ":", ",", "<", "\n", " ", "é", "🙂", "\x00",
    "<function=", "</function>", "<parameter=", "</parameter>", "get_weather>", "days>", ">",
    "</think>", "<|tool_call|>", '"name": "get_weather"', '"arguments": {"days": "3"}',
    "[ARGS]", "[THINK]", "[/THINK]", "<|im_end|>", "get_weather", '{"days": "3"}',
]
deltas = st.lists(
    st.lists(st.one_of(st.sampled_from(ATOMS), st.text(max_size=6)), max_size=4).map("".join),
    max_size=12,
)


def stream_all(parser: TableToolParser, pieces: list[str]) -> list:
    state = parser.initial_state()
    events: list = []
    for piece in pieces:
        state = type(state).from_json(json.loads(json.dumps(state.to_json())))
        state, out = parser.feed(state, piece, "r")
        events += out
    _, out = parser.finish(state, "r")
    return events + out


@pytest.mark.parametrize("parser", PARSERS, ids=IDS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=deltas)
def test_garbage_gives_events_or_typed_error(parser: TableToolParser, pieces: list[str]) -> None:
    """Random deltas: events equal to the batch result of their concatenation, or ParserError."""
    try:
        events = stream_all(parser, pieces)
    except ParserError:
        with pytest.raises(ParserError):
            parser.parse("".join(pieces), "r")
        return
    from parsers.tools._base import assemble

    assert assemble(events) == parser.parse("".join(pieces), "r")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


@pytest.mark.parametrize("parser", PARSERS, ids=IDS)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_corrupted_state_raises_state_error(parser: TableToolParser, data: st.DataObject) -> None:
    """Any field replaced, dropped or added, or a wrong version: StateError before any work."""
    state = parser.feed(parser.initial_state(), '<tool_call>{"name": "f"', "r")[0].to_json()
    key = data.draw(st.sampled_from(sorted(state)))
    mutation = data.draw(st.sampled_from(["replace", "drop", "add"]))
    if mutation == "replace":
        value = data.draw(json_values)
        if value == state[key] and type(value) is type(state[key]):
            return
        state[key] = value
    elif mutation == "drop":
        del state[key]
    else:
        state[data.draw(st.text(min_size=1, max_size=5).filter(lambda k: k not in state))] = 1
    try:
        restored = type(parser.initial_state()).from_json(state)
    except StateError:
        return
    # A value that is still well-typed must still be rejected if it is not this parser's,
    # or be a legal state of it (feeding it gives events or a typed error).
    try:
        parser.feed(restored, "x", "r")
        parser.finish(restored, "r")
    except ParserError:
        pass


def test_state_of_another_parser_is_rejected() -> None:
    """A hermes state fed to the llama3_json parser raises StateError."""
    state = HermesToolParser(None, []).initial_state()
    with pytest.raises(StateError):
        Llama3JsonToolParser(None, []).feed(state, "x", "r")


def test_illegal_phase_is_rejected() -> None:
    """A phase outside the family's transition table raises StateError."""
    state = HermesToolParser(None, []).initial_state().to_json()
    state["phase"] = "lead"
    with pytest.raises(StateError):
        HermesToolParser(None, []).feed(type(HermesToolParser(None, []).initial_state()).from_json(state), "x", "r")


@pytest.mark.parametrize("bad", [None, [], "x", {"v": 2}, {"v": 1}])
def test_malformed_state_json_raises_state_error(bad: object) -> None:
    """Non-object, wrong version or missing fields: StateError."""
    with pytest.raises(StateError):
        type(HermesToolParser(None, []).initial_state()).from_json(bad)


def test_in_flight_call_is_bounded() -> None:
    """A tool call that never ends raises LimitExceededError at MAX_TOOL_CALL_CHARS."""
    from parsers._errors import LimitExceededError
    from parsers.tools._base import MAX_TOOL_CALL_CHARS

    parser = HermesToolParser(None, [])
    state, _ = parser.feed(parser.initial_state(), "<tool_call>", "r")
    with pytest.raises(LimitExceededError):
        parser.feed(state, "x" * (MAX_TOOL_CALL_CHARS + 1), "r")


def test_state_does_not_grow_with_content() -> None:
    """Content output leaves only a possible marker start in the state."""
    parser = HermesToolParser(None, [])
    state = parser.initial_state()
    for _ in range(2000):
        state, _ = parser.feed(state, "some content <tool", "r")
        state, _ = parser.feed(state, "ish text ", "r")
    assert len(json.dumps(state.to_json())) < 300
