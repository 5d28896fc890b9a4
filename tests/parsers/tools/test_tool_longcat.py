"""longcat: differential tests against vLLM 0.33's LongcatFlashToolParser (Hermes over
`<longcat_tool_call>`; one oracle call) and split invariance on the family's tokenizer."""

from __future__ import annotations

import pytest

from parsers.tools.longcat import LongcatToolParser
from tests.parsers.family_oracle import WEATHER_TOOLS
from tests.parsers.family_tokenizers import family_tokenizer

from .json_family_check import (
    KEPT_CALLS,
    assert_family_matches_vllm,
    assert_family_splits,
    family_cases,
)

A, E = "<longcat_tool_call>", "</longcat_tool_call>"
W = A + '\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n' + E
S = A + '{"name": "search", "arguments": {"query": "北京 天气 🌧️", "filters": {"a": [1, 2.5, {"b": null}]}}}' + E

OWN: dict[str, str] = {
    "single": W,
    "two": W + "\n" + S,
    "content_before": "Let me check.\n\n" + W,
    "text_after": W + "\nDone, that was the call.",
    "string_arguments": A + '{"name": "get_weather", "arguments": "{\\"city\\": \\"Rome\\"}"}' + E,
    "no_end_marker": A + '{"name": "get_weather", "arguments": {"city": "Oslo"}}',
    "no_arguments": A + '{"name": "get_weather"}' + E,
    "name_not_string": A + '{"name": 3, "arguments": {}}' + E,
    "list_body": A + "[1, 2]" + E,
    "empty_call": "a " + A + E + " b",
    "end_marker_in_content": "Use " + E + " to close. " + A,
    "arguments_first": A + '{"arguments": {"a": "b"}, "name": "f"}' + E,
    "partial_marker": "I will call a tool <longcat_tool",
    "hermes_markers_are_text": '<tool_call>{"name": "f", "arguments": {}}</tool_call>',
    "long_arguments": A + '{"name": "f", "arguments": {"text": "' + "word " * 400 + '"}}' + E,
}
DIVERGENCES = {
    KEPT_CALLS: "a call that streamed stays (cut by the end, by its end marker, or broken "
                "after its arguments started); vLLM's batch makes all output content",
    "later_malformed_call": "a malformed call after an emitted one: its text is content and "
                            "the first call stays (vLLM: all output content)",
}  # fmt: skip
OWN["later_malformed_call"] = W + "\n" + A + '\n{"name": "search", "arguments": {\n' + E
SPLIT = ("two", "content_before", "text_after", "no_end_marker", "no_arguments", "list_body",
         "empty_call", "end_marker_in_content", "arguments_first", "partial_marker",
         "later_malformed_call")


@pytest.fixture(scope="module")
def parser() -> LongcatToolParser:
    return LongcatToolParser(family_tokenizer("tool", "longcat").tokenizer.get_vocab(), WEATHER_TOOLS)


@pytest.mark.vllm
def test_longcat_matches_vllm(vllm_ref) -> None:
    assert_family_matches_vllm(vllm_ref, "longcat", family_cases("longcat", OWN), DIVERGENCES)


def test_longcat_split_invariant(parser: LongcatToolParser) -> None:
    assert_family_splits("longcat", parser, {k: OWN[k] for k in SPLIT})


def test_longcat_streams_arguments(parser: LongcatToolParser) -> None:
    state, events = parser.feed(parser.initial_state(), "Hi " + A + '{"name": "get_weather", ', "r")
    assert [type(e).__name__ for e in events] == ["ContentDelta"]
    state, events = parser.feed(state, '"arguments": {"city": "Pa', "r")
    assert [type(e).__name__ for e in events] == ["ToolCallStart", "ToolArgsDelta"]
    assert events[1].text == '{"city": "Pa'
