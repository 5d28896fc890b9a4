"""hf / beam (vLLM 0.33 ResponseTemplateParser / BeamParser, driven by the checkpoint's
`response_template`; here Gemma 4's): composed batch == vLLM's on the Gemma 4 corpus, hostile
variants and our own cases (one oracle call per module), and stream == batch on every split."""

from __future__ import annotations

from typing import Any

import pytest

from parsers.chat import ChatOptions, ChatParser
from parsers.registry import get_reasoning_parser, get_tool_parser

from ..family_run import assert_batches_match, assert_streams_match_batch, family_run
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
}

DIVERGENCES: dict[str, str] = {}


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
    assert assert_batches_match(run, DIVERGENCES) > 30


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
