"""xlam: differential tests against vLLM 0.33's xLAMToolParser (one oracle call) and split
invariance on the family's tokenizer."""

from __future__ import annotations

import json

import pytest

from parsers.tools.xlam import XlamToolParser
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

OWN: dict[str, str] = {
    "array": "[" + W + "]",
    "two_calls": "[" + W + ", " + S + "]",
    "blank_around": "  \n[" + W + "]  \n",
    "fenced": "Sure.\n```json\n[" + W + "]\n```\nDone.",
    "fenced_untagged_end": "Here:\n```\n[" + S + "]```",
    "fenced_object_no_call": "Example:\n```json\n{\"a\": 1}\n```\nok",
    "fence_unclosed": "Look ```json\n[" + W + "]",
    "tool_calls_line": "Hi [TOOL_CALLS][" + W + "]\nbye",
    "tool_calls_eos": "[TOOL_CALLS] [" + W + "]",
    "tool_call_tag": "Hi <tool_call>[" + W + "]</tool_call> bye",
    "tool_call_tag_object": "Hi <tool_call>" + W + "</tool_call> bye",
    "tool_call_tag_unclosed": "Hi <tool_call>[" + W + "]",
    "think_then_array": "<think>hmm</think>\n[" + W + "]",
    "think_then_prose": "<think>hmm</think> It is sunny.",
    "string_arguments": '[{"name": "f", "arguments": "x=1"}]',
    "int_arguments": '[{"name": "f", "arguments": 3}]',
    "null_arguments": '[{"name": "f", "arguments": null}]',
    "list_arguments": '[{"name": "f", "arguments": [1]}]',
    "name_not_string": '[{"name": 3, "arguments": {}}]',
    "empty_array": "[]",
    "skipped_item_then_call": '[{"name": "f"}, 7, ' + W + "]",
    "only_skipped": '[{"name": "f"}, "x"]',
    "numbers": "[1, 2, 3]",
    "bracket_prose": "[Note] this is prose",
    "object_not_array": W,
    "arguments_first": '[{"arguments": {"a": 1}, "name": "f"}]',
    "empty_arguments": '[{"name": "f", "arguments": {}}]',
    "nested": '[{"name": "f", "arguments": {"a": {"b": {"c": [[], {}, "]}"]}}}}]',
    "missing_comma": "[" + W + " " + W + "]",
    "trailing_comma": "[" + W + ",]",
    "marker_in_string": '[{"name": "f", "arguments": {"code": "```json\\n[]```"}}]',
    "long_arguments": '[{"name": "f", "arguments": {"text": "' + "word " * 400 + '"}}]',
}
DIVERGENCES = {
    KEPT_CALLS: "a call that streamed stays (cut, broken or followed by text), the rest is "
                "content; vLLM's batch makes the whole output content",
    "code_nonjson_then_json": "a block without calls stays content (vLLM cuts every block "
                              "of the pattern that held calls)",
    "think_text_around_block": "text after </think> around a block is kept (vLLM drops it)",
    "tool_calls_eos": 'a block path whose content strips to nothing gives None (vLLM: ""); '
                      "a stream cannot tell them apart",
}  # fmt: skip
OWN["code_nonjson_then_json"] = "A ```python\nx=1\n``` B ```json\n[" + W + "]\n``` C"
OWN["think_text_around_block"] = "<think>h</think> text ```json\n[" + W + "]\n``` more"


SPLIT = ("two_calls", "blank_around", "fenced", "tool_calls_line", "tool_call_tag_unclosed",
         "think_then_array", "string_arguments", "int_arguments", "skipped_item_then_call",
         "only_skipped", "bracket_prose", "arguments_first", "missing_comma")


@pytest.fixture(scope="module")
def parser() -> XlamToolParser:
    return XlamToolParser(family_tokenizer("tool", "xlam").tokenizer.get_vocab(), WEATHER_TOOLS)


@pytest.mark.vllm
def test_xlam_matches_vllm(vllm_ref, parser: XlamToolParser) -> None:
    batches = assert_family_matches_vllm(vllm_ref, "xlam", family_cases("xlam", OWN), DIVERGENCES)
    assert batches["two_calls"]["tool_calls"][1]["name"] == "search"


def test_xlam_split_invariant(parser: XlamToolParser) -> None:
    assert_family_splits("xlam", parser, {k: OWN[k] for k in SPLIT})


def test_xlam_streams_arguments(parser: XlamToolParser) -> None:
    """A call is sent at its arguments' first token; string values stream as they come."""
    state, events = parser.feed(parser.initial_state(), '[{"name": "get_weather", "arguments": ', "r")
    assert events == []
    state, events = parser.feed(state, '{"city": "Pa', "r")
    assert [type(e).__name__ for e in events] == ["ToolCallStart", "ToolArgsDelta"]
    assert events[1].text == '{"city": "Pa'
    state, events = parser.feed(state, "ris" * 1000, "r")
    assert len(json.dumps(state.to_json())) < 1000


def test_xlam_divergence_text_after_array(parser: XlamToolParser) -> None:
    """Named divergence KEPT_CALLS: the array's call had streamed; the text is content."""
    result = parser.parse("[" + W + "]\nAnything else?", "r")
    assert result.content == "\nAnything else?" and result.tool_calls[0].name == "get_weather"
