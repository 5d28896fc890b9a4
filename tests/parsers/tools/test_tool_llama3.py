"""llama3_json / llama4_json: split invariance on real Llama 3 (tiktoken) tokens and
differential tests against vLLM 0.33's Llama3JsonToolParser."""

from __future__ import annotations

import pytest

from parsers.tools.llama3_json import Llama3JsonToolParser

from .tool_parser_support import assert_matches_vllm, assert_split_invariant, comparable, llama3

W = '{"name": "get_weather", "parameters": {"city": "Paris", "unit": "c"}}'
S = '{"name": "search", "arguments": {"query": "東京 ラーメン 🍜", "filters": {"a": [1, {"b": [true, null]}]}}}'

CORPUS: dict[str, str] = {
    "plain_content": "Paris is sunny today, around 21°C. 🌞",
    "single_call": W,
    "python_tag_call": "<|python_tag|>" + W,
    "two_calls": "<|python_tag|>" + W + "; " + S,
    "cjk_emoji_args": S,
    "nested_json": '{"name": "search", "parameters": {"filters": {"x": {"y": {"z": ["}", "{", {}]}}}}}',
    "string_arguments": '{"name": "get_weather", "arguments": "{\\"city\\": \\"Rome\\"}"}',
    "leading_whitespace": "\n\n  " + W,
    "malformed_json": '{"name": "get_weather", "parameters": {"city": "Paris"',
    "truncated_at_eos": '<|python_tag|>{"name": "get_weather", "parameters": {"ci',
    "call_without_arguments": '{"name": "get_weather"}',
    "partial_marker_at_end": "<|python_",
    "json_not_a_call": '{"answer": 42, "unit": "km"}',
    "python_tag_code": "<|python_tag|>print(sum(range(10)))",
    "content_with_braces": "Use the set {1, 2} here.",
    "name_not_string": '{"name": ["x"], "parameters": {}}',
    "trailing_text_after_call": W + "\nI called the tool.",
    "prose_before_json": "Sure, calling it now: " + W,
    "back_to_back_objects": W + S,
    "list_wrapped": "[" + W + "]",
    "list_wrapped_two": "[\n  " + W + ",\n  " + S + "\n]\n",
    "list_then_prose": "[ this is not a call ] " + W,
    "lone_bracket": "[",
}

STREAM_LOSSES = frozenset(
    {
        "malformed_json",  # stream emits a call from the partial JSON; batch: content
        "truncated_at_eos",
        "call_without_arguments",  # stream: the name only; batch: content
        "json_not_a_call",  # stream: nothing at all; batch: content
        "python_tag_code",  # stream: nothing; batch: content
        "name_not_string",
        "leading_whitespace",  # stream: content (does not start with "{"); batch: a call
        "prose_before_json",  # stream: content; batch: a call
        "list_wrapped",  # stream: content; batch: a call
        "list_wrapped_two",
        "list_then_prose",  # stream: content; batch: a call (prose dropped)
        "back_to_back_objects",  # stream: two calls; batch: all content
    }
)

# Ours differs from vLLM's batch here (stream == our batch; see the module docstring): vLLM's
# batch would take back what was already streamed.
DIVERGENCES = frozenset(
    {
        "prose_before_json",  # the prose streamed as content before any object was seen
        "list_then_prose",  # same: the text after `[` is prose
        "back_to_back_objects",  # the first call streamed before the second object failed
        "malformed_json",  # the call streamed its name and arguments before the object proved cut
        "truncated_at_eos",  # same, cut by the end of the output
    }
)


@pytest.fixture(scope="module")
def parser() -> Llama3JsonToolParser:
    return Llama3JsonToolParser(llama3().vocab, [])


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_llama3_split_invariant(parser: Llama3JsonToolParser, case: str) -> None:
    """Streaming any split of a real Llama 3 token sequence yields exactly the batch result."""
    text = CORPUS[case]
    assert_split_invariant(parser, text, llama3().chunks(text))


@pytest.mark.vllm
def test_llama3_matches_vllm(vllm_oracle, parser: Llama3JsonToolParser) -> None:
    """Batch == vLLM 0.33 batch on the corpus except the named divergences; stream == vLLM's."""
    results = assert_matches_vllm(
        vllm_oracle,
        "llama3_json",
        parser,
        llama3(),
        CORPUS,
        stream_losses=STREAM_LOSSES,
        divergences=DIVERGENCES,
    )
    # The prose divergences follow vLLM's own stream exactly.
    for name in ("prose_before_json", "list_then_prose"):
        ours = parser.parse(CORPUS[name], "req-1")
        stream = results[name]["stream"]
        assert comparable(ours.content, []) == comparable(stream["content"], stream["calls"])


def test_llama3_divergence_back_to_back(parser: Llama3JsonToolParser) -> None:
    """Named divergence: `{..}{..}` keeps the first call; vLLM's skip of the `{` right after
    an object makes the second object's inner `{}` a malformed call, returned as content."""
    result = parser.parse(CORPUS["back_to_back_objects"], "r")
    assert [c.name for c in result.tool_calls] == ["get_weather"]
    assert result.content == S[S.index('{"query"') : -1]


def test_llama3_divergence_prose_before_json(parser: Llama3JsonToolParser) -> None:
    """Named divergence: prose first means a content answer (as vLLM's stream decides)."""
    result = parser.parse(CORPUS["prose_before_json"], "r")
    assert result.tool_calls == () and result.content == CORPUS["prose_before_json"]


def test_llama3_divergence_cut_calls(parser: Llama3JsonToolParser) -> None:
    """Named divergences: a call that streamed before its object proved cut keeps the
    arguments it has (vLLM's batch: all content; its own stream sends the call too)."""
    cut = parser.parse(CORPUS["truncated_at_eos"], "r")
    assert cut.content is None and [(c.name, c.arguments) for c in cut.tool_calls] == [("get_weather", '{"ci')]
    unclosed = parser.parse(CORPUS["malformed_json"], "r")
    assert [(c.name, c.arguments) for c in unclosed.tool_calls] == [("get_weather", '{"city": "Paris"')]


def test_llama3_streams_name_then_argument_fragments(parser: Llama3JsonToolParser) -> None:
    state, events = parser.feed(parser.initial_state(), '<|python_tag|>{"name": "get_weather", "param', "r")
    assert events == []
    state, events = parser.feed(state, 'eters": {"city": "Pa', "r")
    assert [type(e).__name__ for e in events] == ["ToolCallStart", "ToolArgsDelta"]
    assert events[1].text == '{"city": "Pa'
    state, events = parser.feed(state, 'ris"}}', "r")
    assert [e.text for e in events] == ['ris"}']
