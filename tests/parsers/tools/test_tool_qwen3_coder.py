"""qwen3_coder / qwen3_xml: split invariance on real Qwen3 tokens and differential tests
against vLLM 0.33's engine-based Qwen3EngineToolParser (schema-typed XML parameters)."""

from __future__ import annotations

import json

import pytest

from parsers._base import make_tool_call_id
from parsers._errors import LimitExceededError
from parsers.tools._base import MAX_TOOL_CALL_CHARS
from parsers.tools.qwen3_coder import Qwen3CoderToolParser

from .tool_parser_support import assert_matches_vllm, assert_split_invariant, qwen3

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "unit": {"type": "string", "enum": ["c", "f"]},
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "content": {"type": "string"},
                    "mode": {"type": ["integer", "null"]},
                    "ratio": {"type": "number"},
                    "overwrite": {"type": "boolean"},
                    "meta": {"type": "object", "properties": {"n": {"type": "integer"}}},
                    "tags": {"type": "array", "items": {"type": "integer"}},
                },
            },
        },
    },
]


def call(name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


CALL_W = call("get_weather", city="Paris", days="3")
CALL_F = call(
    "write_file",
    path="src/main.py",
    content='def main():\n    print("héllo 世界 🚀")\n\n',
    mode="null",
    ratio="0.75",
    overwrite="True",
    meta='{"n": "7", "extra": [1, 2]}',
    tags='["1", 2, "x"]',
)

CORPUS: dict[str, str] = {
    "plain_content": "The weather in Paris is sunny. 😊",
    "single_call": CALL_W,
    "two_calls": CALL_W + "\n" + call("get_weather", city="東京", unit="c"),
    "content_before_call": "I'll check the weather for you.\n\n" + CALL_W,
    "typed_params": CALL_F,
    "cjk_emoji_params": call("get_weather", city="北京 🌧️ ☂️", days="七"),
    "conversion_fallbacks": call("write_file", ratio="abc", overwrite="maybe", mode="1.5",
                                 meta="{broken", tags="[1, 2"),
    "number_forms": call("write_file", ratio="1e3", mode="-4", tags="[1.0, 2.5]"),
    "unknown_function": call("no_such_tool", anything="42"),
    "unknown_parameter": call("get_weather", city="Oslo", colour="blue"),
    "text_after_calls": CALL_W + "\nThe call above fetches the forecast.",
    "truncated_at_eos": "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPa",
    "missing_tool_call_end": "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>",
    "missing_function_end": "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</tool_call>\nthen",
    "unclosed_parameter_before_next": "<tool_call>\n<function=get_weather>\n<parameter=city>\nLima\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
    "function_without_tool_call": "Sure: <function=get_weather>\n<parameter=city>\nBern\n</parameter>\n</function>",
    "name_not_closed": "<tool_call>\n<function=get_weather</tool_call> after",
    "empty_tool_call": "a <tool_call></tool_call> b",
    "whitespace_only_content": "  \n<tool_call>\n</tool_call>\n  ",
    "partial_marker_at_end": "I will call a tool <tool_",
    "partial_function_end_at_end": "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</func",
    "think_end_in_content": "done</think>\n\nAnswer <tool</think>_call> here",
    "lone_angle_brackets": "a < b > c, <function but not a call>, x >= y",
    "consecutive_without_end": CALL_W.removesuffix("</tool_call>") + "<tool_call>\n<function=get_weather>\n<parameter=city>\nNice\n</parameter>\n</function>\n</tool_call>",
    "repeated_parameter": call("get_weather", city="A").replace("</function>", "<parameter=city>\nB\n</parameter>\n</function>"),
    "name_from_json_body": '<function=>{"name": "get_weather", "arguments": {"city": "X"}}</function>',
}

# vLLM 0.33's stream differs from its own batch here; ours follows vLLM's batch.
STREAM_LOSSES = frozenset(
    {
        "content_before_call",  # stream keeps the blank line the batch strips
        "function_without_tool_call",  # same, a trailing space
        "leading_whitespace_before_call",
        "text_after_calls",  # stream sends text after the call, batch drops it
        "name_not_closed",
        "truncated_at_eos",  # stream sends a broken args prefix, batch: "{}"
        "repeated_parameter",  # stream streams the first value and cannot take it back
        "think_end_in_content",  # stream (no reasoning parser) keeps </think>: see below
        "whitespace_name",  # stream sends a call named " "
    }
)
# Ours differs from vLLM's batch, because the text had streamed before it could be known:
# the leading whitespace before the call; a value cut by the end of the output (vLLM drops
# the parameter; its own stream sends it too).
DIVERGENCES = frozenset({"leading_whitespace_before_call", "truncated_at_eos"})
# Same object, other string: a repeated parameter is written twice (json.loads of ours keeps
# the last value at the first position, as vLLM's dict does).
SAME_OBJECT = frozenset({"repeated_parameter"})
CORPUS["leading_whitespace_before_call"] = "\n\nLet me look that up.\n" + CALL_W
CORPUS["whitespace_name"] = "hi <function= >\n<parameter=city>\nX\n</parameter>\n</function></tool_call> tail"


@pytest.fixture(scope="module")
def parser() -> Qwen3CoderToolParser:
    return Qwen3CoderToolParser(qwen3().vocab, TOOLS)


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_qwen3_coder_split_invariant(parser: Qwen3CoderToolParser, case: str) -> None:
    """Streaming any split of a real Qwen3 token sequence yields exactly the batch result."""
    text = CORPUS[case]
    assert_split_invariant(parser, text, qwen3().chunks(text))


@pytest.mark.vllm
@pytest.mark.parametrize("vllm_name", ["qwen3_coder", "qwen3_xml"])
def test_qwen3_coder_matches_vllm(vllm_oracle, parser: Qwen3CoderToolParser, vllm_name: str) -> None:
    """Batch == vLLM 0.33 batch (content, names, JSON-equal schema-typed arguments) on the
    corpus except the named divergence; stream == vLLM's stream where vLLM is lossless."""
    results = assert_matches_vllm(
        vllm_oracle, vllm_name, parser, qwen3(), CORPUS,
        stream_losses=STREAM_LOSSES, divergences=DIVERGENCES, tools=TOOLS, real_tokenizer=True,
    )
    for name, res in results.items():  # arguments are json.dumps output: byte-identical
        if name in DIVERGENCES | SAME_OBJECT:
            continue
        ours = parser.parse(CORPUS[name], "req-1")
        assert [c.arguments for c in ours.tool_calls] == [a for _, a, _ in res["batch"]["calls"]]


def test_qwen3_coder_typed_arguments(parser: Qwen3CoderToolParser) -> None:
    """Schema types: null/int union, number, boolean, object and array decoded from the value
    text; one newline trimmed at each end of a value. A value decoded into an object or array
    is not coerced further (its nested schema is not applied, as in vLLM)."""
    (only,) = parser.parse(CORPUS["typed_params"], "r").tool_calls
    assert json.loads(only.arguments) == {
        "path": "src/main.py",
        "content": 'def main():\n    print("héllo 世界 🚀")\n\n',
        "mode": None,
        "ratio": 0.75,
        "overwrite": True,
        "meta": {"n": "7", "extra": [1, 2]},
        "tags": ["1", 2, "x"],
    }
    assert "世界" in only.arguments  # ensure_ascii=False


def test_qwen3_coder_without_tools_keeps_strings() -> None:
    """No request tools: every parameter stays a string."""
    (only,) = Qwen3CoderToolParser(None, []).parse(CALL_W, "r").tool_calls
    assert json.loads(only.arguments) == {"city": "Paris", "days": "3"}


def test_qwen3_coder_ids_are_deterministic(parser: Qwen3CoderToolParser) -> None:
    result = parser.parse(CORPUS["two_calls"], "chatcmpl-abc")
    assert [c.id for c in result.tool_calls] == [make_tool_call_id("chatcmpl-abc", i) for i in range(2)]


def test_qwen3_coder_divergence_leading_whitespace(parser: Qwen3CoderToolParser) -> None:
    """Named divergence: leading whitespace before prose and a call is kept (vLLM's batch
    strips it; the prose streams before the call is known). Trailing whitespace is dropped."""
    result = parser.parse(CORPUS["leading_whitespace_before_call"], "r")
    assert result.content == "\n\nLet me look that up."


def test_qwen3_coder_whitespace_name(parser: Qwen3CoderToolParser) -> None:
    """A call named only by whitespace is dropped, and so is the content after it (vLLM's
    engine announced the slot); the content before it stays, unstripped."""
    text = CORPUS["whitespace_name"]
    result = parser.parse(text, "r")
    assert result.tool_calls == () and result.content == "hi "
    assert_split_invariant(parser, text, qwen3().chunks(text))


def test_qwen3_coder_streams_name_then_argument_fragments(parser: Qwen3CoderToolParser) -> None:
    """The name is sent when `<function=NAME>` closes; a string value streams as it comes,
    an integer value when it ends (it is coerced), the object closes at `</function>`."""
    head = "Hi there\n<tool_call>\n<function=get_weather>\n"
    state, events = parser.feed(parser.initial_state(), head, "r")
    assert [type(e).__name__ for e in events] == ["ContentDelta", "ToolCallStart"]
    assert events[0].text == "Hi there" and events[1].name == "get_weather"
    state, events = parser.feed(state, "<parameter=city>\nPar", "r")
    assert [e.text for e in events] == ['{"city": "Par']
    state, events = parser.feed(state, "is\n</parameter>\n<parameter=days>\n5", "r")
    assert [e.text for e in events] == ['is"']
    state, events = parser.feed(state, "\n</parameter>\n", "r")
    assert [e.text for e in events] == [', "days": 5']
    state, events = parser.feed(state, "</function>", "r")
    assert [e.text for e in events] == ["}"]


def test_qwen3_coder_state_bounded(parser: Qwen3CoderToolParser) -> None:
    """Content leaves only a held literal prefix / whitespace; a streamed string value keeps
    nothing of its text in the state; only a value the schema coerces is held, and one that
    never ends hits MAX_TOOL_CALL_CHARS."""
    state = parser.initial_state()
    for _ in range(500):
        state, _ = parser.feed(state, "some <b>content</b> <tool_c", "r")
        state, _ = parser.feed(state, "all-ish text \n", "r")
    assert len(json.dumps(state.to_json())) < 300
    state, _ = parser.feed(parser.initial_state(), "<tool_call><function=write_file>\n", "r")
    state, _ = parser.feed(state, "<parameter=content>\n", "r")
    for _ in range(1000):
        state, events = parser.feed(state, "x = a < b\n" * 10, "r")
        assert len(json.dumps(state.to_json())) < 600 and events
    state, _ = parser.feed(state, "</parameter>\n<parameter=mode>\n", "r")
    with pytest.raises(LimitExceededError):
        parser.feed(state, "1" * (MAX_TOOL_CALL_CHARS + 1), "r")


@pytest.mark.vllm
def test_qwen3_coder_think_end_as_content_matches_vllm_stream(vllm_oracle) -> None:
    """`skip_reasoning_parsing=True` gives what vLLM's serving layer streams without a
    reasoning parser: `</think>` stays content."""
    keep = Qwen3CoderToolParser(qwen3().vocab, TOOLS, skip_reasoning_parsing=True)
    text = CORPUS["think_end_in_content"]
    (res,) = vllm_oracle.run("qwen3_coder", qwen3(), [text], TOOLS, real_tokenizer=True)
    assert keep.parse(text, "r").content == res["stream"]["content"] == text
    assert_split_invariant(keep, text, qwen3().chunks(text))
