"""functiongemma: differential against vLLM 0.33's FunctionGemmaToolParser (one batched
oracle call: composed batch and the tool parser alone) and split invariance."""

from __future__ import annotations

import json
from typing import Any

import pytest

from parsers import ChatOptions, ChatParser
from parsers.tools.functiongemma import FunctionGemmaToolParser

from ..chunking import Collapsed, CollapsedCall, assert_chunking_invariant
from ..family_corpus import corpus_entries, family_markers, hostile_variants
from ..family_oracle import WEATHER_TOOLS, family_cases, vllm_family
from ..family_tokenizers import family_tokenizer

E = "<escape>"
S, T = "<start_function_call>", "}<end_function_call>"
W = S + "call:get_weather{city:" + E + "Tokyo" + E + ",days:" + E + "3" + E + T
Q = S + "call:search{query:" + E + 'say "hi" \\ 東京 😀' + E + ",filters:" + E + '{"a": [1, 2.5]}' + E + T

OWN: dict[str, str] = {
    "content_call_text": "Let me check.  \n" + W + " and then some text",
    "two_calls": W + Q,
    "text_between": W + " between " + Q + " after",
    "json_values": S + "call:f{a:" + E + "true" + E + ",b:" + E + " null " + E + ",c:" + E + "NaN" + E
                   + ",d:" + E + "-1.5e3" + E + ",e:" + E + '"q"' + E + ",f:" + E + "truex" + E + T,
    "string_values": S + "call:f{a:" + E + "the end" + E + ",b:" + E + "nothing" + E + ",c:" + E + "  " + E + T,
    "no_end_marker": S + "call:get_weather{city:" + E + "Oslo" + E,
    "end_without_brace": S + "call:f{a:" + E + "1" + E + "<end_function_call>" + S + "call:g{b:" + E + "2" + E + T,
    "brace_in_value": S + "call:f{a:" + E + "x } y" + E + T,
    "end_inside_value": S + "call:f{a:" + E + "open" + T + "rest" + E + "}",
    "truncated_value_held": S + "call:f{a:" + E + "12",
    "truncated_header": "Hi " + S + "call:get_wea",
    "bad_header_only": "Hi " + S + "get_weather{}" + T,
    "bad_then_good": "Hi " + S + "call:{x}" + T + " mid " + W,
    "no_colon_key": S + "call:f{a " + E + "1" + E + ",b:" + E + "2" + E + T,
    "key_with_spaces": S + "call:f{my key:" + E + "v" + E + T,
    "unicode_key": S + "call:f{città:" + E + "Roma" + E + T,
    "empty_args": S + "call:f{" + T,
    "whitespace_before_call": "  \n" + W,
    "marker_in_content": "The " + E + " and " + "<end_function_call>" + " tokens.",
    "long_value": S + "call:search{query:" + E + ("lorem ipsum 東京 " * 200) + E + T,
    "cjk_name": S + "call:天気{a:" + E + "b" + E + T,
}

DIVERGENCES: dict[str, str] = {
    "end_inside_value": "a streamed value cut by the end of its call is kept (vLLM drops it)",
    "duplicate_key": "a repeated key is written twice (JSON-equal to vLLM's object)",
    "leading_ws_prose_call": "leading whitespace of the content streamed before the call",
}
OWN["duplicate_key"] = S + "call:f{a:" + E + "x" + E + ",a:" + E + "y" + E + T
OWN["leading_ws_prose_call"] = "\n Sure. " + W
OWN["open_streamed_value"] = S + "call:f{a:" + E + "open text"
DIVERGENCES["open_streamed_value"] = "a streamed value cut by the end of the output is kept"

OPTIONS = {"tool_choice": "auto"}


def _bundle():
    return family_tokenizer("tool", "functiongemma")


def _tool() -> FunctionGemmaToolParser:
    return FunctionGemmaToolParser(_bundle().tokenizer, WEATHER_TOOLS)


def _chat() -> ChatParser:
    return ChatParser(None, _tool(), ChatOptions(enable_auto_tools=True, **OPTIONS))


def _cases() -> list[dict[str, Any]]:
    entries = corpus_entries("tool", "functiongemma")
    richest = max(entries, key=lambda e: len(e["text"]))
    markers = family_markers("tool", "functiongemma", richest["text"])
    items: list[dict[str, Any]] = list(entries)
    items += [{"name": f"hostile:{k}", "text": t} for k, t in hostile_variants(richest["text"], markers, max_cuts=30).items()]
    items += [{"name": k, "text": t} for k, t in OWN.items()]
    return items


def _open_value_kept(mine: tuple, theirs: tuple) -> bool:
    """The named divergence in general form: all equal except that our last call has one
    more (last) member, the streamed value vLLM drops because it never closed."""
    if mine[:2] != theirs[:2] or len(mine[2]) != len(theirs[2]) or not mine[2]:
        return False
    if mine[2][:-1] != theirs[2][:-1] or mine[2][-1][0] != theirs[2][-1][0]:
        return False
    ours, vllms = json.loads(mine[2][-1][1]), json.loads(theirs[2][-1][1])
    last = list(ours)[-1] if ours else None
    return last is not None and isinstance(ours[last], str) and {
        k: v for k, v in ours.items() if k != last} == vllms


def _calls(calls: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(c["name"], c["arguments"]) for c in calls]


@pytest.mark.vllm
def test_functiongemma_matches_vllm(vllm_ref) -> None:
    bundle = _bundle()
    items = _cases()
    out = vllm_family(vllm_ref, tool="functiongemma", bundle=bundle,
                      cases=family_cases(bundle, items), request=OPTIONS)  # fmt: skip
    assert not out.infra_errors(), out.infra_errors()
    chat, tool = _chat(), _tool()
    errors: list[str] = []
    for item, res in zip(items, out.results, strict=True):
        name, text = item["name"], item["text"]
        assert "batch" in res and "tool" in res, (name, res)
        ours = chat.parse(text, "req")
        mine = (ours.reasoning, ours.content, [(c.name, c.arguments) for c in ours.tool_calls])
        v = res["batch"]
        theirs = (v["reasoning"], v["content"], _calls(v["tool_calls"]))
        t = tool.parse(text, "req")
        t_mine = (t.content, [(c.name, c.arguments) for c in t.tool_calls])
        # vLLM's class alone returns "" for an empty output; both mean no content
        t_theirs = (res["tool"]["content"] or None, _calls(res["tool"]["tool_calls"]))
        if name in DIVERGENCES:
            if mine == theirs:
                errors.append(f"{name}: named divergence, but ours equals vLLM")
            continue
        if _open_value_kept(mine, theirs) and _open_value_kept(("", *t_mine), ("", *t_theirs)):
            continue  # DIVERGENCES["open_streamed_value"] on a cut output
        if mine != theirs:
            errors.append(f"{name}: composed ours {mine}\n   != vLLM {theirs}")
        if t_mine != t_theirs:
            errors.append(f"{name}: tool alone ours {t_mine}\n   != vLLM {t_theirs}")
    assert not errors, "\n".join(errors)


def test_functiongemma_duplicate_key_is_json_equal() -> None:
    (call,) = _tool().parse(OWN["duplicate_key"], "r").tool_calls
    assert call.arguments == '{"a": "x", "a": "y"}' and json.loads(call.arguments) == {"a": "y"}


@pytest.mark.parametrize("case", sorted(OWN))
def test_functiongemma_split_invariant(case: str) -> None:
    chat, text = _chat(), OWN[case]
    ours = chat.parse(text, "req")
    expected = Collapsed(ours.reasoning or "", ours.content or "", tuple(
        CollapsedCall(i, c.id, c.name, c.arguments) for i, c in enumerate(ours.tool_calls)))
    for pieces, n_random in ((_bundle().pieces(text), 30), (list(text), 3)):
        assert_chunking_invariant(
            feed_fn=lambda state, delta: chat.feed(state, delta, "req"),
            finish_fn=lambda state: chat.finish(state, "req"),
            initial_state=chat.initial_state(), state_type=chat.state_type(),
            pieces=pieces, expected=expected, n_random=n_random,
        )


def test_functiongemma_streams_name_then_string_value() -> None:
    tool = _tool()
    state, events = tool.feed(tool.initial_state(), "Hi " + S + "call:get_weather{", "r")
    assert [type(e).__name__ for e in events] == ["ContentDelta", "ToolCallStart"]
    state, events = tool.feed(state, "city:" + E + "Tok", "r")
    assert "".join(e.text for e in events) == '{"city": "Tok'
    state, events = tool.feed(state, "yo" + E + ",days:" + E + "3", "r")
    assert "".join(e.text for e in events) == 'yo"'
    state, events = tool.feed(state, E + T, "r")
    assert "".join(e.text for e in events) == ', "days": 3}'
    for _ in range(300):
        state, _ = tool.feed(state, " junk after the call ", "r")
    assert len(json.dumps(state.to_json())) < 400
