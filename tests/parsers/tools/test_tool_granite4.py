"""granite4: differential tests against vLLM 0.33's Granite4ToolParser (one oracle call) and
split invariance on the family's tokenizer."""

from __future__ import annotations

import pytest

from parsers.tools.granite4 import Granite4ToolParser
from tests.parsers.family_oracle import WEATHER_TOOLS
from tests.parsers.family_tokenizers import family_tokenizer

from .json_family_check import (
    KEPT_CALLS,
    assert_family_matches_vllm,
    assert_family_splits,
    family_cases,
)

A, E = "<tool_call>", "</tool_call>"
W = A + '\n{"name": "get_weather", "arguments": {"city": "東京", "unit": "c"}}\n' + E
S = A + '{"name": "search", "arguments": {"query": "say \\"hi\\" 😀", "filters": {"a": [1, {"b": null}]}}}' + E

OWN: dict[str, str] = {
    "one": W,
    "around_and_between": "Hi " + W + " mid " + S + " end",
    "blank_around": "\n" + W + "\n",
    "string_arguments": A + '{"name": "f", "arguments": "x=1"}' + E,
    "int_arguments": A + '{"name": "f", "arguments": 3}' + E,
    "null_arguments": A + '{"name": "f", "arguments": null}' + E,
    "bool_arguments": A + '{"name": "f", "arguments": true}' + E,
    "no_arguments": A + '{"name": "f"}' + E,
    "name_not_string": A + '{"name": 1, "arguments": {}}' + E,
    "list_body": A + "[1]" + E,
    "empty_call": "a " + A + E + " b",
    "unclosed": "x " + A + '{"name": "f", "arguments": {"a": 1}}',
    "unclosed_uncommitted": "x " + A + '{"name": "f"',
    "start_twice": A + A + '{"name": "f", "arguments": {}}' + E,
    "stray_end": "a " + E + " b " + W,
    "arguments_first": A + '{"arguments": {"a": 1}, "name": "f"}' + E,
    "text_after_object": A + '{"name": "f", "arguments": {}} x' + E,
    "partial_marker": "I will <tool_",
    "long_arguments": A + '{"name": "f", "arguments": {"text": "' + "word " * 400 + '"}}' + E,
}
DIVERGENCES = {
    KEPT_CALLS: "a call that streamed stays where the output later faults",
    "later_bad_call": "after a sent call, a call that is not one is content (vLLM: all content)",
}
OWN["later_bad_call"] = W + " then " + A + "[1]" + E
SPLIT = ("around_and_between", "int_arguments", "null_arguments", "no_arguments", "list_body",
         "empty_call", "unclosed", "unclosed_uncommitted", "start_twice", "stray_end",
         "arguments_first", "text_after_object", "partial_marker", "later_bad_call")


@pytest.fixture(scope="module")
def parser() -> Granite4ToolParser:
    return Granite4ToolParser(family_tokenizer("tool", "granite4").tokenizer.get_vocab(), WEATHER_TOOLS)


@pytest.mark.vllm
def test_granite4_matches_vllm(vllm_ref) -> None:
    assert_family_matches_vllm(vllm_ref, "granite4", family_cases("granite4", OWN), DIVERGENCES)


def test_granite4_split_invariant(parser: Granite4ToolParser) -> None:
    assert_family_splits("granite4", parser, {k: OWN[k] for k in SPLIT})


def test_granite4_streams_arguments(parser: Granite4ToolParser) -> None:
    state, events = parser.feed(parser.initial_state(), "Hi " + A + '{"name": "get_weather", ', "r")
    assert [type(e).__name__ for e in events] == ["ContentDelta"]
    state, events = parser.feed(state, '"arguments": {"city": "Pa', "r")
    assert [type(e).__name__ for e in events] == ["ToolCallStart", "ToolArgsDelta"]
    assert events[1].text == '{"city": "Pa'
