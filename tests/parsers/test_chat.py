"""Combined parser: tool_choice modes, include_reasoning, parallel_tool_calls, forced content "",
split invariance with JSON round trips, garbage input, corrupted state. Equality with vLLM's
DelegatingParser + assemble_chat_message_fields is in test_differential.py."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parsers import ChatOptions, ChatParser, ChatParseResult, ParserError, StateError
from parsers._base import make_tool_call_id
from parsers.registry import get_tool_parser

from .chunking import Collapsed, CollapsedCall, assert_chunking_invariant, collapse_events
from .families import build
from .tokenizers_util import qwen3
from .toy_tool_parser import ToyToolParser

REQ = "chatcmpl-test-1"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def collapsed(result: ChatParseResult) -> Collapsed:
    return Collapsed(
        result.reasoning or "",
        result.content or "",
        tuple(CollapsedCall(i, c.id, c.name, c.arguments) for i, c in enumerate(result.tool_calls)),
    )


def check_invariant(parser: ChatParser, text: str, prompt=(), n_random: int = 100) -> ChatParseResult:
    result = parser.parse(text, REQ, prompt)
    assert_chunking_invariant(
        lambda s, t: parser.feed(s, t, REQ),
        lambda s: parser.finish(s, REQ),
        parser.initial_state(prompt),
        parser.state_type(),
        qwen3().pieces(text),
        collapsed(result),
        n_random=n_random,
    )
    return result


def toy_chat(**options) -> ChatParser:
    bundle = qwen3()
    opts = ChatOptions(enable_auto_tools=True, **options)
    return ChatParser(build("qwen3"), ToyToolParser(bundle.tokenizer, TOOLS), opts)


def hermes_chat(**options) -> ChatParser:
    bundle = qwen3()
    opts = ChatOptions(enable_auto_tools=True, **options)
    return ChatParser(build("qwen3"), get_tool_parser("hermes")(bundle.tokenizer, TOOLS), opts)


TOY_TEXT = 'Thinking 你好</think>\n\nSure 😀.<call>get_weather {"city": "Paris"}</call> and <call>f {}</call>'


def test_toy_auto_reasoning_content_and_calls_in_model_order() -> None:
    result = check_invariant(toy_chat(tool_choice="auto"), TOY_TEXT)
    assert result.reasoning == "Thinking 你好"
    assert result.content == "\n\nSure 😀. and "
    assert [(c.name, c.arguments) for c in result.tool_calls] == [
        ("get_weather", '{"city": "Paris"}'), ("f", "{}")]
    assert [c.id for c in result.tool_calls] == [make_tool_call_id(REQ, 0), make_tool_call_id(REQ, 1)]


def test_toy_parallel_tool_calls_false_keeps_the_first_call() -> None:
    result = check_invariant(toy_chat(tool_choice="auto", parallel_tool_calls=False), TOY_TEXT)
    assert [c.name for c in result.tool_calls] == ["get_weather"]


def test_include_reasoning_false_drops_reasoning() -> None:
    result = check_invariant(toy_chat(tool_choice="auto", include_reasoning=False), TOY_TEXT)
    assert result.reasoning is None and len(result.tool_calls) == 2


def test_tool_choice_none_leaves_markup_in_content() -> None:
    result = check_invariant(toy_chat(tool_choice="none"), TOY_TEXT)
    assert result.tool_calls == () and "<call>" in (result.content or "")


def test_without_auto_tools_no_tool_parsing_happens() -> None:
    parser = ChatParser(build("qwen3"), ToyToolParser(qwen3().tokenizer, TOOLS),
                        ChatOptions(tool_choice="auto", enable_auto_tools=False))
    result = check_invariant(parser, TOY_TEXT)
    assert result.tool_calls == () and "<call>" in (result.content or "")


def test_whitespace_only_content_is_null_when_calls_are_made() -> None:
    result = check_invariant(toy_chat(tool_choice="auto"), 'R</think>\n\n<call>f {}</call>\n')
    assert result.content is None and len(result.tool_calls) == 1
    kept = check_invariant(toy_chat(tool_choice="auto"), "R</think>\n\n")
    assert kept.content == "\n\n" and kept.tool_calls == ()


def test_auto_without_tools_in_request_drops_calls_but_strips_markup() -> None:
    bundle = qwen3()
    parser = ChatParser(build("qwen3"), ToyToolParser(bundle.tokenizer, []),
                        ChatOptions(tool_choice="auto", enable_auto_tools=True))
    result = check_invariant(parser, TOY_TEXT)
    assert result.tool_calls == () and result.content == "\n\nSure 😀. and "


def test_named_tool_choice_content_is_the_arguments() -> None:
    result = check_invariant(toy_chat(tool_choice=NAMED), 'R</think>\n {"city": "Paris"}')
    assert result.content == ""  # forced tool call: "" not null
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("get_weather", '\n {"city": "Paris"}')]
    blank = check_invariant(toy_chat(tool_choice=NAMED), "R</think>\n \n")
    assert blank.tool_calls == () and blank.content == ""


def test_required_parses_a_json_array_of_name_parameters() -> None:
    text = 'R</think>[{"name": "get_weather", "parameters": {"city":"東京"}}, {"name": "f", "parameters": {}}]'
    result = check_invariant(toy_chat(tool_choice="required"), text)
    assert result.content == ""
    assert [(c.name, c.arguments) for c in result.tool_calls] == [
        ("get_weather", '{"city": "東京"}'), ("f", "{}")]
    for broken in ['R</think>[{"name": "f", "parameters": {}}', 'R</think>[{"name": 5}]',
                   'R</think>[] trailing', "R</think>"]:
        bad = check_invariant(toy_chat(tool_choice="required"), broken)
        assert bad.tool_calls == () and bad.content == ""


def test_required_null_parameters_serialise_as_null() -> None:
    result = check_invariant(toy_chat(tool_choice="required"), '</think>[{"name": "f"}]')
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("f", "null")]


def test_reasoning_only_and_no_parser_configurations() -> None:
    reasoning_only = ChatParser(build("qwen3"), None, ChatOptions())
    assert check_invariant(reasoning_only, TOY_TEXT).content == TOY_TEXT.split("</think>")[1]
    plain = ChatParser(None, None, ChatOptions())
    assert check_invariant(plain, TOY_TEXT) == ChatParseResult(None, TOY_TEXT, ())


HERMES_TEXT = (
    "Let me check the weather in Paris and Tokyo. 好的 😀\n</think>\n\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "東京"}}\n</tool_call>'
)


@pytest.mark.parametrize("options", [
    {"tool_choice": "auto"},
    {"tool_choice": "auto", "parallel_tool_calls": False},
    {"tool_choice": "auto", "include_reasoning": False},
    {"tool_choice": "none"},
    {"tool_choice": "required"},
    {"tool_choice": NAMED},
], ids=["auto", "single", "no-reasoning", "none", "required", "named"])
def test_qwen3_hermes_modes_stream_equals_batch(options: dict) -> None:
    result = check_invariant(hermes_chat(**options), HERMES_TEXT)
    if options.get("tool_choice") == "auto":
        expected_calls = 1 if options.get("parallel_tool_calls") is False else 2
        assert [c.name for c in result.tool_calls] == ["get_weather"] * expected_calls
        assert result.content is None


def test_qwen3_hermes_tool_call_inside_reasoning_ends_reasoning() -> None:
    text = 'I should call it.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    result = check_invariant(hermes_chat(tool_choice="auto"), text)
    assert result.reasoning == "I should call it.\n"
    assert [c.arguments for c in result.tool_calls] == ['{"city": "Paris"}']


# Alternating whitespace makes one held run per character: 600 runs here. A held-whitespace
# bound of 512 runs once made the stream fail (LimitExceededError at token 130) where batch
# parsing succeeds.
WS_FLOOD = "R</think>" + " \n" * 300 + "hello"


@pytest.mark.parametrize("choice", ["auto", "named"])
def test_qwen3_hermes_long_alternating_whitespace_streams_like_batch(choice: str) -> None:
    parser = hermes_chat(tool_choice="auto") if choice == "auto" else toy_chat(tool_choice=NAMED)
    result = check_invariant(parser, WS_FLOOD, n_random=20)  # ~600 held runs per round trip
    if choice == "auto":
        assert result.content == " \n" * 300 + "hello"
    else:
        assert [c.arguments for c in result.tool_calls] == [" \n" * 300 + "hello"]


def test_held_whitespace_has_a_named_character_bound() -> None:
    from parsers import LimitExceededError
    from parsers._text import MAX_WS_RUNS, ws_runs_append
    from parsers.tools._base import MAX_TOOL_CALL_CHARS

    assert MAX_WS_RUNS == MAX_TOOL_CALL_CHARS
    chars, counts = ws_runs_append("", (), " \n" * (MAX_WS_RUNS // 2))
    assert len(chars) == MAX_WS_RUNS
    assert ws_runs_append(chars, counts, "\n" * 1000)[1][-1] == 1001  # a longer run is free
    with pytest.raises(LimitExceededError):
        ws_runs_append(chars, counts, " ")
    parser = hermes_chat(tool_choice="auto")
    state = parser.feed(parser.initial_state(), "R</think>", REQ)[0]
    with pytest.raises(LimitExceededError):
        parser.feed(state, " \n" * (MAX_WS_RUNS // 2) + " ", REQ)
    over = {**state.to_json(), "ws_chars": " \n" * (MAX_WS_RUNS // 2) + " ",
            "ws_counts": [1] * (MAX_WS_RUNS + 1)}
    with pytest.raises(StateError):
        parser.state_type().from_json(over)


def test_state_of_another_mode_or_corrupt_is_state_error() -> None:
    auto, named = hermes_chat(tool_choice="auto"), toy_chat(tool_choice=NAMED)
    with pytest.raises(StateError):
        auto.feed(named.initial_state(), "x", REQ)
    data = auto.initial_state().to_json()
    with pytest.raises(StateError):
        auto.state_type().from_json({**data, "mode": "bogus"})
    with pytest.raises(StateError):
        auto.state_type().from_json({**data, "v": 2})
    with pytest.raises(StateError):
        auto.feed(auto.state_type().from_json({**data, "reasoning": {"v": 1}}), "x", REQ)


@settings(max_examples=60, deadline=None)
@given(deltas=st.lists(st.one_of(
    st.text(max_size=10),
    st.sampled_from(["<tool_call>", "</tool_call>", "</think>", '{"name": "get_weather", ',
                     '"arguments": {"city": "P"}}', "\n", "<think>", "<|im_end|>"])), max_size=14),
       choice=st.sampled_from(["auto", "none", "required", "named"]))
def test_garbage_gives_output_or_typed_error(deltas: list[str], choice: str) -> None:
    parser = hermes_chat(tool_choice=NAMED if choice == "named" else choice)
    state, events = parser.initial_state(), []
    try:
        for delta in deltas:
            state, out = parser.feed(state, delta, REQ)
            events += out
            state = parser.state_type().from_json(json.loads(json.dumps(state.to_json())))
        events += parser.finish(state, REQ)[1]
    except ParserError:
        return
    assert collapse_events(events) == collapsed(parser.parse("".join(deltas), REQ))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_random_byte_corruption_is_state_error_or_valid(data: st.DataObject) -> None:
    parser = hermes_chat(tool_choice="auto")
    state, _ = parser.feed(parser.initial_state(), 'R</think>\n\n<tool_call>\n{"name": "g', REQ)
    wire = bytearray(json.dumps(state.to_json()).encode())
    for _ in range(data.draw(st.integers(1, 4))):
        wire[data.draw(st.integers(0, len(wire) - 1))] = data.draw(st.integers(0, 255))
    try:
        loaded = json.loads(wire.decode("utf-8", errors="replace"))
    except json.JSONDecodeError:
        return
    try:
        restored = parser.state_type().from_json(loaded)
        restored, _ = parser.feed(restored, 'et_weather", "arguments": {}}</tool_call>', REQ)
        parser.finish(restored, REQ)
    except StateError:
        pass
