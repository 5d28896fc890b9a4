"""hermes / qwen3_json: split invariance on real Qwen3 tokens and differential tests against
vLLM 0.33's Hermes2ProToolParser."""

from __future__ import annotations

import json

import pytest
from .tool_parser_support import assert_matches_vllm, assert_split_invariant, qwen3

from parsers._base import make_tool_call_id
from parsers.tools.hermes_parser import HermesToolParser

CALL_W = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>'
CALL_S = '<tool_call>\n{"name": "search", "arguments": {"query": "北京 天气 🌧️", "filters": {"a": [1, 2.5, {"b": null}]}}}\n</tool_call>'

CORPUS: dict[str, str] = {
    "plain_content": "The weather in Paris is sunny. 😊",
    "single_call": CALL_W,
    "two_calls": CALL_W + "\n" + CALL_S,
    "content_before_call": "Let me check the weather for you.\n\n" + CALL_W,
    "cjk_emoji_args": CALL_S,
    "nested_json": '<tool_call>\n{"name": "search", "arguments": {"filters": {"x": {"y": {"z": [[], {}, "}"]}}}}}\n</tool_call>',
    "string_arguments": '<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Rome\\"}"}\n</tool_call>',
    "malformed_json": "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}\n</tool_call>",
    "truncated_at_eos": 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa',
    "complete_json_no_end_tag": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}',
    "call_without_arguments": '<tool_call>\n{"name": "get_weather"}\n</tool_call>',
    "partial_marker_at_end": "I will call a tool <tool_",
    "partial_end_marker_at_end": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_',
    "text_after_call": CALL_W + "\nDone, that was the call.",
    "name_not_string": '<tool_call>\n{"name": 3, "arguments": {}}\n</tool_call>',
    "json_list_body": "<tool_call>\n[1, 2]\n</tool_call>",
    "empty_call": "a <tool_call></tool_call> b",
    "end_marker_in_content": "Use </tool_call> to close. <tool_call>",
    "arguments_scalar": '<tool_call>{"name": "get_weather", "arguments": 7}</tool_call>',
    "nan_argument": '<tool_call>{"name": "get_weather", "arguments": {"x": NaN}}</tool_call>',
    "lone_less_than": "a < b and c <= d, also <tool but not a call",
}
BAD_CALL = '<tool_call>\n{"name": "search", "arguments": {\n</tool_call>'
CORPUS["later_malformed_call"] = CALL_W + "\n" + BAD_CALL

# vLLM 0.33's stream differs from its own batch here (it drops or mangles text); ours
# follows vLLM's batch.
STREAM_LOSSES = frozenset(
    {
        "malformed_json",  # stream sends the name and a broken args prefix, batch: all content
        "truncated_at_eos",  # same
        "call_without_arguments",  # stream sends a call without arguments, batch: content
        "partial_end_marker_at_end",  # stream holds "</tool_" forever: args never close
        "name_not_string",  # stream drops the call, batch: content
        "json_list_body",
        "empty_call",
        "end_marker_in_content",
        "partial_marker_at_end",  # stream holds "<tool_" back and never flushes it
        "later_malformed_call",  # stream sends the first call and the second's name
    }
)
# Ours differs from vLLM's batch here (stream == our batch instead).
DIVERGENCES = {
    "later_malformed_call": "vLLM's batch makes all output content, taking back the call "
    "already streamed",
}


@pytest.fixture(scope="module")
def parser() -> HermesToolParser:
    return HermesToolParser(qwen3().vocab, [])


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_hermes_split_invariant(parser: HermesToolParser, case: str) -> None:
    """Streaming any split of a real Qwen3 token sequence yields exactly the batch result."""
    text = CORPUS[case]
    assert_split_invariant(parser, text, qwen3().chunks(text))


@pytest.mark.vllm
def test_hermes_matches_vllm(vllm_oracle, parser: HermesToolParser) -> None:
    """Batch == vLLM 0.33 batch on the corpus; stream == vLLM's stream where vLLM is lossless."""
    results = assert_matches_vllm(
        vllm_oracle, "hermes", parser, qwen3(), CORPUS, stream_losses=STREAM_LOSSES,
        divergences=frozenset(DIVERGENCES),
    )
    assert results["later_malformed_call"]["batch"]["content"] == CORPUS["later_malformed_call"]
    for name, res in results.items():  # hermes arguments are byte-identical, not just JSON-equal
        if name in DIVERGENCES:
            continue
        ours = parser.parse(CORPUS[name], "req-1")
        assert [c.arguments for c in ours.tool_calls] == [a for _, a, _ in res["batch"]["calls"]]


def test_hermes_ids_are_deterministic(parser: HermesToolParser) -> None:
    """Tool-call ids derive from the request id and index only."""
    result = parser.parse(CORPUS["two_calls"], "chatcmpl-abc")
    assert [c.id for c in result.tool_calls] == [make_tool_call_id("chatcmpl-abc", i) for i in range(2)]


def test_hermes_later_malformed_call_divergence(parser: HermesToolParser) -> None:
    """Named divergence `later_malformed_call`: a malformed call after an emitted call becomes
    content (raw text, markers included) and the earlier call stays; vLLM's batch would make
    all output content, taking back the call already streamed."""
    text = CORPUS["later_malformed_call"]
    result = parser.parse(text, "req-1")
    assert [c.name for c in result.tool_calls] == ["get_weather"]
    assert result.content == BAD_CALL
    assert_split_invariant(parser, text, qwen3().chunks(text))


def test_hermes_emits_call_whole_when_closed(parser: HermesToolParser) -> None:
    """The call is emitted (name + canonical args) as soon as `</tool_call>` arrives."""
    state = parser.initial_state()
    state, events = parser.feed(state, "Hi <tool_call>\n" + '{"name": "get_weather", "arguments": {"city":"X"}}', "r")
    assert [type(e).__name__ for e in events] == ["ContentDelta"]
    state, events = parser.feed(state, "\n</tool_call>", "r")
    assert [type(e).__name__ for e in events] == ["ToolCallStart", "ToolArgsDelta"]
    assert json.loads(events[1].text) == {"city": "X"} and events[1].text == '{"city": "X"}'
