"""phi4_mini_json: differential tests against vLLM 0.33's Phi4MiniJsonToolParser (one oracle
call) and split invariance on the family's tokenizer."""

from __future__ import annotations

import pytest

from parsers.tools.phi4_mini_json import Phi4MiniJsonToolParser
from tests.parsers.family_oracle import WEATHER_TOOLS
from tests.parsers.family_tokenizers import family_tokenizer

from .json_family_check import (
    DROPS_OUTPUT,
    KEPT_CALLS,
    assert_family_matches_vllm,
    assert_family_splits,
    family_cases,
)

W = '{"name": "get_weather", "arguments": {"city": "東京", "unit": "c"}}'
S = '{"name": "search", "parameters": {"query": "say \\"hi\\" 😀", "filters": {"a": {"b": null}}}}'

OWN: dict[str, str] = {
    "one": "functools[" + W + "]",
    "two": "functools[" + W + ", " + S + "]",
    "parameters": 'functools[{"name": "f", "parameters": {"a": 1}}]',
    "empty_arguments": 'functools[{"name": "f", "arguments": {}}]',
    "string_arguments": 'functools[{"name": "f", "arguments": "x=1"}]',
    "scalar_arguments": 'functools[{"name": "f", "arguments": 7}]',
    "arguments_first": 'functools[{"arguments": {"a": 1}, "name": "f"}]',
    "no_arguments": 'functools[{"name": "f"}]',
    "no_name": 'functools[{"arguments": {}}]',
    "name_not_string": 'functools[{"name": 3, "arguments": {}}]',
    "string_item": 'functools["x"]',
    "unclosed": 'functools[{"name": "f", "arguments": {"a": 1}}',
    "marker_with_space": "functools [" + W + "]",
    "marker_in_content": "The word functools alone is text.",
    "nested_object": 'functools[{"name": "f", "arguments": {"a": {"b": {"c": 1}}}}]',
    "empty_array": "functools[]",
    "not_json": "functools[{oops}]",
    "bracket_in_arguments": 'functools[{"name": "f", "arguments": {"a": [1, 2]}}]',
    "bracket_in_string": 'functools[{"name": "f", "arguments": {"a": "x]y"}}]',
    "text_after": "functools[" + W + "] and more text",
    "second_marker": "functools[" + W + "] functools[" + W + "]",
    "partial_marker": "call functools",
    "long_arguments": 'functools[{"name": "f", "arguments": {"text": "' + "word " * 400 + '"}}]',
}
DIVERGENCES = {
    KEPT_CALLS: "a call that streamed stays where its array later breaks or is cut",
    DROPS_OUTPUT: "vLLM returns no content and no call for a region that is not JSON (its "
                  "region ends at the first `]`); ours reads the array as JSON and keeps "
                  "the calls, or the whole output as content",
    "prose_before": "prose before functools[ had streamed: it stays content (vLLM drops it)",
    "parameters_then_arguments": "the parameters member had streamed; vLLM takes arguments",
}  # fmt: skip
OWN["prose_before"] = "Sure. functools[" + W + "]"
OWN["parameters_then_arguments"] = 'functools[{"name": "f", "parameters": {"a": 1}, "arguments": {"b": 2}}]'
SPLIT = ("two", "parameters", "arguments_first", "no_arguments", "string_item", "unclosed",
         "empty_array", "text_after", "prose_before", "partial_marker", "not_json")


@pytest.fixture(scope="module")
def parser() -> Phi4MiniJsonToolParser:
    vocab = family_tokenizer("tool", "phi4_mini_json").tokenizer.get_vocab()
    return Phi4MiniJsonToolParser(vocab, WEATHER_TOOLS)


@pytest.mark.vllm
def test_phi4_matches_vllm(vllm_ref) -> None:
    assert_family_matches_vllm(vllm_ref, "phi4_mini_json", family_cases("phi4_mini_json", OWN), DIVERGENCES)


def test_phi4_split_invariant(parser: Phi4MiniJsonToolParser) -> None:
    assert_family_splits("phi4_mini_json", parser, {k: OWN[k] for k in SPLIT})


def test_phi4_streams_arguments(parser: Phi4MiniJsonToolParser) -> None:
    """A call is sent at its arguments' start; its arguments stream."""
    state, events = parser.feed(parser.initial_state(), 'Hi functools[{"name": "get_weather", "argu', "r")
    assert [type(e).__name__ for e in events] == ["ContentDelta"]
    state, events = parser.feed(state, 'ments": {"city": "Pa', "r")
    assert [type(e).__name__ for e in events] == ["ToolCallStart", "ToolArgsDelta"]
    assert events[1].text == '{"city": "Pa'


def test_phi4_divergence_bracket_in_arguments(parser: Phi4MiniJsonToolParser) -> None:
    """Named DROPS_OUTPUT: a `]` inside the arguments ends vLLM's region (no content, no
    call); ours keeps the call."""
    result = parser.parse(OWN["bracket_in_arguments"], "r")
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("f", '{"a": [1, 2]}')]
