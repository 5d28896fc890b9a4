"""lfm2: our tool parser against vLLM 0.33's Lfm2ToolParser, on the family tokenizer and
corpus, in one oracle call; chunking invariance."""

from __future__ import annotations

import pytest

from ..family_check import check_chunking, check_family_vs_vllm, family_chat
from ..family_corpus import corpus_entries, family_markers, hostile_variants
from ..family_tokenizers import family_tokenizer

NAME = "lfm2"
S, E = "<|tool_call_start|>", "<|tool_call_end|>"
W = "get_weather(city='東京', unit=\"c\", days=3)"
Q = "search(query='天気 🌧️ \"x\"', filters={'a': [1, (2, 3)], 'b': None, 'c': True})"

OWN: dict[str, str] = {
    "plain": "Just text, no call. 😀",
    "one_call": S + "[" + W + "]" + E,
    "two_calls_around": "  Checking.\n\n" + S + "[" + W + ", " + Q + "]" + E + "\n\nDone. \n",
    "blank_before": "\n\n" + S + "[" + W + "]" + E,
    "no_end_marker": "Hi " + S + "[" + W + "]",
    "truncated_call": "Hi " + S + "[get_weather(city='Pa",
    "truncated_before_commit": "Hi " + S + "[get_wea",
    "not_a_list": S + W + E,
    "empty_list": S + "[]" + E,
    "json_body": S + '[{"name": "get_weather", "arguments": {}}]' + E,
    "positional": S + "[get_weather('x')]" + E,
    "text_after_list": S + "[" + W + "] trailing" + E,
    "syntax_error": S + "[get_weather(city=)]" + E,
    "unknown_tool": S + "[nope(x=1)]" + E,
    "no_arguments": S + "[get_weather()]" + E,
    "echo": S + "[" + W + "]" + E + "[" + W + "]" + E + " ok",
    "long_value": S + "[search(query='" + "長い" * 150 + "')]" + E,
    "marker_in_content": "The tag " + E + " is text.",
    "second_block": S + "[" + W + "]" + E + " and " + S + "[" + Q + "]" + E,
}

# Ours differs from vLLM's batch here (stream == our batch instead); see the module docstring.
DIVERGENCES: dict[str, str] = {
    "two_calls_around": "blanks at the very start of the content are kept",
    "truncated_call": "a call cut by the end keeps its arguments (broken_call_list)",
    "echo": "text after the block before an echoed end marker has streamed",
    "second_block": "text after the block before an echoed end marker has streamed",
    "positional": "a positional first argument makes no call list (the pythonic head)",
    "text_after_list": "text after a sent list inside the block is content (broken_call_list)",
}


def _cases() -> tuple[dict[str, object], dict[str, str]]:
    entries = corpus_entries("tool", NAME)
    cases: dict[str, object] = {e["name"]: e for e in entries}
    cases.update(OWN)
    divergences = dict(DIVERGENCES)
    call_entry = next(e for e in entries if e["name"] == "vllm:content_around_call")
    hostile = hostile_variants(call_entry["text"], family_markers("tool", NAME, call_entry["text"]))
    for key, text in hostile.items():
        cases["hostile:" + key] = text
        if key.startswith("cut@") and S + "[get_weather(city=" in text and E not in text and not text.endswith("]"):
            divergences["hostile:" + key] = "a list cut by the end keeps its calls (broken_call_list)"
    return cases, divergences


@pytest.mark.vllm
def test_lfm2_matches_vllm(vllm_ref) -> None:
    cases, divergences = _cases()
    check_family_vs_vllm(vllm_ref, family_chat(tool=NAME, reasoning=None), tool=NAME,
                         reasoning=None, cases=cases, divergences=divergences)


@pytest.mark.parametrize("case", sorted(OWN))
def test_lfm2_chunking(case: str) -> None:
    check_chunking(family_chat(tool=NAME, reasoning=None), family_tokenizer("tool", NAME), OWN[case])


def test_lfm2_streams_call_incrementally() -> None:
    chat = family_chat(tool=NAME, reasoning=None)
    state = chat.initial_state([])
    state, events = chat.feed(state, S + "[search(query='ab", "r")
    kinds = [type(e).__name__ for e in events]
    assert "ToolCallStart" in kinds and kinds[-1] == "ToolArgsDelta"
    state, events = chat.feed(state, "c" * 5000, "r")
    assert "".join(e.text for e in events) == "c" * 5000
    assert len(str(state.to_json())) < 2000
