"""minimax_m2 (vLLM's MinimaxM2ToolParser): batch == vLLM 0.33's tool parser on the MiniMax-M2 /
M2.5 corpus, hostile variants and our own cases (one oracle call); streaming == batch on every
split; string values stream as fragments."""

from __future__ import annotations

import json

import pytest

from parsers import ChatOptions, ChatParser
from parsers._events import ToolArgsDelta, ToolCallStart
from parsers.reasoning.minimax_m2 import MinimaxM2ReasoningParser
from parsers.tools.minimax_m2 import MinimaxM2ToolParser

from ..family_tokenizers import family_tokenizer
from .engine_family_support import (
    XML_TOOLS,
    assert_stream_equals_batch,
    batch_mismatches,
    composed_mismatches,
    family_cases_for,
    reasoning_mismatches,
    run_oracle,
)

TOOLS = XML_TOOLS

BLOCK = "<minimax:tool_call>\n{}\n</minimax:tool_call>"


def invoke(name: str, **params: str) -> str:
    body = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in params.items())
    return f'<invoke name="{name}">\n{body}</invoke>'


W = BLOCK.format(invoke("get_weather", city="Paris", days="3"))
OWN: dict[str, str] = {
    "own:two_invokes_one_block": BLOCK.format(invoke("get_weather", city="A") + "\n" + invoke("search", query="q")),
    "own:two_blocks_text_between": W + "\nthen\n" + BLOCK.format(invoke("search", query="東京 😀", exact="true")),
    "own:text_after_block": W + " and that is all.",
    "own:typed_values": BLOCK.format(invoke("search", query='say "hi" \\ now', filters='{"a": [1, 2]}',
                                            exact="false", score="null")),
    "own:bad_typed_values": BLOCK.format(invoke("search", filters="{broken", exact="maybe", score="x")),
    "own:days_not_int": BLOCK.format(invoke("get_weather", city="Oslo", days="three")),
    "own:value_whitespace_kept": BLOCK.format(invoke("get_weather", city="\n  Oslo \n")),
    "own:single_quotes": "<minimax:tool_call><invoke name='get_weather'><parameter name='city'>X</parameter></invoke></minimax:tool_call>",
    "own:bare_names": "<minimax:tool_call><invoke name=get_weather><parameter name=city>X</parameter>"
                      "<parameter name = days >2</parameter></invoke></minimax:tool_call>",
    "own:spaces_in_tags": '<invoke name="get_weather">< parameter  name = "city" >Y< / parameter ></invoke>',
    "own:quote_inside_bare": '<invoke name="get_weather"><parameter name="city>Paris</parameter>'
                             '<parameter name="days">3</parameter></invoke>',
    "own:empty_param_name": '<invoke name="get_weather"><parameter name=" ">x</parameter>'
                            '<parameter name="city">Z</parameter></invoke>',
    "own:unclosed_param_before_next": '<invoke name="get_weather"><parameter name="city">Lima'
                                      '<parameter name="days">2</parameter></invoke>',
    "own:invoke_without_block": "Sure: " + invoke("get_weather", city="Bern"),
    "own:no_params": '<minimax:tool_call><invoke name="get_weather"></invoke></minimax:tool_call>',
    "own:empty_block": "a <minimax:tool_call></minimax:tool_call> b",
    "own:text_in_block": "<minimax:tool_call>junk " + invoke("get_weather", city="Q") + " more</minimax:tool_call>",
    "own:unknown_tool": "x " + BLOCK.format(invoke("no_such_tool", a="1")) + " y",
    "own:unknown_then_known": BLOCK.format(invoke("no_such_tool", a="1") + invoke("get_weather", city="K")),
    "own:unknown_param": BLOCK.format(invoke("get_weather", city="Oslo", colour="blue")),
    "own:name_with_spaces": '<invoke name=" get_weather "><parameter name="city">S</parameter></invoke>',
    "own:empty_name": '<invoke name=""><parameter name="city">S</parameter></invoke> t',
    "own:truncated_in_value": 'Checking.<minimax:tool_call><invoke name="get_weather"><parameter name="city">Pa',
    "own:truncated_in_int_value": '<invoke name="get_weather"><parameter name="days">4',
    "own:truncated_in_header": '<invoke name="get_weather"><parameter name="ci',
    "own:truncated_in_name": '<minimax:tool_call><invoke name="get_wea',
    "own:missing_invoke_end": '<minimax:tool_call><invoke name="get_weather"><parameter name="city">R</parameter></minimax:tool_call> t',
    "own:repeated_param": '<invoke name="get_weather"><parameter name="city">A</parameter>'
                          '<parameter name="city">B</parameter></invoke>',
    "own:markers_in_value": BLOCK.format(invoke("search", query="<invoke name=\"x\"> </think> <think> a>b")),
    "own:name_from_json_body": '<invoke name="">{"name": "get_weather", "arguments": {"city": "X"}}</invoke>',
    "own:think_in_content": "<think>x</think>Shown " + W,
    "own:stray_think_end": "done</think>\n\nAnswer here",
    "own:partial_marker_at_end": "I will call a tool <minimax:tool_",
    "own:lone_angles": "a < b > c, x >= y, <parameter name=\"q\">v</parameter>",
    "own:only_whitespace_then_call": "  \n" + W + "\n  ",
    "own:cjk_emoji": BLOCK.format(invoke("get_weather", city="北京 🌧️ ☂️\n第二行", unit="c")),
    "own:long_value": BLOCK.format(invoke("search", query="lorem ipsum " * 300)),
    "own:leading_whitespace_content": "\n\nLet me look.\n" + W,
}

REASONING_OWN: dict[str, str] = {
    "own:r:plain": "thinking about it\n</think>\n\nAnswer.",
    "own:r:no_end": "still thinking <think> inner",
    "own:r:tool_ends_reasoning": "thinking " + W,
    "own:r:trailing_ws": "thought   \n\n</think>text  ",
    "own:r:double_end": "a</think>b</think>c",
    "own:r:special_token": "a<|im_end|>b</think>c<|im_end|>",
}

DIVERGENCES = {
    "own:truncated_in_value": "a streamed value the output cuts is kept (vLLM drops the parameter)",
}
SAME_OBJECT = frozenset({"own:repeated_param"})


@pytest.fixture(scope="module")
def bundle():  # noqa: ANN201
    return family_tokenizer("tool", "minimax_m2")


@pytest.fixture(scope="module")
def parser(bundle) -> MinimaxM2ToolParser:  # noqa: ANN001
    return MinimaxM2ToolParser(None, TOOLS, special_tokens=bundle.special_tokens)


@pytest.mark.vllm
def test_minimax_m2_matches_vllm(vllm_ref, bundle, parser: MinimaxM2ToolParser) -> None:  # noqa: ANN001
    """Tool parser alone, reasoning parser alone and both composed, in one oracle call."""
    cases = family_cases_for(["minimax_m2"], {**OWN, **REASONING_OWN})
    _, results = run_oracle(vllm_ref, "minimax_m2", cases, TOOLS, bundle=bundle, reasoning="minimax_m2")
    bad = batch_mismatches(parser, cases, results, DIVERGENCES, lambda n: n in SAME_OBJECT)
    assert not bad, json.dumps(bad, ensure_ascii=False)[:8000]
    reasoning = MinimaxM2ReasoningParser(bundle.tokenizer, {}, special_tokens=bundle.special_tokens)
    bad = reasoning_mismatches(reasoning, cases, results, bundle)
    assert not bad, json.dumps(bad, ensure_ascii=False)[:8000]
    chat = ChatParser(reasoning, parser, ChatOptions(tool_choice="auto", enable_auto_tools=True))
    bad = composed_mismatches(chat, cases, results, bundle, DIVERGENCES, lambda n: n in SAME_OBJECT)
    assert not bad, json.dumps(bad, ensure_ascii=False)[:8000]


@pytest.mark.parametrize("name", sorted(set(OWN) - {"own:long_value"}))  # long: see below
def test_minimax_m2_stream_equals_batch(bundle, parser: MinimaxM2ToolParser, name: str) -> None:  # noqa: ANN001
    assert_stream_equals_batch(parser, bundle, [OWN[name]])


def test_minimax_m2_streams_name_then_fragments(parser: MinimaxM2ToolParser) -> None:
    head = 'Hi<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Par'
    state, events = parser.feed(parser.initial_state(), head, "r")
    assert [type(e).__name__ for e in events] == ["ContentDelta", "ToolCallStart", "ToolArgsDelta"]
    assert isinstance(events[1], ToolCallStart) and events[1].name == "get_weather"
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == ['{"city": "Par']
    state, events = parser.feed(state, 'is</parameter>\n<parameter name="days">5', "r")
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == ['is"']
    state, events = parser.feed(state, "</parameter>\n</invoke>", "r")
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == [', "days": 5}']


def test_minimax_m2_long_value_streams_with_bounded_state(parser: MinimaxM2ToolParser) -> None:
    state, _ = parser.feed(parser.initial_state(), '<invoke name="search"><parameter name="query">', "r")
    sent = 0
    for _ in range(2000):
        state, events = parser.feed(state, "x < y </param z\n", "r")
        sent += sum(len(e.text) for e in events if isinstance(e, ToolArgsDelta))
        assert len(json.dumps(state.to_json())) < 800
    assert sent > 2000 * 10


@pytest.mark.parametrize("name", sorted(REASONING_OWN) + ["own:two_blocks_text_between", "own:think_in_content"])
def test_minimax_m2_composed_stream_equals_batch(bundle, parser: MinimaxM2ToolParser, name: str) -> None:  # noqa: ANN001
    """Reasoning + tool parser together: every split (state round-tripped) gives the batch."""
    from ..family_check import check_chunking

    reasoning = MinimaxM2ReasoningParser(bundle.tokenizer, {}, special_tokens=bundle.special_tokens)
    chat = ChatParser(reasoning, parser, ChatOptions(tool_choice="auto", enable_auto_tools=True))
    check_chunking(chat, bundle, {**OWN, **REASONING_OWN}[name])
