"""mistral (pre-v11 tokenizers): split invariance on real mistral_common v3 tokens and
differential tests against vLLM 0.33's MistralToolParser (legacy [TOOL_CALLS] path).
v11+ tokenizers: test_tool_mistral_v11.py."""

from __future__ import annotations

import pytest

from parsers.tools.mistral import MistralToolParser, mistral_tool_call_id

from .tool_parser_support import assert_matches_vllm, assert_split_invariant, mistral_v3

W = '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}'
S = '{"name": "search", "arguments": {"query": "München 天气 ☀️", "filters": {"a": [1, {"b": null}]}}}'

CORPUS: dict[str, str] = {
    "plain_content": "Bonjour ! Il fait beau à Paris. 😊",
    "single_call": "[TOOL_CALLS] [" + W + "]",
    "two_calls": "[TOOL_CALLS] [" + W + ", " + S + "]",
    "content_before_call": "Let me check that for you. [TOOL_CALLS] [" + W + "]",
    "whitespace_before_call": "  \n[TOOL_CALLS] [" + W + "]",
    "cjk_emoji_args": "[TOOL_CALLS] [" + S + "]",
    "bare_object": "[TOOL_CALLS] " + W,
    "nested_json": '[TOOL_CALLS] [{"name": "search", "arguments": {"f": {"x": {"y": [[], {}, "]"]}}}}]',
    "string_arguments": '[TOOL_CALLS] [{"name": "get_weather", "arguments": "{\\"city\\": \\"Rome\\"}"}]',
    "malformed_json": '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}]',
    "truncated_at_eos": '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"ci',
    "call_without_arguments": '[TOOL_CALLS] [{"name": "get_weather"}]',
    "partial_marker_at_end": "I will call a tool [TOOL_CA",
    "trailing_text": "[TOOL_CALLS] [" + W + "] I hope that helps.",
    "repeated_marker": "[TOOL_CALLS][TOOL_CALLS] [" + W + "]",
    "no_call_objects": "[TOOL_CALLS] [1, 2, 3]",
    "prose_then_no_call": "Hmm. [TOOL_CALLS] not json",
}

# vLLM's stream differs from its own batch here; ours follows vLLM's batch.
STREAM_LOSSES = frozenset(
    {
        "malformed_json",
        "truncated_at_eos",
        "no_call_objects",
        "prose_then_no_call",
        "whitespace_before_call",  # stream: the whitespace as content; batch: None
        "trailing_text",
        "call_without_arguments",
    }
)
# Ours differs from vLLM's batch here (stream == our batch instead): vLLM's batch drops the
# prose before the marker, which had already streamed as content.
DIVERGENCES = frozenset({
    "prose_then_no_call",
    # The call streamed (name, then arguments) before its item proved broken or cut; vLLM's
    # batch then finds no call and returns the segment as content (its own stream sends the
    # call too). What broke the item after its arguments is content.
    "malformed_json",
    "truncated_at_eos",
})


@pytest.fixture(scope="module")
def parser() -> MistralToolParser:
    return MistralToolParser(mistral_v3().vocab, [])


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_mistral_split_invariant(parser: MistralToolParser, case: str) -> None:
    """Streaming any split of a real Mistral v3 token sequence yields exactly the batch result."""
    text = CORPUS[case]
    assert_split_invariant(parser, text, mistral_v3().chunks(text))


@pytest.mark.vllm
def test_mistral_matches_vllm(vllm_oracle, parser: MistralToolParser) -> None:
    """Batch == vLLM 0.33 batch except the named divergence; ids have vLLM's Mistral shape."""
    results = assert_matches_vllm(
        vllm_oracle, "mistral", parser, mistral_v3(), CORPUS,
        stream_losses=STREAM_LOSSES, divergences=DIVERGENCES,
    )
    for res in results.values():
        for _, _, vllm_id in res["batch"]["calls"]:
            assert vllm_id.isalnum() and len(vllm_id) == 9
    assert all(c.id == mistral_tool_call_id("req-1", i)
               for i, c in enumerate(parser.parse(CORPUS["two_calls"], "req-1").tool_calls))


def test_mistral_divergence_prose_then_no_call(parser: MistralToolParser) -> None:
    """Named divergence `prose_then_no_call`: the prose before a marker that yields no call
    stays (it streamed as content); vLLM's batch keeps only the segment after the marker."""
    assert parser.parse(CORPUS["prose_then_no_call"], "r").content == "Hmm. not json"


def test_mistral_divergence_cut_calls(parser: MistralToolParser) -> None:
    """Named divergences: a call that streamed keeps its arguments; nothing is lost."""
    broken = parser.parse(CORPUS["malformed_json"], "r")
    assert [(c.name, c.arguments) for c in broken.tool_calls] == [("get_weather", '{"city": "Paris"}')]
    assert broken.content == "]"
    cut = parser.parse(CORPUS["truncated_at_eos"], "r")
    assert [(c.name, c.arguments) for c in cut.tool_calls] == [("get_weather", '{"ci')]


def test_mistral_streams_items(parser: MistralToolParser) -> None:
    """Each item of the array is sent at its arguments' start and streams."""
    state, events = parser.feed(parser.initial_state(), '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Pa', "r")
    assert [type(e).__name__ for e in events] == ["ToolCallStart", "ToolArgsDelta"]
    state, events = parser.feed(state, 'ris"}}, {"name": "search", "arguments": "x', "r")
    assert [type(e).__name__ for e in events] == ["ToolArgsDelta", "ToolCallStart", "ToolArgsDelta"]
    assert events[2].text == "x"  # string arguments are kept verbatim
