"""mimo (vLLM's MiMoToolParser and MiMoParserReasoningAdapter): tool parser alone, reasoning
parser alone and both composed == vLLM 0.33 on the MiMo corpus (MiMo-VL's template renders
Hermes JSON, which mimo does not parse; vLLM's own XML examples), hostile variants and our
own cases (one oracle call); streaming == batch on every split."""

from __future__ import annotations

import json

import pytest

from parsers import ChatOptions, ChatParser
from parsers._events import ToolArgsDelta
from parsers.reasoning.qwen3 import MimoReasoningParser
from parsers.tools.mimo import MimoToolParser

from ..family_tokenizers import family_tokenizer
from .engine_family_support import (
    assert_stream_equals_batch,
    batch_mismatches,
    composed_mismatches,
    family_cases_for,
    reasoning_mismatches,
    run_oracle,
)
from .test_tool_seed_oss import TOOLS


def call(name: str, nl: str = "", **params: str) -> str:
    body = "".join(f"<parameter={k}>{nl}{v}{nl}</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


W = call("get_weather", city="Paris", days="3")
OWN: dict[str, str] = {
    "own:newlines_kept": call("get_weather", "\n", city="Paris", days="3"),
    "own:two_calls_text_between": W + "\nthen\n" + call("search", query="東京 😀", exact="true"),
    "own:typed_values": call("search", query='say "hi" \\ now', filters='{"a": [1, 2]}', exact="false",
                             score="null"),
    "own:bad_typed_values": call("search", filters="{broken", exact="maybe", score="x"),
    "own:unknown_tool": "x " + call("no_such_tool", a="1") + " y",
    "own:truncated_in_value": "Checking.<tool_call>\n<function=get_weather>\n<parameter=city>Pa\n",
    "own:unclosed_before_next": "<tool_call>\n<function=get_weather>\n<parameter=city>Lima\n"
                                "<parameter=days>2</parameter>\n</function>\n</tool_call>",
    "own:function_without_tool_call": "Sure: <function=get_weather>\n<parameter=city>Bern</parameter>\n</function>",
    "own:repeated_param": call("get_weather", city="A").replace(
        "</function>", "<parameter=city>B</parameter>\n</function>"),
    "own:hermes_json": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "X"}}\n</tool_call>',
    "own:partial_marker_at_end": "I will call a tool <tool_",
    "own:cjk_emoji": call("get_weather", city="北京 🌧️ ☂️\n第二行\n", unit="c"),
}
REASONING_OWN: dict[str, str] = {
    "own:r:plain": "<think>\nthinking\n</think>\n\nAnswer.",
    "own:r:no_end": "still thinking",
    "own:r:implicit_end": "thinking " + W,
    "own:r:double_end": "a</think>b</think>c",
}
DIVERGENCES = {
    "own:truncated_in_value": "a streamed value the output cuts is kept (vLLM drops the parameter)",
}


@pytest.fixture(scope="module")
def bundle():  # noqa: ANN201
    return family_tokenizer("tool", "mimo")


@pytest.fixture(scope="module")
def parser(bundle) -> MimoToolParser:  # noqa: ANN001
    return MimoToolParser(bundle.tokenizer, TOOLS, special_tokens=bundle.special_tokens)


@pytest.mark.vllm
def test_mimo_matches_vllm(vllm_ref, bundle, parser: MimoToolParser) -> None:  # noqa: ANN001
    cases = family_cases_for(["mimo"], {**OWN, **REASONING_OWN})
    _, results = run_oracle(vllm_ref, "mimo", cases, TOOLS, bundle=bundle, reasoning="mimo")
    bad = batch_mismatches(parser, cases, results, DIVERGENCES)
    assert not bad, json.dumps(bad, ensure_ascii=False)[:8000]
    reasoning = MimoReasoningParser(bundle.tokenizer, {}, special_tokens=bundle.special_tokens)
    bad = reasoning_mismatches(reasoning, cases, results, bundle)
    assert not bad, json.dumps(bad, ensure_ascii=False)[:8000]
    chat = ChatParser(reasoning, parser, ChatOptions(tool_choice="auto", enable_auto_tools=True))
    bad = composed_mismatches(chat, cases, results, bundle, DIVERGENCES)
    assert not bad, json.dumps(bad, ensure_ascii=False)[:8000]


@pytest.mark.parametrize("name", sorted(OWN))
def test_mimo_stream_equals_batch(bundle, parser: MimoToolParser, name: str) -> None:  # noqa: ANN001
    assert_stream_equals_batch(parser, bundle, [OWN[name]])


@pytest.mark.parametrize("name", sorted(REASONING_OWN))
def test_mimo_composed_stream_equals_batch(bundle, parser: MimoToolParser, name: str) -> None:  # noqa: ANN001
    from ..family_check import check_chunking

    reasoning = MimoReasoningParser(bundle.tokenizer, {}, special_tokens=bundle.special_tokens)
    chat = ChatParser(reasoning, parser, ChatOptions(tool_choice="auto", enable_auto_tools=True))
    check_chunking(chat, bundle, REASONING_OWN[name])


def test_mimo_values_are_verbatim(parser: MimoToolParser) -> None:
    state, events = parser.feed(parser.initial_state(), "<tool_call>\n<function=search>\n<parameter=query>\nab\n", "r")
    assert [e.text for e in events if isinstance(e, ToolArgsDelta)] == ['{"query": "\\nab\\n']
