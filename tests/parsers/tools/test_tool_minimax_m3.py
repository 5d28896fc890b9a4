"""minimax_m3 (vLLM's MinimaxM3ToolParser and MiniMaxM3ReasoningParser): tool parser alone,
reasoning parser alone and both composed == vLLM 0.33 on the MiniMax-M3 corpus, hostile
variants and our own cases (one oracle call); streaming == batch on every split."""

from __future__ import annotations

import json
from typing import Any

import pytest

from parsers import ChatOptions, ChatParser
from parsers._events import ToolArgsDelta, ToolCallStart
from parsers.reasoning.minimax_m3 import MinimaxM3ReasoningParser
from parsers.tools.minimax_m3 import NS, MinimaxM3ToolParser

from ..family_tokenizers import family_tokenizer
from .engine_family_support import (
    assert_stream_equals_batch,
    batch_mismatches,
    composed_mismatches,
    family_cases_for,
    reasoning_mismatches,
    run_oracle,
)
from .tool_parser_support import stream_long_value

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {
            "city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]},
            "days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {
            "query": {"type": "string"}, "filters": {"type": "object", "properties": {"n": {"type": "integer"}},
                                                     "additionalProperties": {"type": "boolean"}},
            "tags": {"type": "array", "items": {"type": "integer"}},
            "maybe": {"anyOf": [{"type": "null"}, {"type": "array", "items": {"type": "string"}}]},
            "exact": {"type": "boolean"}, "score": {"type": ["number", "null"]}}}}},
]  # fmt: skip


def el(name: str, body: str) -> str:
    return f"{NS}<{name}>{body}{NS}</{name}>"


def invoke(name: str, *elements: str) -> str:
    return f'{NS}<invoke name="{name}">' + "".join(elements) + f"{NS}</invoke>"


def block(*invokes: str) -> str:
    return f"{NS}<tool_call>\n" + "\n".join(invokes) + f"\n{NS}</tool_call>"


W = block(invoke("get_weather", el("city", "Paris"), el("days", "3")))
OWN: dict[str, str] = {
    "own:nested_object": block(invoke("search", el("query", "q"), el("filters", el("n", "2") + el("x", "true")))),
    "own:array_items": block(invoke("search", el("tags", el("item", "1") + el("item", "2")))),
    "own:empty_containers": block(invoke("search", el("tags", ""), el("filters", " "), el("maybe", ""))),
    "own:anyof_array": block(invoke("search", el("maybe", el("item", "a") + el("item", "b")))),
    "own:repeated_names": block(invoke("search", el("query", "a"), el("query", "b"), el("query", "c"))),
    "own:mixed_text": block(invoke("search", el("filters", "note " + el("n", "1")))),
    "own:mixed_text_field_taken": block(invoke("search", el("filters", "t " + el("$text", "1")))),
    "own:typed_values": block(invoke("search", el("exact", "false"), el("score", "null"), el("query", ' "q" '))),
    "own:bad_typed_values": block(invoke("search", el("exact", "maybe"), el("score", "x"), el("tags", "[1, 2]"))),
    "own:unknown_param": block(invoke("get_weather", el("city", "Oslo"), el("colour", "blue"))),
    "own:unknown_tool": "x " + block(invoke("no_such_tool", el("a", "1"))),
    "own:malformed_stops": block(invoke("get_weather", el("city", "A"), f"{NS}<days>3{NS}</day>", el("unit", "c"))),
    "own:unterminated_element": block(invoke("get_weather", el("city", "A"), f"{NS}<days>3")),
    "own:text_between_elements": block(invoke("get_weather", el("city", "A"), " junk ", el("days", "1"))),
    "own:two_calls": block(invoke("get_weather", el("city", "東京 😀")), invoke("search", el("query", "x"))),
    "own:text_after_block": W + "\nAnything else?",
    "own:text_before_block": "Let me check.\n" + W,
    "own:leading_ws_before_block": "\n\n  " + W,
    "own:no_params": block(invoke("get_weather")),
    "own:single_quote_name": f"{NS}<tool_call>{NS}<invoke name='get_weather'>{el('city', 'x')}{NS}</invoke>{NS}</tool_call>",
    "own:bare_name": f"{NS}<tool_call>{NS}<invoke name=get_weather>{el('city', 'x')}{NS}</invoke>{NS}</tool_call>",
    "own:invoke_without_block": "Sure: " + invoke("get_weather", el("city", "Bern")),
    "own:truncated_in_body": f"{NS}<tool_call>\n{NS}<invoke name=\"get_weather\">{NS}<city>Pa",
    "own:truncated_in_name": f"{NS}<tool_call>\n{NS}<invoke name=\"get_wea",
    "own:missing_invoke_end": f"{NS}<tool_call>{NS}<invoke name=\"get_weather\">{el('city', 'R')}{NS}</tool_call>",
    "own:empty_block": f"a {NS}<tool_call>{NS}</tool_call> b",
    "own:name_with_spaces": block(f'{NS}<invoke name=" get_weather ">{el("city", "S")}{NS}</invoke>'),
    "own:deep_nesting": block(invoke("search", el("filters", el("a", el("b", el("c", "1")))))),
    "own:namespace_in_text": "The marker ]<]minimax[>[ and <tool_call> are text.",
    "own:partial_marker_at_end": "I will call ]<]minimax[>[<tool_",
    "own:child_in_string": block(invoke("search", el("query", "a " + el("b", "c") + " d"), el("exact", "true"))),
    "own:stray_marker_in_string": block(invoke("search", el("query", f"a {NS} b"), el("exact", "true"))),
    "own:typed_after_string": block(invoke("search", el("query", "q\nr"), el("tags", el("item", "3")))),
    "own:long_cut": f'{NS}<tool_call>\n{NS}<invoke name="search">{NS}<query>' + "long text " * 500,
}
# Where vLLM's element conversion is not prefix-stable, ours keeps what streamed (module docstring).
DIVERGENCES = {
    "own:repeated_names": "a repeated parameter is written twice (vLLM: a list of the values)",
    "own:child_in_string": "a child element ends the streamed string value; the rest of the body "
                           "is dropped (vLLM: an object with $text)",
    "own:stray_marker_in_string": "a stray marker ends the streamed string value (vLLM drops it)",
    "own:truncated_in_body": "a string value the output cuts is kept (vLLM drops it)",
    "own:long_cut": "as own:truncated_in_body, in a long value",
}
REASONING_OWN: dict[str, str] = {
    "own:r:leading_close": "</mm:think>Answer </mm:think> <mm:think>x</mm:think>",
    "own:r:think_block": "before <mm:think>thought</mm:think> after </mm:think>",
    "own:r:unclosed": "before <mm:think>thinking on",
    "own:r:close_only": "no start </mm:think> here",
    "own:r:double_start": "<mm:think>a <mm:think> b</mm:think>c",
    "own:r:empty": "",
    "own:r:partial_close": "</mm:thi",
}


@pytest.fixture(scope="module")
def bundle():  # noqa: ANN201
    return family_tokenizer("tool", "minimax_m3")


@pytest.fixture(scope="module")
def parser(bundle) -> MinimaxM3ToolParser:  # noqa: ANN001
    return MinimaxM3ToolParser(None, TOOLS, special_tokens=bundle.special_tokens)


@pytest.mark.vllm
def test_minimax_m3_matches_vllm(vllm_ref, bundle, parser: MinimaxM3ToolParser) -> None:  # noqa: ANN001
    cases = family_cases_for(["minimax_m3"], {**OWN, **REASONING_OWN})
    _, results = run_oracle(vllm_ref, "minimax_m3", cases, TOOLS, bundle=bundle, reasoning="minimax_m3")
    bad = batch_mismatches(parser, cases, results, DIVERGENCES)
    assert not bad, json.dumps(bad, ensure_ascii=False)[:8000]
    reasoning = MinimaxM3ReasoningParser(bundle.tokenizer, {}, special_tokens=bundle.special_tokens)
    bad = reasoning_mismatches(reasoning, cases, results, bundle)
    assert not bad, json.dumps(bad, ensure_ascii=False)[:8000]
    chat = ChatParser(reasoning, parser, ChatOptions(tool_choice="auto", enable_auto_tools=True))
    bad = composed_mismatches(chat, cases, results, bundle, DIVERGENCES)
    assert not bad, json.dumps(bad, ensure_ascii=False)[:8000]


@pytest.mark.parametrize("name", sorted(OWN))
def test_minimax_m3_stream_equals_batch(bundle, parser: MinimaxM3ToolParser, name: str) -> None:  # noqa: ANN001
    assert_stream_equals_batch(parser, bundle, [OWN[name]])


@pytest.mark.parametrize("name", sorted(k for k, v in REASONING_OWN.items() if v))
@pytest.mark.parametrize("mode", [None, "enabled"])
def test_minimax_m3_reasoning_stream_equals_batch(bundle, parser: MinimaxM3ToolParser, name: str,  # noqa: ANN001
                                                  mode: str | None) -> None:
    from ..family_check import check_chunking

    kwargs = {"thinking_mode": mode} if mode else {}
    reasoning = MinimaxM3ReasoningParser(bundle.tokenizer, kwargs, special_tokens=bundle.special_tokens)
    chat = ChatParser(reasoning, parser, ChatOptions(tool_choice="auto", enable_auto_tools=True))
    check_chunking(chat, bundle, REASONING_OWN[name] + W)


def test_minimax_m3_reasoning_prefilled() -> None:
    """thinking_mode "enabled": reasoning to the first `</mm:think>`; a later `<mm:think>` is
    text (named divergence: vLLM's batch would re-read the streamed reasoning as content)."""
    parser = MinimaxM3ReasoningParser(None, {"thinking_mode": "enabled"})  # type: ignore[arg-type]
    got = parser.parse("r</mm:think>c<mm:think>x</mm:think>y")
    assert (got.reasoning, got.content) == ("r", "c<mm:think>x</mm:think>y")
    assert (parser.parse("all").reasoning, parser.parse("all").content) == ("all", None)


def test_minimax_m3_streams_name_then_fragments(parser: MinimaxM3ToolParser) -> None:
    """The name goes out when it is complete, a string value as fragments, a typed value when
    its element closes."""
    head = f'Hi{NS}<tool_call>\n{NS}<invoke name="get_weather">{NS}<city>Par'
    state, events = parser.feed(parser.initial_state(), head, "r")
    assert [type(e).__name__ for e in events] == ["ContentDelta", "ToolCallStart", "ToolArgsDelta"]
    assert isinstance(events[1], ToolCallStart) and events[1].name == "get_weather"
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == ['{"city": "Par']
    state, events = parser.feed(state, f"is{NS}</city>{NS}<days>5", "r")
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == ['is"']
    state, events = parser.feed(state, f"{NS}</days>{NS}</invoke>", "r")
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == [', "days": 5}']


def test_minimax_m3_long_string_value_streams_with_bounded_state(parser: MinimaxM3ToolParser) -> None:
    """A ~20k-character string value, one token per chunk: the state stays under 2 KB."""
    pieces = ["\n", f'{NS}<invoke name="', "search", '">', NS, "<query>"]
    pieces += ["x < y ]<]mini z\n"] * 1300 + [NS, "</query>", f"{NS}</invoke>", f"{NS}</tool_call>"]
    _, largest, sent = stream_long_value(parser, f"{NS}<tool_call>", pieces)
    assert largest < 2_000, largest
    assert sent > 19_000
    call = parser.parse(f"{NS}<tool_call>" + "".join(pieces), "r").tool_calls[0]
    assert json.loads(call.arguments) == {"query": "x < y ]<]mini z\n" * 1300}
