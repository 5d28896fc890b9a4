"""gigachat3: our tool parser against vLLM 0.33's GigaChat3ToolParser, on the family tokenizer
and corpus, in one oracle call; chunking invariance."""

from __future__ import annotations

import json

import pytest

from ..family_check import check_chunking, check_family_vs_vllm, family_chat
from ..family_corpus import corpus_entries, family_markers, hostile_variants
from ..family_tokenizers import family_tokenizer

NAME = "gigachat3"
HEAD = "<|message_sep|>\n\nfunction call<|role_sep|>\n"
W = '{"name": "get_weather", "arguments": {"city": "東京", "unit": "c"}}'
S = '{"name": "search", "arguments": {"query": "天気 🌧️ \\"x\\"", "filters": {"a": [1, {"b": null}]}}}'

OWN: dict[str, str] = {
    "plain": "Just text, no call. 😀",
    "one_call": "Checking.\n" + HEAD + W,
    "cjk_nested": HEAD + S,
    "function_call_token": "Sure.<|function_call|>" + W,
    "call_no_arguments": HEAD + '{"name": "get_weather"}',
    "arguments_first": HEAD + '{"arguments": {"city": "Oslo"}, "name": "search"}',
    "arguments_not_object": HEAD + '{"name": "search", "arguments": "q"}',
    "name_not_string": HEAD + '{"name": 7, "arguments": {}}',
    "malformed_json": HEAD + '{"name": "get_weather", "arguments": {"city": }}',
    "not_json": HEAD + "get_weather(city='x')",
    "unknown_tool": HEAD + '{"name": "nope", "arguments": {"x": 1}}',
    "empty_arguments": HEAD + '{"name": "search", "arguments": {}}',
    "long_arguments": HEAD + '{"name": "search", "arguments": {"query": "' + "長い" * 150 + '"}}',
    "text_after_call": HEAD + W + "\nAnything else?",
    "truncated_call": HEAD + '{"name": "get_weather", "arguments": {"city": "Pa',
    "sep_then_text": "Hi<|message_sep|>\n\nassistant<|role_sep|>\nmore",
    "trailing_ws": HEAD + W + "\n  ",
    "marker_in_content": "The tag <|role_sep|> is text.",
}

# Ours differs from vLLM's batch here (stream == our batch instead); see the module docstring.
DIVERGENCES: dict[str, str] = {
    "text_after_call": "text after a sent call's JSON is content (vLLM: not JSON, all content)",
    "malformed_json": "arguments that break after the call was sent keep their text",
    "truncated_call": "a call cut by the end keeps its arguments (vLLM: no call)",
    "arguments_not_object": "arguments that are not an object stay the call's (vLLM: no call)",
}

# vLLM's batch raises here (FunctionCall refuses the name); ours: no call, the output is content.
VLLM_ERRORS = {"name_not_string": "ValidationError"}


def _cases() -> tuple[dict[str, object], dict[str, str]]:
    entries = corpus_entries("tool", NAME)
    cases: dict[str, object] = {e["name"]: e for e in entries}
    cases.update(OWN)
    divergences = dict(DIVERGENCES)
    divergences["GigaChat3-10B-A1.8B:one_call_then_content"] = DIVERGENCES["text_after_call"]
    call_entry = next(e for e in entries if e["name"] == "GigaChat3-10B-A1.8B:content_then_calls")
    hostile = hostile_variants(call_entry["text"], family_markers("tool", NAME, call_entry["text"]))
    for key, text in hostile.items():
        cases["hostile:" + key] = text
        why = _hostile_divergence(key, text)
        if why:
            divergences["hostile:" + key] = why
    return cases, divergences


def _hostile_divergence(key: str, text: str) -> str | None:
    body = text.split("<|role_sep|>\n", 1)[-1]
    if key.startswith("cut@") and '"arguments": {' in body and not body.endswith("}}"):
        return "a call cut by the end keeps its arguments"
    try:
        _, end = json.JSONDecoder().raw_decode(body)
    except ValueError:
        end = None
    if end is not None and body[end:].strip():
        return DIVERGENCES["text_after_call"]
    if key == "unbalanced_json_missing_brace":
        return "arguments that break after the call was sent keep their text"
    return None


@pytest.mark.vllm
def test_gigachat3_matches_vllm(vllm_ref) -> None:
    cases, divergences = _cases()
    check_family_vs_vllm(vllm_ref, family_chat(tool=NAME, reasoning=None), tool=NAME,
                         reasoning=None, cases=cases, divergences=divergences,
                         vllm_errors=VLLM_ERRORS)


@pytest.mark.parametrize("case", sorted(OWN))
def test_gigachat3_chunking(case: str) -> None:
    check_chunking(family_chat(tool=NAME, reasoning=None), family_tokenizer("tool", NAME), OWN[case])


def test_gigachat3_streams_call_incrementally() -> None:
    chat = family_chat(tool=NAME, reasoning=None)
    state = chat.initial_state([])
    state, events = chat.feed(state, HEAD + '{"name": "search", "arguments": {"query": "ab', "r")
    kinds = [type(e).__name__ for e in events]
    assert "ToolCallStart" in kinds and kinds[-1] == "ToolArgsDelta"
    state, events = chat.feed(state, "c" * 5000, "r")
    assert "".join(e.text for e in events) == "c" * 5000
    assert len(str(state.to_json())) < 2000
