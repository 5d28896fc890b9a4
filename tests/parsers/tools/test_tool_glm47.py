"""glm45 / glm47 (one vLLM class, Glm47MoeModelToolParser): batch == vLLM 0.33's tool parser on
the GLM-4.6 / GLM-4.7 corpus, hostile variants and our own cases (one oracle call); streaming
== batch on every split; arguments stream as fragments."""

from __future__ import annotations

import json

import pytest

from parsers._events import ToolArgsDelta, ToolCallStart
from parsers.registry import get_tool_parser
from parsers.tools.glm47 import Glm47ToolParser

from ..family_tokenizers import family_tokenizer
from .engine_family_support import (
    XML_TOOLS,
    assert_stream_equals_batch,
    batch_mismatches,
    family_cases_for,
    run_oracle,
)

TOOLS = XML_TOOLS


def call(name: str, sep: str = "", **params: str) -> str:
    body = "".join(f"<arg_key>{k}</arg_key>{sep}<arg_value>{v}</arg_value>{sep}" for k, v in params.items())
    return f"<tool_call>{name}{sep}{body}</tool_call>"


W = call("get_weather", city="Paris", days="3")
OWN: dict[str, str] = {
    "own:glm45_newlines": "Sure.\n" + call("get_weather", "\n", city="Paris", unit="c"),
    "own:two_calls_text_between": W + "\nthen\n" + call("search", query="東京 😀", exact="true"),
    "own:text_after_call": W + " and that is all.",
    "own:typed_values": call("search", query='say "hi" \\ now', filters='{"a": [1, 2]}',
                             exact="false", score="null"),
    "own:bad_typed_values": call("search", filters="{broken", exact="maybe", score="1e400"),
    "own:days_not_int": call("get_weather", city="Oslo", days="three"),
    "own:no_args": "<tool_call>get_weather</tool_call>",
    "own:no_args_newline": "<tool_call>get_weather\n</tool_call>",
    "own:empty_call": "a <tool_call></tool_call> b",
    "own:whitespace_name": "a <tool_call> \n<arg_key>city</arg_key><arg_value>X</arg_value></tool_call> b",
    "own:unknown_tool": "x " + call("no_such_tool", anything="42") + " y",
    "own:unknown_then_known": call("no_such_tool", a="1") + W,
    "own:unknown_param": call("get_weather", city="Oslo", colour="blue"),
    "own:truncated_in_value": "Checking.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Pa",
    "own:truncated_in_key": "<tool_call>get_weather<arg_key>ci",
    "own:truncated_mid_marker": "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_val",
    "own:truncated_in_int_value": "<tool_call>get_weather<arg_key>days</arg_key><arg_value>4",
    "own:missing_tool_end": "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value>",
    "own:value_closed_by_tool_end": "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</tool_call> t",
    "own:repeated_key": call("get_weather", city="A", days="1").replace(
        "</tool_call>", "<arg_key>city</arg_key><arg_value>B</arg_value></tool_call>"),
    "own:junk_between_key_and_value": "<tool_call>get_weather<arg_key>city</arg_key>junk"
                                      "<arg_key>days</arg_key> \n<arg_value>2</arg_value></tool_call>",
    "own:key_end_twice": "<tool_call>search<arg_key>query</arg_key></arg_key><arg_value>v</arg_value></tool_call>",
    "own:key_with_spaces": "<tool_call>get_weather<arg_key> city \n</arg_key><arg_value> x </arg_value></tool_call>",
    "own:empty_key_and_value": "<tool_call>get_weather<arg_key></arg_key><arg_value></arg_value></tool_call>",
    "own:markers_in_value": call("search", query="<arg_key>k</arg_key> <tool_call> </think> <think>"),
    "own:name_from_json_body": '<tool_call>{"name": "get_weather", "arguments": {"city": "X"}}</tool_call>',
    "own:name_in_value": "<tool_call><arg_key>q</arg_key><arg_value>"
                         '{"name": "search"}</arg_value></tool_call>',
    "own:think_in_content": "<think>hidden</think>Shown " + W,
    "own:stray_think_end": "done</think>\n\nAnswer <tool</think>_call> here",
    "own:partial_marker_at_end": "I will call a tool <tool_",
    "own:lone_angles": "a < b > c, <arg_key> not in a call </arg_value>",
    "own:only_whitespace_then_call": "  \n" + W + "\n  ",
    "own:special_token_inside": "<tool_call>get_<|user|>weather<arg_key>city</arg_key>"
                                "<arg_value>Pa<|observation|>ris</arg_value></tool_call>",
    "own:cjk_emoji": call("get_weather", city="北京 🌧️ ☂️\n第二行", unit="c"),
    "own:long_value": call("search", query="lorem ipsum " * 300),
    "own:leading_whitespace_content": "\n\nLet me look.\n" + W,
}

# Ours differs from vLLM's batch, each because the text had streamed before it was known.
DIVERGENCES = {
    "own:truncated_in_value": "a streamed value the output cuts is kept (vLLM drops the pair)",
    "own:truncated_mid_marker": "same: the value never closes",
    "own:value_closed_by_tool_end": "same: </tool_call> ends the call inside the value",
}
# Hostile cuts inside a value diverge the same way (recognised by shape: `open_value_kept`).
# The same arguments object, another string: a repeated key is written twice.
SAME_OBJECT = frozenset({"own:repeated_key"})


@pytest.fixture(scope="module")
def bundle():  # noqa: ANN201
    return family_tokenizer("tool", "glm47")


@pytest.fixture(scope="module")
def parser(bundle) -> Glm47ToolParser:  # noqa: ANN001
    return Glm47ToolParser(None, TOOLS, special_tokens=bundle.special_tokens)


@pytest.mark.vllm
def test_glm_matches_vllm(vllm_ref, bundle, parser: Glm47ToolParser) -> None:  # noqa: ANN001
    cases = family_cases_for(["glm45", "glm47"], OWN)
    _, results = run_oracle(vllm_ref, "glm47", cases, TOOLS, bundle=bundle)
    bad = batch_mismatches(parser, cases, results, DIVERGENCES, lambda n: n in SAME_OBJECT)
    assert not bad, json.dumps(bad, ensure_ascii=False)[:8000]


@pytest.mark.parametrize("name", sorted(set(OWN) - {"own:long_value"}))  # long: see below
def test_glm_stream_equals_batch(bundle, parser: Glm47ToolParser, name: str) -> None:  # noqa: ANN001
    assert_stream_equals_batch(parser, bundle, [OWN[name]])


def test_glm_names_share_one_class() -> None:
    assert get_tool_parser("glm45") is get_tool_parser("glm47") is Glm47ToolParser


def test_glm_streams_name_then_fragments(parser: Glm47ToolParser) -> None:
    state, events = parser.feed(parser.initial_state(), "Hi<tool_call>get_weather<arg_key>city", "r")
    assert [type(e).__name__ for e in events] == ["ContentDelta", "ToolCallStart"]
    assert isinstance(events[1], ToolCallStart) and events[1].name == "get_weather"
    state, events = parser.feed(state, "</arg_key><arg_value>Par", "r")
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == ['{"city": "Par']
    state, events = parser.feed(state, "is</arg_value><arg_key>days</arg_key><arg_value>5", "r")
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == ['is"']
    state, events = parser.feed(state, "</arg_value></tool_call>", "r")
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == [', "days": 5}']


def test_glm_long_value_streams_with_bounded_state(parser: Glm47ToolParser) -> None:
    state, _ = parser.feed(parser.initial_state(), "<tool_call>search<arg_key>query</arg_key><arg_value>", "r")
    sent = 0
    for _ in range(2000):
        state, events = parser.feed(state, "x < y </arg_ z\n", "r")
        sent += sum(len(e.text) for e in events if isinstance(e, ToolArgsDelta))
        assert len(json.dumps(state.to_json())) < 800
    assert sent > 2000 * 10


def test_glm_thinking_off_keeps_think_markers_as_text(bundle) -> None:  # noqa: ANN001
    off = Glm47ToolParser(None, TOOLS, chat_template_kwargs={"enable_thinking": False})
    on = Glm47ToolParser(None, TOOLS)
    text = "<think>x</think>y " + W
    assert off.parse(text, "r").content == "<think>x</think>y"
    assert on.parse(text, "r").content == "y"
