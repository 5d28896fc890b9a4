"""step3 (vLLM 0.33 Step3ToolParser): `<｜tool_calls_begin｜>` blocks of steptml invoke parts,
arguments cast by schema type. Differential against vLLM (the tool parser composed alone: with
the step3 reasoning parser an output without `</think>` is all reasoning) on the Step3 corpus,
hostile variants and own cases, stream == batch, and the call streams (name, then string
values as fragments) with a bounded state."""

from __future__ import annotations

import json

import pytest

from parsers._events import ToolArgsDelta, ToolCallStart
from parsers.tools import tool_parser_traits
from parsers.tools.step3 import Step3ToolParser

from ..family_oracle import WEATHER_TOOLS
from ..family_run import (
    assert_batches_match,
    assert_streams_match_batch,
    family_run,
    xml_params_classify,
)
from .tool_parser_support import stream_long_value

pytestmark = pytest.mark.vllm

B, E, CB, CE, SEP = "<｜tool_calls_begin｜>", "<｜tool_calls_end｜>", "<｜tool_call_begin｜>", "<｜tool_call_end｜>", "<｜tool_sep｜>"


def part(name: str, kind: str = "function", **params: str) -> str:
    body = "".join(f'<steptml:parameter name="{k}">{v}</steptml:parameter>' for k, v in params.items())
    return f'{CB}\n{kind}{SEP}<steptml:invoke name="{name}">{body}</steptml:invoke>{CE}\n'


W = part("get_weather", city="Paris", days="3")
CASES = {
    "s:casts": B + part("get_weather", city="  Oslo \n", days=" 7 ", unit="c") + E,
    "s:cast_fallbacks": B + part("get_weather", days="seven", city="") + E,
    "s:unknown_tool": B + part("no_such", x="1", y=" two ") + E + " after",
    "s:duplicate_param": B + part("get_weather", city="A").replace("</steptml:invoke>",
        '<steptml:parameter name="city">B</steptml:parameter></steptml:invoke>') + E,
    "s:type_not_function": B + part("get_weather", kind="tool", city="X") + W + E,
    "s:no_sep": B + f'{CB}function<steptml:invoke name="f"></steptml:invoke>{CE}' + W + E,
    "s:part_before_first_begin": B + f'function{SEP}<steptml:invoke name="search"></steptml:invoke>{CE}' + E,
    "s:nested_begin": B + CB + "junk" + W + E,
    "s:no_invoke_name": B + f"{CB}function{SEP}<steptml:invoke>{CE}" + E + "tail",
    "s:no_valid_call": "Hi " + B + f"{CB}tool{SEP}x{CE}" + E + " bye ",
    "s:two_blocks": B + W + E + " mid " + B + W + E,
    "s:text_around": "Before \n\n" + B + W + E + "\n\n after \n",
    "s:ws_only_content": " \n " + B + W + E + " \n",
    "s:cut_after_call": "Hi " + B + W + part("search", query="x"),
    "s:cut_in_part": "Hi " + B + W + CB + "function" + SEP + '<steptml:invoke name="search">',
    "s:cut_no_call": "Hi " + B + CB + "function" + SEP,
    "s:end_only": "text " + E + " more",
    "s:cjk_long": B + part("search", query="東京 😀 " * 300, filters='{"n": 2}') + E,
    "s:unclosed_param": B + part("get_weather", city="Rome").replace("</steptml:invoke>",
        '<steptml:parameter name="days">4</steptml:invoke>') + E,
    "s:marker_in_content": "The " + CE + " and " + SEP + " markers are text.",
    "s:params_before_invoke": B + f'{CB}function{SEP}<steptml:parameter name="query">q</steptml:parameter>'
                              f'<steptml:invoke name="search"></steptml:invoke>{CE}' + E,
    "s:invoke_in_value": B + f'{CB}function{SEP}<steptml:parameter name="query">a <steptml:invoke name="search">'
                         f" b</steptml:parameter>{CE}" + E,
    "s:failed_header_retry": B + part("search").replace("</steptml:invoke>",
        '<steptml:parameter name="<steptml:parameter name="query">x</steptml:parameter></steptml:invoke>') + E,
    "s:failed_invoke_retry": B + f'{CB}function{SEP}<steptml:invoke name="<steptml:invoke name="search">{CE}' + E,
    "s:value_whitespace": B + part("search", query="\n  a \n b  \n\t", filters=" {} ") + E,
    "s:type_padded": B + part("get_weather", kind=" \n function \n", city="X") + E,
    "s:type_prefix_only": B + part("get_weather", kind="func", city="X") + E,
    "s:part_cut_by_begin": "Hi " + B + CB + "function" + SEP + '<steptml:invoke name="search">'
                           '<steptml:parameter name="query">x</steptml:parameter>' + W + E,
    "s:part_cut_by_block_end": B + CB + "function" + SEP + '<steptml:invoke name="search">' + E + " tail",
    "s:value_open_at_end": B + CB + "function" + SEP + '<steptml:invoke name="search">'
                           '<steptml:parameter name="query"> abc ' + CE + E,
    "s:long_cut": "Hi " + B + CB + "function" + SEP + '<steptml:invoke name="search">'
                  '<steptml:parameter name="query">' + "long text " * 500,
}

# Each: vLLM's batch takes back a call (or a value) that had streamed; ours keeps it.
DIVERGENCES = {
    "s:part_cut_by_begin": "a part that ends at the next part's begin keeps its streamed call",
    "s:part_cut_by_block_end": "a part that ends at the block's end keeps its streamed call",
    "s:long_cut": "a block the output cuts keeps the call streaming in it (vLLM: all content)",
    "s:value_open_at_end": "a string value open at its part's end is kept (vLLM drops it)",
    "s:duplicate_param": "a repeated parameter is written twice (the same object)",
    "leading_ws": "content whitespace before text and a later call had streamed (vLLM strips it)",
    "call_kept": "a block cut by the end of the output keeps its streamed calls (vLLM's batch: "
                 "all content; its stream sends the completed ones)",
}


def classify(theirs: dict, ours: dict) -> set[str]:
    """vLLM's calls are a prefix of ours (its content then is the whole output, ours the text
    around the block), or the XML families' shapes."""
    t_calls, o_calls = theirs["tool_calls"], ours["tool_calls"]
    if len(o_calls) > len(t_calls) and not t_calls and B in (theirs["content"] or ""):
        return {"call_kept"}
    kinds = xml_params_classify(theirs, ours)
    return kinds if kinds <= {"leading_ws"} else set()


@pytest.fixture(scope="module")
def run(vllm_ref):
    return family_run(vllm_ref, tool="step3", extra=CASES)


def test_batch_matches_vllm(run):
    assert run.construct == {"tool": None, "reasoning": None, "composed": None}
    assert assert_batches_match(run, DIVERGENCES, classify) > 40


def test_stream_equals_batch_on_every_split(run):
    # Only a part's head, a parameter name, a typed value or a held tail, never a string value.
    assert_streams_match_batch(run, max_state_bytes=2_000)


def test_call_streams_name_then_fragments():
    """The name goes out at the complete invoke tag, a string value as fragments (leading
    whitespace dropped, trailing whitespace held), a typed value at its close."""
    parser = Step3ToolParser(None, WEATHER_TOOLS)
    head = f'Hi{B}{CB}function{SEP}<steptml:invoke name="get_weather"><steptml:parameter name="city"> Par'
    state, events = parser.feed(parser.initial_state(), head, "r")
    assert [type(e).__name__ for e in events] == ["ContentDelta", "ToolCallStart", "ToolArgsDelta"]
    assert isinstance(events[1], ToolCallStart) and events[1].name == "get_weather"
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == ['{"city": "Par']
    state, events = parser.feed(state, 'is  </steptml:parameter><steptml:parameter name="days"> 5', "r")
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == ['is"']
    state, events = parser.feed(state, f"</steptml:parameter></steptml:invoke>{CE}", "r")
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == [', "days": 5}']


def test_long_string_value_streams_with_bounded_state():
    """A ~20k-character string value, one token per chunk: the state stays under 2 KB."""
    parser = Step3ToolParser(None, WEATHER_TOOLS)
    head = [B, CB, "function", SEP, '<steptml:invoke name="', "search", '">', '<steptml:parameter name="',
            "query", '">']
    pieces = [*head[1:], *["x < y </steptml:para z\n"] * 900, "</steptml:parameter>", CE, E]
    _, largest, sent = stream_long_value(parser, head[0], pieces)
    assert largest < 2_000, largest
    assert sent > 19_000
    call = parser.parse(head[0] + "".join(pieces), "r").tool_calls[0]
    assert json.loads(call.arguments) == {"query": ("x < y </steptml:para z\n" * 900).strip()}


def test_traits():
    traits = tool_parser_traits("step3")
    assert traits.keeps_special_tokens and not traits.engine_based
    assert traits.structural_tag_model is None and traits.supports_required_and_named
