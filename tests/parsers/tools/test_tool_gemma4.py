"""gemma4 tool calls and reasoning: differential against vLLM 0.33's Gemma4 parser engine
(one batched oracle call: composed batch, tool parser alone, reasoning parser alone), split
invariance of the combined parser, and the argument format against vLLM's converter."""

from __future__ import annotations

import json
from typing import Any

import pytest

from parsers import ChatOptions, ChatParser
from parsers.reasoning.gemma4 import Gemma4ReasoningParser
from parsers.tools.gemma4 import Gemma4Args, Gemma4ToolParser

from ..chunking import Collapsed, CollapsedCall, assert_chunking_invariant
from ..family_corpus import corpus_entries, family_markers, hostile_variants
from ..family_oracle import WEATHER_TOOLS, family_cases, vllm_family
from ..family_tokenizers import family_tokenizer

D = '<|"|>'
W = "<|tool_call>call:get_weather{city:" + D + "Tokyo" + D + ",days:3}<tool_call|>"
S = ("<|tool_call>call:search{filters:{lang:" + D + "ja" + D + ",n:2,deep:{a:[1,{b:" + D + "x}" + D
     + "}]}},query:" + D + 'say "hi" \\ 東京 😀' + D + "}<tool_call|>")  # fmt: skip
LONG = "<|tool_call>call:search{query:" + D + ("lorem ipsum 東京 " * 200) + D + "}<tool_call|>"

OWN: dict[str, str] = {
    "call_then_text": W + "Done, anything else?",
    "two_calls_cjk": W + S,
    "reasoning_then_call": "<|channel>thought\nNeed the weather.  \n<channel|>" + W,
    "call_inside_reasoning": "<|channel>thought\nR " + W + " after",
    "label_only": "<|channel>thought\n<channel|>Answer.",
    "label_word_only": "<|channel>thought<channel|>Answer.",
    "no_label": "<|channel>pondering<channel|>Answer.",
    "two_channels": "<|channel>thought\nA<channel|>mid<|channel>thought\nB<channel|>end",
    "truncated_in_string": "Checking.\n<|tool_call>call:get_weather{city:" + D + "Tok",
    "truncated_in_delim": "<|tool_call>call:get_weather{city:" + D + "Tokyo<|\"",
    "truncated_nested": "<|tool_call>call:search{filters:{n:2,lang:" + D + "ja",
    "truncated_bare": "<|tool_call>call:get_weather{days:3",
    "truncated_name": "<|tool_call>call:get_wea",
    "partial_marker_text": "I will call <|tool_ca",
    "malformed_args": "<|tool_call>call:get_weather{city:Tokyo,,days:,}<tool_call|>",
    "value_starts_with_comma": "<|tool_call>call:get_weather{city:,days:3}<tool_call|>",
    "unknown_tool": "<|tool_call>call:no_such_tool{x:" + D + "1" + D + "}<tool_call|>",
    "empty_args": "<|tool_call>call:get_weather{}<tool_call|>",
    "no_args": "<|tool_call>call:get_weather<tool_call|>",
    "paren_args": "<|tool_call>call:get_weather(city:" + D + "Oslo" + D + ")<tool_call|>",
    "bare_opener": "<|tool_call>:get_weather{city:" + D + "Rome" + D + "}<tool_call|>",
    "no_prefix": "<|tool_call>get_weather{city:" + D + "Rome" + D + "}<tool_call|>",
    "json_body": '<|tool_call>{"name": "get_weather", "arguments": {"city": "X"}}<tool_call|>',
    "quoted_key": "<|tool_call>call:get_weather{" + D + "city" + D + ":" + D + "Lima" + D + "}<tool_call|>",
    "string_with_braces": "<|tool_call>call:search{query:" + D + "a } b { c ]" + D + "}<tool_call|>",
    "string_ends_with_brace": "<|tool_call>call:search{query:" + D + "a }<tool_call|>",
    "coerced_string": "<|tool_call>call:get_weather{city:" + D + "Paris" + D + ",days:" + D + "4" + D + "}<tool_call|>",
    "nested_array_values": "<|tool_call>call:search{filters:[1,[2,3],{k:v}],query:q}<tool_call|>",
    "stray_end_marker": "A<tool_call|>B",
    "marker_in_content": "Use the <|tool_call> marker and <tool_call|> to call.",
    "special_tokens_after": "The answer.<turn|><eos>",
    "whitespace_content_call": "  \n" + W + "\n ",
    "long_arguments": LONG,
    "ws_in_args": "<|tool_call>call:get_weather{ city : " + D + " Tokyo " + D + " , days : 3 }<tool_call|>",
    "call_end_inside_args": "<|tool_call>call:get_weather{city:" + D + "a<tool_call|>b" + D + "}<tool_call|>",
}

# vLLM's batch is indefensible here (module docstrings); ours is the stream-safe result.
DIVERGENCES: dict[str, str] = {
    "duplicate_key": "a repeated key is written twice (JSON-equal to vLLM's object)",
    "unopened_label": "vLLM prepends a <|channel> the model never wrote to text starting "
                      "with thought\\n (whole-text first-feed rewrite)",
    "unopened_close": "vLLM's batch makes text before a <channel|> with no <|channel> "
                      "reasoning; a stream cannot know that at its start",
    "leading_ws_prose_call": "the engine's leading-whitespace rule (_engine)",
}
OWN["duplicate_key"] = "<|tool_call>call:get_weather{city:" + D + "A" + D + ",days:2,city:" + D + "B" + D + "}<tool_call|>"
OWN["unopened_label"] = "thought\nSome thinking<channel|>Answer"
OWN["unopened_close"] = "Some thinking<channel|>Answer"
OWN["leading_ws_prose_call"] = "\n\nSure.\n" + W

# The tool parser alone, fed channel markers (serving never does: without a reasoning parser
# they are text, with one the content has none): vLLM drops the whole delta, content
# included, when its reasoning is a proper prefix of "thought\n" (_events_to_delta).
TOOL_ALONE_DIVERGENCES = {"label_word_only": "vLLM drops the content after <|channel>thought<channel|>"}

OPTIONS = {"tool_choice": "auto"}


def _bundle():
    return family_tokenizer("tool", "gemma4")


def _reasoning() -> Gemma4ReasoningParser:
    bundle = _bundle()
    return Gemma4ReasoningParser(bundle.tokenizer, {}, special_tokens=bundle.special_tokens)


def _tool(skip_reasoning: bool = False) -> Gemma4ToolParser:
    bundle = _bundle()
    return Gemma4ToolParser(bundle.tokenizer, WEATHER_TOOLS, special_tokens=bundle.special_tokens,
                            skip_reasoning_parsing=skip_reasoning)  # fmt: skip


def _chat() -> ChatParser:
    return ChatParser(_reasoning(), _tool(), ChatOptions(enable_auto_tools=True, **OPTIONS))


def _cases() -> list[dict[str, Any]]:
    entries = corpus_entries("tool", "gemma4")
    richest = max(entries, key=lambda e: len(e["text"]))
    hostile = hostile_variants(richest["text"], family_markers("tool", "gemma4", richest["text"]), max_cuts=30)
    items: list[dict[str, Any]] = [{**e, "name": e["name"]} for e in entries]
    items += [{"name": f"hostile:{k}", "text": t, "prompt": richest.get("prompt")} for k, t in hostile.items()]
    items += [{"name": k, "text": t, "prompt": richest.get("prompt")} for k, t in OWN.items()]
    return items


def _calls(calls: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(c["name"], c["arguments"]) for c in calls]


def _json_calls(calls: list[tuple[str, str]]) -> list[tuple[str, Any]]:
    return [(n, json.loads(a)) for n, a in calls]


@pytest.mark.vllm
def test_gemma4_matches_vllm(vllm_ref) -> None:
    """Composed batch == vLLM's DelegatingParser batch (reasoning, content, names, argument
    strings exactly); the tool parser alone and the reasoning parser alone == vLLM's classes
    alone; named divergences must still differ from vLLM (else they are stale)."""
    bundle = _bundle()
    items = _cases()
    out = vllm_family(vllm_ref, tool="gemma4", reasoning="gemma4", bundle=bundle,
                      cases=family_cases(bundle, items), request=OPTIONS)  # fmt: skip
    assert not out.infra_errors(), out.infra_errors()
    assert out.construct == {"tool": None, "reasoning": None, "composed": None}, out.construct
    chat, tool, reasoning = _chat(), _tool(), _reasoning()
    errors: list[str] = []
    for item, case, res in zip(items, out.cases, out.results, strict=True):
        name, text = item["name"], item["text"]
        assert "batch" in res and "tool" in res and "reasoning" in res, (name, res)
        v = res["batch"]
        ours = chat.parse(text, "req", case.get("prompt_token_ids", ()))
        mine = (ours.reasoning, ours.content, [(c.name, c.arguments) for c in ours.tool_calls])
        theirs = (v["reasoning"], v["content"], _calls(v["tool_calls"]))
        t = tool.parse(text, "req")
        t_mine = (t.content, [(c.name, c.arguments) for c in t.tool_calls])
        t_theirs = (res["tool"]["content"], _calls(res["tool"]["tool_calls"]))
        r = reasoning.parse(text)
        r_mine = (r.reasoning, r.content)
        r_theirs = (res["reasoning"]["reasoning"], res["reasoning"]["content"])
        same = mine == theirs and t_mine == t_theirs and r_mine == r_theirs
        if name in DIVERGENCES:
            if same:
                errors.append(f"{name}: named divergence, but ours equals vLLM")
            elif name == "duplicate_key":
                assert _json_calls(mine[2]) == _json_calls(theirs[2]), (mine, theirs)
            continue
        if mine != theirs:
            errors.append(f"{name}: composed ours {mine}\n   != vLLM {theirs}")
        if name in TOOL_ALONE_DIVERGENCES:
            if t_mine == t_theirs:
                errors.append(f"{name}: named tool-alone divergence, but ours equals vLLM")
        elif t_mine != t_theirs:
            errors.append(f"{name}: tool alone ours {t_mine}\n   != vLLM {t_theirs}")
        if r_mine != r_theirs:
            errors.append(f"{name}: reasoning alone ours {r_mine}\n   != vLLM {r_theirs}")
    assert not errors, "\n".join(errors)


def _expected(chat: ChatParser, text: str) -> Collapsed:
    ours = chat.parse(text, "req")
    return Collapsed(ours.reasoning or "", ours.content or "", tuple(
        CollapsedCall(i, c.id, c.name, c.arguments) for i, c in enumerate(ours.tool_calls)))


SPLIT_CASES = ["two_calls_cjk", "reasoning_then_call", "call_inside_reasoning", "label_only",
               "label_word_only", "two_channels", "truncated_in_string", "truncated_in_delim",
               "truncated_nested", "truncated_bare", "malformed_args", "string_ends_with_brace",
               "coerced_string", "nested_array_values", "stray_end_marker", "ws_in_args",
               "paren_args", "json_body", "whitespace_content_call", "duplicate_key"]


@pytest.mark.parametrize("case", SPLIT_CASES)
def test_gemma4_split_invariant(case: str) -> None:
    """The combined parser streams exactly its batch result: whole, one token per chunk,
    every two-chunk split and random splits, state JSON-round-tripped at each boundary; and
    character by character."""
    chat, text = _chat(), OWN[case]
    for pieces, n_random in ((_bundle().pieces(text), 30), (list(text), 3)):
        assert_chunking_invariant(
            feed_fn=lambda state, delta: chat.feed(state, delta, "req"),
            finish_fn=lambda state: chat.finish(state, "req"),
            initial_state=chat.initial_state(), state_type=chat.state_type(),
            pieces=pieces, expected=_expected(chat, text), n_random=n_random,
        )


def test_gemma4_streams_name_then_string_fragments() -> None:
    """The call's first delta names it with the first argument character (vLLM's engine
    announces a name on its first argument event); a string value streams as written; an
    integer-typed value is held until it ends, then coerced."""
    tool = _tool()
    state, events = tool.feed(tool.initial_state(), "Hi <|tool_call>call:get_weather{ci", "r")
    assert [type(e).__name__ for e in events] == ["ContentDelta", "ToolCallStart"]
    assert events[1].name == "get_weather"
    state, events = tool.feed(state, "ty:" + D + "Tok", "r")
    assert "".join(e.text for e in events) == '{"city": "Tok'
    state, events = tool.feed(state, "yo" + D + ",days:" + D + "3", "r")
    assert "".join(e.text for e in events) == 'yo"'
    state, events = tool.feed(state, D + "}<tool_call|>", "r")
    assert "".join(e.text for e in events) == ', "days": 3}'


def test_gemma4_long_string_state_is_bounded() -> None:
    """A long streamed string value leaves only a short tail in the state."""
    tool = _tool()
    state, _ = tool.feed(tool.initial_state(), "<|tool_call>call:search{query:" + D, "r")
    sent = 0
    for _ in range(500):
        state, events = tool.feed(state, "some text 東京 ", "r")
        sent += sum(len(getattr(e, "text", "")) for e in events)
        assert len(json.dumps(state.to_json())) < 600
    assert sent > 5000


def test_gemma4_reasoning_prompt_open_channel_starts_in_reasoning() -> None:
    """A prompt ending inside `<|channel>` (post-tool-response continuation) starts in
    reasoning; one that starts a model turn starts in content."""
    bundle, reasoning = _bundle(), _reasoning()
    open_prompt = bundle.encode("<|turn>model\n<|channel>thought\n")
    turn_prompt = bundle.encode("<|turn>model\n")
    assert reasoning.parse("R<channel|>A", open_prompt) == reasoning.parse("<|channel>R<channel|>A")
    assert reasoning.parse("R", open_prompt).reasoning == "R"
    assert reasoning.parse("R", turn_prompt).content == "R"


ARG_TEXTS = [
    "city:" + D + "Tokyo" + D + ",days:3}",
    "filters:{lang:" + D + "ja" + D + ",n:2},query:" + D + "q" + D + "}",
    "items:[1,2.5,[3],{a:" + D + "]" + D + "}]}",
    "x:" + D + "open }  ",
    "x:{n:1}",
    "x:(1))",
    "x:",
    "x:<|",
    "k: 4.,z:true",
    "a:1}b:2",
    "<|\"|>q<|\"|>:" + D + "v" + D,
    ": , :",
    "days:" + D + "7" + D + "}",
]


@pytest.mark.vllm
def test_gemma4_argument_format_matches_vllm_converter(vllm_ref) -> None:
    """The streamed argument string (any split) == vLLM's `_gemma4_arg_converter` followed by
    `_fix_arg_types`, via the same oracle call's tool path on synthetic calls."""
    bundle = _bundle()
    texts = ["<|tool_call>call:get_weather{" + a + "<tool_call|>" for a in ARG_TEXTS]
    out = vllm_family(vllm_ref, tool="gemma4", bundle=bundle, cases=texts, request=OPTIONS)
    tool = _tool(skip_reasoning=True)
    for raw, text, res in zip(ARG_TEXTS, texts, out.results, strict=True):
        theirs = _calls(res["batch"]["tool_calls"])
        assert [(c.name, c.arguments) for c in tool.parse(text, "r").tool_calls] == theirs, raw
        fmt = Gemma4Args(tool.tool_properties("get_weather"))
        for size in (1, 2, 3, 7):
            state, parts = fmt.start("get_weather"), []
            body = raw
            for i in range(0, len(body), size):
                state, piece, _ = fmt.feed(state, body[i : i + size])
                parts.append(piece)
            parts.append(fmt.end(state)[1])
            assert "".join(parts) == theirs[0][1], (raw, size)
