"""ernie45 (tool + reasoning): our combined parser against vLLM 0.33's Ernie45ToolParser and
Ernie45ReasoningParser composed, on the family tokenizer and corpus, in one oracle call; and
chunking invariance."""

from __future__ import annotations

import pytest

from parsers.reasoning.ernie45 import Ernie45ReasoningParser

from ..family_check import check_chunking, check_family_vs_vllm, family_chat
from ..family_corpus import corpus_entries, family_markers, hostile_variants
from ..family_tokenizers import family_tokenizer

W = '{"name": "get_weather", "arguments": {"city": "東京", "unit": "c"}}'
S = '{"name": "search", "arguments": {"query": "天気 🌧️ \\"x\\"", "filters": {"a": [1, {"b": null}]}}}'
CALL = "<tool_call>\n" + W + "\n</tool_call>\n"
THINK = "Let me think about 東京.\n</think>\n\n"

OWN: dict[str, str] = {
    "plain": "Just text, no call. 😀",
    "think_then_call": THINK + "\n" + CALL,
    "content_then_call": THINK + "Checking now.\n\n" + CALL,
    "two_calls_text_between": THINK + CALL + "and then\n" + "<tool_call>" + S + "</tool_call> bye",
    "call_no_arguments": THINK + '<tool_call>{"name": "get_weather"}</tool_call>',
    "call_no_name": THINK + '<tool_call>{"arguments": {"city": "Oslo"}}</tool_call>',
    "arguments_first": THINK + '<tool_call>{"arguments": {"city": "Oslo"}, "name": "search"}</tool_call>',
    "name_not_string": THINK + '<tool_call>{"name": 7, "arguments": {}}</tool_call>',
    "malformed_json": THINK + '<tool_call>{"name": "get_weather", "arguments": {"city": }}</tool_call>',
    "unknown_tool": THINK + '<tool_call>{"name": "nope", "arguments": {"x": 1}}</tool_call>',
    "empty_arguments": THINK + '<tool_call>{"name": "search", "arguments": {}}</tool_call>',
    "nested_long_args": THINK + "<tool_call>" + '{"name": "search", "arguments": {"query": "'
    + "長い" * 150 + '", "filters": {"x": {"y": [[], {}, "}"]}}}}' + "</tool_call>",
    "skipped_then_call": THINK + "<tool_call> not json </tool_call>\n" + CALL,
    "only_skipped_call": THINK + "Hi\n<tool_call> not json </tool_call>",
    "truncated_call": THINK + '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa',
    "truncated_before_commit": THINK + 'Hi\n<tool_call>\n{"na',
    "marker_in_content": THINK + "The tag </tool_call> is text.",
    "end_marker_only": "x\n</tool_call>\n",
    "response_wrapped": THINK + "<response>\nIt is sunny.\n</response>\n",
    "response_two_ends": THINK + "<response>a</response>b</response>c",
    "response_unclosed": THINK + "<response>\nIt is sun",
    "response_after_text": THINK + "Hi <response>x</response>",
    "response_then_call": THINK + "<response>ok</response>\n" + CALL,
    "no_think_end": "Thinking only, cut short",
    "think_start": "<think>abc</think>def",
    "double_think_end": "a</think>b</think>c",
}

# Ours differs from vLLM's batch here (stream == our batch instead); see the modules' docstrings.
DIVERGENCES: dict[str, str] = {
    "only_skipped_call": "no call results: the text stays content (vLLM drops it from <tool_call>)",
    "truncated_before_commit": "no call results: the text stays content",
    "truncated_call": "a call cut by the end keeps its arguments (vLLM: no call, text dropped)",
    "malformed_json": "arguments that break after the call was sent keep their text (as hermes)",
    "response_unclosed": "an unclosed <response>: marker and blanks before it are dropped",
    "response_after_text": "a <response> after text: content verbatim (vLLM drops around it)",
}
# Hostile variants of the corpus' reasoning_call entry, by what vLLM does differently.
HOSTILE_DIVERGENCES = {
    "markers_only": "no call results: the text stays content",
    "unbalanced_json_missing_brace": "a body that broke after its commit stays a call",
    "markers_in_json_string": "no call results: the text stays content",
    "replacement_chars": "no call results (U+FFFD before the object): content kept",
}


def _cases() -> tuple[dict[str, object], dict[str, str]]:
    entries = corpus_entries("tool", "ernie45")
    cases: dict[str, object] = {e["name"]: e for e in entries}
    cases.update(OWN)
    call_entry = next(e for e in entries if e["name"] == "vllm:reasoning_call")
    hostile = hostile_variants(call_entry["text"], family_markers("tool", "ernie45", call_entry["text"]))
    divergences = dict(DIVERGENCES)
    for key, text in hostile.items():
        cases["hostile:" + key] = text
    for key, why in HOSTILE_DIVERGENCES.items():
        divergences["hostile:" + key] = why
    return cases, divergences


@pytest.mark.vllm
def test_ernie45_matches_vllm(vllm_ref) -> None:
    cases, divergences = _cases()
    cut_divergences = _cut_divergences(cases)
    check_family_vs_vllm(
        vllm_ref, family_chat(tool="ernie45", reasoning="ernie45"), tool="ernie45",
        reasoning="ernie45", cases=cases, divergences={**divergences, **cut_divergences},
    )


def _cut_divergences(cases: dict[str, object]) -> dict[str, str]:
    """Cuts of the call output inside or after `<tool_call>` but before `</tool_call>`: vLLM
    makes no call and drops the text; ours keeps a committed call or the text."""
    out = {}
    for key, text in cases.items():
        if key.startswith("hostile:cut@") and isinstance(text, str):
            if "<tool_call>" in text and "</tool_call>" not in text:
                out[key] = "cut inside the call"
    return out


@pytest.mark.parametrize("case", sorted(OWN))
def test_ernie45_chunking(case: str) -> None:
    bundle = family_tokenizer("tool", "ernie45")
    check_chunking(family_chat(tool="ernie45", reasoning="ernie45"), bundle, OWN[case])


def test_ernie45_corpus_chunking() -> None:
    bundle = family_tokenizer("tool", "ernie45")
    chat = family_chat(tool="ernie45", reasoning="ernie45")
    for entry in corpus_entries("tool", "ernie45"):
        check_chunking(chat, bundle, entry["text"], bundle.encode(entry.get("prompt") or ""))


def test_ernie45_streams_call_incrementally() -> None:
    """The call's id and name go out once its arguments start; arguments then stream."""
    chat = family_chat(tool="ernie45", reasoning="ernie45")
    state = chat.initial_state([])
    state, events = chat.feed(state, THINK + '<tool_call>\n{"name": "search", "arguments": {"query": "ab', "r")
    kinds = [type(e).__name__ for e in events]
    assert "ToolCallStart" in kinds and kinds[-1] == "ToolArgsDelta"
    state, events = chat.feed(state, "c" * 5000, "r")
    assert "".join(e.text for e in events) == "c" * 5000
    assert len(str(state.to_json())) < 2000


def test_ernie45_response_tail_bounded() -> None:
    parser = Ernie45ReasoningParser(family_tokenizer("reasoning", "ernie45").tokenizer)
    state = parser.initial_state()
    state, _ = parser.feed(state, "r</think><response>x</response>")
    for _ in range(100):
        state, _ = parser.feed(state, "y" * 100)
    assert len(state.kept) <= 4096
