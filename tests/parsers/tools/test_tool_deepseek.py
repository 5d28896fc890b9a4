"""deepseek_v3 / deepseek_v31: split invariance on real DeepSeek tokens and differential tests
against vLLM 0.33's DeepSeekV3ToolParser and DeepSeekV31ToolParser."""

from __future__ import annotations

import pytest

from parsers.tools.deepseek_v3 import DeepSeekV3ToolParser
from parsers.tools.deepseek_v31 import DeepSeekV31ToolParser

from .tool_parser_support import assert_matches_vllm, assert_split_invariant, deepseek

BEGIN, END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CB, CE, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def v3_call(name: str, args: str, kind: str = "function") -> str:
    return f"{CB}{kind}{SEP}{name}\n```json\n{args}\n```{CE}"


def v31_call(name: str, args: str) -> str:
    return f"{CB}{name}{SEP}{args}{CE}"


W = '{"city": "Paris", "unit": "c"}'
S = '{"query": "上海 天气 🌤️", "filters": {"a": [1, {"b": null}]}}'


def corpus(call) -> dict[str, str]:
    return {
        "plain_content": "Hello! How can I help? 😊",
        "single_call": BEGIN + call("get_weather", W) + END,
        "two_calls": BEGIN + call("get_weather", W) + "\n" + call("search", S) + END,
        "content_before_call": "Let me look that up.\n\n" + BEGIN + call("get_weather", W) + END,
        "cjk_emoji_args": BEGIN + call("search", S) + END,
        "nested_json": BEGIN + call("search", '{"filters": {"x": {"y": [[], {}, "}"]}}}') + END,
        "string_serialised_args": BEGIN + call("get_weather", '"{\\"city\\": \\"Rome\\"}"') + END,
        "malformed_json": BEGIN + call("get_weather", '{"city": "Paris"') + END,
        "truncated_at_eos": "Checking." + BEGIN + call("get_weather", W)[:-25],
        "call_without_arguments": BEGIN + call("get_weather", "") + END,
        "partial_marker_at_end": "Sure, calling <｜tool▁calls",
        "text_after_block": BEGIN + call("get_weather", W) + END + "\nAnything else?",
        "block_without_calls": "Hi" + BEGIN + "nothing here" + END + "bye",
        "skipped_malformed_call_then_call": BEGIN + CB + "garbage\n" + call("get_weather", W) + END,
        "unclosed_block": BEGIN + call("get_weather", W),
        "multiline_pretty_args": BEGIN + call("search", '{\n  "query": "x",\n  "filters": {}\n}') + END,
    }


def call_marker_in_content(call) -> str:
    return "Example: " + call("search", S) + "\n" + BEGIN + call("get_weather", W) + END


V3_CORPUS = {
    **corpus(v3_call),
    "call_marker_in_content": call_marker_in_content(v3_call),
    "later_bad_type": BEGIN + v3_call("get_weather", W) + v3_call("search", S, kind="tool") + END,
    "bad_type": BEGIN + v3_call("get_weather", W, kind="tool") + END,
    "sep_in_type_line": BEGIN + f"{CB}fun{SEP}function{SEP}get_weather\n```json\n{W}\n```{CE}" + END,
}
V31_CORPUS = {
    **corpus(v31_call),
    "call_marker_in_content": call_marker_in_content(v31_call),
    "newline_in_name": BEGIN + f"{CB}get\nweather{SEP}{W}{CE}" + v31_call("search", S) + END,
    "call_after_block_end": BEGIN + v31_call("get_weather", W) + END + "x" + v31_call("search", S),
}

# vLLM's stream differs from its own batch here; ours follows vLLM's batch.
_COMMON_LOSSES = {
    "two_calls",  # stream: the "\n" between calls becomes content; batch: dropped
    "truncated_at_eos",  # stream: a call with partial arguments; batch: no call
    "block_without_calls",  # stream: drops "bye"; batch keeps... (V3) / differs (V3.1)
    "skipped_malformed_call_then_call",  # stream: a garbage call; batch: skips it
    "call_marker_in_content",  # stream: content only (as ours); batch: also a call
}
V3_STREAM_LOSSES = frozenset(_COMMON_LOSSES | {"bad_type", "sep_in_type_line", "later_bad_type"})

# Ours differs from vLLM's batch here (stream == our batch instead).
DIVERGENCES = {
    # vLLM runs its call regex over the whole output: call text before the block is returned
    # as content (already streamed) *and* as a call; matching it would hold every call seen
    # in content until a block begins, so the state would grow with the content.
    "call_marker_in_content": "the call in the content is not also returned as a call",
    # vLLM's batch makes all output content, taking back the call already streamed.
    "later_bad_type": "the first call stays, the bad-type call is content",
    # A call cut by the end of the output: its name and arguments streamed as they came
    # (vLLM's stream sends them too); vLLM's batch finds no match and drops the call.
    "truncated_at_eos": "the cut call is kept with the arguments it has",
}
V31_STREAM_LOSSES = frozenset(_COMMON_LOSSES | {"call_after_block_end", "text_after_block"})


@pytest.mark.parametrize("case", sorted(V3_CORPUS))
def test_deepseek_v3_split_invariant(case: str) -> None:
    """Streaming any split of a real DeepSeek token sequence yields exactly the batch result."""
    text = V3_CORPUS[case]
    assert_split_invariant(DeepSeekV3ToolParser(deepseek().vocab, []), text, deepseek().chunks(text))


@pytest.mark.parametrize("case", sorted(V31_CORPUS))
def test_deepseek_v31_split_invariant(case: str) -> None:
    """Same for the V3.1 call shape."""
    text = V31_CORPUS[case]
    assert_split_invariant(DeepSeekV31ToolParser(deepseek().vocab, []), text, deepseek().chunks(text))


@pytest.mark.vllm
def test_deepseek_v3_matches_vllm(vllm_oracle) -> None:
    """Batch == vLLM 0.33 batch; stream == vLLM's stream where vLLM's is lossless."""
    assert_matches_vllm(
        vllm_oracle, "deepseek_v3", DeepSeekV3ToolParser(deepseek().vocab, []), deepseek(),
        V3_CORPUS, stream_losses=V3_STREAM_LOSSES, divergences=frozenset(DIVERGENCES),
    )


@pytest.mark.vllm
def test_deepseek_v31_matches_vllm(vllm_oracle) -> None:
    """Batch == vLLM 0.33 batch; stream == vLLM's stream where vLLM's is lossless."""
    assert_matches_vllm(
        vllm_oracle, "deepseek_v31", DeepSeekV31ToolParser(deepseek().vocab, []), deepseek(),
        V31_CORPUS, stream_losses=V31_STREAM_LOSSES,
        divergences=frozenset({"call_marker_in_content", "truncated_at_eos"}),
    )


def test_deepseek_v3_divergence_later_bad_type() -> None:
    """Named divergence `later_bad_type`: a bad-type call after an emitted call is content and
    the first call stays (vLLM's batch: all content, taking back the streamed call)."""
    text = V3_CORPUS["later_bad_type"]
    result = DeepSeekV3ToolParser(deepseek().vocab, []).parse(text, "r")
    assert [c.name for c in result.tool_calls] == ["get_weather"]
    assert result.content == v3_call("search", S, kind="tool")


@pytest.mark.parametrize(("parser_cls", "call"), [(DeepSeekV3ToolParser, v3_call),
                                                   (DeepSeekV31ToolParser, v31_call)])
def test_deepseek_divergence_call_marker_in_content(parser_cls, call) -> None:
    """Named divergence `call_marker_in_content`: call text before the block is content only
    (vLLM's batch also returns it as a call; it streamed as content before any block)."""
    result = parser_cls(deepseek().vocab, []).parse(call_marker_in_content(call), "r")
    assert [c.name for c in result.tool_calls] == ["get_weather"]
    assert result.content == "Example: " + call("search", S) + "\n"
