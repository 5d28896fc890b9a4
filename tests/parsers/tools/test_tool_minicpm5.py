"""minicpm5 (vLLM's MiniCPM5XMLToolParser): batch == vLLM 0.33's tool parser on the MiniCPM5
corpus, hostile variants, vLLM's own test strings (tests/tool_parsers/
test_minicpm5xml_tool_parser.py) and our cases (one oracle call); streaming == batch on every
split, the state restored at every boundary; a call streams from its `<function>` tag with a
bounded state (its named divergences: a call vLLM would drop stays a call)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from parsers import ChatOptions, ChatParser
from parsers._base import MAX_HELD_CHARS
from parsers._errors import LimitExceededError
from parsers._events import ContentDelta, ToolArgsDelta, ToolCallStart
from parsers.tools._base import assemble
from parsers.tools._schema import decode_tools, encode_tools
from parsers.tools.minicpm5 import MiniCPM5ToolParser

from ..family_corpus import corpus_entries
from ..family_tokenizers import family_tokenizer
from .engine_family_support import (
    XML_TOOLS,
    assert_stream_equals_batch,
    batch_mismatches,
    composed_mismatches,
    family_cases_for,
    run_oracle,
)


def tool(name: str, props: dict[str, Any], required: Any = None) -> dict[str, Any]:
    params: dict[str, Any] = {"type": "object", "properties": props}
    if required is not None:
        params["required"] = required
    return {"type": "function", "function": {"name": name, "parameters": params}}


S, B, N, A = {"type": "string"}, {"type": "boolean"}, {"type": "number"}, {"type": "array"}
# XML_TOOLS (the corpus's tools), get_weather also taking vLLM's tests' `date` and requiring
# `city`, plus the tools of vLLM's tests (aliases, wrappers, required sets).
TOOLS: list[dict[str, Any]] = [
    tool("get_weather", {**XML_TOOLS[0]["function"]["parameters"]["properties"], "date": S}, ["city"]),
    XML_TOOLS[1],
    tool("sum_values", {"nums": A, "exact": B}, ["nums"]),
    tool("noop", {"note": S}, []),
    tool("get_customer_by_phone", {"phone_number": S}, ["phone_number"]),
    tool("get_customer_by_name", {"full_name": S, "date_of_birth": S}, ["full_name"]),
    tool("get_details_by_id", {"id": S}, ["id"]),
    tool("toggle_roaming", {"line_id": S, "enabled": B}, ["line_id", "enabled"]),
    tool("refuel_data", {"customer_id": S, "line_id": S, "amount_gb": N}, ["line_id", "amount_gb"]),
    tool("get_current_weather", {"city": S, "state": S, "unit": S}, ["city", "state", "unit"]),
    tool("chars_required", {"ab": S}, "ab"),  # set("ab") == {"a", "b"}: never satisfied
    tool("takes_arguments", {"arguments": {"type": "object"}, "x": S}),
    {"type": "function", "function": {"name": "free"}},  # no schema: every key kept
]


def fn(name: str, body: str = "") -> str:
    return f'<function name="{name}">{body}</function>'


def p(key: str, value: str) -> str:
    return f'<param name="{key}">{value}</param>'


W = fn("get_weather", p("city", "上海") + p("date", "2024-06-27"))
OWN: dict[str, str] = {
    # vLLM's tests/tool_parsers/test_minicpm5xml_tool_parser.py
    "vllm:no_call": "How can I help you?",
    "vllm:surrounding_text": "Intro before.\n" + W + "\nOutro after.\n",
    "vllm:cdata_multiline": fn("get_weather", p("city", "<![CDATA[北\n京]]>") + p("date", "2024-06-27")) + "\n",
    "vllm:tokenizer_space": '<function\u0120name="get_weather"><param\u0120name="city">上海</param>'
                            '<param\u0120name="date">2024-06-27</param></function>\n',
    "vllm:collapsed_tags": '<functionname="get_weather"><paramname="city">上海</param>'
                           '<paramname="date">2024-06-27</param></function>\n',
    "vllm:collapsed_param_space_function": '<function\u0120name="get_weather"><paramname="city">上海</param></function>\n',
    "vllm:current_weather": '<functionname="get_current_weather"><paramname="city">Dallas</param>'
                            '<paramname="state">TX</param><paramname="unit">fahrenheit</param></function>',
    "vllm:unknown_tool": fn("unknown", p("x", "1")) + "\n",
    "vllm:non_string_types": fn("sum_values", p("nums", "[1, 2, 3]") + p("exact", "true")) + "\n",
    "vllm:interleaved": "Head\n" + fn("get_weather", p("city", "北京")) + "\nTXT\n"
                        + fn("sum_values", p("nums", "[7,8,9]") + p("exact", "false")) + "\nTail\n",
    "vllm:missing_function_end": '<function name="get_weather"><param name="city">北京</param>',
    "vllm:param_missing_name": fn("get_weather", "<param>北京</param>" + p("date", "2024-06-27")) + "\n",
    "vllm:duplicate_param": fn("get_weather", p("city", "北京") + p("city", "上海")) + "\n",
    "vllm:case_sensitive": fn("get_weather", p("City", "北京")) + "\n",
    "vllm:zero_param": fn("noop") + "\n",
    "vllm:sentencepiece_content": "\u010aFirst,\u0120I\u0120need\u0120to\u0120check\u0120the\u0120weather.",
    "vllm:properties_wrapped": fn("get_customer_by_phone", p("properties", "{'phone_number': '555-123-2002'}")),
    "vllm:arguments_wrapped": fn("get_weather", p("arguments", '{"city": "上海", "date": "2024-06-27"}')),
    "vllm:wrapped_unknown": fn("get_weather", p("properties", '{"unknown": "x"}')),
    "vllm:extra_ignored": fn("get_weather", p("city", "上海") + p("unknown", "ignored")),
    "vllm:extra_not_required": fn("get_weather", p("unknown", "ignored")),
    "vllm:zero_arg_extra": fn("noop", p("note", "ignored") + p("extra", "ignored")),
    "vllm:alias_phone": fn("get_details_by_phone", p("phone_number", "555-123-2002")),
    "vllm:alias_line_details": fn("get_line_details", p("customer_id", "C1001") + p("line_id", "L1001")),
    "vllm:alias_enable_roaming": fn("enable_roaming", p("line_id", "L1001")),
    "vllm:xxe": '<!DOCTYPE test [ <!ENTITY xxe SYSTEM "file:///etc/passwd"> ]>'
                + fn("get_weather", p("city", "&xxe;") + p("date", "2024-06-27")) + "\n",
    # ours
    "own:alias_name": fn("get_details_by_name", p("name", "Ann") + p("dob", "1990-01-01")),
    "own:alias_name_no_dob": fn("get_details_by_name", p("full_name", "Ann")),
    "own:alias_disable_roaming": fn("disable_roaming", p("id", "L2")),
    "own:alias_refuel": fn("add_data_to_line", p("customer_id", "C1") + p("line_id", "L1") + p("gb", "2.5")),
    "own:alias_refuel_zero": fn("add_refueled_data", p("line_id", "L1") + p("amount_gb", "0")),
    "own:alias_plan": fn("get_plan_details", p("plan_id", "P9")),
    "own:alias_no_args": fn("get_roaming_status"),
    "own:chars_required": fn("chars_required", p("ab", "x")),
    "own:arguments_is_a_property": fn("takes_arguments", p("arguments", '{"x": "1"}')),
    "own:free_tool": fn("free", p("a", "1") + p("b", "[1, {'c': None}]") + p("c", " text ")),
    "own:wrapped_duplicate": fn("get_weather", p("city", "A") + p("properties", '{"city": "B"}')),
    "own:wrapped_not_object": fn("get_weather", p("arguments", "[1]")),
    "own:wrapped_typed": fn("get_weather", p("arguments", '{"city": 5, "days": "3", "unit": "c"}')),
    "own:arguments_child": fn("get_weather", "<arguments>" + p("city", "X") + p("days", "2") + "</arguments>"),
    "own:not_xml_regex": fn("get_weather", p("city", " a & b ") + p("days", "4")),
    "own:regex_cdata": fn("get_weather", p("city", "<![CDATA[ x < y ]]>") + "&bad;"),
    "own:regex_nameless": fn("get_weather", p("city", "x") + "<param>y</param>") + "&",
    "own:xml_whitespace_kept": fn("get_weather", p("city", "\n  Paris \n")),
    "own:comment_in_value": fn("get_weather", p("city", "Pa<!-- c -->ris")),
    "own:pi_in_value": fn("get_weather", p("city", "Pa<?x y?>ris")),
    "own:nested_element": fn("get_weather", p("city", "Pa<b>x</b>ris")),
    "own:single_quotes": "<function name='get_weather'><param name='city'>Rome</param></function>",
    "own:name_spaces": fn(" get_weather ", p("city", "x")),
    "own:empty_name": fn("", p("city", "x")),
    "own:no_name": "<function>" + p("city", "x") + "</function>",
    "own:namespaced": '<function xmlns="urn:x" name="get_weather">' + p("city", "ns") + "</function>",
    "own:functions_wrapper": "<functions>" + W + "</functions>",
    "own:function_underscore": "<function_call>" + W,
    "own:typed_values": fn("search", p("query", "true") + p("filters", "{'a': (1, 2)}") + p("exact", "True")
                           + p("score", "1e3")),
    "own:bad_typed": fn("search", p("exact", "maybe") + p("score", "x") + p("filters", "{")),
    "own:nan": fn("search", p("score", "NaN")),
    "own:two_calls_ws": W + "\n\n" + fn("sum_values", p("nums", "[1]")) + "\n",
    "own:invalid_then_valid": fn("nope") + " mid " + W,
    "own:invalid_only": "  " + fn("nope") + " tail  \n",
    "own:invalid_two": fn("nope") + "\n" + fn("nope2"),
    "own:think_then_text": "<think>\nplan\n</think>\n\nThe answer.\n",
    "own:think_then_call": "<think>plan " + fn("nope") + "</think>\n" + W,
    "own:think_then_invalid": "<think>plan</think>\n" + fn("nope") + "\n",
    "own:blank_then_think": "\n <think>a</think>b",
    "own:think_word_later": "Say <think> and </think> ok",
    "own:content_only_blanks": "  \n ",
    "own:leading_blanks_text": "  Hello there.  ",
    "own:stray_close": "a </function> b",
    "own:collapsed_param_in_content": "see <paramname=x> here",
    "own:cut_open": "Hi <functi",
    "own:cut_in_block": "Hi " + W[:-5],
    "own:unicode_value": fn("get_weather", p("city", "東京 🌧️ \"q\" \\")),
    "own:long_value": fn("search", p("query", "長い" * 200)),
    "own:think_unclosed": "<think>still thinking",
    "own:think_only": "<think>a thought</think>\n",
    "own:set_value": W + "\n" + fn("free", p("a", "{1, 2}")) + " ",
}

DIVERGENCES: dict[str, str] = {
    "minicpm5:hostile:empty": "an empty output has no content (None); vLLM returns ''",
    "own:think_word_later": "a </think> not closing a leading <think>: the text before it streamed",
    "own:think_unclosed": "the unclosed leading thought is dropped, not held; vLLM returns it",
    "own:think_only": "nothing after the thought: None; vLLM returns the thought (it would be held)",
    "own:set_value": "json.dumps refuses a set: the value is written as its text; vLLM makes all output content",
    # a call that streamed stays a call (vLLM drops it, its block then content)
    "vllm:missing_function_end": "a block the output cuts keeps what it sent",
    "own:cut_in_block": "a block the output cuts keeps what it sent",
    "vllm:param_missing_name": "a nameless parameter is skipped",
    "own:regex_nameless": "a nameless parameter is skipped",
    "vllm:duplicate_param": "a repeated key is written twice",
    "own:wrapped_duplicate": "a repeated key (here through a wrapper) is written twice",
    "vllm:case_sensitive": "a required key missing (the key is not the tool's): the call stays",
    "vllm:extra_not_required": "a required key missing: the call stays",
    "own:chars_required": "a required set never satisfied: the call stays",
    "vllm:wrapped_unknown": "a wrapper without a known key writes nothing; the call stays",
    "own:wrapped_not_object": "a wrapper that is no object writes nothing; the call stays",
    # the XML reading holds while the block stays in the plain form (module docstring)
    "own:not_xml_regex": "a value's leading blank streamed before a bare & showed the block "
                         "is not XML (vLLM's regex reading strips it)",
    "own:comment_in_value": "markup in a value is read as text (vLLM's XML reading drops a comment)",
    "own:pi_in_value": "markup in a value is read as text (vLLM's XML reading drops an instruction)",
    "own:nested_element": "markup in a value is read as text (vLLM's XML reading keeps the text "
                          "before the element)",
}
# Tool-parser divergences the composed parser does not show (it keeps the raw output then).
TOOL_ALONE_ONLY = {"minicpm5:hostile:empty", "own:think_word_later", "own:think_unclosed", "own:think_only"}
# Outputs with content before a call (content_before_call): vLLM's batch drops it, ours sent it.
WITH_CONTENT_BEFORE_CALL = {"openbmb-MiniCPM5-1B:content_then_calls", "vllm:surrounding_text", "vllm:interleaved",
                            "vllm:xxe", "own:invalid_then_valid"}  # fmt: skip


def content_before_call(ours: tuple[str | None, list[tuple[str, str]]], theirs: Any) -> bool:
    """The named divergence's shape: the same calls, vLLM's content None, ours the text
    that streamed before the first call."""
    return not isinstance(theirs, str) and theirs[0] is None and bool(ours[0]) and ours[1] == theirs[1]


def cut_call_kept(ours: tuple[str | None, list[tuple[str, str]]], theirs: Any) -> bool:
    """A cut output's named divergence: vLLM's calls, then the call the cut block streamed
    (vLLM returns that block as content)."""
    return not isinstance(theirs, str) and len(ours[1]) == len(theirs[1]) + 1 and ours[1][:-1] == theirs[1]


@pytest.fixture(scope="module")
def bundle():  # noqa: ANN201
    return family_tokenizer("tool", "minicpm5")


@pytest.fixture(scope="module")
def parser(bundle) -> MiniCPM5ToolParser:  # noqa: ANN001
    return MiniCPM5ToolParser(bundle.tokenizer, TOOLS)


@pytest.mark.vllm
def test_minicpm5_matches_vllm(vllm_ref, bundle, parser: MiniCPM5ToolParser) -> None:  # noqa: ANN001
    cases = family_cases_for(["minicpm5"], OWN)
    _, results = run_oracle(vllm_ref, "minicpm5", cases, TOOLS, bundle=bundle)
    bad = batch_mismatches(parser, cases, results, DIVERGENCES, cut_divergence=cut_call_kept)
    diverged = {n for n, v in bad.items() if isinstance(v, dict) and content_before_call(tuple(v["ours"]), v["vllm"])}
    bad = {n: v for n, v in bad.items() if n not in diverged}
    assert not bad, json.dumps(bad, ensure_ascii=False)[:8000]
    own = {n for n in diverged if not n.startswith("minicpm5:hostile:")}
    assert own == WITH_CONTENT_BEFORE_CALL, own
    # Composed (no reasoning parser, DelegatingParser): the raw output when no call is made.
    chat = ChatParser(None, parser, ChatOptions(tool_choice="auto", enable_auto_tools=True))
    composed_divergences = {n: r for n, r in DIVERGENCES.items() if n not in TOOL_ALONE_ONLY}
    composed = {n: v for n, v in composed_mismatches(chat, cases, results, bundle, composed_divergences).items()
                if not (isinstance(v, dict) and v["ours"][0] == v["vllm"][0]
                        and (content_before_call(tuple(v["ours"][1:]), tuple(v["vllm"][1:]))
                             or ":hostile:cut@" in n and cut_call_kept(v["ours"][1:], v["vllm"][1:])))}  # fmt: skip
    assert not composed, json.dumps(composed, ensure_ascii=False)[:8000]


def test_minicpm5_decoded_tools_parse_the_same(parser: MiniCPM5ToolParser) -> None:
    """Derender rebuilds the parser from the `required` tool view: same results."""
    rebuilt = MiniCPM5ToolParser(None, decode_tools(json.loads(json.dumps(encode_tools(TOOLS, "required")))))
    for text in OWN.values():
        assert rebuilt.parse(text, "r") == parser.parse(text, "r"), text


@pytest.mark.parametrize("raw", [False, True], ids=["parsed", "raw"])
@pytest.mark.parametrize("name", sorted(OWN))
def test_minicpm5_stream_equals_batch(bundle, parser: MiniCPM5ToolParser, name: str, raw: bool) -> None:  # noqa: ANN001
    assert_stream_equals_batch(parser.with_raw_without_calls() if raw else parser, bundle, [OWN[name]])


def test_minicpm5_corpus_streams_equal_batch(bundle, parser: MiniCPM5ToolParser) -> None:  # noqa: ANN001
    cases = family_cases_for(["minicpm5"], {})
    assert_stream_equals_batch(parser, bundle, [e["text"] for e in corpus_entries("tool", "minicpm5")])
    for case in cases.values():  # hostile variants (not all tokenizable): one char at a time
        for mode in (parser, parser.with_raw_without_calls()):
            state, events = mode.initial_state(), []
            for ch in case["text"]:
                state, out = mode.feed(type(state).from_json(json.loads(json.dumps(state.to_json()))), ch, "req-1")
                events += out
            events += mode.finish(state, "req-1")[1]
            assert assemble(events) == mode.parse(case["text"], "req-1"), case["text"]
    chat = ChatParser(None, parser, ChatOptions(tool_choice="auto", enable_auto_tools=True))
    for case in cases.values():  # the composed batch (raw without calls) is what streams
        got = chat.parse(case["text"], "req-1")
        raw = parser.with_raw_without_calls().parse(case["text"], "req-1")
        assert (got.content, got.tool_calls) == (raw.content if raw.tool_calls else case["text"],
                                                 raw.tool_calls), case["text"]


def test_minicpm5_streams_a_call_with_a_bounded_state(parser: MiniCPM5ToolParser) -> None:
    """The name goes out at the `<function>` tag, a string value as fragments; a typed value
    is held to its `</param>`, within the tool-call limit."""
    state, events = parser.feed(parser.initial_state(), "Hi " + '<function name="search"><param name="query">', "r")
    assert [e.text for e in events if isinstance(e, ContentDelta)] == ["Hi"]
    assert [e.name for e in events if isinstance(e, ToolCallStart)] == ["search"]
    sent = "".join(e.text for e in events if isinstance(e, ToolArgsDelta))
    for _ in range(100):
        state, events = parser.feed(state, "c" * 50, "r")
        sent += "".join(e.text for e in events if isinstance(e, ToolArgsDelta))
        assert len(json.dumps(state.to_json())) < 600
    state, events = parser.feed(state, '</param><param name="score">1e3</param></function> dropped', "r")
    _, tail = parser.finish(state, "r")
    sent += "".join(e.text for e in events if isinstance(e, ToolArgsDelta))
    assert json.loads(sent) == {"query": "c" * 5000, "score": 1000.0} and not tail
    small = MiniCPM5ToolParser(None, TOOLS, max_call_chars=1000)
    with pytest.raises(LimitExceededError):
        small.feed(small.initial_state(), "<function" + "x" * 2000, "r")
    state, _ = small.feed(small.initial_state(), '<function name="search"><param name="score">', "r")
    with pytest.raises(LimitExceededError):
        small.feed(state, "1" * 2000, "r")
    # content and a thought stream with a bounded state
    state = parser.initial_state()
    for _ in range(50):
        state, _ = parser.feed(state, "<think>" if _ == 0 else "reasoning " * 20, "r")
        assert len(json.dumps(state.to_json())) < 1000


def test_minicpm5_state_bounded_over_a_long_argument(bundle, parser: MiniCPM5ToolParser) -> None:  # noqa: ANN001
    """A ~20k-character string argument (plain and in CDATA), one token per chunk with the
    state round-tripped: the largest state stays under 2 KB."""
    from parsers.detokenizer import IncrementalDetokenizer

    words = ("the forecast for 東京 says rain, then sun 😀 and wind; " * 400)[:20_000]
    for value in (words, "<![CDATA[" + words + " <b> & ]]>"):
        text = "Sure. " + fn("search", p("query", value) + p("score", "2.5"))
        detok = IncrementalDetokenizer(bundle.tokenizer, bundle.special_ids, skip_special_tokens=False)
        d_state, state, events, largest = detok.initial_state(), parser.initial_state(), [], 0
        for token_id in bundle.encode(text):
            d_state, piece = detok.feed(d_state, [token_id])
            state = type(state).from_json(json.loads(json.dumps(state.to_json())))
            state, out = parser.feed(state, piece, "r")
            events += out
            largest = max(largest, len(json.dumps(state.to_json(), ensure_ascii=False).encode()))
        events += parser.finish(state, "r")[1]
        assert largest < 2048, largest
        result = assemble(events)
        assert result == parser.parse(text, "r")
        assert json.loads(result.tool_calls[0].arguments)["query"] == value.removeprefix("<![CDATA[").removesuffix("]]>")


def test_minicpm5_render_keeps_special_tokens_with_tools() -> None:
    """vLLM's adjust_request: skip_special_tokens=False when the request has tools and
    tool_choice is not "none" (the tool XML tags are special tokens in MiniCPM5)."""
    from render_service.config import ServiceConfig
    from render_service.protocol import ChatCompletionRequest
    from render_service.render.parser_support import ParserSupport

    support = ParserSupport(ServiceConfig(tool_call_parser="minicpm5", enable_auto_tool_choice=True), None)

    def changes(**body: Any) -> Any:
        request = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                                        **body})  # fmt: skip
        return support.adjust_request(request)

    assert changes(tools=TOOLS[:1]).get("skip_special_tokens") is False
    assert "skip_special_tokens" not in changes(tools=TOOLS[:1], tool_choice="none")
    assert "skip_special_tokens" not in changes()


def test_minicpm5_tool_view_stays_small() -> None:
    import zlib

    from .test_tool_schema import agent_tools

    wire = json.dumps(encode_tools(agent_tools(), "required"), separators=(",", ":")).encode()
    assert len(zlib.compress(wire, 9)) < 900


def test_minicpm5_long_blank_runs_stream(parser: MiniCPM5ToolParser) -> None:
    """Blanks are held for vLLM's strip, up to MAX_HELD_CHARS; a longer run is sent."""
    texts = ["\n" * 9000 + "x", "x" + " " * 9000 + "y", "x" + " " * 9000 + W, "  " * 5000 + "<think>a</think>b",
             "<think>a</think>" + " " * 9000 + "b"]  # fmt: skip
    for text, size in ((t, n) for t in texts for n in (333, 700)):
        state, events = parser.initial_state(), []
        for i in range(0, len(text), size):
            state, out = parser.feed(state, text[i : i + size], "r")
            events += out
            assert len(state.blanks) + len(state.tail) <= MAX_HELD_CHARS and not state.block or len(state.block) < 8000
        events += parser.finish(state, "r")[1]
        assert assemble(events) == parser.parse(text, "r")
