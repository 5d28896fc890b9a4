"""kimi_k3 (vLLM 0.33 KimiK3ToolParser + KimiK3ReasoningParser under vllm/parser/kimi_k3.py).

One oracle call per configuration: the tool parser alone (`extract_tool_calls`) and the
composed KimiK3Parser batch with tool_choice auto / none / required, reasoning alone (with and
without request tools), thinking on and off per case. Then our streams equal our batch on
token, character and random splits (state JSON round-tripped at every boundary), and the state
stays small on a long argument and a long reasoning."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest

from parsers import ChatOptions, ChatParser
from parsers._events import ToolArgsDelta, ToolCallStart
from parsers.reasoning.kimi_k3 import KimiK3ReasoningParser
from parsers.reasoning_tokens import reasoning_token_counter
from parsers.tools.kimi_k3 import KimiK3ToolParser

from ..chunking import ChunkingStats, assert_chunking_invariant, collapse_events, run_split
from ..family_check import REQ, _collapsed, check_chunking
from ..family_oracle import WEATHER_TOOLS, vllm_family
from ..family_tokenizers import family_tokenizer
from .engine_family_support import batch_mismatches, family_cases_for, run_oracle
from .tool_parser_support import stream_args

OP, C, S = "<|open|>", "<|close|>", "<|sep|>"
TO, TC = f"{OP}think{S}", f"{C}think{S}"
RO, RC, MC = f"{OP}response{S}", f"{C}response{S}", f"{C}message{S}"
XO, XC = f"{OP}tools{S}", f"{C}tools{S}"
CALL_END, ARG_END = f"{C}call{S}", f"{C}argument{S}"
OFF = {"thinking": False}
_THINK = re.compile(r"<\|(open|close)\|>\s*think")


def arg(key: str, value: str, kind: str | None = "string") -> str:
    typed = f' type="{kind}"' if kind is not None else ""
    return f'{OP}argument key="{key}"{typed}{S}{value}{ARG_END}'


def call(name: str | None, *args: str, index: int = 1) -> str:
    tool = f'tool="{name}" ' if name is not None else ""
    return f'{OP}call {tool}index="{index}"{S}' + "".join(args) + CALL_END


def tools(*calls: str) -> str:
    return XO + "".join(calls) + XC


W = call("get_weather", arg("city", "Tokyo"))
# Post-reasoning texts (what the tool parser sees), vLLM's test strings first.
TOOL_OWN: dict[str, str] = {
    "vllm:t:message_close": f"Hello{MC}",
    "vllm:t:docstring": RO + "Running it." + RC + tools(call(
        "python", arg("code", "print(1)"), arg("opts", '{"a":1}', "object"))) + MC,
    "own:plain": "Just an answer 😀, no markup.",
    "own:consumed_prefix": f"Hi there.{RC}" + tools(W) + MC,
    "own:ws_in_markers": f"{OP} response {S}Hi{C}\nresponse\n{S}{OP}\ttools {S}{OP} call tool=\"get_weather\"{S}"
                         f"{OP}argument  key=\"city\"{S}Oslo{C} argument{S}{C}call {S}{XC}",
    "own:escaped_attrs": tools(call("a&quot;b&amp;c", arg("k&amp;&quot;", "v"))),
    "own:missing_type": tools(call("search", arg("query", "q", None))),
    "own:typed_values": tools(call("search", arg("n", "1e3", "number"), arg("b", "true", "boolean"),
                                   arg("z", "null", "null"), arg("a", "[1, 2,3]", "array"),
                                   arg("o", '{"x": {"y": [null]}}', "object"), arg("bad", "abc", "number"),
                                   arg("up", "x", "STRING"), arg("ws", " 5 ", "integer"),
                                   arg("nan", "NaN", "number"), arg("u", '"\\u00e9"', "object"))),
    "own:string_escapes": tools(call("search", arg("query", 'say "hi" \\ \n\t\x01 é 東京 😀'))),
    "own:unnamed_call_dropped": tools(call(None, arg("x", "1")), call("", arg("x", "2")), W),
    "own:no_args": tools(call("get_weather")),
    "own:text_between": "Pre " + XO + " junk " + call("get_weather", " b ", arg("city", "A"), " c ")
                        + " mid " + W + " tail" + XC + " after " + tools(W),
    "own:no_tools_close": "x" + XO + W + call("search", arg("query", "q")),
    "own:merged_unclosed_call": tools(f'{OP}call tool="get_weather"{S}' + arg("city", "A")
                                      + call("search", arg("query", "q"))),
    "own:markers_in_value": tools(call("search", arg("query", f"{OP}foo{S} {RO} <|x|> {OP}argument a{S} <|")))
                            + MC,
    "own:empty_key": tools(call("search", arg("", "v"))),
    "own:ws_then_response": f"\n\n{RO}World{RC}" + tools(W),
    "own:rc_then_text": f"A{RC}B",
    "own:response_then_junk": f"{RO}A{RC}junk",
    "own:message_close_mid": f"A{MC}B",
    "own:unclosed_response": f"{RO}A{MC}",
    "own:second_response_open": f"{RO}A{RO}B{RC}",
    "own:unknown_tags": f"{OP}foo{S}a{C}bar{S}b{OP}call{S}c{S}",
    "own:only_ws": " \n ",
    "own:ws_before_tools": "  \n" + tools(W),
    "own:cjk_emoji": RO + "東京 ☀️" + RC + tools(call("get_weather", arg("city", "北京 🌧️\n第二行"))),
    "own:long_value": tools(call("search", arg("query", "lorem ipsum " * 80))),
    "own:attr_variants": tools(f"{OP}call index=\"2\" tool=\"search\" tool=\"get_weather\"{S}{CALL_END}"),
    # Values longer than HOLD_CHARS stream (parsers/tools/_json_value.py)
    "own:long_json_value": tools(call("search", arg("o", json.dumps(
        {"rows": [{"id": i, "name": f"n\u00e9{i}", "ok": i % 2 == 0, "w": i / 4} for i in range(9)]}, indent=1),
        "object"))),
    "own:long_text_value": tools(call("search", arg("o", "def f(x):\n    return {x: [x, 'y']}\n" * 9, "object"))),
    "own:long_value_breaks": tools(call("search", arg("a", "[" + ", ".join(map(str, range(90))) + "] and more",
                                                      "array"))),
    "own:long_value_cut_by_call": tools(call("search", f'{OP}argument key="a" type="array"{S}[' + "1, " * 90)),
    # Divergences (module docstring of parsers/tools/kimi_k3.py)
    "own:truncated_value": RO + "Checking." + RC + XO + f'{OP}call tool="get_weather"{S}' + f'{OP}argument key="city"{S}Pa',
    "own:call_close_in_value": tools(call("search", f'{OP}argument key="query"{S}xx')),
    "own:tools_close_in_call": XO + f'{OP}call tool="get_weather"{S}' + arg("city", "A") + XC,
    "own:repeated_key": tools(call("get_weather", arg("city", "A"), arg("days", "2", "integer"), arg("city", "B"))),
    "own:late_response": f"Hello{RO}World{RC}",
    "own:response_after_tools": "Hi" + tools(W) + f"{RO}Bye{RC}",
    "own:message_close_in_response": f"{RO}A{MC}B{RC}",
}
TOOL_DIVERGENCES = {
    "own:call_close_in_value": "an argument without its close marker is kept (it had streamed)",
    "own:tools_close_in_call": "a call the tools channel cuts is kept (it had streamed)",
    "own:late_response": "content before a late response channel had streamed (vLLM drops it)",
    "own:response_after_tools": "a response channel after the tools channel is not the content",
    "own:message_close_in_response": "<|close|>message<|sep|> inside a closed response is dropped",
    "own:truncated_value": "a call the output cuts is kept (it had streamed)",
    "own:long_value_breaks": "a value over HOLD_CHARS that stops being JSON keeps the canonical text it "
                             "streamed, then its raw text (vLLM: the whole value as a string)",
    "own:long_value_cut_by_call": "a value over HOLD_CHARS cut by its call's end is kept as far as it "
                                  "streamed (vLLM drops the argument)",
    # Without a reasoning parser the think channel is text before the response channel.
    "reasoning_response": "content before a late response channel had streamed (vLLM drops it)",
    "kimi_k3:hostile:duplicated_markers": "content before a late response channel had streamed",
}


def _cut_kept(ours: tuple[str | None, list[tuple[str, str]]], theirs: Any) -> bool:
    """A cut output: ours keeps the call the cut left open (it had streamed); the calls vLLM
    returns come first and equal."""
    return not isinstance(theirs, str) and ours[0] == theirs[0] and ours[1][: len(theirs[1])] == theirs[1]


@pytest.fixture(scope="module")
def bundle():  # noqa: ANN201
    return family_tokenizer("tool", "kimi_k3")


@pytest.fixture(scope="module")
def tool_parser(bundle) -> KimiK3ToolParser:  # noqa: ANN001
    return KimiK3ToolParser(bundle.tokenizer, WEATHER_TOOLS)


@pytest.mark.vllm
def test_kimi_k3_tool_parser_matches_vllm(vllm_ref, bundle, tool_parser) -> None:  # noqa: ANN001
    cases = family_cases_for(["kimi_k3"], TOOL_OWN, max_cuts=12)
    _, results = run_oracle(vllm_ref, "kimi_k3", cases, WEATHER_TOOLS, bundle=bundle)
    bad = batch_mismatches(tool_parser, cases, results, TOOL_DIVERGENCES, cut_divergence=_cut_kept)
    assert not bad, json.dumps(bad, ensure_ascii=False)[:8000]
    # The truncated call is kept where vLLM drops it (the named cut divergence).
    theirs = results["own:truncated_value"]["tool"]["tool_calls"]
    assert theirs == [] and [c.arguments for c in tool_parser.parse(TOOL_OWN["own:truncated_value"], "r").tool_calls] == ['{"city": "Pa"}']


# -- the composed parser ------------------------------------------------------------------------

# Whole model outputs.
CHAT_OWN: dict[str, str] = {
    "think_response": f"{TO}Let me think. 東京{TC}{RO}It is sunny.{RC}{MC}",
    "think_tools": f"{TO}plan{TC}{RO}Checking.{RC}" + tools(W, call("search", arg("query", "q"))) + MC,
    "consumed_think_open": f"reasoning without the open{TC}{RO}A{RC}{MC}",
    "truncated_reasoning": f"{TO}still thinking",
    "response_only": f"{RO}direct answer{RC}{MC}",
    "plain": "no markup at all",
    "ws_then_think": f"  \n{TO}r{TC}c",
    "empty_reasoning": f"{TO}{TC}{RO}x{RC}",
    "ws_reasoning": f"{TO}\n  \n{TC}\n",
    "close_only": TC,
    "partial_close": f"{TO}abc{C}thi",
    "second_think_open": f"{TO}a{TO}b{TC}c",
    "think_close_in_content": f"{TO}a{TC}b{TC}c",
    "tools_in_reasoning": f"{TO}plan {XO}x{TC}{RO}A{RC}",
    "spaced_markers": f"{OP} think {S}r{C} think{S}{OP}response {S}A{C}response{S}",
    "no_response_open_content": f"{TO}r{TC}answer{RC}" + tools(W),
    "long_reasoning": TO + "長い" * 600 + TC + RO + "done" + RC,
    # Divergences (parsers/reasoning/kimi_k3.py)
    "late_think_open": f"x{TO}y{TC}z",
    "text_then_response": f"abc{RO}x{RC}",
    "response_then_think_close": f"{RO}A{TC}B",
    "think_open_after_close": f"a{TC}b{TO}c",
}
_LATE = "text before a late <|open|>think<|sep|> had streamed as reasoning (vLLM drops it)"
_RESP = "reasoning text before a response channel with no think marker (vLLM: all content)"
_REREAD = "vLLM re-reads the whole output around a think marker that comes after the decision"
CHAT_DIVERGENCES = {"late_think_open": _LATE, "text_then_response": _RESP,
                    "response_then_think_close": _REREAD, "think_open_after_close": _REREAD}  # fmt: skip


def _chat(bundle: Any, *, tool: bool, reasoning: bool, choice: Any, request_tools: bool,
          kwargs: dict[str, Any] | None = None) -> ChatParser:
    r_parser = (KimiK3ReasoningParser(bundle.tokenizer, kwargs or {}, special_tokens=bundle.special_tokens,
                                      request_tools=request_tools, tool_choice=choice)
                if reasoning else None)  # fmt: skip
    t_parser = KimiK3ToolParser(bundle.tokenizer, WEATHER_TOOLS if request_tools else []) if tool else None
    return ChatParser(r_parser, t_parser, ChatOptions(tool_choice=choice, enable_auto_tools=True))


# name -> (tool parser, reasoning parser, tool_choice, request tools)
CONFIGS: dict[str, tuple[bool, bool, Any, bool]] = {
    "auto": (True, True, "auto", True),
    "none": (True, True, "none", True),
    "reasoning_only": (False, True, "none", False),
    "reasoning_only_tools": (False, True, "auto", True),
    "tool_only_required": (True, False, "required", True),
}


def _chat_cases() -> dict[str, dict[str, Any]]:
    cases: dict[str, dict[str, Any]] = {}
    for name, text in {**{k: v["text"] for k, v in family_cases_for(["kimi_k3"], {}, max_cuts=8).items()},
                       **CHAT_OWN, **{f"t:{k}": v for k, v in TOOL_OWN.items()}}.items():  # fmt: skip
        cases[name] = {"text": text}
        if not _THINK.search(text):  # thinking off: no think channel is written
            cases["off:" + name] = {"text": text, "chat_template_kwargs": OFF}
    return cases


# Reasoning-side divergences by case (thinking on, a reasoning parser configured).
_REASONING_CASES = {**CHAT_DIVERGENCES, "kimi_k3:hostile:duplicated_markers": _RESP,
                    "t:own:markers_in_value": _RESP, "t:own:response_after_tools": _RESP,
                    "t:own:late_response": _RESP}  # fmt: skip
# Both stages see the text: an earlier stage's divergence changes what the next one reads.
_STAGED = {
    ("none", "off:t:own:markers_in_value"): "a late response channel in the unwrapped content "
                                            "(vLLM drops the tools markup before it)",
    ("tool_only_required", "tools_in_reasoning"): "a response channel after the tools channel is "
                                                  "not the content",
}
# Divergences recognised by their shape, wherever the content rules see the text.
KINDS = {
    "late_response": "content before a late response channel had streamed (vLLM drops it): "
                     "vLLM's content is the end of ours, the rest equal",
    "repeated_key": "a repeated argument key is written twice (the objects are JSON-equal)",
}


def _classify(ours: list[Any], theirs: list[Any]) -> str | None:
    if ours[0] != theirs[0]:
        return None
    if ours[1] == theirs[1] and len(ours[2]) == len(theirs[2]) and ours[2] != theirs[2]:
        same = all(n == m and json.loads(a) == json.loads(b) for (n, a), (m, b) in zip(ours[2], theirs[2]))
        return "repeated_key" if same else None
    if ours[2] == theirs[2] and ours[1] and (ours[1] or "").endswith(theirs[1] or "") and ours[1] != theirs[1]:
        return "late_response"
    return None


def _divergent(config: str, case: str) -> str | None:
    thinking = not case.startswith("off:")
    base = case.removeprefix("off:")
    if (config, case) in _STAGED:
        return _STAGED[(config, case)]
    if CONFIGS[config][1] and thinking and base in _REASONING_CASES:
        return _REASONING_CASES[base]
    tool_case = base.removeprefix("t:")
    # The tool text reaches the tool stage as content: no reasoning (or it ends at once:
    # the text starts with the response channel), calls kept.
    as_content = not (CONFIGS[config][1] and thinking) or TOOL_OWN.get(tool_case, "").startswith(RO)
    # Raw text reaches the tool parser (tool_choice is not "none"): its own divergences.
    calls = ("own:call_close_in_value", "own:tools_close_in_call", "own:truncated_value",
             "own:message_close_in_response", "own:long_value_breaks", "own:long_value_cut_by_call")
    content = ("own:response_after_tools",)
    if as_content and ((config in ("auto", "tool_only_required") and tool_case in calls)
                       or (CONFIGS[config][0] and tool_case in content)):  # fmt: skip
        return TOOL_DIVERGENCES[tool_case]
    return None


@pytest.mark.vllm
@pytest.mark.parametrize("config", list(CONFIGS))
def test_kimi_k3_composed_matches_vllm(vllm_ref, bundle, config: str) -> None:  # noqa: ANN001
    tool, reasoning, choice, request_tools = CONFIGS[config]
    cases = _chat_cases()
    out = vllm_family(vllm_ref, tool="kimi_k3" if tool else None, reasoning="kimi_k3" if reasoning else None,
                      bundle=bundle, cases=list(cases.values()), tools=WEATHER_TOOLS if request_tools else [],
                      request={"tool_choice": choice} if request_tools else {})
    assert not out.infra_errors(), out.infra_errors()
    bad, stale, kinds = {}, [], set()
    for (name, case), res, sent in zip(cases.items(), out.results, out.cases, strict=True):
        chat = _chat(bundle, tool=tool, reasoning=reasoning, choice=choice, request_tools=request_tools,
                     kwargs=case.get("chat_template_kwargs"))  # fmt: skip
        got = chat.parse(case["text"], "r")
        ours = [got.reasoning, got.content, [(c.name, c.arguments) for c in got.tool_calls]]
        assert "batch" in res, (name, res.get("batch_error"))
        batch = res["batch"]
        theirs = [batch["reasoning"], batch["content"], [(c["name"], c["arguments"]) for c in batch["tool_calls"]]]
        if reasoning:  # usage.reasoning_tokens: KimiK3ReasoningParser.count_reasoning_tokens
            counter = reasoning_token_counter(chat.reasoning_parser)  # type: ignore[arg-type]
            ids = [i for _, chunk in sent["chunks"] for i in chunk]
            folded = counter.start(streaming=True)
            for _, chunk in sent["chunks"]:
                folded = counter.fold(folded, chunk)
            counts = (counter.count(ids), counter.finish(folded).count)
            if counts != (batch["reasoning_tokens"],) * 2:
                bad[name + ":reasoning_tokens"] = {"ours": counts, "vllm": batch["reasoning_tokens"]}
        why = _divergent(config, name)
        if why is not None:
            if ours == theirs:
                stale.append(name)
            continue
        if ours == theirs:
            continue
        if ":hostile:cut@" in name and ours[:2] == theirs[:2] and ours[2][: len(theirs[2])] == theirs[2]:
            continue  # a cut call kept (the tool parser's cut divergence)
        kind = _classify(ours, theirs)
        if kind is not None:
            kinds.add(kind)
            continue
        bad[name] = {"text": case["text"], "ours": ours, "vllm": theirs}
    assert not bad, (sorted(bad), json.dumps(bad, ensure_ascii=False)[:3000])
    assert not stale, stale
    assert kinds <= set(KINDS)


# -- streaming --------------------------------------------------------------------------------------

_STREAM_TEXTS = {**CHAT_OWN, **{f"t:{k}": v for k, v in TOOL_OWN.items()}}
_LONG = {"long_reasoning", "t:own:long_value"}


@pytest.mark.parametrize("config", ["auto", "none", "reasoning_only", "tool_only_required"])
def test_kimi_k3_stream_equals_batch(bundle, config: str) -> None:  # noqa: ANN001
    """Token splits (whole, one per chunk, every two-chunk split, random), thinking on; thinking
    off where a content rule differs (the tool stage, the unwrapping)."""
    tool, reasoning, choice, request_tools = CONFIGS[config]
    for kwargs in ({}, OFF) if config in ("auto", "none") else ({},):
        chat = _chat(bundle, tool=tool, reasoning=reasoning, choice=choice, request_tools=request_tools,
                     kwargs=kwargs)  # fmt: skip
        for name, text in _STREAM_TEXTS.items():
            if name not in _LONG and not (kwargs and _THINK.search(text)):
                check_chunking(chat, bundle, text, n_random=2)


def test_kimi_k3_long_and_char_splits(bundle) -> None:  # noqa: ANN001
    """Long outputs: whole, one token per chunk and random splits; a few outputs split by
    character (cuts inside the marker tokens' text)."""
    chat = _chat(bundle, tool=True, reasoning=True, choice="auto", request_tools=True)
    rng = random.Random(0)
    for name in sorted(_LONG):
        text = _STREAM_TEXTS[name]
        pieces = bundle.pieces(text)
        expected = _collapsed(chat.parse(text, REQ))
        for cuts in [(), tuple(range(1, len(pieces)))] + [
                tuple(sorted(rng.sample(range(1, len(pieces)), k))) for k in (3, 40)]:  # fmt: skip
            events = run_split(lambda st, d: chat.feed(st, d, REQ), lambda st: chat.finish(st, REQ),
                               chat.initial_state([]), chat.state_type(), pieces, cuts, ChunkingStats())
            assert collapse_events(events) == expected, (name, cuts[:10])
    for name in ("think_tools", "t:own:ws_in_markers", "t:own:markers_in_value", "partial_close"):
        text = _STREAM_TEXTS[name]
        result = chat.parse(text, REQ)
        assert_chunking_invariant(lambda st, d: chat.feed(st, d, REQ), lambda st: chat.finish(st, REQ),
                                  chat.initial_state([]), chat.state_type(), list(text),
                                  _collapsed(result), n_random=2)


def test_kimi_k3_arguments_stream_incrementally(tool_parser: KimiK3ToolParser) -> None:
    state, events = tool_parser.feed(tool_parser.initial_state(), f'Hi{RC}{XO}{OP}call tool="search"{S}'
                                     f'{OP}argument key="query" type="string"{S}par', "r")
    assert [e.name for e in events if isinstance(e, ToolCallStart)] == ["search"]
    assert "".join(e.text for e in events if isinstance(e, ToolArgsDelta)) == '{"query": "par'
    state, events = tool_parser.feed(state, f'is{C}', "r")
    assert "".join(e.text for e in events if isinstance(e, ToolArgsDelta)) == "is"
    state, events = tool_parser.feed(state, f"argument{S}{CALL_END}", "r")
    assert "".join(e.text for e in events if isinstance(e, ToolArgsDelta)) == '"}'


def test_kimi_k3_state_bounded(bundle) -> None:  # noqa: ANN001
    chat = _chat(bundle, tool=True, reasoning=True, choice="auto", request_tools=True)
    state = chat.initial_state([])
    state, _ = chat.feed(state, TO + "r" * 20000, "r")
    assert len(json.dumps(state.to_json())) < 1500
    state, _ = chat.feed(state, TC + RO + "c" * 20000 + RC + XO + f'{OP}call tool="search"{S}'
                         f'{OP}argument key="query" type="string"{S}' + "q" * 20000, "r")
    assert len(json.dumps(state.to_json())) < 1500
    state, events = chat.feed(state, "tail" + ARG_END + CALL_END, "r")
    assert any(isinstance(e, ToolArgsDelta) and e.text.endswith("}") for e in events)


def test_kimi_k3_object_argument_streams_with_small_state(bundle, tool_parser) -> None:  # noqa: ANN001
    """A ~20k-character object argument, one token per chunk: its JSON streams and the largest
    state stays under 2 KB (the value is never held)."""
    value = {"rows": [{"id": i, "name": f"row {i} \u00e9", "tags": ["a", "b"], "ok": i % 3 == 0}
                      for i in range(200)]}
    text = tools(call("search", arg("o", json.dumps(value, indent=1), "object")))
    assert len(text) > 20000
    args, biggest = stream_args(tool_parser, bundle.pieces(text))
    assert biggest < 2048, biggest
    assert args == tool_parser.parse(text, "r").tool_calls[0].arguments
    assert json.loads(args) == {"o": value}


# -- kimi_k3 reasoning with another family's tool parser (vLLM still builds KimiK3Parser) --------

_HERMES_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
OTHER_TOOL_TEXTS = {
    "call": f"{TO}r{TC}Sure. {_HERMES_CALL}",
    "plain": f"{TO}r{TC}{RO}plain answer{RC}",
    "json_array": f'{TO}r{TC}[{{"name": "get_weather", "parameters": {{"city": "X"}}}}]',
    "blank": f"{TO}r{TC}  ",
    "call_only": f"{TO}r{TC}{_HERMES_CALL}",
}
NAMED = {"type": "function", "function": {"name": "get_weather"}}


@pytest.mark.vllm
@pytest.mark.parametrize("choice", ["auto", "none", "required", "named"])
def test_kimi_k3_reasoning_composes_other_tool_parsers(vllm_ref, bundle, choice: str) -> None:  # noqa: ANN001
    from parsers.registry import get_tool_parser

    tool_choice = NAMED if choice == "named" else choice
    out = vllm_family(vllm_ref, tool="hermes", reasoning="kimi_k3", bundle=bundle, loader="auto",
                      cases=list(OTHER_TOOL_TEXTS.values()), tools=WEATHER_TOOLS,
                      request={"tool_choice": tool_choice})  # fmt: skip
    assert not out.infra_errors(), out.infra_errors()
    r_parser = KimiK3ReasoningParser(bundle.tokenizer, {}, request_tools=True, tool_choice=tool_choice)
    chat = ChatParser(r_parser, get_tool_parser("hermes")(bundle.tokenizer, WEATHER_TOOLS),
                      ChatOptions(tool_choice=tool_choice, enable_auto_tools=True))
    for (name, text), res in zip(OTHER_TOOL_TEXTS.items(), out.results, strict=True):
        got = chat.parse(text, "r")
        batch = res["batch"]
        assert [got.reasoning, got.content, [(c.name, c.arguments) for c in got.tool_calls]] == [
            batch["reasoning"], batch["content"], [(c["name"], c["arguments"]) for c in batch["tool_calls"]]
        ], name
        check_chunking(chat, bundle, text, n_random=1)
