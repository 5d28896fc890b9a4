"""poolside_v1 (vLLM 0.33 PoolsideV1ToolParser): GLM-4 style <tool_call>NAME <arg_key>/<arg_value>
calls, string values verbatim, others JSON / Python literals. Differential against vLLM on the
Laguna corpus, hostile variants and own cases, stream == batch, and the call streams (name,
then string values as fragments) with a bounded state."""

from __future__ import annotations

import json

import pytest

from parsers._events import ToolArgsDelta, ToolCallStart
from parsers.tools import tool_parser_traits
from parsers.tools.poolside_v1 import PoolsideV1ToolParser

from ..family_oracle import WEATHER_TOOLS
from ..family_run import (
    assert_batches_match,
    assert_streams_match_batch,
    family_run,
    xml_params_classify,
)
from .tool_parser_support import stream_long_value

pytestmark = pytest.mark.vllm


def call(name: str, **args: str) -> str:
    body = "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>\n" for k, v in args.items())
    return f"<tool_call>{name}\n{body}</tool_call>"


W = call("get_weather", city="Paris", days="3")
CASES = {
    "p:string_verbatim": call("get_weather", city="  Oslo \n", days=" 7 "),
    "p:literals": call("search", query="x", filters="{'a': (1, 2), 'b': None}"),
    "p:json_values": call("search", query="1", filters='{"n": [1, 2.5, true, null]}'),
    "p:bad_literal": call("search", filters="{1, 2}"),
    "p:bad_literal_after_call": W + call("search", filters="{1, 2}"),
    "p:unhashable": call("search", filters="{[1]}"),
    "p:not_a_literal": call("get_weather", days="three days"),
    "p:unknown_tool": call("no_such", a="1", b="x y"),
    "p:duplicate_key": call("get_weather", city="A").replace("</tool_call>",
        "<arg_key>city</arg_key><arg_value>B</arg_value></tool_call>"),
    "p:no_name": "<tool_call>\n<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>",
    "p:name_then_junk": "<tool_call>f\njunk<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>",
    "p:nested_start": "<tool_call>a<tool_call>b\n</tool_call> x",
    "p:unclosed": "Hi " + W + " and <tool_call>search\n<arg_key>q</arg_key><arg_value>x",
    "p:unclosed_only": "Hi <tool_call>search\n<arg_key>q</arg_key>",
    "p:text_between": "Before\n" + W + "\nmiddle\n" + call("search", query="東京 😀") + "\nafter",
    "p:ws_content": " \n " + W,
    "p:end_in_content": "a </tool_call> b",
    "p:empty_call": "x <tool_call></tool_call> y",
    "p:long_value": call("search", query="λ\n" * 2000),
    "p:pair_gap": call("get_weather", city="x").replace("</arg_key><arg_value>", "</arg_key>\n \n<arg_value>"),
    "p:space_name": "x <tool_call> \n<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>",
    "p:newline_only_name": "x <tool_call>\n\n</tool_call>",
    "p:restart_after_junk": "<tool_call>f\njunk<tool_call>search\n<arg_key>query</arg_key><arg_value>q</arg_value></tool_call>",
    "p:nested_in_args": call("search", query="a <tool_call>b\n c"),
    "p:lazy_key": "<tool_call>search\n<arg_key>a</arg_key>x<arg_key>query</arg_key><arg_value>v</arg_value></tool_call>",
    "p:empty_key": call("search", **{" ": "v"}),
    "p:value_open_at_close": "<tool_call>search\n<arg_key>query</arg_key><arg_value>abc</tool_call>",
    "p:long_cut": "<tool_call>search\n<arg_key>query</arg_key><arg_value>" + "long text " * 500,
}

# Each: vLLM's batch takes back a call that had streamed (or writes it otherwise); ours keeps it.
DIVERGENCES = {
    "p:bad_literal": "a set literal (no JSON form): vLLM: all content; ours: the value as text",
    "p:unhashable": "an unhashable literal: as p:bad_literal",
    "p:bad_literal_after_call": "as p:bad_literal, after another call (vLLM: all content)",
    "p:unclosed": "a candidate the output cuts keeps its streamed call (vLLM: no such call)",
    "p:unclosed_only": "as p:unclosed, with no other call (vLLM: all content)",
    "p:long_cut": "as p:unclosed_only, inside a long string value",
    "p:value_open_at_close": "a string value open at </tool_call> is kept (vLLM drops the pair)",
    "p:duplicate_key": "a repeated key is written twice (the same object)",
    "call_kept": "a hostile cut inside a streamed call keeps it",
}


def classify(theirs: dict, ours: dict) -> set[str]:
    """A cut case vLLM's batch takes calls back from: its calls are a prefix of ours, and its
    content (all of the output, without calls) starts with ours before a <tool_call>."""
    t_calls, o_calls = theirs["tool_calls"], ours["tool_calls"]
    if len(o_calls) <= len(t_calls):
        return xml_params_classify(theirs, ours)
    if o_calls[: len(t_calls)] != t_calls or theirs["reasoning"] != ours["reasoning"]:
        return set()
    if t_calls:
        return {"call_kept"} if theirs["content"] == ours["content"] else set()
    head, rest = ours["content"] or "", theirs["content"] or ""
    cut_call = rest.startswith(head) and rest[len(head) :].lstrip().startswith("<tool_call>")
    return {"call_kept"} if cut_call else set()


@pytest.fixture(scope="module")
def run(vllm_ref):
    return family_run(vllm_ref, tool="poolside_v1", extra=CASES)


def test_batch_matches_vllm(run):
    assert run.construct == {"tool": None, "reasoning": None, "composed": None}
    assert assert_batches_match(run, DIVERGENCES, classify) > 40


def test_stream_equals_batch_on_every_split(run):
    # Only a name, a key, a typed value or a tag tail is held, never a string value.
    assert_streams_match_batch(run, max_state_bytes=2_000)


def test_call_streams_name_then_fragments():
    """The name goes out at the first <arg_key>, a string value as fragments, a typed value
    at its close."""
    parser = PoolsideV1ToolParser(None, WEATHER_TOOLS)
    state, events = parser.feed(parser.initial_state(), "Hi<tool_call>get_weather\n<arg_key>city", "r")
    assert [type(e).__name__ for e in events] == ["ContentDelta", "ToolCallStart"]
    assert isinstance(events[1], ToolCallStart) and events[1].name == "get_weather"
    state, events = parser.feed(state, "</arg_key><arg_value>Par", "r")
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == ['{"city": "Par']
    state, events = parser.feed(state, "is</arg_value><arg_key>days</arg_key><arg_value> 5", "r")
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == ['is"']
    state, events = parser.feed(state, " </arg_value></tool_call>", "r")
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == [', "days": 5}']


def test_long_string_value_streams_with_bounded_state():
    """A ~20k-character string value, one token per chunk: the state stays under 2 KB."""
    parser = PoolsideV1ToolParser(None, WEATHER_TOOLS)
    pieces = ["search", "\n", "<arg_key>", "query", "</arg_key>", "<arg_value>"]
    pieces += ["x < y </arg_ z\n"] * 1400 + ["</arg_value>", "</tool_call>"]
    _, largest, sent = stream_long_value(parser, "<tool_call>", pieces)
    assert largest < 2_000, largest
    assert sent > 19_000
    call = parser.parse("<tool_call>" + "".join(pieces), "r").tool_calls[0]
    assert json.loads(call.arguments) == {"query": "x < y </arg_ z\n" * 1400}


def test_traits():
    traits = tool_parser_traits("poolside_v1")
    assert traits.keeps_special_tokens and not traits.supports_required_and_named
    assert not traits.json_schema_choice and not traits.engine_based
