"""hermes / qwen3_json: split invariance on real Qwen3 tokens and differential tests against
vLLM 0.33's Hermes2ProToolParser."""

from __future__ import annotations

import pytest

from parsers._base import make_tool_call_id
from parsers.tools.hermes_parser import HermesToolParser

from .tool_parser_support import assert_matches_vllm, assert_split_invariant, qwen3

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
    "later_malformed_call": "the second call had started streaming: it stays, cut",
    "malformed_json": "the call streamed before its body proved unclosed: it stays",
    "truncated_at_eos": "the call streamed before the output stopped: it stays, cut",
    "partial_end_marker_at_end": "the call streamed; the text after it is content",
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


def test_hermes_divergence_later_malformed_call(parser: HermesToolParser) -> None:
    """Named divergence `later_malformed_call`: the second call had sent its name and its
    arguments' first character when `</tool_call>` cut it; it stays as it is and the first
    call stays (vLLM's batch would make all output content, taking back what streamed)."""
    text = CORPUS["later_malformed_call"]
    result = parser.parse(text, "req-1")
    assert [(c.name, c.arguments) for c in result.tool_calls] == [
        ("get_weather", '{"city": "Paris", "unit": "c"}'), ("search", "{\n")]
    assert result.content is None


def test_hermes_divergence_cut_calls(parser: HermesToolParser) -> None:
    """Named divergences: a call cut by the end of the output keeps the arguments it has; a
    body that never closes its object keeps its (complete) arguments; text after a complete
    body that makes it invalid is content. Nothing the model wrote is lost."""
    cut = parser.parse(CORPUS["truncated_at_eos"], "r")
    assert cut.content == "Checking.\n" and cut.tool_calls[0].arguments == '{"city": "Pa'
    unclosed = parser.parse(CORPUS["malformed_json"], "r")
    assert unclosed.tool_calls[0].arguments == '{"city": "Paris"}'
    tail = parser.parse(CORPUS["partial_end_marker_at_end"], "r")
    assert tail.content == "\n</tool_" and tail.tool_calls[0].name == "get_weather"
    broken = parser.parse('<tool_call>{"name": "f", "arguments": {"a": 1 2}}</tool_call>', "r")
    assert broken.tool_calls[0].arguments == '{"a": 1 2}}'


def test_hermes_invalid_before_commit_is_content(parser: HermesToolParser) -> None:
    """A body that is not a call before its arguments start is content, as vLLM's batch
    makes it (the first call: all output)."""
    for text in ('x <tool_call>{"name": 3, "arguments": {}}</tool_call>',
                 "x <tool_call>[1]</tool_call> y", 'x <tool_call>{"arguments": {}}</tool_call>'):
        assert parser.parse(text, "r").content == text


def test_hermes_arguments_before_name_held_whole(parser: HermesToolParser) -> None:
    """A body that names its arguments first is held to its end and decided as vLLM does."""
    text = '<tool_call>{"arguments": {"a": "b"}, "name": "f"}</tool_call>'
    state, events = parser.feed(parser.initial_state(), text[:-12], "r")
    assert events == []
    result = parser.parse(text, "r")
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("f", '{"a": "b"}')]
    assert_split_invariant(parser, text, qwen3().chunks(text))


def test_hermes_streams_name_then_argument_fragments(parser: HermesToolParser) -> None:
    """The call is sent once its name and the start of its arguments are read; string
    values stream as they come; the arguments are canonical JSON."""
    state = parser.initial_state()
    state, events = parser.feed(state, 'Hi <tool_call>\n{"name": "get_weather", "argu', "r")
    assert [type(e).__name__ for e in events] == ["ContentDelta"]
    state, events = parser.feed(state, 'ments": {"city":"Pa', "r")
    assert [type(e).__name__ for e in events] == ["ToolCallStart", "ToolArgsDelta"]
    assert events[0].name == "get_weather" and events[1].text == '{"city": "Pa'
    state, events = parser.feed(state, 'ris","n":12', "r")
    assert [e.text for e in events] == ['ris", "n": ']
    state, events = parser.feed(state, "}}\n</tool_call>", "r")
    assert [e.text for e in events] == ["12}"]
