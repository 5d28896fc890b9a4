"""plamo3 (tool and reasoning) against vLLM 0.33's Plamo3 adapters: the corpus, hostile
variants and our own cases, thinking on and off, in one oracle call; every split of every
case streams to our batch result."""

from __future__ import annotations

import json
from typing import Any

import pytest

from parsers.tools.plamo3 import (
    BEGIN_THINK as BT,
)
from parsers.tools.plamo3 import (
    BEGIN_TOOL_ARGUMENTS as BA,
)
from parsers.tools.plamo3 import (
    BEGIN_TOOL_NAME as BN,
)
from parsers.tools.plamo3 import (
    BEGIN_TOOL_REQUEST as BR,
)
from parsers.tools.plamo3 import (
    BEGIN_TOOL_REQUESTS as BRS,
)
from parsers.tools.plamo3 import (
    END_THINK as ET,
)
from parsers.tools.plamo3 import (
    END_TOOL_ARGUMENTS as EA,
)
from parsers.tools.plamo3 import (
    END_TOOL_NAME as EN,
)
from parsers.tools.plamo3 import (
    END_TOOL_REQUEST as ER,
)
from parsers.tools.plamo3 import (
    END_TOOL_REQUESTS as ERS,
)
from parsers.tools.plamo3 import (
    EOT,
    Plamo3ToolParser,
)

from ..family_compare import AUTO, assert_streams_to_batch, batch_of, chat_parser, vllm_batch
from ..family_corpus import corpus_entries, family_markers, hostile_variants
from ..family_oracle import vllm_family
from ..family_tokenizers import family_tokenizer

pytestmark = pytest.mark.vllm

NAME = "plamo3"


def call(name: str, args: str) -> str:
    return f"{BR}{BN}{name}{EN}{BA}{args}{EA}{ER}"


def block(*calls: str) -> str:
    return BRS + "".join(calls) + ERS + EOT


OWN = {
    "unknown_tool": block(call("no_such_tool", '{"x": 1}')),
    "empty_args": block(call("get_weather", "")),
    "blank_args": block(call("get_weather", "  \n")),
    "coerced_days": block(call("get_weather", '{"city": "東京", "days": "3"}')),
    "nested": block(call("search", '{"query": "q", "filters": {"a": [1, {"b": null}]}}')),
    "not_json_args": block(call("search", "query=hi")),
    "malformed_json": block(call("search", '{"query": "hi"')),
    "text_after_value": block(call("search", '{"query": "hi"} trailing')),
    "ws_after_value": block(call("search", '{"query": "hi"}  \n')),
    "marker_tail_after_value": BRS + BR + BN + "search" + EN + BA + '{"query": "hi"}<|plamo:xyz|>',
    "truncated_in_args": BRS + BR + BN + "search" + EN + BA + '{"query": "hi',
    "truncated_in_name": BRS + BR + BN + "get_wea",
    "truncated_name_marker": BRS + BR + BN + "get_weather<|plamo:end_tool_na",
    "truncated_args_marker": BRS + BR + BN + "search" + EN + BA + '{"query": "hi"}<|plamo:end_tool_ar',
    "eot_in_name": BRS + BR + BN + "get_weather" + EOT + "after",
    "eot_in_args": BRS + BR + BN + "search" + EN + BA + '{"query": "x"' + EOT + "after",
    "eot_in_preamble": BRS + BR + EOT + "after",
    "text_after_calls": block(call("search", '{"query": "a"}')) + "\nDone 😀",
    "content_after_block_no_eot": BRS + call("search", '{"query": "a"}') + ERS + " tail",
    "two_blocks": block(call("search", '{"query": "a"}')) + block(call("get_weather", '{"city": "x"}')),
    "ws_before_call": "  \n" + block(call("search", '{"query": "a"}')),
    "marker_in_string": block(call("search", json.dumps({"query": BRS + EOT + "<|plamo:x"}))),
    "empty_name": block(call("", '{"name": "search", "arguments": {"query": "z"}}')),
    "blank_name_json": block(call("  ", '{"name": "search", "arguments": {"query": "z"}}')),
    "long_args": block(call("search", json.dumps({"query": "長い" * 400 + "\\" * 20}))),
    "reasoning_then_eot": BT + "thinking" + EOT + "content",
    "reasoning_block_eot": BT + "plan" + BRS + EOT + "x",
    "content_block_eot": "pre" + BRS + "junk" + EOT + "post",
    "rethink": "a" + ET + "b" + BT + "c" + ET + "d",
    "partial_think": "thought<|plamo:end_thi",
    "partial_args_marker_in_reasoning": "thought<|plamo:begin_tool_arguments:plamo|>",
    "cjk_emoji": BT + "考える 🤔" + ET + "答え 😀",
    "dangling_eot_only": EOT,
    "coerced_then_text": block(call("get_weather", '{"city": "x", "days": "3"} junk')),
    "coerced_noncanonical": block(call("get_weather", '{"city":"x",  "days": "3"}')),
}

SWITCHES: list[dict[str, Any]] = [{}, {"enable_thinking": False}]
# Named divergences (our stream == our batch): how ours relates to vLLM's batch.
DIVERGENCES: dict[str, str] = {
    "coerced_then_text": "text after a JSON value whose values the schema coerced: we keep "
    "the coerced value as streamed, then the raw text (vLLM: the raw text, uncoerced)",
    "coerced_noncanonical": "a coerced value after non-canonical text: written coerced within "
    "the model's text (vLLM re-serialises the object; the two are JSON-equal)",
}


@pytest.fixture(scope="module")
def oracle(vllm_ref):
    bundle = family_tokenizer("tool", NAME)
    entries = corpus_entries("tool", NAME)
    markers = family_markers("tool", NAME)
    texts = [e["text"] for e in entries]
    for source in (entries[2]["text"], entries[5]["text"]):
        texts += list(hostile_variants(source, markers).values())
    texts += list(OWN.values())
    cases = [{"text": t, "chat_template_kwargs": kw} for kw in SWITCHES for t in texts]
    out = vllm_family(vllm_ref, tool=NAME, reasoning=NAME, bundle=bundle, cases=cases, request=AUTO)
    assert out.infra_errors() == []
    return bundle, out


def test_batch_matches_vllm(oracle) -> None:
    bundle, out = oracle
    bad = []
    diverged = {OWN[k]: k for k in DIVERGENCES}
    for case, res in zip(out.cases, out.results, strict=True):
        ours = chat_parser(bundle, NAME, NAME, case["chat_template_kwargs"])
        assert "batch" in res, res
        if case["text"] in diverged:
            _check_divergence(diverged[case["text"]], batch_of(ours, case), vllm_batch(res))
        elif batch_of(ours, case) != vllm_batch(res):
            bad.append((case["text"], case["chat_template_kwargs"], batch_of(ours, case), vllm_batch(res)))
    assert bad == [], "\n".join(map(repr, bad[:8])) + f"\n{len(bad)} cases differ"


def _check_divergence(name: str, ours: Any, theirs: Any) -> None:
    (_, _, [(o_name, o_args)]), (_, _, [(t_name, t_args)]) = ours, theirs
    assert o_name == t_name and o_args != t_args, name
    if name == "coerced_then_text":
        assert o_args == '{"city": "x", "days": 3} junk' and t_args == '{"city": "x", "days": "3"} junk'
    else:
        assert json.loads(o_args) == json.loads(t_args) == {"city": "x", "days": 3}


def test_every_split_streams_to_the_batch(oracle) -> None:
    bundle, out = oracle
    for case in out.cases:
        assert_streams_to_batch(chat_parser(bundle, NAME, NAME, case["chat_template_kwargs"]), case)


def test_tool_parser_alone_streams_name_then_arguments() -> None:
    bundle = family_tokenizer("tool", NAME)
    parser = Plamo3ToolParser(bundle.tokenizer, [], special_tokens=bundle.special_tokens)
    state = parser.initial_state()
    state, events = parser.feed(state, BRS + BR + BN + "search" + EN + BA + '{"query": "ab', "r")
    assert [type(e).__name__ for e in events] == ["ToolCallStart", "ToolArgsDelta"]
    assert events[1].text == '{"query": "ab'
    state, events = parser.feed(state, "x" * 100_000, "r")  # a long value streams, not held
    assert events[0].text == "x" * 100_000
    assert len(json.dumps(state.to_json())) < 1024
