"""dots (vLLM's DotsToolParser): batch == vLLM 0.33's tool parser on the dots.llm1 corpus,
hostile variants, vLLM's own test strings and our cases (one oracle call); streaming == batch
on every split, the state restored at every boundary."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from parsers._events import ToolArgsDelta, ToolCallStart
from parsers.tools.dots import DotsToolParser

from ..family_tokenizers import family_tokenizer
from .engine_family_support import (
    XML_TOOLS,
    assert_stream_equals_batch,
    batch_mismatches,
    family_cases_for,
    run_oracle,
)
from .tool_parser_support import stream_long_value

# vLLM resolves a member's type through `$defs` refs and anyOf alternatives: search gets some.
TOOLS = copy.deepcopy(XML_TOOLS)
TOOLS[1]["function"]["parameters"]["$defs"] = {"Mode": {"type": "string"}, "Lim": {"type": "integer"}}
TOOLS[1]["function"]["parameters"]["properties"].update({
    "mode": {"$ref": "#/$defs/Mode"}, "limit": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/Lim"}]},
    "tags": {"type": "array"}, "free": {}})  # fmt: skip

BLOCK = "<dots_function_call>\n{}\n</dots_function_call>"


def invoke(name: str, **params: str) -> str:
    body = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in params.items())
    return f'<invoke name="{name}">\n{body}</invoke>'


W = BLOCK.format(invoke("get_weather", city="Paris", days="3"))
OWN: dict[str, str] = {
    # vLLM's tests/tool_parsers/test_dots_tool_parser.py shapes
    "vllm:t:no_calls": "This is a regular response without tool calls.",
    "vllm:t:single_quotes": "<dots_function_call><invoke name='get_weather'><parameter name='city'>Tokyo</parameter></invoke></dots_function_call>",
    "vllm:t:unknown_tool": BLOCK.format(invoke("unknown_tool", x="1")),
    "vllm:t:parameters_key": '<dots_function_call>{"name": "search", "parameters": {"query": "q"}}</dots_function_call>',
    "vllm:t:bad_json": "<dots_function_call>{not json}</dots_function_call>",
    "vllm:t:json_list": '<dots_function_call>[{"name": "search"}]</dots_function_call>',
    "vllm:t:json_args_not_object": '<dots_function_call>{"name": "search", "arguments": "q"}</dots_function_call>',
    "vllm:t:json_args_null": '<dots_function_call>{"name": "search", "arguments": null}</dots_function_call>',
    "vllm:t:json_name_not_str": '<dots_function_call>{"name": 3, "arguments": {}}</dots_function_call>',
    # ours
    "own:two_invokes_one_block": BLOCK.format(invoke("get_weather", city="A") + "\n" + invoke("search", query="q")),
    "own:two_blocks_text_between": W + "\nthen\n" + BLOCK.format(invoke("search", query="東京 😀", exact="true")),
    "own:text_after_block": "Sure. " + W + " and that is all.",
    "own:typed_values": BLOCK.format(invoke("search", query=' say "hi" \\ now ', filters='{"a": [1, 2]}',
                                            exact="TRUE", score="2.0", mode="m", limit="7", tags="[1]",
                                            free="{\"x\": 1}")),
    "own:bad_typed_values": BLOCK.format(invoke("search", filters="{broken", exact="maybe", score="x",
                                                limit="1.5", tags="[")),
    "own:null_values": BLOCK.format(invoke("search", query="NULL", score="null", free="Null")),
    "own:number_forms": BLOCK.format(invoke("search", score="1e3", limit=" 12 ")) + BLOCK.format(
        invoke("search", score="inf")),
    "own:days_not_int": BLOCK.format(invoke("get_weather", city="Oslo", days="three")),
    "own:value_stripped": BLOCK.format(invoke("get_weather", city="\n  Oslo \n")),
    "own:bare_names": "<dots_function_call><invoke name=get_weather><parameter name=city>X</parameter>"
                      "<parameter name = days >2</parameter></invoke></dots_function_call>",
    "own:quoted_param_spaces": '<dots_function_call><invoke name=" get_weather "><parameter name=" city ">S'
                               "</parameter></invoke></dots_function_call>",
    "own:unclosed_param_before_next": '<dots_function_call><invoke name="get_weather"><parameter name="city">Lima'
                                      '<parameter name="days">2</parameter></invoke></dots_function_call>',
    "own:invoke_without_block": "Sure: " + invoke("get_weather", city="Bern"),
    "own:no_params": '<dots_function_call><invoke name="get_weather"></invoke></dots_function_call>',
    "own:empty_block": "a <dots_function_call></dots_function_call> b",
    "own:text_between_invokes": "<dots_function_call>" + invoke("get_weather", city="Q") + " more "
                                + invoke("search", query="z") + " tail</dots_function_call>",
    "own:unknown_then_known": BLOCK.format(invoke("no_such_tool", a="1") + invoke("get_weather", city="K")),
    "own:unknown_param": BLOCK.format(invoke("get_weather", city="Oslo", colour="blue")),
    "own:empty_name": '<dots_function_call><invoke name=""><parameter name="city">S</parameter></invoke></dots_function_call> t',
    "own:blank_name_json_body": '<dots_function_call><invoke name=" ">{"name": "get_weather", "arguments": {}}'
                                "</invoke></dots_function_call>",
    "own:truncated_in_value": 'Checking.<dots_function_call><invoke name="get_weather"><parameter name="city">Pa',
    "own:truncated_in_name": 'x <dots_function_call><invoke name="get_wea',
    "own:truncated_json": 'x <dots_function_call>{"name": "get_weather", "argu',
    "own:truncated_block_after_call": W + '<dots_function_call><invoke name="search"><parameter name="query">q',
    "own:repeated_param": '<dots_function_call><invoke name="get_weather"><parameter name="city">A</parameter>'
                          '<parameter name="city">B</parameter></invoke></dots_function_call>',
    "own:markers_in_value": BLOCK.format(invoke("search", query="<invoke name=\"x\"> a>b <b>")),
    "own:stray_end_marker": "done</dots_function_call> here",
    "own:partial_marker_at_end": "I will call a tool <dots_function_",
    "own:lone_angles": "a < b > c, <parameter name=\"q\">v</parameter>",
    "own:only_whitespace_then_call": "  \n" + W + "\n  ",
    "own:json_then_xml_blocks": '<dots_function_call>{"name": "search", "arguments": {"query": "é"}}</dots_function_call>'
                                + W,
    "own:json_unknown_then_xml": '<dots_function_call>{"name": "nope", "arguments": {}}</dots_function_call> t ' + W,
    "own:json_whitespace": '<dots_function_call>\n  {"name": "get_weather", "arguments": {"city": "Z"}}  \n</dots_function_call>',
    "own:cjk_emoji": BLOCK.format(invoke("get_weather", city="北京 🌧️ ☂️\n第二行", unit="c")),
    "own:long_value": BLOCK.format(invoke("search", query="lorem ipsum " * 60)),
    "own:text_before_invoke": "<dots_function_call>x " + invoke("get_weather", city="Q") + "</dots_function_call>",
    "own:content_ws_around": "\n\nLet me look.  \n" + W,
    # a string value streams once it can no longer strip to "null"; a boolean once it can
    # no longer be "true" / "1" / "null"
    "own:null_prefixes": BLOCK.format(invoke("search", query=" nul ", mode="null \n", free="nULLx")
                                      + invoke("get_weather", city="nu ll", unit=" \t ")),
    "own:bool_prefixes": BLOCK.format(invoke("search", exact=" tr")) + BLOCK.format(invoke("search", exact="1 "))
                         + BLOCK.format(invoke("search", exact="10")) + BLOCK.format(invoke("search", exact="TRUE x"))
                         + BLOCK.format(invoke("search", exact="\nNull\n", query="q")),
    "own:ws_runs_in_value": BLOCK.format(invoke("search", query="a  \n\n b\u3000c\u2028 \x1f")),
    "own:truncated_in_null_prefix": BLOCK.format(invoke("get_weather", city="X"))[:-31]
                                    + '<parameter name="unit"> nu',
    "own:truncated_after_ws": '<dots_function_call><invoke name="get_weather"><parameter name="city">Lima \n',
    "own:truncated_bool": '<dots_function_call><invoke name="search"><parameter name="exact">nope',
}

DIVERGENCES = {
    "dots:hostile:cut@0": "an empty output has no content (None); vLLM returns ''",
    "own:truncated_in_value": "a call the output cuts is kept (vLLM ignores an unclosed block)",
    "own:truncated_block_after_call": "a call the output cuts is kept (vLLM ignores an unclosed block)",
    "dots:hostile:empty": "an empty output has no content (None); vLLM returns ''",
    "dots:hostile:duplicated_markers": "text before a block's first invoke: its invokes had streamed"
                                       " (vLLM reads the block as JSON, fails, returns the text)",
    "dots:hostile:replacement_chars": "text before a block's first invoke: its invokes had streamed"
                                      " (vLLM reads the block as JSON, fails, returns the text)",
    "own:text_before_invoke": "text before a block's first invoke: its invokes had streamed",
    "own:truncated_in_null_prefix": "a call the output cuts is kept; its undecided value is dropped",
    "own:truncated_after_ws": "a call the output cuts is kept, with the string value it streamed",
    "own:truncated_bool": "a call the output cuts is kept, with the boolean it decided (false)",
}


def unclosed_block_kept(ours: tuple[str | None, list[tuple[str, str]]], theirs: Any) -> bool:
    """A cut output: vLLM ignores the unclosed block (no call, the text returned); ours keeps
    the calls that had streamed."""
    return not isinstance(theirs, str) and theirs[1] == [] and bool(ours[1])


@pytest.fixture(scope="module")
def bundle():  # noqa: ANN201
    return family_tokenizer("tool", "dots")


@pytest.fixture(scope="module")
def parser(bundle) -> DotsToolParser:  # noqa: ANN001
    return DotsToolParser(None, TOOLS, special_tokens=bundle.special_tokens)


@pytest.mark.vllm
def test_dots_matches_vllm(vllm_ref, bundle, parser: DotsToolParser) -> None:  # noqa: ANN001
    cases = family_cases_for(["dots"], OWN)
    _, results = run_oracle(vllm_ref, "dots", cases, TOOLS, bundle=bundle)
    bad = batch_mismatches(parser, cases, results, DIVERGENCES,
                           cut_divergence=unclosed_block_kept)
    assert not bad, json.dumps(bad, ensure_ascii=False)[:8000]
    # vLLM checks names against the request's tools: without tools nothing is a call. The
    # oracle runs with TOOLS, so this case is checked against that rule: the output is content.
    bare = DotsToolParser(None, [], special_tokens=bundle.special_tokens).parse(W, "r")
    assert (bare.content, list(bare.tool_calls)) == (W, [])


@pytest.mark.parametrize("name", sorted(set(OWN) - {"own:long_value"}))
def test_dots_stream_equals_batch(bundle, parser: DotsToolParser, name: str) -> None:  # noqa: ANN001
    assert_stream_equals_batch(parser, bundle, [OWN[name]])


def test_dots_long_value_stream_equals_batch(bundle, parser: DotsToolParser) -> None:  # noqa: ANN001
    assert_stream_equals_batch(parser, bundle, [OWN["own:long_value"]])


def test_dots_streams_call_then_members(parser: DotsToolParser) -> None:
    head = 'Hi <dots_function_call>\n<invoke name="get_weather">\n<parameter name="city"> Par'
    state, events = parser.feed(parser.initial_state(), head, "r")
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [e.name for e in starts] == ["get_weather"]
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == ['{"city": "Par']
    state, events = parser.feed(state, 'is </parameter>\n<parameter name="days">5', "r")
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == ['is"']
    state, events = parser.feed(state, "</parameter>\n</invoke>", "r")
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == [', "days": 5}']


def test_dots_string_value_held_only_while_it_may_be_null(parser: DotsToolParser) -> None:
    head = '<dots_function_call><invoke name="search"><parameter name="query">  \n nUl'
    state, events = parser.feed(parser.initial_state(), head, "r")
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == []
    state, events = parser.feed(state, "l \n", "r")
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == []
    state, events = parser.feed(state, "</parameter></invoke>", "r")
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == ['{"query": null}']
    state, events = parser.feed(parser.initial_state(), head + "l  x", "r")
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == ['{"query": "nUll  x']


def test_dots_long_value_streams_with_bounded_state(parser: DotsToolParser) -> None:
    head = '<dots_function_call><invoke name="search"><parameter name="query">'
    pieces = ("lorem ", "ipsum <", "/param ", "\n", "x") * 4000  # 20k+ characters
    _, largest, sent = stream_long_value(parser, head, pieces)
    assert largest < 2048 and sent > 20000
