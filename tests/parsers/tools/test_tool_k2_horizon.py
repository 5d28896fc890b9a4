"""k2_horizon tool calls (xml, xml_typed, json formats) with the k2_horizon reasoning parser:
split invariance, and one batched differential call against vLLM 0.33's K2HorizonToolParser
per format (tool parser alone and composed with reasoning) on the corpus, hostile variants
and hand-written cases."""

from __future__ import annotations

from typing import Any

import pytest

from parsers import ChatOptions, ChatParser
from parsers._errors import ParserConfigError
from parsers._events import ToolArgsDelta
from parsers.reasoning.k2_horizon import K2HorizonReasoningParser
from parsers.tools.k2_horizon import K2HorizonToolParser

from ..chunking import Collapsed, CollapsedCall, assert_chunking_invariant
from ..family_corpus import corpus_entries, family_markers, hostile_variants
from ..family_oracle import WEATHER_TOOLS, vllm_family
from ..family_tokenizers import family_tokenizer, token_chunks
from .tool_parser_support import assert_split_invariant, stream_long_value

G, GE, C, CE = "<ifm|tool_calls>", "</ifm|tool_calls>", "<ifm|tool_call>", "</ifm|tool_call>"


def arg(key: str, value: str, typ: str | None = None) -> str:
    t = f"<ifm|arg_type>{typ}</ifm|arg_type>" if typ is not None else ""
    return f"<ifm|arg_key>{key}</ifm|arg_key>{t}<ifm|arg_value>{value}</ifm|arg_value>"


def grp(*calls: str) -> str:
    return G + "".join(calls) + GE


W = f"{C}get_weather{arg('city', '東京')}{arg('days', ' 3 ')}{CE}"
WT = f"{C}get_weather{arg('city', '東京', 'string')}{arg('days', '3', 'integer')}{CE}"
WJ = C + '{"name": "get_weather", "arguments": {"city": "東京", "days": "3"}}' + CE
OWN: dict[str, str] = {
    "plain": "Just an answer 😀.",
    "xml_call": "Sure. " + grp(W) + " Done.",
    "xml_two_calls": grp(W, "\n", C + "search" + arg("query", "a b") + arg("filters", '{"x": [1]}') + CE),
    "typed_call": grp(WT),
    "typed_any": grp(f"{C}search{arg('query', ' q ', 'any')}{CE}"),
    "json_call": grp(WJ),
    "json_nan": grp(C + '{"name": "search", "arguments": {"filters": NaN}}' + CE),
    "json_args_not_object": grp(C + '{"name": "search", "arguments": [1]}' + CE),
    "no_args": grp(f"{C}get_weather{CE}"),
    "unknown_tool": grp(f"{C}nope{arg('a', '1')}{CE}"),
    "name_with_space": grp(f"{C}get weather{CE}"),
    "duplicate_arg": grp(f"{C}get_weather{arg('city', 'a')}{arg('city', 'b')}{CE}"),
    "garbage_between_args": grp(f"{C}get_weather{arg('city', 'a')} x {arg('days', '1')}{CE}"),
    "garbage_in_group": grp(W, " junk"),
    "unclosed_group": "Hi " + G + W,
    "unclosed_call": grp(f"{C}get_weather{arg('city', 'a')}"),
    "empty_group": "x " + grp(),
    "second_group_is_content": grp(W) + " and " + grp(W),
    "whitespace_only_content": "  \n" + grp(W) + "\n",
    "markers_in_content": f"Use {GE} and {C} here.",
    "reasoning_call": "<ifm|think>Need 東京 weather.</ifm|think>" + grp(W),
    "reasoning_implicit": "Need it." + grp(W),
    "reasoning_content": "<ifm|think>R</ifm|think>\n\nIt is sunny.",
    # faults after a call streamed (vLLM's batch takes the whole group back)
    "unknown_second_tool": grp(W, f"{C}nope{arg('a', '1')}{CE}"),
    "type_tag_after_call": grp(W, f"{C}search{arg('query', 'q', 'string')}{CE}"),
    "nan_after_call": grp(WT, f"{C}search{arg('query', 'q', 'string')}{arg('extra', 'NaN', 'number')}{CE}"),
    "typed_missing_after_call": grp(WT, f"{C}search{arg('query', 'q')}{CE}"),
    "call_end_in_value": grp(f"{C}search{arg('query', 'a b')}{arg('filters', 'x')}".replace("x</ifm|arg_value>", f"x{CE}")),
    "second_call_name_cut": grp(W) [: -len(GE)] + f"{C}get_wea",
    # the lazy key regex: a `</ifm|arg_key>` not followed by a value runs the key on
    "key_runs_on": grp(f"{C}search<ifm|arg_key>query</ifm|arg_key> x </ifm|arg_key><ifm|arg_value>v</ifm|arg_value>{CE}"),
    "ws_gaps": grp(f"{C} search \n<ifm|arg_key> query </ifm|arg_key>\n<ifm|arg_value> v </ifm|arg_value>\n{CE}\n"),
    "typed_gaps": grp(f"{C}search<ifm|arg_key>query</ifm|arg_key> <ifm|arg_type> string </ifm|arg_type>\n"
                      f"<ifm|arg_value> v </ifm|arg_value>{CE}"),
    "long_string_value": grp(f"{C}search{arg('query', 'lorem ipsum ' * 80)}{arg('filters', '{}')}{CE}"),
}
# A call that streamed stays a call (README "Known differences"): where later text makes
# vLLM's batch take the group back, ours keeps the calls sent, the open call keeps what it
# has, and the text from the fault on is content. Per format: {case: why}.
_AFTER_CALL = {
    "duplicate_arg": "a repeated key after the call was sent",
    "garbage_between_args": "text between pairs after the call was sent",
    "garbage_in_group": "text after a call in the group",
    "unclosed_group": "the output ends before the group's end",
    "unclosed_call": "the output ends inside a sent call",
    "unknown_second_tool": "an unknown tool after a call was sent",
    "call_end_in_value": "the call ends inside a value after the call was sent",
    "second_call_name_cut": "the output ends inside a second call",
}
DIVERGENCES: dict[str, dict[str, str]] = {
    "xml": {**_AFTER_CALL, "type_tag_after_call": "a type tag after a call was sent"},
    "xml_typed": {"typed_missing_after_call": "a pair without its type after a call was sent"},
    "json": {},
}
FORMATS = ("xml", "xml_typed", "json")


def _cases() -> dict[str, dict[str, Any]]:
    cases: dict[str, dict[str, Any]] = {}
    entries = corpus_entries("tool", "k2_horizon")
    for entry in entries:
        cases[entry["name"]] = entry
    markers = family_markers("tool", "k2_horizon")
    for entry in entries[:2]:
        for key, text in hostile_variants(entry["text"], markers, max_cuts=16).items():
            cases[f"{entry['name']}|{key}"] = {"text": text}
    for name, text in OWN.items():
        cases[name] = {"text": text}
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def bundle() -> Any:
    return family_tokenizer("tool", "k2_horizon")


def _tool(bundle: Any, fmt: str) -> K2HorizonToolParser:
    return K2HorizonToolParser(bundle.tokenizer, WEATHER_TOOLS, chat_template_kwargs={"tool_call_format": fmt})


def _chat(bundle: Any, fmt: str) -> ChatParser:
    reasoning = K2HorizonReasoningParser(bundle.tokenizer, {}, special_tokens=bundle.special_tokens)
    return ChatParser(reasoning, _tool(bundle, fmt), ChatOptions(tool_choice="auto", enable_auto_tools=True))


def compare(fmt: str, oracle: dict[str, dict[str, Any]], bundle: Any) -> list[str]:
    tool, chat = _tool(bundle, fmt), _chat(bundle, fmt)
    errors, diverged = [], set()
    for name, case in CASES.items():
        res, text = oracle[name], case["text"]
        failed = [f"{k}: {v}" for k, v in res.items() if k.endswith("_error")]
        if failed:
            errors.append(f"{name}: vLLM raised {failed}")
            continue
        ours = tool.parse(text, "r")
        mine = (ours.content, [(c.name, c.arguments) for c in ours.tool_calls])
        theirs = (res["tool"]["content"], [(c["name"], c["arguments"]) for c in res["tool"]["tool_calls"]])
        if mine != theirs and (name in DIVERGENCES[fmt] or ("|cut@" in name and mine[1] and not theirs[1])):
            diverged.add(name)  # named above, or a cut group that kept its calls
            continue
        if mine != theirs:
            errors.append(f"tool {name}: ours {mine} != vLLM {theirs}")
        composed = chat.parse(text, "r")
        mine_c = (composed.reasoning, composed.content, [(c.name, c.arguments) for c in composed.tool_calls])
        batch = res["batch"]
        theirs_c = (batch["reasoning"], batch["content"], [(c["name"], c["arguments"]) for c in batch["tool_calls"]])
        if mine_c != theirs_c:
            errors.append(f"composed {name}: ours {mine_c} != vLLM {theirs_c}")
    errors += [f"{name}: named divergence does not diverge" for name in set(DIVERGENCES[fmt]) - diverged]
    return errors


@pytest.mark.vllm
@pytest.mark.parametrize("fmt", FORMATS)
def test_k2_horizon_matches_vllm(vllm_ref: Any, bundle: Any, fmt: str) -> None:
    out = vllm_family(vllm_ref, tool="k2_horizon", reasoning="k2_horizon", bundle=bundle,
                      cases=list(CASES.values()), chat_template_kwargs={"tool_call_format": fmt})  # fmt: skip
    assert not out.infra_errors(), out.infra_errors()
    oracle = dict(zip(CASES, out.results, strict=True))
    called = {"xml": "xml_call", "xml_typed": "typed_call", "json": "json_call"}[fmt]
    assert oracle[called]["tool"]["tool_calls"], "the format's own call must be a call in vLLM"
    errors = compare(fmt, oracle, bundle)
    assert not errors, f"{len(errors)} errors:\n" + "\n".join(e[:600] for e in errors[:30])


@pytest.mark.parametrize("name", sorted(OWN))
def test_k2_horizon_tool_split_invariant(bundle: Any, name: str) -> None:
    text = OWN[name]
    for fmt in FORMATS:
        assert_split_invariant(_tool(bundle, fmt), text, token_chunks(bundle, text, merge_incomplete=True))


@pytest.mark.parametrize("name", ["reasoning_call", "reasoning_implicit", "reasoning_content", "xml_call"])
def test_k2_horizon_composed_split_invariant(bundle: Any, name: str) -> None:
    parser, text = _chat(bundle, "xml"), OWN[name]
    ours = parser.parse(text, "req")
    expected = Collapsed(ours.reasoning or "", ours.content or "", tuple(
        CollapsedCall(i, c.id, c.name, c.arguments) for i, c in enumerate(ours.tool_calls)))  # fmt: skip
    assert_chunking_invariant(
        feed_fn=lambda state, delta: parser.feed(state, delta, "req"),
        finish_fn=lambda state: parser.finish(state, "req"),
        initial_state=parser.initial_state(), state_type=parser.state_type(),
        pieces=[p for p, _ in token_chunks(bundle, text, merge_incomplete=True)], expected=expected,
    )


def test_k2_horizon_calls_stream_a_pair_at_a_time(bundle: Any) -> None:
    parser = _tool(bundle, "xml")
    state, events = parser.feed(parser.initial_state(), "Hi " + G + C + "get_weather<ifm|arg_key>city", "r")
    assert [type(e).__name__ for e in events] == ["ContentDelta"]  # the first pair may still break
    state, events = parser.feed(state, "</ifm|arg_key><ifm|arg_value>東", "r")
    assert [(type(e).__name__, getattr(e, "text", None)) for e in events] == [
        ("ToolCallStart", None), ("ToolArgsDelta", '{"city": "東')]  # fmt: skip
    state, events = parser.feed(state, "京</ifm|arg_value>" + arg("days", " 3 "), "r")
    assert [e.text for e in events] == ['京", "days": 3']
    state, events = parser.feed(state, CE + GE + " ok", "r")
    assert [e.text for e in events] == ["}", " ok"]
    with pytest.raises(ParserConfigError):
        K2HorizonToolParser(bundle.tokenizer, [], chat_template_kwargs={"tool_call_format": "yaml"})


@pytest.mark.parametrize("fmt", ["xml", "xml_typed"])
def test_k2_horizon_long_value_streams_with_bounded_state(bundle: Any, fmt: str) -> None:
    parser = _tool(bundle, fmt)
    typed = "<ifm|arg_type>string</ifm|arg_type>" if fmt == "xml_typed" else ""
    head = G + C + "search<ifm|arg_key>query</ifm|arg_key>" + typed + "<ifm|arg_value>"
    pieces = ("lorem ", "ipsum <", "/ifm|arg_ ", "\n", "x") * 4000  # 20k+ characters
    state, largest, sent = stream_long_value(parser, head, pieces)
    assert largest < 2048 and sent > 20000
    state, events = parser.feed(state, "</ifm|arg_value>" + CE + GE, "r")
    assert "".join(e.text for e in events if isinstance(e, ToolArgsDelta)) == '"}'
