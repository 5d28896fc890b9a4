"""poolside_v1 (vLLM 0.33 PoolsideV1ToolParser): GLM-4 style <tool_call>NAME <arg_key>/<arg_value>
calls, string values verbatim, others JSON / Python literals. Differential against vLLM on the
Laguna corpus, hostile variants and own cases, and stream == batch."""

from __future__ import annotations

import pytest

from parsers.tools import tool_parser_traits

from ..family_run import assert_batches_match, assert_streams_match_batch, family_run

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
}

DIVERGENCES = {
    "p:bad_literal_after_call": "a call that errors after one was sent is skipped (vLLM: all "
                                "content, taking back the sent call)",
}


@pytest.fixture(scope="module")
def run(vllm_ref):
    return family_run(vllm_ref, tool="poolside_v1", extra=CASES)


def test_batch_matches_vllm(run):
    assert run.construct == {"tool": None, "reasoning": None, "composed": None}
    assert assert_batches_match(run, DIVERGENCES) > 40


def test_stream_equals_batch_on_every_split(run):
    # A candidate is held whole to its </tool_call> (and the raw text while no call is
    # decided): the state holds that call text, nothing already sent.
    assert_streams_match_batch(run, max_state_bytes=20_000)


def test_traits():
    traits = tool_parser_traits("poolside_v1")
    assert traits.keeps_special_tokens and not traits.supports_required_and_named
    assert not traits.json_schema_choice and not traits.engine_based
