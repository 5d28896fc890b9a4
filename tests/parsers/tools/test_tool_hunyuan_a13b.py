"""hunyuan_a13b (tool + reasoning): our combined parser against vLLM 0.33's
HunyuanA13BToolParser and HunyuanA13BReasoningParser composed, on the family tokenizer and
corpus, in one oracle call; and chunking invariance."""

from __future__ import annotations

import pytest

from ..family_check import check_chunking, check_family_vs_vllm, family_chat
from ..family_corpus import corpus_entries, family_markers, hostile_variants
from ..family_tokenizers import family_tokenizer

NAME = "hunyuan_a13b"
W = '{"name": "get_weather", "arguments": {"city": "東京", "unit": "c"}}'
S = '{"name": "search", "arguments": {"query": "天気 🌧️ \\"x\\"", "filters": {"a": [1, {"b": null}]}}}'
THINK = "<think>\nLet me think about 東京.\n</think>\n<answer>\n"
END = "\n</answer>"


def block(*items: str) -> str:
    return "<tool_calls>[" + ", ".join(items) + "]</tool_calls>"


OWN: dict[str, str] = {
    "plain": "Just text, no call. 😀",
    "answer_only": THINK + "It is sunny." + END,
    "one_call": THINK + block(W) + END,
    "two_calls": THINK + block(W, S) + END,
    "content_then_call": THINK + "Checking now.\n" + block(W) + END,
    "text_after_block": THINK + block(W) + " and more" + END,
    "no_think": block(W),
    "call_no_arguments": THINK + block('{"name": "get_weather"}') + END,
    "string_arguments": THINK + block('{"name": "search", "arguments": "q=1"}') + END,
    "arguments_first": THINK + block('{"arguments": {"city": "Oslo"}, "name": "search"}') + END,
    "name_not_string": THINK + block('{"name": 7, "arguments": {}}') + END,
    "skipped_item_then_call": THINK + block('{"x": 1}', W) + END,
    "malformed_json": THINK + '<tool_calls>[{"name": "get_weather", "arguments": {"city": }}]</tool_calls>' + END,
    "bad_block_then_good": THINK + "<tool_calls>not json</tool_calls> mid " + block(W) + END,
    "empty_array": THINK + "<tool_calls>[]</tool_calls>" + END,
    "not_array": THINK + "<tool_calls>" + W + "</tool_calls>" + END,
    "unknown_tool": THINK + block('{"name": "nope", "arguments": {"x": 1}}') + END,
    "empty_arguments": THINK + block('{"name": "search", "arguments": {}}') + END,
    "nested_long_args": THINK + block('{"name": "search", "arguments": {"query": "' + "長い" * 150
                                      + '", "filters": {"x": {"y": [[], {}, "}"]}}}}') + END,
    "truncated_call": THINK + '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Pa',
    "truncated_before_commit": THINK + 'Hi <tool_calls>[{"na',
    "marker_in_content": THINK + "The tag </tool_calls> is text." + END,
    "after_answer_end": THINK + "Answer." + END + " trailing",
    "think_unclosed": "<think>\nStill thinking",
    "answer_end_no_think": "Plain answer" + END + "x",
}

# Ours differs from vLLM's batch here (stream == our batch instead); see the modules' docstrings.
DIVERGENCES: dict[str, str] = {
    "malformed_json": "arguments that break after the call was sent keep their text",
    "truncated_call": "a call cut by the end keeps its arguments (vLLM: no call)",
    "think_unclosed": "an unclosed <think> is reasoning (vLLM: all content)",
}
HOSTILE_DIVERGENCES: dict[str, str] = {
    "unbalanced_json_missing_brace": "text that breaks a sent call's body is content",
    "replacement_chars": "a <think> whose answer marker is broken stays reasoning",
}


def _cut_divergence(text: str) -> str | None:
    """Why a cut of the call output differs from vLLM's batch, if it does."""
    if text.startswith("<think>\n") and "\n</think>\n<answer>\n" not in text:
        return "an unclosed <think> is reasoning (vLLM: all content)"
    if '"arguments": {' in text and "</tool_calls>" not in text:
        return "a call cut by the end keeps its arguments (vLLM: no call)"
    return None


def _cases() -> tuple[dict[str, object], dict[str, str]]:
    entries = corpus_entries("tool", NAME)
    cases: dict[str, object] = {e["name"]: e for e in entries}
    cases.update(OWN)
    call_entry = next(e for e in entries if e["name"] == "vllm:one_call")
    hostile = hostile_variants(call_entry["text"], family_markers("tool", NAME, call_entry["text"]))
    divergences = dict(DIVERGENCES)
    for key, text in hostile.items():
        cases["hostile:" + key] = text
        why = _cut_divergence(text) if key.startswith("cut@") else None
        if why:
            divergences["hostile:" + key] = why
    for key, why in HOSTILE_DIVERGENCES.items():
        divergences["hostile:" + key] = why
    return cases, divergences


@pytest.mark.vllm
def test_hunyuan_a13b_matches_vllm(vllm_ref) -> None:
    cases, divergences = _cases()
    check_family_vs_vllm(
        vllm_ref, family_chat(tool=NAME, reasoning=NAME), tool=NAME, reasoning=NAME,
        cases=cases, divergences=divergences,
    )


@pytest.mark.parametrize("case", sorted(OWN))
def test_hunyuan_a13b_chunking(case: str) -> None:
    check_chunking(family_chat(tool=NAME, reasoning=NAME), family_tokenizer("tool", NAME), OWN[case])


def test_hunyuan_a13b_streams_call_incrementally() -> None:
    chat = family_chat(tool=NAME, reasoning=NAME)
    state = chat.initial_state([])
    state, events = chat.feed(state, THINK + '<tool_calls>[{"name": "search", "arguments": {"query": "ab', "r")
    kinds = [type(e).__name__ for e in events]
    assert "ToolCallStart" in kinds and kinds[-1] == "ToolArgsDelta"
    state, events = chat.feed(state, "c" * 5000, "r")
    assert "".join(e.text for e in events) == "c" * 5000
    assert len(str(state.to_json())) < 2000
