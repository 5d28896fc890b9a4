"""granite: split invariance and differential tests against vLLM 0.33's engine-based
GraniteEngineToolParser. No Granite tokenizer package is installed, so outputs are tokenized
with the real Qwen3 tokenizer (`<tool_call>` is one special token there; `<|tool_call|>`
splits into plain-text pieces, which the split-invariance harness also covers char by char)."""

from __future__ import annotations

import json

import pytest

from parsers._base import make_tool_call_id
from parsers.tools.granite import GraniteToolParser

from .tool_parser_support import WEATHER_TOOLS, assert_matches_vllm, assert_split_invariant, qwen3

W = '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c", "days": "3"}}'
S = '{"name": "search", "arguments": {"query": "北京 天气 🌧️", "filters": {"a": [1, 2.5, {"b": null}]}}}'

CORPUS: dict[str, str] = {
    "plain_content": "The weather in Paris is sunny. 😊",
    "single_call_30": "<|tool_call|>[" + W + "]",
    "single_call_31": "<tool_call>[" + W + "]",
    "two_calls": "<|tool_call|>[" + W + ", " + S + "]",
    "content_before_call": "Let me check the weather.\n\n<tool_call> [" + W + "]",
    "cjk_emoji_args": "<tool_call>[" + S + "]",
    "nested_brackets_in_strings": '<tool_call>[{"name": "search", "arguments": {"query": "}]{[\\"", "filters": {}}}]',
    "text_after_array": "<tool_call>[" + W + "] Hope that helps!",
    "second_region": "<tool_call>[" + W + "] and <tool_call>[" + S + "] done",
    "truncated_at_eos": 'Checking.\n<tool_call>[{"name": "get_weather", "arguments": {"city": "Pa',
    "array_not_closed": "<tool_call>[" + W,
    "no_array": "<tool_call> get_weather(city='Paris')",
    "bail_inside_array": "<tool_call>[" + W + "; oops",
    "empty_array": "Nothing to call <tool_call>[] here",
    "call_without_arguments": '<tool_call>[{"name": "get_weather"}]',
    "call_without_name": '<tool_call>[{"arguments": {"city": "Oslo"}}]',
    "arguments_not_object": '<tool_call>[{"name": "get_weather", "arguments": "city=Oslo"}]',
    "parameters_key": '<tool_call>[{"name": "get_weather", "parameters": {"city": "Oslo"}}]',
    "unknown_function": '<tool_call>[{"name": "no_such_tool", "arguments": {"x": "1"}}]',
    "partial_marker_at_end": "I will call a tool <tool_",
    "partial_marker_30_at_end": "I will call a tool <|tool_ca",
    "marker_twice": "<tool_call><tool_call>[" + W + "]",
    "whitespace_only_content": "  \n<tool_call>[" + W + "]\n  ",
}

# vLLM 0.33's stream differs from its own batch here; ours follows vLLM's batch.
STREAM_LOSSES = frozenset(
    {
        "content_before_call",  # stream keeps the blank line the batch strips
        "text_after_array",  # stream sends text after the array, batch drops it
        "second_region",
        "truncated_at_eos",  # stream sends an args prefix, batch the raw partial object
        "arguments_not_object",  # stream sends no arguments, batch the raw string value
        "bail_inside_array",
        "leading_whitespace_before_call",
    }
)
DIVERGENCES = frozenset({"leading_whitespace_before_call"})
CORPUS["leading_whitespace_before_call"] = "\n\nSure thing.\n<tool_call>[" + W + "]"


@pytest.fixture(scope="module")
def parser() -> GraniteToolParser:
    return GraniteToolParser(qwen3().vocab, WEATHER_TOOLS)


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_granite_split_invariant(parser: GraniteToolParser, case: str) -> None:
    """Streaming any split of the token sequence yields exactly the batch result."""
    text = CORPUS[case]
    assert_split_invariant(parser, text, qwen3().chunks(text))


@pytest.mark.vllm
def test_granite_matches_vllm(vllm_oracle, parser: GraniteToolParser) -> None:
    """Batch == vLLM 0.33 batch (content, names, JSON-equal arguments) except the named
    divergence; stream == vLLM's stream where vLLM is lossless."""
    results = assert_matches_vllm(
        vllm_oracle, "granite", parser, qwen3(), CORPUS,
        stream_losses=STREAM_LOSSES, divergences=DIVERGENCES, real_tokenizer=True,
    )
    for name, res in results.items():  # arguments are byte-identical (raw member text)
        ours = parser.parse(CORPUS[name], "req-1")
        assert [c.arguments for c in ours.tool_calls] == [a for _, a, _ in res["batch"]["calls"]]


def test_granite_schema_types_and_raw_arguments(parser: GraniteToolParser) -> None:
    """"days": "3" becomes 3 (integer schema, re-serialised); without a change the raw member
    text is kept verbatim."""
    (first,) = parser.parse(CORPUS["single_call_31"], "r").tool_calls
    assert json.loads(first.arguments) == {"city": "Paris", "unit": "c", "days": 3}
    raw = '<tool_call>[{"name": "search", "arguments": {"query":"x" ,"filters":{}}}]'
    (second,) = parser.parse(raw, "r").tool_calls
    assert second.arguments == '{"query":"x" ,"filters":{}}'


def test_granite_ids_are_deterministic(parser: GraniteToolParser) -> None:
    result = parser.parse(CORPUS["two_calls"], "chatcmpl-abc")
    assert [c.id for c in result.tool_calls] == [make_tool_call_id("chatcmpl-abc", i) for i in range(2)]


def test_granite_divergence_leading_whitespace(parser: GraniteToolParser) -> None:
    """Named divergence: leading whitespace before prose and a call is kept (vLLM's batch
    strips it; the prose streams before the call is known). Trailing whitespace is dropped."""
    assert parser.parse(CORPUS["leading_whitespace_before_call"], "r").content == "\n\nSure thing."


def test_granite_streams_name_then_raw_arguments(parser: GraniteToolParser) -> None:
    """A call is sent when its name is read; its `arguments` text streams as written (the
    integer-typed `days` is held until its value ends, then coerced)."""
    state, events = parser.feed(parser.initial_state(), 'Hi <tool_call>[{"name": "get_weather", ', "r")
    assert [type(e).__name__ for e in events] == ["ContentDelta", "ToolCallStart"]
    assert events[1].name == "get_weather"
    state, events = parser.feed(state, '"arguments": {"city": "Par', "r")
    assert [e.text for e in events] == ['{"city": "Par']
    state, events = parser.feed(state, 'is", "days": "3"}}]', "r")
    assert "".join(e.text for e in events) == 'is", "days": 3}'


def test_granite_region_before_first_call_is_bounded(parser: GraniteToolParser) -> None:
    """Blanks and commas before the first call leave no text in the state."""
    state, _ = parser.feed(parser.initial_state(), "<tool_call> [", "r")
    for _ in range(1000):
        state, events = parser.feed(state, " ,\n ,", "r")
        assert events == []
    assert state.phase == "tool_args" and state.ext.opened
    assert len(json.dumps(state.to_json())) < 400
