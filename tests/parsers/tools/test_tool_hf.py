"""hf / beam (vLLM 0.33 ResponseTemplateParser / BeamParser, driven by the checkpoint's
`response_template`; here Gemma 4's): composed batch == vLLM's on the Gemma 4 corpus, hostile
variants and our own cases (one oracle call per module), except the named divergences of a
streamed call; stream == batch on every split, with a bounded state."""

from __future__ import annotations

import json
from typing import Any

import pytest

from parsers.chat import ChatOptions, ChatParser
from parsers.registry import get_reasoning_parser, get_tool_parser

from ..family_run import (
    assert_batches_match,
    assert_streams_match_batch,
    family_run,
    our_batch,
    vllm_batch,
)
from ..family_tokenizers import GEMMA4_RESPONSE_TEMPLATE

pytestmark = pytest.mark.vllm

D = '<|"|>'
W = "<|tool_call>call:get_weather{city:" + D + "Tokyo" + D + ",days:3}<tool_call|>"
S = "<|tool_call>call:search{query:" + D + 'say "hi" 東京 😀' + D + ",n:2}<tool_call|>"
ALARM = "<|tool_call>call:set_alarm{hour:7,label:" + D + "morning" + D + "}<tool_call|>"
OWN: dict[str, str] = {
    "own:call_then_text": W + "Done, anything else?",
    "own:two_calls": W + S,
    "own:reasoning_then_call": "<|channel>thought\nNeed the weather.  \n<channel|>" + W,
    "own:call_inside_reasoning": "<|channel>thought\nR " + W + " after",
    "own:two_channels": "<|channel>thought\nA<channel|>mid<|channel>thought\nB<channel|>end",
    "own:truncated_in_string": "Checking.\n<|tool_call>call:get_weather{city:" + D + "Tok",
    "own:truncated_closed_json": "<|tool_call>call:get_weather{days:3}",
    "own:truncated_name": "<|tool_call>call:get_wea",
    "own:bad_json": "<|tool_call>call:get_weather{days:3,,}<tool_call|>after",
    "own:string_days": "<|tool_call>call:get_weather{days:" + D + "4" + D + "}<tool_call|>",
    "own:turn_end": "Answer.<turn|>",
    "own:after_turn_end": "Answer.<turn|>more text",
    "own:tool_response": W + "<|tool_response>",
    "own:eos": "Answer.<eos>",
    "own:partial_closer_at_end": "<|channel>thought\nR<channel",
    "own:sentinel": "<|tool_call>call:get_weather{city:" + D + "a\x01b" + D + "}<tool_call|>",
    "own:not_a_dict": "<|tool_call>call:get_weather[1,2]<tool_call|>",
    "own:nested_keys": "<|tool_call>call:search{filters:{lang:" + D + "ja" + D + "}}<tool_call|>",
    "own:ws_only": "  \n",
    # vLLM's tests/parser/test_response_template.py strings
    "vllm:content": "Hello<turn|>",
    "vllm:reasoning": "<|channel>thought\nplan<channel|>The answer is 42.<turn|>",
    "vllm:tool": "<|channel>thought\nplan<channel|>" + ALARM,
    "vllm:content_then_tool": "Let me check." + ALARM,
    "vllm:multiple_tools": "<|tool_call>call:get_weather{city:" + D + "Paris" + D + ",unit:" + D
                           + "celsius" + D + "}<tool_call|>" + ALARM,
    "vllm:nested_arguments": "<|tool_call>call:complex_function{nested:{inner:" + D + "value" + D
                             + "},list:[" + D + "a" + D + "," + D + "b" + D + "]}<tool_call|>",
    "vllm:nullable": "<|tool_call>call:configure{enabled:false,ratio:5.0,label:null,value:null}<tool_call|>",
    "vllm:hyphen_name": "<|tool_call>call:get-weather{city:" + D + "Oslo" + D + "}<tool_call|>",
    "own:empty": "",
    # the streamed dialect: root values, schema coercion, whitespace, duplicates
    "own:string_root": "<|tool_call>call:get_weather" + D + "raw args" + D + "<tool_call|>",
    "own:empty_string_root": "<|tool_call>call:get_weather" + D + D + "<tool_call|>",
    "own:number_root": "<|tool_call>call:get_weather 42 <tool_call|>",
    "own:null_root": "<|tool_call>call:get_weather null<tool_call|>",
    "own:array_root": "<|tool_call>call:get_weather[1,{a:2}]<tool_call|>",
    "own:coerced_list": "<|tool_call>call:get_weather{days:[" + D + "1" + D + ",2," + D + "x" + D
                        + "],unit:" + D + "7" + D + "}<tool_call|>",
    "own:coerced_bool_like": "<|tool_call>call:get_weather{days:" + D + "3.0" + D + "}<tool_call|>",
    "own:quoted_json": '<|tool_call>call:get_weather{"city":"To\\"kyo \\u6771","days":"5"}<tool_call|>',
    "own:ws_after_value": "<|tool_call>call:get_weather{city:" + D + "x" + D + "}\n <tool_call|>",
    "own:nested_floats": "<|tool_call>call:search{filters:{a:[1.5e3,-0,true]},query:" + D + "q" + D
                         + "}<tool_call|>",
    "own:unicode_key": "<|tool_call>call:search{東京:1}<tool_call|>",
    "own:empty_object": "<|tool_call>call:get_weather{}<tool_call|>",
    "own:empty_body": "<|tool_call>call:get_weather<tool_call|>",
    "own:delim_in_key": "<|tool_call>call:search{" + D + "query" + D + ":" + D + "q" + D + "}<tool_call|>",
    # a call that streamed stays a call (README "Known differences")
    "own:space_before_key": "<|tool_call>call:get_weather{ city:" + D + "x" + D + "}<tool_call|>",
    "own:comma_key_in_string": '<|tool_call>call:get_weather{city:"a,b:c"}<tool_call|>',
    "own:garbage_after_value": "<|tool_call>call:get_weather{days:3} x<tool_call|>",
    "own:duplicate_key": "<|tool_call>call:get_weather{city:" + D + "A" + D + ",days:2,city:" + D
                         + "B" + D + "}<tool_call|>",
}

# Kinds of difference from vLLM's batch (`_classify`), each a case above or a hostile cut.
DIVERGENCES: dict[str, str] = {
    "kept_call": "a call that streamed stays a call: cut by the end of the output "
                 "(own:truncated_in_string) or broken after it started (own:bad_json, "
                 "own:sentinel, own:space_before_key, own:comma_key_in_string, "
                 "own:garbage_after_value), vLLM drops the region",
    "duplicate_key": "a repeated key is written twice (JSON-equal to vLLM's object)",
}
KEPT = {"own:truncated_in_string", "own:bad_json", "own:sentinel", "own:space_before_key",
        "own:comma_key_in_string", "own:garbage_after_value"}


def _classify(theirs: dict[str, Any], mine: dict[str, Any]) -> set[str]:
    """The documented kinds explaining a difference: our calls are vLLM's in order, plus
    calls vLLM dropped, or JSON-equal ones written with a repeated key."""
    if (theirs["reasoning"], theirs["content"]) != (mine["reasoning"], mine["content"]):
        return set()
    kinds, pending = set(), list(theirs["tool_calls"])
    for name, arguments in mine["tool_calls"]:
        if pending and pending[0] == (name, arguments):
            pending.pop(0)
        elif pending and pending[0][0] == name and _loads(arguments) == _loads(pending[0][1]):
            pending.pop(0)
            kinds.add("duplicate_key")
        else:
            kinds.add("kept_call")
    return set() if pending else kinds


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _ours(run: Any, tool: str | None, reasoning: str | None) -> ChatParser:
    kwargs = {"response_template": GEMMA4_RESPONSE_TEMPLATE}
    r = (get_reasoning_parser(reasoning)(run.bundle.tokenizer, run.chat_template_kwargs,
                                         special_tokens=run.bundle.special_tokens, **kwargs)
         if reasoning else None)
    t = get_tool_parser(tool)(run.bundle.tokenizer, run.tools, **kwargs) if tool else None
    return ChatParser(r, t, ChatOptions(tool_choice="auto", enable_auto_tools=True))


# Both parsers; the tool parser alone (thinking is content, its markers dropped); the
# reasoning parser alone (tool regions are content verbatim).
@pytest.fixture(scope="module", params=[("hf", "hf"), ("beam", "beam"), ("hf", None), (None, "hf")],
                ids=["hf", "beam", "hf_tool_only", "hf_reasoning_only"])
def run(request, vllm_ref):
    tool, reasoning = request.param
    out = family_run(vllm_ref, tool=tool, reasoning=reasoning, extra=OWN)
    out.parser = lambda: _ours(out, tool, reasoning)  # type: ignore[method-assign]
    return out


def test_batch_matches_vllm(run):
    assert run.construct == {"tool": None, "reasoning": None, "composed": None}
    if run.tool is None:  # the reasoning parser passes tool regions on verbatim
        assert assert_batches_match(run) > 30
        return
    assert assert_batches_match(run, DIVERGENCES, _classify) > 30
    for name in KEPT:  # each named case really is one
        assert _classify(vllm_batch(run, name), our_batch(run, name)) == {"kept_call"}, name
    assert _classify(vllm_batch(run, "own:duplicate_key"),
                     our_batch(run, "own:duplicate_key")) == {"duplicate_key"}


def test_stream_equals_batch_on_every_split(run):
    assert_streams_match_batch(run)


def test_template_from_tokenizer_config():
    """The service reads the metadata off the transformers tokenizer, as vLLM does."""
    from transformers import AutoTokenizer

    from parsers import ParserConfigError
    from parsers.response_template import template_of

    from ..family_tokenizers import family_tokenizer

    bundle = family_tokenizer("tool", "hf")
    assert template_of(AutoTokenizer.from_pretrained(str(bundle.directory))) == GEMMA4_RESPONSE_TEMPLATE
    with pytest.raises(ParserConfigError, match="response_template"):
        get_tool_parser("hf")(bundle.tokenizer, [])
    with pytest.raises(ParserConfigError, match="thinking"):
        get_reasoning_parser("beam")(bundle.tokenizer, response_template={
            **GEMMA4_RESPONSE_TEMPLATE, "fields": {"content": {}}})


def _max_state_one_token_per_chunk(chat: ChatParser, bundle: Any, text: str) -> tuple[int, Any]:
    """Largest serialized state streaming `text` one token per chunk (state JSON
    round-tripped at every chunk), and the collapsed stream."""
    from parsers.detokenizer import IncrementalDetokenizer

    from ..chunking import collapse_events

    detok = IncrementalDetokenizer(bundle.tokenizer, bundle.special_ids, skip_special_tokens=False)
    d_state, state, events, largest, seen = detok.initial_state(), chat.initial_state(), [], 0, ""
    for token_id in bundle.encode(text):
        d_state, piece = detok.feed(d_state, [token_id])
        state = chat.state_type().from_json(json.loads(json.dumps(state.to_json())))
        state, out = chat.feed(state, piece, "r")
        seen += piece
        events += out
        largest = max(largest, len(json.dumps(state.to_json(), ensure_ascii=False).encode()))
    _, out = chat.finish(state, "r")
    assert seen == text
    return largest, collapse_events(events + out)


class _Run:
    def __init__(self, bundle: Any) -> None:
        self.bundle, self.tools, self.chat_template_kwargs = bundle, None, {}


def test_state_bounded_over_long_argument_and_reasoning():
    """A ~20k-character argument and a ~20k-character reasoning, one token per chunk: the
    largest state stays under 2 KB (no call body or reasoning text is kept)."""
    from ..family_oracle import WEATHER_TOOLS
    from ..family_tokenizers import family_tokenizer

    bundle = family_tokenizer("tool", "hf")
    run = _Run(bundle)
    run.tools = WEATHER_TOOLS
    words = ("the forecast for 東京 says rain, then sun 😀 and wind; " * 400)[:20_000]
    long_call = "<|tool_call>call:search{query:" + D + words + D + ",filters:{n:2}}<tool_call|>"
    largest, got = _max_state_one_token_per_chunk(_ours(run, "hf", "hf"), bundle, long_call)
    assert largest < 2048, largest
    assert [json.loads(c.arguments) for c in got.tool_calls] == [{"query": words, "filters": {"n": 2}}]
    long_reasoning = "<|channel>thought\n" + words + "<channel|>Done." + ALARM
    for tool in ("hf", None):
        largest, got = _max_state_one_token_per_chunk(_ours(run, tool, "hf"), bundle, long_reasoning)
        assert largest < 2048, (tool, largest)
        assert got.reasoning == words
