"""jamba: differential tests against vLLM 0.33's JambaToolParser (one oracle call) and split
invariance on the family's tokenizer."""

from __future__ import annotations

import pytest

from parsers.tools.jamba import JambaToolParser
from tests.parsers.family_oracle import WEATHER_TOOLS
from tests.parsers.family_tokenizers import family_tokenizer

from .json_family_check import (
    KEPT_CALLS,
    assert_family_matches_vllm,
    assert_family_splits,
    family_cases,
)

W = '{"name": "get_weather", "arguments": {"city": "東京", "unit": "c"}}'
S = '{"name": "search", "arguments": {"query": "say \\"hi\\" 😀", "filters": {"a": [1, {"b": null}]}}}'
T = "<tool_calls>[{}]</tool_calls>"

OWN: dict[str, str] = {
    "one": T.format(W),
    "two": "<tool_calls>[\n  " + W + ",\n  " + S + "\n]</tool_calls>",
    "content_before": "Let me check.\n" + T.format(W),
    "blank_before": " " + T.format(W),
    "text_after": T.format(W) + "\nAnything else?",
    "object_region": "<tool_calls>" + W + "</tool_calls>",
    "unclosed": "<tool_calls>[" + W + "]",
    "blank_region": "x <tool_calls> </tool_calls> y",
    "not_json": "<tool_calls>[{oops}]</tool_calls>",
    "text_inside_after_array": "<tool_calls>[" + W + "] oops</tool_calls>",
    "no_arguments": '<tool_calls>[{"name": "f"}]</tool_calls>',
    "name_not_string": '<tool_calls>[{"name": 1, "arguments": {}}]</tool_calls>',
    "string_item": '<tool_calls>["x"]</tool_calls>',
    "scalar_arguments": '<tool_calls>[{"name": "f", "arguments": 3}]</tool_calls>',
    "string_arguments": '<tool_calls>[{"name": "f", "arguments": "a=1"}]</tool_calls>',
    "arguments_first": '<tool_calls>[{"arguments": {"a": 1}, "name": "f"}]</tool_calls>',
    "empty_arguments": '<tool_calls>[{"name": "f", "arguments": {}}]</tool_calls>',
    "end_marker_in_string": '<tool_calls>[{"name": "f", "arguments": {"a": "</tool_calls>"}}]</tool_calls>',
    "end_marker_in_content": "Use </tool_calls> to close.",
    "second_region": T.format(W) + " " + T.format(S),
    "partial_marker": "I will call <tool_ca",
    "long_arguments": '<tool_calls>[{"name": "f", "arguments": {"text": "' + "word " * 400 + '"}}]</tool_calls>',
}
DIVERGENCES = {
    KEPT_CALLS: "a call that streamed stays where the region later breaks or never closes",
    "empty_array": "no call: the whole output is content (vLLM: the text before the region)",
}
OWN["empty_array"] = "Hi <tool_calls>[]</tool_calls> after"
SPLIT = ("two", "content_before", "text_after", "object_region", "unclosed", "blank_region",
         "text_inside_after_array", "no_arguments", "arguments_first", "end_marker_in_string",
         "second_region", "partial_marker", "empty_array")


@pytest.fixture(scope="module")
def parser() -> JambaToolParser:
    return JambaToolParser(family_tokenizer("tool", "jamba").tokenizer.get_vocab(), WEATHER_TOOLS)


@pytest.mark.vllm
def test_jamba_matches_vllm(vllm_ref) -> None:
    assert_family_matches_vllm(vllm_ref, "jamba", family_cases("jamba", OWN), DIVERGENCES)


def test_jamba_split_invariant(parser: JambaToolParser) -> None:
    assert_family_splits("jamba", parser, {k: OWN[k] for k in SPLIT})


def test_jamba_streams_arguments(parser: JambaToolParser) -> None:
    state, events = parser.feed(parser.initial_state(), 'Hi <tool_calls>[{"name": "get_weather", ', "r")
    assert [type(e).__name__ for e in events] == ["ContentDelta"]
    state, events = parser.feed(state, '"arguments": {"city": "Pa', "r")
    assert [type(e).__name__ for e in events] == ["ToolCallStart", "ToolArgsDelta"]
    assert events[1].text == '{"city": "Pa'


def test_jamba_divergence_kept_call(parser: JambaToolParser) -> None:
    """Named KEPT_CALLS: a region that never closes keeps the call that streamed."""
    result = parser.parse(OWN["unclosed"], "r")
    assert result.content is None and [c.name for c in result.tool_calls] == ["get_weather"]
