"""internlm: differential tests against vLLM 0.33's Internlm2ToolParser (one oracle call) and
split invariance on the family's tokenizer."""

from __future__ import annotations

import pytest

from parsers.tools.internlm import InternLMToolParser
from tests.parsers.family_oracle import WEATHER_TOOLS
from tests.parsers.family_tokenizers import family_tokenizer

from .json_family_check import assert_family_matches_vllm, assert_family_splits, family_cases

A, E = "<|action_start|><|plugin|>", "<|action_end|>"
W = '{"name": "get_weather", "parameters": {"city": "東京", "unit": "c"}}'
S = '{"name": "search", "parameters": {"query": "say \\"hi\\" 😀", "filters": {"a": [1, {"b": null}]}}}'

OWN: dict[str, str] = {
    "one": A + "\n" + W + E,
    "content_before": "Let me check.\n" + A + "\n" + W + "\n" + E,
    "text_after": A + W + E + "\nAnything else?",
    "arguments_key": A + '{"name": "f", "arguments": {"a": 1}}' + E,
    "no_arguments": A + '{"name": "f"}' + E,
    "null_parameters": A + '{"name": "f", "parameters": null}' + E,
    "string_parameters": A + '{"name": "f", "parameters": "x=1"}' + E,
    "parameters_first": A + '{"parameters": {"a": 1}, "name": "f"}' + E,
    "prefix_before_object": A + "get_weather\n" + W + E,
    "no_end_marker": A + W,
    "nested": A + '{"name": "f", "parameters": {"a": {"b": [[], {}, "}"]}}}' + E,
    "empty_parameters": A + '{"name": "f", "parameters": {}}' + E,
    "start_token_alone": "<|action_start|><|interpreter|>print(1)<|action_end|>",
    "end_marker_in_content": "Use " + E + " to end.",
    "partial_marker": "Calling <|action_start|>",
    "long_arguments": A + '{"name": "f", "parameters": {"text": "' + "word " * 400 + '"}}' + E,
}
# vLLM's batch raises on these (no response at all); ours, named:
VLLM_ERRORS = {
    "too many values to unpack": "two or more actions: each is a call",
    "Expecting": "an action that is not JSON: content, or a call that streamed is kept",
    "Extra data": "text after the action's object (a cut end marker): the call is kept, "
                  "the text is content",
    "KeyError": "an action without a name: the output is content",
    "validation error": "a name that is no string: the output is content",
}
DIVERGENCES: dict[str, str] = {}  # vLLM's batch raises wherever ours differs (VLLM_ERRORS)
OWN["two_actions"] = A + W + E + "\n" + A + S + E
OWN["not_json"] = "x " + A + "{oops}" + E
OWN["no_name"] = A + '{"parameters": {}}' + E
OWN["name_not_string"] = A + '{"name": 3, "parameters": {}}' + E
SPLIT = ("content_before", "text_after", "no_arguments", "parameters_first", "prefix_before_object",
         "no_end_marker", "start_token_alone", "partial_marker", "two_actions", "not_json", "no_name")


@pytest.fixture(scope="module")
def parser() -> InternLMToolParser:
    return InternLMToolParser(family_tokenizer("tool", "internlm").tokenizer.get_vocab(), WEATHER_TOOLS)


@pytest.mark.vllm
def test_internlm_matches_vllm(vllm_ref) -> None:
    assert_family_matches_vllm(vllm_ref, "internlm", family_cases("internlm", OWN), DIVERGENCES,
                               vllm_errors=VLLM_ERRORS)  # fmt: skip


def test_internlm_split_invariant(parser: InternLMToolParser) -> None:
    assert_family_splits("internlm", parser, {k: OWN[k] for k in SPLIT})


def test_internlm_two_actions_are_two_calls(parser: InternLMToolParser) -> None:
    """Named divergence (vLLM raises): each action is a call, in order."""
    result = parser.parse(OWN["two_actions"], "r")
    assert [c.name for c in result.tool_calls] == ["get_weather", "search"]


def test_internlm_streams_arguments(parser: InternLMToolParser) -> None:
    state, events = parser.feed(parser.initial_state(), 'Hi ' + A + '\n{"name": "get_weather", ', "r")
    assert [type(e).__name__ for e in events] == ["ContentDelta"]
    state, events = parser.feed(state, '"parameters": {"city": "Pa', "r")
    assert [type(e).__name__ for e in events] == ["ToolCallStart", "ToolArgsDelta"]
    assert events[1].text == '{"city": "Pa'
