"""apertus: our tool parser against vLLM 0.33's ApertusToolParser, on the family tokenizer and
corpus, in one oracle call; chunking invariance."""

from __future__ import annotations

import json

import pytest

from ..family_check import check_chunking, check_family_vs_vllm, family_chat
from ..family_corpus import corpus_entries, family_markers, hostile_variants
from ..family_tokenizers import family_tokenizer

NAME = "apertus"
PRE, SUF = "<|tools_prefix|>", "<|tools_suffix|>"
W = '{"get_weather": {"city": "東京", "unit": "c", "days": 3}}'
Q = '{"search": {"query": "天気 🌧️ \\"x\\"", "filters": {"a": [1, {"b": null}]}}}'

OWN: dict[str, str] = {
    "plain": "Just text, no call. 😀",
    "one_call": PRE + "[" + W + "]" + SUF,
    "two_calls_around": "Checking.\n\n" + PRE + " [" + W + ", " + Q + "] " + SUF + "\n\nDone. \n",
    "blank_before": "\n\n" + PRE + "[" + W + "]" + SUF,
    "single_object": PRE + W + SUF,
    "no_suffix": "Hi " + PRE + "[" + W + "]",
    "trailing_in_block": PRE + "[" + W + "] and more " + SUF + " after",
    "suffix_echo": PRE + "[" + W + "]" + SUF + "a" + SUF + " b",
    "empty_list": PRE + "[]" + SUF,
    "empty_object": PRE + "[{}, " + W + "]" + SUF,
    "string_args": PRE + '[{"search": "q"}]' + SUF,
    "not_json": PRE + "get_weather(city='x')" + SUF,
    "malformed_json": PRE + '[{"get_weather": {"city": }}]' + SUF,
    "unknown_tool": PRE + '[{"nope": {"x": 1}}]' + SUF,
    "long_value": PRE + '[{"search": {"query": "' + "長い" * 150 + '"}}]' + SUF,
    "truncated_call": "Hi " + PRE + '[{"get_weather": {"city": "Pa',
    "marker_in_content": "The tag " + SUF + " is text.",
    "escaped_name": PRE + '[{"get_\\u0077eather": {}}]' + SUF,
}

# Ours differs from vLLM's batch here (stream == our batch instead); see the module docstring.
DIVERGENCES: dict[str, str] = {
    "empty_list": "no call results: the output stays content",
    "truncated_call": "a call cut by the end keeps its text (vLLM completes the JSON)",
    "malformed_json": "arguments that break after the call was sent keep their text",
    "hostile:unbalanced_json_missing_brace": "JSON that breaks after a call was sent: calls stay",
}


def _cut_divergence(text: str) -> str | None:
    """A cut of the block (no suffix): vLLM completes partial JSON; ours keeps it as cut."""
    if PRE not in text or SUF in text:
        return None
    body = text.split(PRE, 1)[1].strip()
    for closed in (body, body + "]"):  # whole, or whole items of an array cut between them
        try:
            value, _ = json.JSONDecoder().raw_decode(closed)
        except ValueError:
            continue
        items = value if isinstance(value, list) else [value]
        return None if any(isinstance(i, dict) and i for i in items) else "no call results: content"
    if not body:
        return None  # vLLM's partial parser refuses an empty block: all content, as ours
    return "a block cut by the end: vLLM completes the partial JSON"


def _cases() -> tuple[dict[str, object], dict[str, str]]:
    entries = corpus_entries("tool", NAME)
    cases: dict[str, object] = {e["name"]: e for e in entries}
    cases.update(OWN)
    divergences = {k: v for k, v in DIVERGENCES.items() if not k.startswith("hostile:")}
    call_entry = next(e for e in entries if e["name"].endswith(":content_then_calls"))
    hostile = hostile_variants(call_entry["text"], family_markers("tool", NAME, call_entry["text"]))
    for key, text in hostile.items():
        cases["hostile:" + key] = text
        why = _cut_divergence(text) if key.startswith("cut@") else DIVERGENCES.get("hostile:" + key)
        if why:
            divergences["hostile:" + key] = why
    return cases, divergences


@pytest.mark.vllm
def test_apertus_matches_vllm(vllm_ref) -> None:
    cases, divergences = _cases()
    check_family_vs_vllm(vllm_ref, family_chat(tool=NAME, reasoning=None), tool=NAME,
                         reasoning=None, cases=cases, divergences=divergences)


@pytest.mark.parametrize("case", sorted(OWN))
def test_apertus_chunking(case: str) -> None:
    check_chunking(family_chat(tool=NAME, reasoning=None), family_tokenizer("tool", NAME), OWN[case])


def test_apertus_streams_call_incrementally() -> None:
    chat = family_chat(tool=NAME, reasoning=None)
    state = chat.initial_state([])
    state, events = chat.feed(state, PRE + '[{"search": {"query": "ab', "r")
    kinds = [type(e).__name__ for e in events]
    assert "ToolCallStart" in kinds and kinds[-1] == "ToolArgsDelta"
    state, events = chat.feed(state, "c" * 5000, "r")
    assert "".join(e.text for e in events) == "c" * 5000
    assert len(str(state.to_json())) < 2000
