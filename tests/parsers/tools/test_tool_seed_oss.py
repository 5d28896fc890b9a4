"""seed_oss (vLLM's SeedOssEngineToolParser and SeedOssParserReasoningAdapter): tool parser
alone, reasoning parser alone and both composed == vLLM 0.33 on the Seed-OSS corpus, hostile
variants and our own cases (one oracle call); streaming == batch on every split."""

from __future__ import annotations

import json

import pytest

from parsers import ChatOptions, ChatParser
from parsers._events import ToolArgsDelta
from parsers.reasoning.seed_oss import SeedOssReasoningParser
from parsers.tools.seed_oss import SeedOssToolParser

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


def call(name: str, nl: str = "", **params: str) -> str:
    body = "".join(f"<parameter={k}>{nl}{v}{nl}</parameter>\n" for k, v in params.items())
    return f"<seed:tool_call>\n<function={name}>\n{body}</function>\n</seed:tool_call>"


W = call("get_weather", city="Paris", days="3")
OWN: dict[str, str] = {
    "own:newline_wrapped_values": call("get_weather", "\n", city="Paris", days="3"),
    "own:two_calls_text_between": W + "\nthen\n" + call("search", query="東京 😀", exact="true"),
    "own:text_after_call": W + " and that is all.",
    "own:typed_values": call("search", query='say "hi" \\ now', filters='{"a": [1, 2]}', exact="false",
                             score="null"),
    "own:bad_typed_values": call("search", filters="{broken", exact="maybe", score="x"),
    "own:unknown_tool": "x " + call("no_such_tool", a="1") + " y",
    "own:unknown_param": call("get_weather", city="Oslo", colour="blue"),
    "own:truncated_in_value": "Checking.<seed:tool_call>\n<function=get_weather>\n<parameter=city>Pa",
    "own:missing_tool_end": "<seed:tool_call>\n<function=get_weather>\n<parameter=city>R</parameter>\n</function>",
    "own:function_without_tool_call": "Sure: <function=get_weather>\n<parameter=city>Bern</parameter>\n</function>",
    "own:qwen_markers_are_text": "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>",
    "own:empty_call": "a <seed:tool_call></seed:tool_call> b",
    "own:repeated_param": call("get_weather", city="A").replace(
        "</function>", "<parameter=city>B</parameter>\n</function>"),
    "own:think_in_content": "<seed:think>x</seed:think>Shown " + W,
    "own:partial_marker_at_end": "I will call a tool <seed:tool_",
    "own:leading_whitespace_content": "\n\nLet me look.\n" + W,
    "own:cjk_emoji": call("get_weather", city="北京 🌧️ ☂️\n第二行", unit="c"),
}
REASONING_OWN: dict[str, str] = {
    "own:r:plain": "<seed:think>thinking</seed:think>\nAnswer.",
    "own:r:no_end": "<seed:think>still thinking",
    "own:r:implicit_end": "<seed:think>thinking " + W,
    "own:r:double_end": "a</seed:think>b</seed:think>c",
    "own:r:qwen_markers": "<think>x</think> y",
    "own:r:special_tokens": "a<seed:eos>b</seed:think>c<seed:bos>",
}
DIVERGENCES = {
    "own:truncated_in_value": "a streamed value the output cuts is kept (vLLM drops the parameter)",
}
SAME_OBJECT = frozenset({"own:repeated_param"})


@pytest.fixture(scope="module")
def bundle():  # noqa: ANN201
    return family_tokenizer("tool", "seed_oss")


@pytest.fixture(scope="module")
def parser(bundle) -> SeedOssToolParser:  # noqa: ANN001
    return SeedOssToolParser(None, TOOLS, special_tokens=bundle.special_tokens)


@pytest.mark.vllm
def test_seed_oss_matches_vllm(vllm_ref, bundle, parser: SeedOssToolParser) -> None:  # noqa: ANN001
    cases = family_cases_for(["seed_oss"], {**OWN, **REASONING_OWN})
    _, results = run_oracle(vllm_ref, "seed_oss", cases, TOOLS, bundle=bundle, reasoning="seed_oss")
    same = lambda n: n in SAME_OBJECT  # noqa: E731
    bad = batch_mismatches(parser, cases, results, DIVERGENCES, same)
    assert not bad, json.dumps(bad, ensure_ascii=False)[:8000]
    reasoning = SeedOssReasoningParser(bundle.tokenizer, {}, special_tokens=bundle.special_tokens)
    bad = reasoning_mismatches(reasoning, cases, results, bundle)
    assert not bad, json.dumps(bad, ensure_ascii=False)[:8000]
    chat = ChatParser(reasoning, parser, ChatOptions(tool_choice="auto", enable_auto_tools=True))
    bad = composed_mismatches(chat, cases, results, bundle, DIVERGENCES, same)
    assert not bad, json.dumps(bad, ensure_ascii=False)[:8000]


@pytest.mark.parametrize("name", sorted(OWN))
def test_seed_oss_stream_equals_batch(bundle, parser: SeedOssToolParser, name: str) -> None:  # noqa: ANN001
    assert_stream_equals_batch(parser, bundle, [OWN[name]])


@pytest.mark.parametrize("name", sorted(REASONING_OWN))
def test_seed_oss_composed_stream_equals_batch(bundle, parser: SeedOssToolParser, name: str) -> None:  # noqa: ANN001
    from ..family_check import check_chunking

    reasoning = SeedOssReasoningParser(bundle.tokenizer, {}, special_tokens=bundle.special_tokens)
    chat = ChatParser(reasoning, parser, ChatOptions(tool_choice="auto", enable_auto_tools=True))
    check_chunking(chat, bundle, REASONING_OWN[name])


def test_seed_oss_streams_string_values(parser: SeedOssToolParser) -> None:
    state, events = parser.feed(parser.initial_state(), "<seed:tool_call>\n<function=search>\n<parameter=query>\nab", "r")
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == ['{"query": "ab']
