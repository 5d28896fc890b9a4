"""hy_v3 (tool + reasoning): our combined parser against vLLM 0.33's HYV3ToolParser and
HYV3ReasoningParser composed, on the family tokenizer (markers suffixed ':opensource') and
corpus, with reasoning off (vLLM's default) and on, in one oracle call; chunking invariance."""

from __future__ import annotations

import pytest

from ..family_check import check_chunking, check_family_vs_vllm, family_chat
from ..family_corpus import corpus_entries, family_markers, hostile_variants
from ..family_tokenizers import family_tokenizer

NAME = "hy_v3"
SFX = ":opensource"
TCS, TCE = f"<tool_calls{SFX}>", f"</tool_calls{SFX}>"
TC, TCEND, SEP = f"<tool_call{SFX}>", f"</tool_call{SFX}>", f"<tool_sep{SFX}>"
THINK_END = f"</think{SFX}>"
ON = {"reasoning_effort": "high"}
STRING_KEYS = {"city", "unit", "query"}  # WEATHER_TOOLS' string-typed parameters


def pair(key: str, value: str) -> str:
    return f"<arg_key{SFX}>{key}</arg_key{SFX}>\n<arg_value{SFX}>{value}</arg_value{SFX}>\n"


def call(name: str, *pairs: str, close: bool = True) -> str:
    return f"{TC}{name}{SEP}\n" + "".join(pairs) + (TCEND + "\n" if close else "")


W = call("get_weather", pair("city", "東京"), pair("unit", "c"), pair("days", "3"))
S = call("search", pair("query", 'say "hi" 🌧️\nnow'), pair("filters", '{"a": [1, {"b": null}]}'))

OWN: dict[str, str] = {
    "plain": "Just text, no call. 😀",
    "one_call": TCS + "\n" + W + TCE,
    "two_calls": "Let me check.\n" + TCS + "\n" + W + S + TCE,
    "truncated_call": TCS + TC + "get_weather" + SEP + f"<arg_key{SFX}>city</arg_key{SFX}><arg_value{SFX}>Par",
    "truncated_after_pair": TCS + "\n" + call("get_weather", pair("city", "Paris"), close=False),
    "no_sep": TCS + TC + "get_weather" + TCEND + TCE,
    "empty_block": "Hi " + TCS + TCE,
    "unknown_tool": TCS + call("nope", pair("x", "1")) + TCE,
    "no_arguments": TCS + call("get_weather") + TCE,
    "typed_values": TCS + call("search", pair("query", "true"), pair("filters", "[1, 2]"),
                               pair("n", "5"), pair("f", "1.5"), pair("s", "{'a': (1, 2)}")) + TCE,
    "key_with_spaces": TCS + call("get_weather", pair(" city ", "x")) + TCE,
    "text_after_block": TCS + W + TCE + " trailing text",
    "call_after_block": TCS + W + TCE + "x" + S,
    "long_value": TCS + call("search", pair("query", "長い" * 150)) + TCE,
    "marker_in_content": "The tag " + TCEND + " is text.",
    "reasoning_then_call": "Thinking about 東京." + THINK_END + TCS + W + TCE,
}

DIVERGENCES: dict[str, str] = {
    "no_sep": "no call results: the text stays content (vLLM keeps what precedes <tool_calls>)",
    "empty_block": "no call results: the text stays content",
    "truncated_call": "a streamed value that never closes is kept (vLLM drops the pair)",
}


def _cases() -> tuple[dict[str, object], dict[str, str]]:
    entries = corpus_entries("tool", NAME)
    cases: dict[str, object] = {e["name"]: e for e in entries}
    cases.update({"on:" + e["name"]: {**e, "chat_template_kwargs": ON} for e in entries})
    cases.update(OWN)
    cases.update({"on:" + k: {"text": v, "chat_template_kwargs": ON} for k, v in OWN.items()})
    # With reasoning on, an output without </think> is all reasoning: no tool stage.
    divergences = {**DIVERGENCES, **{"on:" + k: v for k, v in DIVERGENCES.items() if THINK_END in OWN[k]}}
    call_entry = next(e for e in entries if e["name"] == "tencent-Hy3:content_then_calls")
    hostile = hostile_variants(call_entry["text"], family_markers("tool", NAME, call_entry["text"]))
    for key, text in hostile.items():
        cases["hostile:" + key] = text
        why = _hostile_divergence(text)
        if why:
            divergences["hostile:" + key] = why
    return cases, divergences


def _hostile_divergence(text: str) -> str | None:
    """Why a malformed call output differs from vLLM's batch, if it does."""
    if TCS in text and SEP not in text.split(TCS, 1)[1]:
        return "no call results: the text stays content"
    last = text.rsplit(SEP, 1)[-1]
    if TCEND not in last and last.count(f"<arg_value{SFX}>") > last.count(f"</arg_value{SFX}>"):
        key = last.rsplit(f"</arg_key{SFX}>", 1)[0].rsplit(f"<arg_key{SFX}>", 1)[-1]
        if key in STRING_KEYS:  # values of other types are held until they close
            return "a streamed value that never closes is kept"
    return None


@pytest.mark.vllm
def test_hy_v3_matches_vllm(vllm_ref) -> None:
    cases, divergences = _cases()
    check_family_vs_vllm(
        vllm_ref, family_chat(tool=NAME, reasoning=NAME), tool=NAME, reasoning=NAME,
        cases=cases, divergences=divergences,
    )


@pytest.mark.parametrize("case", sorted(OWN))
def test_hy_v3_chunking(case: str) -> None:
    bundle = family_tokenizer("tool", NAME)
    check_chunking(family_chat(tool=NAME, reasoning=NAME), bundle, OWN[case])
    check_chunking(family_chat(tool=NAME, reasoning=NAME, chat_template_kwargs=ON), bundle, OWN[case])


def test_hy_v3_streams_call_incrementally() -> None:
    chat = family_chat(tool=NAME, reasoning=NAME)
    state = chat.initial_state([])
    state, events = chat.feed(state, TCS + TC + "search" + SEP + f"<arg_key{SFX}>query</arg_key{SFX}><arg_value{SFX}>ab", "r")
    kinds = [type(e).__name__ for e in events]
    assert "ToolCallStart" in kinds and kinds[-1] == "ToolArgsDelta"
    state, events = chat.feed(state, "c" * 5000, "r")
    assert "".join(e.text for e in events) == "c" * 5000
    assert len(str(state.to_json())) < 2000
