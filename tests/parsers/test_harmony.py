"""gpt-oss (Harmony) derender: `openai_gptoss` + `openai` against vLLM 0.33's HarmonyParser.

One oracle call (`harmony` op of the reference helper) encodes every case with openai_harmony
(realistic outputs rendered from Harmony messages, malformed ones from text with special
tokens), and runs vLLM's `HarmonyParser.parse` + `assemble_chat_message_fields` on the token
ids, under several parser/request configurations. Ours reads the token-aligned decoded text.
Batch must equal vLLM's batch except the named DIVERGENCES; every stream (one token, whole,
random splits, state restored at every boundary) must equal our batch.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from parsers._errors import StateError
from parsers.chat import ChatOptions, ChatParser, ChatState
from parsers.harmony import HarmonyMachine, HarmonyState, parse_header
from parsers.registry import get_reasoning_parser, get_tool_parser

from .chunking import Collapsed, CollapsedCall, assert_chunking_invariant
from .family_oracle import WEATHER_TOOLS
from .tokenizers_util import gpt_oss

RID = "chatcmpl-harmony"
CALL = "commentary to=functions.get_weather"


def _msg(channel: str, content: str, **kw: Any) -> dict[str, Any]:
    return {"role": "assistant", "channel": channel, "content": content, **kw}


def _call(name: str, args: str, ctype: str | None = "<|constrain|>json") -> dict[str, Any]:
    m = _msg("commentary", args, recipient=f"functions.{name}")
    if ctype:
        m["content_type"] = ctype
    return m


A = "<|channel|>analysis<|message|>"
S = "<|start|>assistant"

# name -> case (see the helper's op_harmony): realistic outputs rendered by openai_harmony...
CASES: dict[str, dict[str, Any]] = {
    "reason_then_final": {"messages": [_msg("analysis", "User says hi. Respond politely."),
                                       _msg("final", "Hello! How can I help you today?")]},
    "final_only": {"messages": [_msg("final", "Just the answer: 42.")]},
    "tool_call": {"messages": [_msg("analysis", "Need the weather for Paris."),
                               _call("get_weather", '{"city":"Paris","unit":"c"}')], "end": "call"},
    "preamble_then_call": {"messages": [_msg("analysis", "Check weather."),
                                        _msg("commentary", "Let me look that up."),
                                        _call("get_weather", '{"city": "Tokyo", "days": 3}')],
                           "end": "call"},
    "two_calls": {"messages": [_msg("analysis", "Two lookups."),
                               _call("get_weather", '{"city":"Oslo"}'),
                               _msg("analysis", "Now search."),
                               _call("search", '{"query":"fjords","filters":{"lang":"no"}}')],
                  "end": "call"},
    "unicode": {"messages": [_msg("analysis", "日本語で考える 🤔"),
                             _call("get_weather", '{"city":"東京 🗼","unit":"c"}'),
                             ], "end": "call"},
    "unicode_final": {"messages": [_msg("analysis", "Résumé: naïve café."),
                                   _msg("final", "Voilà 🎉 — 東京")]},
    "json_no_constrain": {"messages": [_call("get_weather", '{"city":"Rome"}', ctype="json")],
                          "end": "call"},
    "no_content_type": {"messages": [_call("get_weather", '{"city":"Lima"}', ctype=None)],
                        "end": "call"},
    "code_content_type": {"messages": [_call("run", "print('hi')", ctype="code")], "end": "call"},
    "empty_args": {"messages": [_call("get_weather", "")], "end": "call"},
    "empty_object": {"messages": [_call("get_weather", "{}")], "end": "call"},
    "nested_long_args": {"messages": [_call("search", json.dumps(
        {"query": "x" * 300, "filters": {"tags": ["a", "b", {"deep": [1, 2.5, None, True]}],
                                         "n": -12e3}}, separators=(",", ":")))], "end": "call"},
    "builtin_browser": {"messages": [_msg("analysis", "Search the web."),
                                     _msg("commentary", '{"query":"vllm"}',
                                          recipient="browser.search", content_type="<|constrain|>json"),
                                     ], "end": "call"},
    "python_tool": {"messages": [_msg("analysis", "compute", recipient="python",
                                      content_type="code")], "end": "call"},
    "bare_recipient": {"messages": [_msg("commentary", '{"tz":"UTC"}', recipient="get_time",
                                         content_type="<|constrain|>json")], "end": "call"},
    "undeclared_tool": {"messages": [_call("launch_rocket", '{"target":"moon"}')], "end": "call"},
    "empty_analysis": {"messages": [_msg("analysis", ""), _msg("final", "ok")]},
    "two_finals": {"messages": [_msg("final", "one"), _msg("final", "two")]},
    "reasoning_after_call_result": {"messages": [
        _msg("analysis", "first"), _msg("analysis", "second"), _msg("final", "done")]},
    "cut_in_final": {"messages": [_msg("analysis", "think"), _msg("final", "A long answer here")],
                     "cut": 3},
    "cut_in_args_canonical": {"messages": [_call("get_weather", '{"city": "Paris", "unit": "c"}')],
                              "cut": 3},
    # ...and malformed ones, as text.
    "plain_text": {"text": "hello world, no Harmony here"},
    "empty": {"text": ""},
    "cut_mid_header": {"text": f"{A}think<|end|>{S}<|channel|>fin"},
    "cut_after_start": {"text": f"{A}think<|end|><|start|>"},
    "unknown_channel": {"text": f"<|channel|>weird<|message|>lost?<|end|>{S}<|channel|>final<|message|>ok"},
    "header_junk": {"text": f"<|channel|>analysis a b c<|message|>dropped<|end|>{S}<|channel|>final<|message|>ok"},
    "empty_channel": {"text": f"<|channel|><|message|>x<|end|>{S}<|channel|>final<|message|>ok"},
    "no_role": {"text": f"{A}t<|end|><|start|><|channel|>final<|message|>z"},
    "unknown_role": {"text": f"{A}t<|end|><|start|>robot<|channel|>final<|message|>z<|end|>{S}<|channel|>final<|message|>y"},
    "unknown_role_to": {"text": f"{A}t<|end|><|start|>robot to=functions.get_weather<|channel|>commentary<|message|>{{}}<|call|>"},
    "user_role": {"text": f"{A}t<|end|><|start|>user<|channel|>final<|message|>u<|end|>{S}<|channel|>final<|message|>a"},
    "text_between": {"text": f"{A}t<|end|>stray text{S}<|channel|>final<|message|>ok"},
    "legacy_header": {"text": f"{A}t<|end|>{S} to=functions.get_weather<|channel|>commentary json<|message|>{{\"city\":\"Bern\"}}<|call|>"},
    "constrain_in_final": {"text": "<|channel|>final <|constrain|>json<|message|>{\"a\": 1}"},
    "constrain_glued": {"text": "<|channel|>commentary to=functions.search<|constrain|>json<|message|>{\"query\":\"q\"}<|call|>"},
    "markers_in_content": {"text": "<|channel|>final<|message|>use <|start|> and <|message|> here"},
    "header_after_start_in_header": {"text": "<|channel|>final<|start|>x<|message|>y"},
    "commentary_other_recipient": {"text": f"{A}t<|end|>{S}<|channel|>commentary to=container.exec json<|message|>{{}}<|call|>"},
    "args_trailing_ws": {"text": "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"X\"}  \n<|call|>"},
    "args_number_root": {"text": "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|> 12 <|call|>"},
    "args_invalid": {"text": "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"X\",}<|call|>"},
    "args_text_after": {"text": "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"X\"} trailing<|call|>"},
    "args_not_json": {"text": "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>city=Paris<|call|>"},
    "cut_in_args_compact": {"text": "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Par"},
    "return_then_more": {"text": "<|channel|>final<|message|>a<|return|><|start|>assistant<|channel|>final<|message|>b"},
    "reserved_token": {"text": "<|channel|>final<|message|>x<|reserved_200010|>y<|endoftext|>"},
}  # fmt: skip

# Where our batch deliberately differs from vLLM's (module docstring of parsers/harmony.py):
# arguments stream canonically, so arguments that stop being JSON keep their canonical text up
# to the fault and the raw text from there (vLLM: the raw text of the whole message).
DIVERGENCES: dict[str, str] = {
    "args_invalid": '{"city": "X",}',  # vLLM: {"city":"X",}
    "args_text_after": '{"city": "X"} trailing',
    "cut_in_args_compact": '{"city": "Par',
}

# Parser/request configurations (each an oracle config and our ChatParser settings).
CONFIGS: dict[str, dict[str, Any]] = {
    "auto": {"request": {"tools": WEATHER_TOOLS, "tool_choice": "auto"}},
    "no_reasoning_out": {"request": {"tools": WEATHER_TOOLS, "tool_choice": "auto",
                                     "include_reasoning": False}},
    "no_tools": {"request": {}},
    "bare_launch": {"tool_parser": None, "request": {"tools": WEATHER_TOOLS, "tool_choice": "auto"}},
    "tool_only": {"reasoning_parser": None, "request": {"tools": WEATHER_TOOLS, "tool_choice": "auto"}},
    "no_auto_tools": {"enable_auto_tools": False,
                      "request": {"tools": WEATHER_TOOLS, "tool_choice": "auto"}},
    "required": {"request": {"tools": WEATHER_TOOLS, "tool_choice": "required"}},
    "named": {"request": {"tools": WEATHER_TOOLS, "tool_choice": {
        "type": "function", "function": {"name": "get_weather"}}}},
    "no_parallel": {"request": {"tools": WEATHER_TOOLS, "tool_choice": "auto",
                                "parallel_tool_calls": False}},
    "choice_none": {"request": {"tools": WEATHER_TOOLS, "tool_choice": "none"}},
}  # fmt: skip


@pytest.fixture(scope="module")
def oracle(vllm_ref) -> dict[str, dict[str, dict[str, Any]]]:
    names = list(CASES)
    configs = [{k: v for k, v in c.items()} for c in CONFIGS.values()]
    out = vllm_ref.call("harmony", tokenizer_dir=str(gpt_oss().directory),
                        cases=[CASES[n] for n in names], configs=configs)
    return {cfg: dict(zip(names, res)) for cfg, res in zip(CONFIGS, out)}


def _parser(config: dict[str, Any]) -> ChatParser:
    request = config.get("request", {})
    reasoning_name = config.get("reasoning_parser", "openai_gptoss")
    tool_name = config.get("tool_parser", "openai")
    reasoning = get_reasoning_parser(reasoning_name)(None) if reasoning_name else None
    tool = get_tool_parser(tool_name)(None, request.get("tools")) if tool_name else None
    tool_choice = request.get("tool_choice", "auto" if request.get("tools") else "none")
    options = ChatOptions(
        tool_choice=tool_choice,
        parallel_tool_calls=request.get("parallel_tool_calls"),
        include_reasoning=request.get("include_reasoning", True),
        enable_auto_tools=config.get("enable_auto_tools", True),
    )
    return ChatParser(reasoning, tool, options)


def _ours(parser: ChatParser, text: str) -> dict[str, Any]:
    got = parser.parse(text, RID)
    return {"reasoning": got.reasoning, "content": got.content,
            "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in got.tool_calls]}


def _theirs(batch: dict[str, Any]) -> dict[str, Any]:
    return {"reasoning": batch["reasoning"], "content": batch["content"],
            "tool_calls": [{"name": c["name"], "arguments": c["arguments"]}
                           for c in batch["tool_calls"]]}


def test_oracle_ran_every_case(oracle) -> None:
    for cfg, results in oracle.items():
        for name, res in results.items():
            assert "batch" in res, (cfg, name, res.get("batch_error"))
    # The realistic cases really are Harmony: the tokenizer's ids are openai_harmony's.
    tok = gpt_oss()
    for name, res in oracle["auto"].items():
        assert tok.encode("".join(res["pieces"])) == res["ids"] or "<|" in "".join(res["pieces"]), name


@pytest.mark.parametrize("cfg", list(CONFIGS))
def test_batch_equals_vllm(oracle, cfg: str) -> None:
    parser = _parser(CONFIGS[cfg])
    mismatches = []
    for name, res in oracle[cfg].items():
        ours, theirs = _ours(parser, "".join(res["pieces"])), _theirs(res["batch"])
        if name in DIVERGENCES and theirs["tool_calls"]:
            # vLLM keeps the raw text; ours the canonical prefix then the raw rest.
            assert [c["arguments"] for c in ours["tool_calls"]] == [DIVERGENCES[name]], name
            for call in theirs["tool_calls"]:
                call["arguments"] = DIVERGENCES[name]
        if ours != theirs:
            mismatches.append((name, ours, theirs))
    assert not mismatches, "\n".join(f"{n}:\n  ours   {o}\n  vllm   {t}" for n, o, t in mismatches)


def test_divergences_are_real(oracle) -> None:
    """Each named divergence is one: vLLM's raw-text arguments differ from ours."""
    parser = _parser(CONFIGS["auto"])
    for name in DIVERGENCES:
        res = oracle["auto"][name]
        theirs = [c["arguments"] for c in res["batch"]["tool_calls"]]
        ours = [c.arguments for c in parser.parse("".join(res["pieces"]), RID).tool_calls]
        assert theirs and ours and theirs != ours, name
        assert ours == [DIVERGENCES[name]], name
    # A truncated call whose text was canonical anyway is equal (checked in the batch test).
    assert "cut_in_args_canonical" not in DIVERGENCES


def _collapsed(parser: ChatParser, text: str) -> Collapsed:
    got = parser.parse(text, RID)
    return Collapsed(
        reasoning=got.reasoning or "", content=got.content or "",
        tool_calls=tuple(CollapsedCall(i, c.id, c.name, c.arguments)
                         for i, c in enumerate(got.tool_calls)),
    )


@pytest.mark.parametrize("cfg", ["auto", "no_reasoning_out", "bare_launch", "no_parallel"])
def test_stream_equals_batch_every_split(oracle, cfg: str) -> None:
    parser = _parser(CONFIGS[cfg])
    for name, res in oracle[cfg].items():
        pieces = res["pieces"] or [""]
        stats = assert_chunking_invariant(
            feed_fn=lambda st, text: parser.feed(st, text, RID),
            finish_fn=lambda st: parser.finish(st, RID),
            initial_state=parser.initial_state(),
            state_type=ChatState,
            pieces=pieces,
            expected=_collapsed(parser, "".join(pieces)),
            n_random=12,
            seed=len(name),
        )
        assert stats.max_state_bytes < 2048, (name, stats.max_state_bytes)


def test_state_stays_small_on_a_long_output() -> None:
    """The state never holds emitted text: a 4,000-token-sized output keeps it tiny."""
    parser = _parser(CONFIGS["auto"])
    body = "Reasoning step, considering options. " * 400
    args = json.dumps({"city": "Paris " * 300})
    text = f"{A}{body}<|end|>{S}<|channel|>final<|message|>{body}<|end|>{S}<|channel|>{CALL} <|constrain|>json<|message|>{args}"
    state, largest = parser.initial_state(), 0
    for i in range(0, len(text), 7):
        state, _ = parser.feed(state, text[i : i + 7], RID)
        largest = max(largest, len(json.dumps(state.to_json())))
    assert largest < 1500, largest


def test_header_is_openai_harmonys() -> None:
    h = parse_header("<|channel|>commentary to=functions.f <|constrain|>json", True)
    assert (h.role, h.recipient, h.channel, h.content_type) == (
        "assistant", "functions.f", "commentary", "<|constrain|>json")
    with pytest.raises(ValueError):
        parse_header("<|channel|>final", False)  # no role after <|start|>


def test_restored_state_is_checked() -> None:
    machine = HarmonyMachine()
    good = machine.initial_state().to_json()
    with pytest.raises(StateError):
        HarmonyState.from_json({**good, "phase": "nowhere"})
    with pytest.raises(StateError):
        HarmonyState.from_json({**good, "head": "x" * 5000})
    parser = _parser(CONFIGS["auto"])
    with pytest.raises(StateError):
        parser.feed(ChatState.from_json({**parser.initial_state().to_json(), "tool": None}), "x", RID)


def test_harmony_pairs_only_with_harmony() -> None:
    from parsers._errors import ParserConfigError

    with pytest.raises(ParserConfigError):
        ChatParser(get_reasoning_parser("qwen3")(gpt_oss().tokenizer), get_tool_parser("openai")(None),
                   ChatOptions(enable_auto_tools=True))


@pytest.mark.parametrize("prefix", ["", "<|channel|>final<|message|>", "<|channel|>final<|message|>x<|end|>",
                                    "<|channel|>commentary to=functions.f<|message|>{\"a\":", "x" * 5000])
def test_every_phase_and_token_kind_is_handled(prefix: str) -> None:
    """The table is total: every marker, text and the end, in every phase (HEAD, BODY,
    IDLE, a call's arguments, RAW), streams to the batch result."""
    from parsers.harmony import LEXER, PHASES, TABLE

    assert {phase for phase, _ in TABLE} == set(PHASES)
    parser = _parser(CONFIGS["auto"])
    for kind in (*LEXER.markers, "text", "<|channel|>", ""):
        text = prefix + kind + "tail"
        pieces = [prefix, kind, "tail"]
        assert_chunking_invariant(
            feed_fn=lambda st, t: parser.feed(st, t, RID), finish_fn=lambda st: parser.finish(st, RID),
            initial_state=parser.initial_state(), state_type=ChatState, pieces=pieces,
            expected=_collapsed(parser, text), n_random=2,
        )


def test_reasoning_tokens_equal_vllms(oracle) -> None:
    """usage reasoning_tokens (the gateway): HarmonyParser.count_reasoning_tokens on every case,
    batch and folded one token at a time."""
    from parsers.reasoning_tokens import reasoning_token_counter

    tok = gpt_oss()
    counter = reasoning_token_counter(get_reasoning_parser("openai_gptoss")(tok.tokenizer))
    counts = {name: res["reasoning_tokens"] for name, res in oracle["auto"].items()}
    assert counts["tool_call"] > 0 and counts["python_tool"] > 0 and counts["final_only"] == 0
    for name, res in oracle["auto"].items():
        ids = res["ids"]
        assert counter.count(ids) == res["reasoning_tokens"], name
        state = counter.start(streaming=True)
        for token_id in ids:
            state = counter.fold(type(state).from_json(json.loads(json.dumps(state.to_json()))), [token_id])
        assert counter.finish(state).count == res["reasoning_tokens"], name
